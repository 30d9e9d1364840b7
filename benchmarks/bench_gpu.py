"""Benchmark: procmap's GPU backend against its own CPU backend, at the GPU paper's scale.

Partition mapping onto 4:8:H (H from ``--nodes``, default 6), distances 1:10:100, eps 0.03,
on the instances of benchmarks/instances.py (``--instances``; rgg23, grid2d_8M, ... or the
2^20 set). For every instance, hierarchy and engine (``--engines``) it runs
``procmap.map_tasks(..., device="gpu")`` and, with ``--cpu``, the same call with
``device="cpu"`` on all cores of the machine (``numba.set_num_threads(os.cpu_count())``),
each ``--repeat`` times (the fastest run is reported), and reports

* ``map[s]``: the mapping time as the GPU paper reports it: graph already in host memory,
  upload, mapping and download included (``map_tasks``' total minus its host-side
  evaluation of the result);
* ``e2e[s]``: the whole ``map_tasks`` call (input checks, mapping, evaluation);
* J (both directions of every edge), the max PE load over L_max, validity;
* ``peak GPU``: the high-water mark of CuPy's memory pool during the call (bytes in use,
  sampled at every allocation), also per directed edge;
* the CPU backend's time and the speedup ``cpu map / gpu map``.

``--kernels`` adds, on each instance, the bandwidth of two kernels on the finest level:
one contraction (after a two-hop matching) and one label-propagation round (the proposal and
afterburner kernels of ``jet_gpu``, state allocated beforehand) on two partitions into 192
blocks: by vertex id (``id``: on graphs numbered without locality, such as rgg, nearly
every vertex lies on the boundary, the worst case) and the partition ``im`` computes
(``im``: what refinement works on). Timed with CUDA events (median of 5), with the bytes
each must move:

* contraction, every access at its element size (``n`` fine vertices, ``m2`` fine CSR
  entries, ``nc`` coarse vertices, ``mc`` coarse CSR entries): the fine CSR and the
  neighbours' ``cmap`` (16 B/entry), each coarse row written to scratch, read back and
  written out (36 B/coarse entry), per fine vertex its row offsets, weight and ``cmap``,
  the three counting atomics and the member list (80 B), per coarse vertex the scans of
  region and member offsets and degrees and the row kernels' reads of them (112 B).
  The table also gives the rate by the byte model of earlier versions (Algorithm 3 with
  a global hash table: 40 B/entry + 12 B/vertex) to compare with their reports;
* LP: reads ``xadj``, the vertex's part and lock (13 B/vertex), ``adjncy`` and the
  neighbour's part (8 B/edge: the boundary test), the weights of boundary vertices (8 B
  per edge of a boundary vertex), and resets dest/move/target (9 B/vertex): 8 B/edge +
  8 B/boundary edge + 22 B/vertex (16 B/edge + 22 B/vertex when every vertex is on the
  boundary).

GPU kernels are compiled by a warm-up run on a small graph first. Run on the GPU machine:

    python benchmarks/bench_gpu.py --instances rgg23,grid2d_8M --engines im,hm --cpu \\
        [--nodes 1,6] [--kernels] [--json out.json]
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import statistics
import sys
import time

import numba
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from instances import INSTANCES, get  # noqa: E402

from procmap import map_tasks  # noqa: E402
from procmap.generators import grid_graph  # noqa: E402
from procmap.objective import max_block_weight  # noqa: E402
from procmap.topology import Hierarchy  # noqa: E402

#: GPU-HeiProMap's record for im on rgg23, 4:8:6 (a comment in its source; RTX 4090).
RGG23_REFERENCE_J = 9_543_754


class PeakMemory:
    """CuPy allocator wrapper that records the pool's bytes in use after each allocation."""

    def __init__(self, cp):
        self.cp = cp
        self.pool = cp.get_default_memory_pool()
        self.peak = 0
        cp.cuda.set_allocator(self.malloc)

    def malloc(self, size):
        mem = self.pool.malloc(size)
        self.peak = max(self.peak, self.pool.used_bytes())
        return mem

    def reset(self) -> None:
        self.pool.free_all_blocks()
        self.peak = self.pool.used_bytes()


def _csv(text: str) -> list[str]:
    return [x for x in text.split(",") if x]


def run_one(graph, topo, engine: str, device: str, seed: int, eps: float, memory,
            schemes: tuple = ("hem", "jet")) -> dict:
    if memory is not None:
        memory.reset()
    t0 = time.perf_counter()
    m = map_tasks(graph, topo, engine=engine, eps=eps, seed=seed, device=device,
                  coarsening=schemes[0], refinement=schemes[1])
    e2e = time.perf_counter() - t0
    lmax = max_block_weight(graph.total_vertex_weight, topo.k, eps)
    out = {"engine": m.engine, "device": m.device, "J": m.J, "valid": m.evaluation.valid,
           "max_load_over_lmax": float(m.evaluation.loads.max()) / lmax,
           "map_s": m.seconds["total"] - m.seconds.get("evaluation", 0.0), "e2e_s": e2e,
           "phases": m.seconds}
    if memory is not None and device == "gpu":
        out["peak_gpu_bytes"] = memory.peak
        out["peak_bytes_per_edge"] = memory.peak / max(1, graph.adjncy.size)
    return out


