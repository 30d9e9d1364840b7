"""``procmap warmup``: fill Numba's on-disk cache ahead of time (docs/design.md section 5).

The first mapping after an install compiles the CPU kernels (about a minute on two
cores). :func:`warmup` runs every code path a command can take on small generated
inputs -- the readers and writers, evaluation, rank placement, each engine on a mesh
and on a power-law graph, and each coarsening and refinement scheme, for integer and
for float volumes -- so that
the kernels they compile land in the cache, where later processes load them. It is
the step for cluster images and shared installs: run it once as the user who owns
the installation (or with ``NUMBA_CACHE_DIR`` pointing at a shared directory that
jobs then read).

Where the cache is: ``NUMBA_CACHE_DIR`` when set, else ``__pycache__`` beside each
kernel module, else (a read-only installation) Numba's user-wide directory under
``~/.cache/numba``; :func:`cache_location` reports the one in use.
"""
from __future__ import annotations

import os
import tempfile
import time
from typing import Callable

Progress = Callable[[str], None]


def cache_location() -> str:
    """The directory where Numba caches procmap's kernels for this process."""
    from procmap.kernels.refinement import jet_cpu

    try:
        return jet_cpu._jet_loop._cache.cache_path
    except AttributeError:  # Numba internals changed: say what governs it instead
        return os.environ.get("NUMBA_CACHE_DIR") or "Numba's default cache directory"


def cold_cache_notice() -> str | None:
    """The line a command prints before it compiles, or ``None`` when the cache is warm.

    Said whether or not stderr is a terminal: a silent minute looks like a hang.
    """
    from procmap.kernels.backend import kernel_cache_is_warm

    if kernel_cache_is_warm():
        return None
    return (f"first run: compiling the CPU kernels into {cache_location()} (about a minute on "
            "two cores, once; 'procmap warmup' does it ahead of time)")


def warmup(progress: Progress | None = None, *, gpu: bool = False) -> dict[str, float]:
    """Compile (or load) every CPU kernel a procmap command uses; return seconds per step.

    ``progress(step)`` is called before each step. With ``gpu=True`` the GPU
    backend's modules are loaded too (CuPy compiles its kernels into its own cache).
    Deterministic and self-contained: it writes only into a temporary directory.
    """
    from procmap.api import map_tasks
    from procmap.formats import read_graph, write_graph, write_mapping
    from procmap.generators import chung_lu_graph, grid_graph
    from procmap.graph import CommGraph
    from procmap.objective import evaluate
    from procmap.options import COARSENINGS, REFINEMENTS
    from procmap.topology import Hierarchy

    say = progress or (lambda step: None)
    seconds: dict[str, float] = {}

    def step(name: str, fn: Callable[[], object]) -> None:
        say(name)
        t0 = time.perf_counter()
        fn()
        seconds[name] = time.perf_counter() - t0

    # Above the size where large levels skip Jet (FM only), so every refiner runs.
    mesh = grid_graph((200, 150), weight=3)
    # Above the sizes that small inputs are read and evaluated without kernels
    # (procmap.formats.comm.SMALL_FILE_BYTES, procmap.objective.NUMPY_OBJECTIVE_MAX_EDGES).
    large = grid_graph((400, 400), diagonal=True, weight=7)
    weighted = CommGraph(mesh.xadj, mesh.adjncy, mesh.adjwgt * 0.5, mesh.vwgt)
    machine = Hierarchy.parse("4:8:2", "1:10:100")
    placement = grid_graph((8, 8, 6), weight=2)          # 384 ranks on 384 cores
    # Matching leaves most of a power-law graph unmatched, so coarsening runs its two-hop
    # stages (leaves, twins), which meshes never reach.
    power_law = chung_lu_graph(20_000, avg_degree=8, seed=0)
    cores = Hierarchy.parse("4:8:12", "1:10:100")

    with tempfile.TemporaryDirectory(prefix="procmap-warmup-") as tmp:
        def formats() -> None:
            # ``large`` is above the size that small text files are read without kernels.
            for graph, tag in ((placement, "int"), (CommGraph(placement.xadj, placement.adjncy,
                               placement.adjwgt * 0.25, placement.vwgt), "float"),
                               (large, "large")):
                for ext in ("comm", "graph", "mtx", "csv", "npy", "npz", "pmg"):
                    if ext == "graph" and tag == "float":
                        continue  # METIS stores integer weights only
                    if tag == "large" and ext not in ("comm", "graph", "mtx"):
                        continue  # only the text readers have a path for large files
                    path = os.path.join(tmp, f"{tag}.{ext}")
                    write_graph(graph, path)
                    read_graph(path)
            write_mapping(placement.xadj[:-1] % 7, os.path.join(tmp, "mapping"))
        step("readers and writers", formats)
        step("evaluation", lambda: evaluate(large, machine, large.xadj[:-1] % machine.k))
        step("rank placement", lambda: map_tasks(placement, cores))
        for graph, tag in ((mesh, "integer volumes"), (weighted, "float volumes")):
            for engine in ("im", "hm", "hm-ultra"):
                step(f"{engine}, {tag}", lambda g=graph, e=engine: map_tasks(g, machine, engine=e))
        for engine in ("im", "hm"):
            step(f"{engine}, power-law graph",
                 lambda e=engine: map_tasks(power_law, machine, engine=e))
        for coarsening in COARSENINGS:
            for refinement in REFINEMENTS:
                if (coarsening, refinement) != (COARSENINGS[0], REFINEMENTS[0]):
                    step(f"im, {coarsening} + {refinement}",
                         lambda c=coarsening, r=refinement: map_tasks(
                             mesh, machine, engine="im", coarsening=c, refinement=r))
        if gpu:
            big = grid_graph((400, 300))  # above the size below which the CPU maps even on a GPU
            step("GPU modules", lambda: map_tasks(big, machine, engine="im", device="gpu"))
    return seconds
