"""Benchmark: load time of one graph in the binary ``.pmg``, scipy ``.npz``, METIS
``.graph`` and edge-list ``.comm`` formats (issue 21: ``.pmg`` should load at >= 1 GB/s on
two cores).

For each generated graph the three files are written once under ``--dir``; then each
format is read in a fresh subprocess: one warm-up read (compiles or loads the Numba
kernels, fills the page cache), then ``--repeat`` timed reads (best reported), and the
process's peak resident memory (``ru_maxrss``, which includes the interpreter and the
libraries: compare it with the ``none`` row, which only imports them).

    python benchmarks/bench_formats.py [--sizes 20 21] [--dir /tmp] [--repeat 3]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

_CHILD = r"""
import json, resource, sys, time
import numba, numpy, scipy.sparse
from procmap.formats import read_graph
path, repeat = sys.argv[1], int(sys.argv[2])
times = []
if path != "none":
    read_graph(path)  # warm-up: kernels compiled or loaded, file in the page cache
    for _ in range(repeat):
        t0 = time.perf_counter()
        graph = read_graph(path)
        times.append(time.perf_counter() - t0)
        del graph
print(json.dumps({"best": min(times) if times else 0.0,
                  "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def measure(path: str, repeat: int) -> dict:
    done = subprocess.run([sys.executable, "-c", _CHILD, path, str(repeat)],
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[20, 21],
                    help="log2 of the number of tasks of the random geometric graphs")
    ap.add_argument("--dir", default="/tmp")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--formats", nargs="+", default=["pmg", "npz", "graph", "comm"])
    args = ap.parse_args()

    from procmap.formats import write_graph
    from procmap.generators import random_geometric_graph

    base = measure("none", 0)
    print(f"interpreter + numpy/scipy/numba/procmap imports: peak RSS {base['maxrss_mb']:.0f} MB")
    print(f"{'graph':<22} {'format':<7} {'MB':>8} {'seconds':>9} {'MB/s':>8} {'peak RSS MB':>12}")
    for k in args.sizes:
        graph = random_geometric_graph(2**k)
        name = f"rgg 2^{k} (m={graph.m / 1e6:.1f}M)"
        for ext in args.formats:
            path = os.path.join(args.dir, f"bench_formats_rgg{k}.{ext}")
            if not os.path.exists(path):
                t0 = time.perf_counter()
                write_graph(graph, path)
                print(f"  (wrote {path} in {time.perf_counter() - t0:.2f} s)", file=sys.stderr)
            size = os.path.getsize(path) / 1e6
            result = measure(path, args.repeat)
            print(f"{name:<22} {ext:<7} {size:8.1f} {result['best']:9.3f} "
                  f"{size / result['best']:8.0f} {result['maxrss_mb']:12.0f}", flush=True)
        del graph


if __name__ == "__main__":
    main()