def kernel_bandwidth(graph, seed: int) -> dict:
    """GB/s of one contraction and one LP round on the finest level (see module docstring)."""
    import cupy as cp

    from procmap.kernels.coarsening import coarsen_gpu
    from procmap.kernels.refinement import jet_gpu

    xadj, adjncy, adjwgt, vwgt = (cp.asarray(a) for a in
                                  (graph.xadj, graph.adjncy, graph.adjwgt, graph.vwgt))
    n, m2 = graph.n, graph.adjncy.size

    def timed(fn, repeat=5):
        times = []
        for _ in range(repeat):
            start, stop = cp.cuda.Event(), cp.cuda.Event()
            start.record()
            fn()
            stop.record()
            stop.synchronize()
            times.append(cp.cuda.get_elapsed_time(start, stop) / 1e3)
        return statistics.median(times)

    match = coarsen_gpu.two_hop_matching(xadj, adjncy, adjwgt, vwgt, None, seed)
    cmap, nc = coarsen_gpu.coarse_ids(match)
    t_contract = timed(lambda: coarsen_gpu.contract(xadj, adjncy, adjwgt, vwgt, cmap, nc))
    mc = int(coarsen_gpu.contract(xadj, adjncy, adjwgt, vwgt, cmap, nc)[0][-1])
    b_contract = 16 * m2 + 36 * mc + 80 * n + 112 * nc
    out = {"contract_s": t_contract, "contract_GBps": b_contract / t_contract / 1e9,
           "contract_model40_GBps": (40 * m2 + 12 * n) / t_contract / 1e9,
           "coarse_entries": mc, "coarse_vertices": nc}
    k = 192
    prefix = np.array([4, 32, 192], dtype=np.int64)
    dist = np.array([1.0, 10.0, 100.0])
    by_id = (np.arange(n, dtype=np.int64) * k // n).astype(np.int32)
    mapped = map_tasks(graph, Hierarchy.parse("4:8:6", "1:10:100"), engine="im", seed=seed,
                       device="gpu").pes.astype(np.int32)
    # the LP round alone (proposal + afterburner kernels), on preallocated state
    g = jet_gpu.DeviceGraph(xadj, adjncy, adjwgt, None, prefix, dist)
    lp = jet_gpu.LPKernels(g)
    locked = cp.zeros(n, dtype=cp.uint8)
    move, target = cp.empty(n, dtype=cp.uint8), cp.empty(n, dtype=cp.int32)
    degree = np.diff(graph.xadj)
    src = np.repeat(np.arange(n), degree)
    for label, host_part in (("id", by_id), ("im", mapped)):
        part = cp.asarray(host_part)
        t_lp = timed(lambda: lp.round(g, part, k, locked, 0.25, move, target))
        boundary = np.zeros(n, dtype=bool)
        boundary[src[host_part[src] != host_part[graph.adjncy]]] = True
        b_lp = 8 * m2 + 8 * int(degree[boundary].sum()) + 22 * n
        out.update({f"lp_{label}_s": t_lp, f"lp_{label}_GBps": b_lp / t_lp / 1e9,
                    f"lp_{label}_boundary": float(boundary.mean())})
    return out


def environment() -> dict:
    env = {"host": platform.node(), "cpus": os.cpu_count(), "python": platform.python_version(),
           "numba": numba.__version__, "numpy": np.__version__}
    try:
        import cupy as cp
        props = cp.cuda.runtime.getDeviceProperties(0)
        env["gpu"] = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
        env["cupy"] = cp.__version__
        env["gpu_memory_GiB"] = round(props["totalGlobalMem"] / 2**30, 1)
    except Exception as exc:  # the report says why there is no GPU column
        env["gpu"] = f"none ({type(exc).__name__})"
    return env


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--instances", default="rgg23,grid2d_8M,grid3d_8M")
    ap.add_argument("--engines", default="im,hm")
    ap.add_argument("--nodes", default="6", help="comma list of H for 4:8:H (default 6)")
    ap.add_argument("--cpu", action="store_true", help="also run the CPU backend on all cores")
    ap.add_argument("--cpu-engines", default=None,
                    help="engines for the CPU runs (default: --engines)")
    ap.add_argument("--kernels", action="store_true", help="kernel bandwidth on each instance")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--eps", type=float, default=0.03)
    ap.add_argument("--schemes", default="hem/jet",
                    help="comma list of COARSENING/REFINEMENT pairs to run each engine with "
                         "(e.g. hem/jet,unionfind/jet,hem/isr)")
    ap.add_argument("--repeat", type=int, default=2,
                    help="runs per configuration and device, the fastest is reported "
                         "(default 2: the first run in a process also loads code paths the "
                         "warm-up missed)")
    ap.add_argument("--json", help="write all results to this file")
    args = ap.parse_args()
    schemes = [tuple(x.split("/")) for x in _csv(args.schemes)]
    names = _csv(args.instances)
    unknown = [x for x in names if x not in INSTANCES]
    if unknown:
        ap.error(f"unknown instances {unknown}; known: {', '.join(INSTANCES)}")
    engines = _csv(args.engines)
    cpu_engines = engines if args.cpu_engines is None else _csv(args.cpu_engines)
    numba.set_num_threads(os.cpu_count() or 1)
    env = environment()
    print("environment:", json.dumps(env), flush=True)

    import cupy as cp
    memory = PeakMemory(cp)
    warm = grid_graph((400, 400))  # compiles every kernel (CuPy caches them on disk too)
    for engine in sorted(set(engines) | set(cpu_engines)):
        map_tasks(warm, Hierarchy.parse("4:8:2", "1:10:100"), engine=engine, device="gpu")
        map_tasks(warm, Hierarchy.parse("4:8:2", "1:10:100"), engine=engine, device="cpu")

    results = []
    for name in names:
        t0 = time.perf_counter()
        graph = get(name, cache=False)
        print(f"{name}: n={graph.n} directed edges={graph.adjncy.size} "
              f"(generated in {time.perf_counter() - t0:.1f} s)", flush=True)
        for h in _csv(args.nodes):
            topo = Hierarchy.parse(f"4:8:{h}", "1:10:100")
            for engine, scheme in itertools.product(engines, schemes):
                label = engine if scheme == ("hem", "jet") else f"{engine} {'/'.join(scheme)}"
                row = {"instance": name, "hierarchy": f"4:8:{h}", "n": graph.n,
                       "edges": int(graph.adjncy.size), "engine": label,
                       "gpu": min((run_one(graph, topo, engine, "gpu", args.seed, args.eps,
                                           memory, scheme) for _ in range(max(1, args.repeat))),
                                  key=lambda r: r["map_s"])}
                if args.cpu and engine in cpu_engines:
                    # the same number of runs as the GPU, fastest kept: a single run's
                    # time varies by up to half on these hosts, more than the GPU's
                    row["cpu"] = min((run_one(graph, topo, engine, "cpu", args.seed, args.eps,
                                              None, scheme)
                                      for _ in range(max(1, args.repeat))),
                                     key=lambda r: r["map_s"])
                    row["speedup"] = row["cpu"]["map_s"] / row["gpu"]["map_s"]
                results.append(row)
                print(json.dumps(row), flush=True)
        if args.kernels:
            kb = kernel_bandwidth(graph, args.seed)
            kb["instance"] = name
            results.append({"instance": name, "kernels": kb})
            print(json.dumps(kb), flush=True)
        del graph
    report(results, env)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"environment": env, "results": results}, f, indent=1)


