"""Named, seeded benchmark instances (the families of the KaHIP / SharedMap / GPU-HeiPa papers).

    from instances import get          # with benchmarks/ on sys.path
    g = get("rgg17")

Every instance is generated once and cached as a scipy ``.npz`` (procmap.formats.write_graph)
under the cache dir: ``$PROCMAP_BENCH_CACHE`` or ``/tmp/procmap-bench-cache``. All graphs have
unit edge and vertex weights. rgg/Delaunay use point seed 1 (the seed of
the peer results quoted in benchmarks/README.md, whose graph sizes they reproduce).

    python benchmarks/instances.py [names...]   # generate (or load) and print sizes
"""
from __future__ import annotations

import os
import sys
import time
from typing import Callable

from procmap.formats import read_graph, write_graph
from procmap.generators import delaunay_graph, grid_graph, random_geometric_graph
from procmap.graph import CommGraph

POINT_SEED = 1

INSTANCES: dict[str, Callable[[], CommGraph]] = {
    # 2^17 scale (the peers table of benchmarks/README.md)
    "grid2d": lambda: grid_graph((300, 300)),
    "grid3d": lambda: grid_graph((40, 40, 40)),
    "rgg17": lambda: random_geometric_graph(2**17, seed=POINT_SEED),
    "del17": lambda: delaunay_graph(2**17, seed=POINT_SEED),
    # 2^20 scale
    "grid2d_1M": lambda: grid_graph((1024, 1024)),
    "grid3d_1M": lambda: grid_graph((101, 101, 101)),
    "rgg20": lambda: random_geometric_graph(2**20, seed=POINT_SEED),
    "del20": lambda: delaunay_graph(2**20, seed=POINT_SEED),
    # the GPU paper's scale (GPU-HeiProMap's rgg23 record: J = 9,543,754 on 4:8:6)
    "rgg23": lambda: random_geometric_graph(2**23, seed=POINT_SEED),
    "rgg24": lambda: random_geometric_graph(2**24, seed=POINT_SEED),
    "del23": lambda: delaunay_graph(2**23, seed=POINT_SEED),
    "del24": lambda: delaunay_graph(2**24, seed=POINT_SEED),
    "grid2d_8M": lambda: grid_graph((2896, 2896)),
    "grid3d_8M": lambda: grid_graph((203, 203, 203)),
    "grid2d_16M": lambda: grid_graph((4096, 4096)),
    "grid3d_16M": lambda: grid_graph((256, 256, 256)),
}
SMALL = ("grid2d", "grid3d", "rgg17", "del17")
LARGE = ("grid2d_1M", "grid3d_1M", "rgg20", "del20")
HUGE = ("rgg23", "del23", "grid2d_8M", "grid3d_8M", "rgg24", "del24", "grid2d_16M", "grid3d_16M")


def cache_dir() -> str:
    return os.environ.get("PROCMAP_BENCH_CACHE", "/tmp/procmap-bench-cache")


def get(name: str, *, cache: bool = True, verbose: bool = False) -> CommGraph:
    """The instance ``name`` (one of :data:`INSTANCES`), from the cache when present."""
    if name not in INSTANCES:
        raise KeyError(f"unknown instance {name!r}; known: {', '.join(INSTANCES)}")
    path = os.path.join(cache_dir(), f"{name}.npz")
    if cache and os.path.exists(path):
        return read_graph(path)
    t0 = time.perf_counter()
    graph = INSTANCES[name]()
    if verbose:
        print(f"generated {name} in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    if cache:
        os.makedirs(cache_dir(), exist_ok=True)
        write_graph(graph, path)  # atomic: a half-written cache file never appears
    return graph


def main() -> None:
    names = sys.argv[1:] or list(INSTANCES)
    print("| instance | n | m | avg degree |")
    print("|---|---:|---:|---:|")
    for name in names:
        g = get(name, verbose=True)
        print(f"| {name} | {g.n} | {g.m} | {2 * g.m / g.n:.2f} |")


if __name__ == "__main__":
    main()
