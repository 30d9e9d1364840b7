"""Benchmark: read a 10-million-line .comm file and build the CSR (CommGraph).

Target (Foundation issue): < 10 s on one core. The file is generated once (seeded:
10M random directed entries among 1M ranks) under --dir and reused.

    python benchmarks/bench_io.py [--lines 10000000] [--ranks 1000000] [--dir /tmp]
"""
from __future__ import annotations

import argparse
import os
import time

import numba
import numpy as np


def make_file(path: str, lines: int, ranks: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    chunk = 1_000_000
    with open(path + ".tmp", "w") as f:
        f.write(f"# tasks: {ranks}\n")
        for start in range(0, lines, chunk):
            m = min(chunk, lines - start)
            src = rng.integers(0, ranks, m)
            dst = rng.integers(0, ranks, m)
            vol = rng.integers(1, 1 << 20, m)
            f.write("\n".join(f"{a} {b} {c}" for a, b, c in zip(src.tolist(), dst.tolist(), vol.tolist())))
            f.write("\n")
    os.replace(path + ".tmp", path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lines", type=int, default=10_000_000)
    ap.add_argument("--ranks", type=int, default=1_000_000)
    ap.add_argument("--dir", default="/tmp")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    numba.set_num_threads(1)  # the target is for one core

    from procmap.formats import read_graph

    path = os.path.join(args.dir, f"procmap-bench-{args.lines}-{args.ranks}.comm")
    if not os.path.exists(path):
        t0 = time.perf_counter()
        make_file(path, args.lines, args.ranks)
        print(f"generated {path} in {time.perf_counter() - t0:.1f} s")
    size = os.path.getsize(path) / 1e6
    read_graph(path)  # warm-up: Numba compile or cache load
    times = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        g = read_graph(path)
        times.append(time.perf_counter() - t0)
    print(f"{args.lines:,} lines ({size:.0f} MB) -> CommGraph n={g.n:,}, 2m={g.num_directed_edges:,}")
    print(f"read + CSR on one core: best {min(times):.2f} s, median {sorted(times)[len(times) // 2]:.2f} s")


if __name__ == "__main__":
    main()
