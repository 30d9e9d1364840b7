"""Benchmark: load time and peak memory of one graph in every file format procmap reads
fast (issue 21: ``.pmg`` >= 1 GB/s on two cores; METIS and ``.comm`` >= 150 MB/s on 2
cores and METIS >= 800 MB/s on 16; peak host memory <= 40 bytes per directed edge).

For each generated random geometric graph the files are written once under ``--dir``
(``mtx`` as ``write_graph`` writes it: ``coordinate integer symmetric``, one triangle;
``mtxg``: ``coordinate integer general`` listing both directions of every edge, as a
file from elsewhere may). Each format is then read in a fresh subprocess with
``NUMBA_NUM_THREADS=--threads``:

* a warm-up read of a smaller file (rgg 2^15) of the same format (kernels compiled or
  loaded);
* one read of the big file under a fresh peak-memory mark (``/proc/self/clear_refs``
  resets ``VmHWM``): ``peak B/edge`` is (peak RSS - RSS before the read) / (2m), so it
  counts the file's bytes, every array and the result, not the interpreter;
* ``--repeat`` timed reads (the best is reported; the file is in the page cache).

    python benchmarks/bench_formats.py [--sizes 21] [--dir /tmp] [--repeat 3] [--threads 2]
        [--formats graph comm mtx mtxg pmg npz]
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


def status(key):
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


path, warm, fmt, repeat = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
read_graph(warm, fmt)  # kernels compiled or loaded
try:
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")  # reset the peak RSS mark (VmHWM) to the current RSS
    fresh = True
except OSError:
    fresh = False
before = status("VmRSS")
t0 = time.perf_counter()
graph = read_graph(path, fmt)
first = time.perf_counter() - t0
peak = status("VmHWM") if fresh else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
edges = graph.num_directed_edges
del graph
times = [first]
for _ in range(repeat):
    t0 = time.perf_counter()
    graph = read_graph(path, fmt)
    times.append(time.perf_counter() - t0)
    del graph
print(json.dumps({"best": min(times), "peak": peak - before, "edges": edges,
                  "fresh_mark": fresh, "threads": numba.get_num_threads()}))
"""

_FORMAT = {"graph": "metis", "comm": "comm", "mtx": "mtx", "mtxg": "mtx", "pmg": "pmg",
           "npz": "npz"}


def measure(path: str, warm: str, ext: str, repeat: int, threads: int) -> dict:
    env = dict(os.environ, NUMBA_NUM_THREADS=str(threads))
    done = subprocess.run([sys.executable, "-c", _CHILD, path, warm, _FORMAT[ext], str(repeat)],
                          capture_output=True, text=True, check=True, env=env)
    return json.loads(done.stdout.strip().splitlines()[-1])


def write_general_mtx(graph, path: str) -> None:
    """``coordinate integer general`` with both directions of every edge (the CSR as is)."""
    import numpy as np

    from procmap.formats import atomic_write
    from procmap.formats.comm import format_int_lines

    rows = graph.edge_sources().astype(np.int64) + 1
    cols = graph.adjncy.astype(np.int64) + 1
    with atomic_write(path, "wb") as handle:
        handle.write(b"%%MatrixMarket matrix coordinate integer general\n"
                     + f"{graph.n} {graph.n} {rows.size}\n".encode())
        step = 1 << 22
        for start in range(0, rows.size, step):
            part = slice(start, start + step)
            table = np.column_stack([rows[part], cols[part], graph.adjwgt[part]]).ravel()
            handle.write(format_int_lines(table, np.arange(0, table.size + 1, 3)))


def write(graph, path: str, ext: str) -> None:
    from procmap.formats import write_graph

    if ext == "mtxg":
        write_general_mtx(graph, path)
    else:
        write_graph(graph, path, _FORMAT[ext])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[21],
                    help="log2 of the number of tasks of the random geometric graphs")
    ap.add_argument("--dir", default="/tmp")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, nargs="+", default=[os.cpu_count() or 1],
                    help="Numba threads of the reading process (several: one row each)")
    ap.add_argument("--formats", nargs="+", default=["graph", "comm", "mtx", "mtxg", "pmg"],
                    choices=sorted(_FORMAT))
    args = ap.parse_args()

    from procmap.generators import random_geometric_graph

    small = random_geometric_graph(2**15)  # above comm.SMALL_FILE_BYTES: the fast paths
    warm = {}
    for ext in args.formats:
        warm[ext] = os.path.join(args.dir, f"bench_formats_warm.{ext}")
        if not os.path.exists(warm[ext]):
            write(small, warm[ext], ext)
    print(f"{'graph':<24} {'format':<7} {'threads':>7} {'MB':>8} {'seconds':>8} {'MB/s':>7} "
          f"{'peak MB':>8} {'peak B/edge':>11}")
    for k in args.sizes:
        graph = None
        name = f"rgg 2^{k}"
        for ext in args.formats:
            path = os.path.join(args.dir, f"bench_formats_rgg{k}.{ext}")
            if not os.path.exists(path):
                if graph is None:
                    graph = random_geometric_graph(2**k)
                t0 = time.perf_counter()
                write(graph, path, ext)
                print(f"  (wrote {path} in {time.perf_counter() - t0:.2f} s)", file=sys.stderr)
            size = os.path.getsize(path) / 1e6
            for threads in args.threads:
                r = measure(path, warm[ext], ext, args.repeat, threads)
                label = f"{name} (2m={r['edges'] / 1e6:.1f}M)"
                mark = "" if r["fresh_mark"] else " (ru_maxrss)"
                print(f"{label:<24} {ext:<7} {r['threads']:>7} {size:8.1f} {r['best']:8.3f} "
                      f"{size / r['best']:7.0f} {r['peak'] / 1e6:8.0f} "
                      f"{r['peak'] / r['edges']:11.1f}{mark}", flush=True)
        del graph


if __name__ == "__main__":
    main()
