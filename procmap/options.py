"""The names a user chooses from: engines, schemes, devices, baselines and file formats.

Kept apart from the modules that implement them, and free of imports, so that the
command line can build its parser (``procmap --help``, ``--version``) without
importing NumPy, Numba or an engine (docs/design.md section 5: imports are lazy).
The implementing modules re-export the tuple they serve.
"""
from __future__ import annotations

#: Mapping engines: hierarchical multisection (``hm``), ``hm`` with Jet's ultra
#: refinement (``hm-ultra``), integrated mapping (``im``); ``auto`` picks by mode.
ENGINES: tuple[str, ...] = ("auto", "hm", "hm-ultra", "im")

#: Coarsening schemes: heavy-edge + two-hop matching (Jet, GPU-HeiPa), or G-kway's
#: union-find clustering (whole pseudo-forest components, capped at L_max).
COARSENINGS: tuple[str, ...] = ("hem", "unionfind")

#: Refinement schemes: Jet label propagation, or G-kway's independent-set refinement.
REFINEMENTS: tuple[str, ...] = ("jet", "isr")

#: Where to compute; ``auto`` uses the GPU for large graphs when one is usable.
DEVICES: tuple[str, ...] = ("auto", "cpu", "gpu")

#: ``device="auto"`` picks the GPU for graphs with at least this many directed edges
#: (below it, transfers, kernel compilation and launches cost more than they save).
AUTO_GPU_MIN_EDGES = 2_000_000

#: Default placements to compare against: mpirun's block order, round-robin over
#: nodes, and a seeded random permutation.
BASELINES: tuple[str, ...] = ("block", "roundrobin", "random")

#: Launcher flavours of ``procmap machinefile``: MPICH's Hydra (``mpiexec -f``) or
#: Intel MPI (``mpiexec -machinefile``).
MPICH_FLAVORS: tuple[str, ...] = ("mpich", "intel")

#: Every graph format name ``procmap.formats.read_graph`` understands.
GRAPH_FORMATS: tuple[str, ...] = ("comm", "metis", "mtx", "npy", "csv", "npz", "prof",
                                  "pmg")

#: The formats ``procmap.formats.write_graph`` can produce (``prof`` is read only).
WRITABLE_FORMATS: tuple[str, ...] = ("comm", "metis", "mtx", "npy", "csv", "npz", "pmg")
