"""Refinement: the Jet loop (label propagation, ISR as a mode of it), k-way FM and
swap refinement for rank placement. CPU (Numba) and GPU (CUDA) twins side by side;
each GPU driver's ``.cu`` file sits beside it."""
