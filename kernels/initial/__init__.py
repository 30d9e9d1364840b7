"""Initial mapping: extraction of the subgraphs induced by a partition's blocks, all
blocks at once, which hierarchical multisection recurses into. CPU and GPU twins."""
