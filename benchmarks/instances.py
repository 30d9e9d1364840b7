"""Named, seeded benchmark instances (the families of the KaHIP / SharedMap / GPU-HeiPa papers).

    from instances import get          # with benchmarks/ on sys.path
    g = get("rgg17")

Every instance is generated once and cached as a scipy ``.npz`` (procmap.formats.write_graph)
under the cache dir: ``$PROCMAP_BENCH_CACHE`` or ``/tmp/procmap-bench-cache``. The papers'
graphs have unit edge and vertex weights. rgg/Delaunay use point seed 1 (the seed of
the peer results quoted in benchmarks/README.md, whose graph sizes they reproduce). The
robustness families of issue #22 (``rmat*``, ``chunglu*``, ``stencil27_*``, ``road*``,
``spread_del*``, ``islands*``) come from benchmarks/families.py, seed 1.

    python benchmarks/instances.py [names...]   # generate (or load) and print sizes
"""
from __future__ import annotations

import os
import sys
import time
from typing import Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # families.py beside this file

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

# The robustness families of issue #22 (benchmarks/families.py; seed 1 everywhere), a 2^17
# version of each for quick runs and a 2^20 one for the target.
def _families() -> dict[str, Callable[[], CommGraph]]:
    import families as fam

    return {
        "rmat16": lambda: fam.rmat(16, seed=POINT_SEED),
        "rmat17": lambda: fam.rmat(17, seed=POINT_SEED),
        "rmat20": lambda: fam.rmat(20, seed=POINT_SEED),
        "rmat22": lambda: fam.rmat(22, seed=POINT_SEED),
        "chunglu17": lambda: fam.chung_lu(2**17, avg_degree=16, exponent=2.5, seed=POINT_SEED),
        "chunglu20": lambda: fam.chung_lu(2**20, avg_degree=16, exponent=2.5, seed=POINT_SEED),
        "stencil27_125k": lambda: fam.stencil27(50, 50, 50),
        "stencil27_1M": lambda: fam.stencil27(101, 101, 101),
        "stencil27_4M": lambda: fam.stencil27(160, 160, 160),
        "road17": lambda: fam.road_like(2**17, keep=0.2, seed=POINT_SEED),
        "road20": lambda: fam.road_like(2**20, keep=0.2, seed=POINT_SEED),
        "spread_del17": lambda: fam.spread_weights(get("del17"), decades=4, seed=POINT_SEED),
        "spread_del20": lambda: fam.spread_weights(get("del20"), decades=4, seed=POINT_SEED),
        "islands17": lambda: fam.with_isolated(get("del17"), fraction=0.2, components=2**17 // 64,
                                               seed=POINT_SEED),
        "islands20": lambda: fam.with_isolated(get("del20"), fraction=0.2, components=2**20 // 64,
                                               seed=POINT_SEED),
    }


INSTANCES.update(_families())
FAMILIES_SMALL = ("rmat17", "chunglu17", "stencil27_125k", "road17", "spread_del17", "islands17")
FAMILIES_LARGE = ("rmat20", "chunglu20", "stencil27_1M", "road20", "spread_del20", "islands20")
FAMILIES_HUGE = ("rmat22", "stencil27_4M")
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
