"""Benchmark: J of a 16M-vertex, ~128M-directed-edge graph on the CPU (parallel Numba).

Instance: 4000 x 4000 grid with the 9-point stencil (16,000,000 tasks,
127,952,004 CSR entries), mapped block-wise onto 4:8:6 with distances 1:10:100.
Target (Foundation issue): < 1 s. Prints the median of several runs after a
warm-up (the first call includes Numba's compile or cache load).

    python benchmarks/bench_objective.py [--side 4000] [--repeat 5] [--threads N]
"""
from __future__ import annotations

import argparse
import statistics
import time

import numba

from procmap import evaluate
from procmap.baselines import block
from procmap.generators import grid_graph
from procmap.kernels import level_traffic
from procmap.topology import Hierarchy


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--side", type=int, default=4000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--threads", type=int, default=numba.config.NUMBA_NUM_THREADS)
    args = ap.parse_args()
    numba.set_num_threads(args.threads)

    t0 = time.perf_counter()
    g = grid_graph((args.side, args.side), diagonal=True)
    t_gen = time.perf_counter() - t0
    h = Hierarchy.parse("4:8:6", "1:10:100")
    pes = block(g.n, h)
    print(f"graph: {g.n:,} tasks, {g.num_directed_edges:,} directed edges "
          f"(generated in {t_gen:.1f} s); threads: {args.threads}")

    ev = evaluate(g, h, pes)  # warm-up: compile / load cache
    kernel, full = [], []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        level_traffic(g.xadj, g.adjncy, g.adjwgt, pes, h.prefix_sizes)
        kernel.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        ev = evaluate(g, h, pes)
        full.append(time.perf_counter() - t0)
    print(f"J = {ev.J:,}   cut = {ev.cut:,}")
    print(f"objective kernel (J + traffic per level): median {statistics.median(kernel):.3f} s "
          f"(min {min(kernel):.3f})")
    print(f"evaluate() incl. validation and loads:     median {statistics.median(full):.3f} s "
          f"(min {min(full):.3f})")


if __name__ == "__main__":
    main()
