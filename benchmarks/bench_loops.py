"""Host round trips of the GPU refinement loops: launches and synchronisations per
level, and time, with the Jet loop driven from the host against captured as a CUDA
graph (issue #5, deliverable 3).

For each instance, ``im`` runs on the GPU once per loop mode (``PROCMAP_CUDA_GRAPHS``:
``off`` = host-driven loop, the "before"; ``auto`` = while node, or graph replay
where while nodes are unavailable, the "after"). Every call of the GPU Jet loop (one
per level's filter schedule) is wrapped: a counting pass records the CUDA API calls of
each call with CUPTI (:mod:`cuda_api_counter`), and a separate timing pass (no counter
attached) gives the mapping time. Levels are the GPU levels of im's uncoarsening, finest last.

    python benchmarks/bench_loops.py --instances rgg20,rgg23 [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cuda_api_counter import ApiCounter  # noqa: E402
from instances import get  # noqa: E402


def _run(graph, topo, seed, engine="im"):
    import cupy as cp
    from procmap import map_tasks
    cp.cuda.Device().synchronize()
    t0 = time.perf_counter()
    m = map_tasks(graph, topo, engine=engine, seed=seed, device="gpu")
    cp.cuda.Device().synchronize()
    return m, time.perf_counter() - t0


class _CountedLoop:
    """Wraps ``jet_gpu.ultra_refine``, which every GPU Jet refinement goes through
    (``jet_refine`` is its one-ratio case; installed before the GPU backend is first
    built, which keeps a reference to it), and records one entry per call -- one level's
    filter schedule -- while recording."""

    def __init__(self, counter: ApiCounter):
        from procmap.kernels.refinement import jet_gpu
        self.original = jet_gpu.ultra_refine
        self.counter = counter
        self.calls: list[dict] = []
        self.recording = False
        jet_gpu.ultra_refine = self

    def __call__(self, *args, **kw):
        if not self.recording:
            return self.original(*args, **kw)
        before = self.counter.snapshot()
        t0 = time.perf_counter()
        out = self.original(*args, **kw)
        after = self.counter.snapshot()
        self.calls.append({"n": int(args[0].size - 1), "seconds": time.perf_counter() - t0,
                           **ApiCounter.summarise(after - before)})
        return out


def measure(name: str, modes, seed: int, loop: _CountedLoop, repeat: int,
            engine: str = "im") -> dict:
    from procmap.topology import Hierarchy
    topo = Hierarchy.parse("4:8:6", "1:10:100")
    graph = get(name)
    result = {"instance": name, "engine": engine, "n": graph.n,
              "directed_edges": int(graph.adjncy.size),
              "modes": {}}
    _run(graph, topo, seed, engine)  # warm-up: compile and load every kernel
    for mode in modes:
        os.environ["PROCMAP_CUDA_GRAPHS"] = mode
        times = []
        for _ in range(repeat):
            m, t = _run(graph, topo, seed, engine)
            times.append(t)
        loop.calls = []
        loop.recording = True
        try:
            with loop.counter:
                m2, _ = _run(graph, topo, seed, engine)
                total = loop.counter.summary()
                raw = dict(loop.counter.counts)
        finally:
            loop.recording = False
            loop.counter.counts.clear()
        result["modes"][mode] = {"seconds": min(times), "J": m.J, "J_counted_run": m2.J,
                                 "total": total, "raw_counts": raw, "levels": loop.calls}
    return result


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--instances", default="rgg20")
    ap.add_argument("--modes", default="off,auto")
    ap.add_argument("--engine", default="im", help="im, hm or hm-ultra")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    from procmap.kernels import backend
    if not backend.gpu_available():
        print("no usable GPU", file=sys.stderr)
        return 2
    loop = _CountedLoop(ApiCounter())
    results = [measure(name, args.modes.split(","), args.seed, loop, args.repeat, args.engine)
               for name in args.instances.split(",")]
    for r in results:
        print(f"\n{r['instance']} ({r['engine']}): n={r['n']} "
              f"directed edges={r['directed_edges']}")
        modes = list(r["modes"])
        for mode in modes:
            d = r["modes"][mode]
            print(f"  mode {mode}: {r['engine']} time {d['seconds']:.3f} s, J {d['J']:.0f} "
                  f"(counted run J {d['J_counted_run']:.0f}); whole run: "
                  f"{d['total']['launches']} launches, {d['total']['syncs']} syncs")
        print("  | GPU level n | " + " | ".join(f"{m} launches | {m} syncs | {m} ms"
                                               for m in modes) + " |")
        print("  |---:|" + "---:|---:|---:|" * len(modes))
        rows = zip(*(r["modes"][m]["levels"] for m in modes))
        for row in rows:
            cells = " | ".join(f"{c['launches']} | {c['syncs']} | {1e3 * c['seconds']:.1f}"
                               for c in row)
            print(f"  | {row[0]['n']} | {cells} |")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
