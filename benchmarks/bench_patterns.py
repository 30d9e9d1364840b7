"""Benchmark: rank placement on application-like patterns (issue #22, item 4).

Patterns: benchmarks/patterns.py (:data:`patterns.PATTERNS`: 2D/3D halos with 4/8 and 6/26
neighbours, AMG-like, CG on a METIS-cut mesh, NPB-LU-like wavefront, AMR octree) with n
ranks, n in 64, 256, 1024, 4096. Machine: ``4:8:(n/32)`` with distances 1:10:100 (4 cores
per processor, 8 processors per node, n/32 nodes: 4:8:32 at 1024 ranks), one slot per PE,
so n = slots (rank placement, strict capacities).

For each pattern it runs, in this process, one thread (``--threads``; Numba compiled or
loaded by a warm-up first):

* ``procmap.map_tasks(graph, topo, engine=E, seed)`` for E in auto, hm, hm-ultra, im (in
  rank placement ``im`` and ``auto`` both run hm + swaps, so their J is the same);
* the ``block`` placement (procmap.baselines.block: rank i on slot i, mpirun's default);
* Scotch tleaf mapping with QUALITY | BALANCE, balance 0 (benchmarks/peers.py
  ``scotch_tleaf(graph, [4, 8, n/32], [1, 10, 100], eps=0.0)``), skipped with a note when
  pyscotch is not installed; a Scotch placement that overloads a PE is marked invalid.

It reports J and time of each, and the issue's targets as PASS/FAIL lines:

* on every pattern: auto J <= min(J of Scotch, hm, hm-ultra, im) (invalid results left out);
* at 1024 ranks: auto within 2 s on one core.

Pattern graphs are cached under ``$PROCMAP_BENCH_CACHE/patterns`` (cg_4096 takes ~45 s:
a 4M-vertex Delaunay mesh cut by METIS); ``--no-cache`` regenerates.

    python benchmarks/bench_patterns.py [--sizes 64,256,1024] [--patterns halo3d-26,amg]
        [--methods auto,hm,hm-ultra,im,block,scotch] [--seed 0] [--threads 1] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

DISTS = [1, 10, 100]
METHODS = ("auto", "hm", "hm-ultra", "im", "block", "scotch")
TIME_LIMIT_1024 = 2.0


def levels_for(n: int) -> list[int]:
    if n % 32:
        raise ValueError(f"{n} ranks: the machine 4:8:(n/32) needs a multiple of 32")
    return [4, 8, n // 32]


def load_pattern(name: str, cache: bool = True):
    from instances import cache_dir
    from patterns import PATTERNS
    from procmap.formats import read_graph, write_graph

    path = os.path.join(cache_dir(), "patterns", f"{name}.npz")
    if cache and os.path.exists(path):
        return read_graph(path)
    t0 = time.perf_counter()
    g = PATTERNS[name][0]()
    dt = time.perf_counter() - t0
    if dt > 1:
        print(f"generated {name} in {dt:.1f} s", file=sys.stderr)
    if cache:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_graph(g, path)
    return g


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="64,256,1024", help="rank counts among 64,256,1024,4096")
    ap.add_argument("--patterns", help="pattern kinds (default: all of patterns.PATTERN_KINDS)")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--no-cache", action="store_true")
    ap.add_argument("--json", help="write the raw results here")
    args = ap.parse_args()

    os.environ["SCOTCH_PTHREAD_NUMBER"] = str(args.threads)
    import numba

    import peers
    import procmap
    from bench_engines import environment
    from patterns import PATTERN_KINDS, PATTERNS, cg_partitioner
    from procmap.baselines import baseline
    from procmap.generators import grid_graph
    from procmap.topology import Hierarchy

    numba.set_num_threads(args.threads)
    sizes = [int(x) for x in args.sizes.split(",") if x.strip()]
    kinds = [x.strip() for x in args.patterns.split(",")] if args.patterns else list(PATTERN_KINDS)
    bad = [k for k in kinds if k not in PATTERN_KINDS]
    if bad:
        raise SystemExit(f"unknown pattern(s) {', '.join(bad)}; known: {', '.join(PATTERN_KINDS)}")
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    if any(m not in METHODS for m in methods):
        raise SystemExit(f"methods are {', '.join(METHODS)}")

    scotch_note = None
    if "scotch" in methods:
        try:
            peers._require("pyscotch", "pyscotch")
        except peers.PeerUnavailable as exc:
            scotch_note = f"Scotch skipped: {exc}"
            methods.remove("scotch")
            print(scotch_note, file=sys.stderr)

    # warm-up: Numba compile / cache load of placement with every engine, and Scotch's library
    warm = Hierarchy.parse("4:8:2", "1:10:100")
    g0 = grid_graph((4, 4, 4))
    t0 = time.perf_counter()
    for e in ("auto", "hm", "hm-ultra", "im"):
        procmap.map_tasks(g0, warm, engine=e, seed=args.seed)
    if "scotch" in methods:
        peers.scotch_tleaf(g0, [4, 8, 2], DISTS, eps=0.0, seed=args.seed)
    print(f"warm-up {time.perf_counter() - t0:.1f} s; threads {args.threads}", file=sys.stderr)

    env = environment()
    rows = []
    for n in sizes:
        levels = levels_for(n)
        topo = Hierarchy.parse(":".join(map(str, levels)), ":".join(map(str, DISTS)))
        for kind in kinds:
            name = f"{kind}_{n}"
            if name not in PATTERNS:
                raise SystemExit(f"no pattern {name}")
            g = load_pattern(name, cache=not args.no_cache)
            assert g.n == n == topo.k
            row = {"pattern": kind, "n": n, "m": g.m, "machine": ":".join(map(str, levels)), "methods": {}}
            for m in methods:
                rec = {}
                try:
                    t0 = time.perf_counter()
                    if m == "block":
                        pes = baseline("block", n, topo)
                    elif m == "scotch":
                        pes = peers.scotch_tleaf(g, levels, DISTS, eps=0.0, quality=True, seed=args.seed)
                    else:
                        mp = procmap.map_tasks(g, topo, engine=m, seed=args.seed)
                        pes = mp.pes
                        rec["engine_used"] = mp.engine
                        rec["seconds"] = {k: float(v) for k, v in mp.seconds.items()}
                    rec["time"] = time.perf_counter() - t0
                    ev = procmap.evaluate(g, topo, pes)
                    rec.update(J=int(ev.J), valid=bool(ev.valid), max_load=int(ev.loads.max()))
                except Exception as exc:  # noqa: BLE001
                    rec = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
                row["methods"][m] = rec
            rows.append(row)
            cells = " ".join(f"{m}={r.get('J', 'ERR')}{'' if r.get('valid', True) else '!'}"
                             f"({r.get('time', 0):.2f}s)" for m, r in row["methods"].items())
            print(f"{name}: m={g.m} {cells}", file=sys.stderr, flush=True)

    load = env.get("loadavg_at_start")
    print(f"{env.get('cpus')} CPUs, load average at start {load[0]:.2f}" if load else f"{env.get('cpus')} CPUs",
          f"| commit {env.get('git_commit', '?')[:10]}"
          + (f" + uncommitted {', '.join(env['git_modified'])}" if env.get("git_modified") else ""),
          f"| threads {args.threads} | seed {args.seed} | machine 4:8:(n/32), distances 1:10:100"
          f" | cg partitioner: {cg_partitioner()}")
    if scotch_note:
        print(scotch_note)
    print()
    checks = report(rows, methods)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"environment": env, "distances": DISTS, "seed": args.seed, "threads": args.threads,
                       "scotch_note": scotch_note, "rows": rows,
                       "checks": [{"check": c, "result": s} for c, s in checks]}, f, indent=1)


def report(rows, methods):
    head = "| pattern | n | m | " + " | ".join(f"{m} J | {m} t[s]" for m in methods) + " | auto / best other |"
    print(head)
    print("|---|---:|---:|" + "---:|---:|" * len(methods) + "---:|")
    checks = []
    for row in rows:
        cells = []
        for m in methods:
            r = row["methods"][m]
            if "error" in r:
                cells += ["error", "-"]
            else:
                cells += [f"{r['J']}{'' if r['valid'] else ' !'}", f"{r['time']:.3f}"]
        auto = row["methods"].get("auto")
        rivals = {m: r for m, r in row["methods"].items()
                  if m in ("scotch", "hm", "hm-ultra", "im") and "error" not in r and r["valid"]}
        ratio = "-"
        name = f"{row['pattern']}_{row['n']}"
        if auto and "error" not in auto and rivals:
            best_m = min(rivals, key=lambda m: rivals[m]["J"])
            best = rivals[best_m]["J"]
            ratio = f"{auto['J'] / best:.3f}" if best else "-"
            ok = auto["valid"] and auto["J"] <= best
            checks.append((f"{name}: auto J {auto['J']} <= min(Scotch, hm, hm-ultra, im) = {best} ({best_m})",
                           "PASS" if ok else "FAIL"))
        elif auto is not None:
            checks.append((f"{name}: auto J vs the others", "SKIP"))
        if auto and "error" not in auto and row["n"] == 1024:
            checks.append((f"{name}: auto time {auto['time']:.2f} s <= {TIME_LIMIT_1024:g} s (1024 ranks)",
                           "PASS" if auto["time"] <= TIME_LIMIT_1024 else "FAIL"))
        print(f"| {row['pattern']} | {row['n']} | {row['m']} | " + " | ".join(cells) + f" | {ratio} |")
    print()
    for text, status in checks:
        print(f"{status} {text}")
    n_fail = sum(1 for _, s in checks if s == "FAIL")
    print(f"{n_fail} of {len(checks)} checks failed")
    return checks


if __name__ == "__main__":
    main()
