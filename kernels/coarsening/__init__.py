"""Coarsening: heavy-edge matching with two-hop fallbacks and hash contraction
(``coarsen_*``), and union-find clustering of graphs that matching cannot shrink
(``unionfind_*``). CPU (Numba) and GPU (CUDA) twins side by side."""