def report(results, env) -> None:
    print(f"\nGPU: {env.get('gpu')} | CPU backend: {env['cpus']} cores\n")
    print("| instance | hierarchy | engine | GPU map[s] | GPU e2e[s] | J | max load / L_max | "
          "peak GPU [GiB] | B / edge | CPU map[s] | CPU J | speedup |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        if "gpu" not in r:
            continue
        g = r["gpu"]
        c = r.get("cpu")
        flag = "" if g["valid"] else " !"
        cpu = (f"{c['map_s']:.2f} | {c['J']} | {r['speedup']:.1f}x" if c else " | | ")
        print(f"| {r['instance']} | {r['hierarchy']} | {r['engine']} | {g['map_s']:.3f} | "
              f"{g['e2e_s']:.3f} | {g['J']}{flag} | {g['max_load_over_lmax']:.3f} | "
              f"{g.get('peak_gpu_bytes', 0) / 2**30:.2f} | {g.get('peak_bytes_per_edge', 0):.0f} | "
              f"{cpu} |")
    kernels = [r["kernels"] for r in results if "kernels" in r]
    if kernels:
        print("\n| instance | contraction [ms] | GB/s | GB/s (40 B/entry model) | partition "
              "| boundary | LP round [ms] | GB/s |")
        print("|---|---:|---:|---:|---|---:|---:|---:|")
        for k in kernels:
            for label in ("id", "im"):
                print(f"| {k['instance']} | {1e3 * k['contract_s']:.2f} | "
                      f"{k['contract_GBps']:.0f} | {k['contract_model40_GBps']:.0f} | "
                      f"{label} | {k[f'lp_{label}_boundary']:.1%} | "
                      f"{1e3 * k[f'lp_{label}_s']:.2f} | {k[f'lp_{label}_GBps']:.0f} |")
    for r in results:
        if r.get("instance") == "rgg23" and r.get("hierarchy") == "4:8:6" and r.get("engine") == "im":
            g = r["gpu"]
            ok = g["map_s"] < 0.5 and g["J"] <= 1.05 * RGG23_REFERENCE_J
            print(f"\n{'PASS' if ok else 'FAIL'} im on rgg23 4:8:6: {1e3 * g['map_s']:.0f} ms "
                  f"(target < 500), J {g['J']} = {g['J'] / RGG23_REFERENCE_J:.3f} x 9,543,754 "
                  "(target <= 1.05)")


if __name__ == "__main__":
    main()
