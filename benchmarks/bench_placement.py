"""Benchmark: rank placement (n = slots, the launcher case) against the launchers' placements.

Machines: 4:8:6 (192 slots) and 8:32:6 (1536 slots), one slot per PE, distances 1:10:100.
Communication patterns with n = slots ranks:

* ``stencil``: 3D 7-point stencil on a process grid (8x6x4 for 192 ranks, 16x12x8 for 1536),
  ranks in natural (row-major) order, unit weights;
* ``stencil-perm``: the same stencil with the rank numbers randomly permuted (seeded) -- what a
  launcher sees when the application numbers its ranks badly;
* ``random-s``: random sparse patterns (seeds 1..3): 3n random rank pairs (average degree ~6),
  integer volumes uniform in [1, 1000].

For each it reports J of ``procmap.map_tasks(graph, topology)`` (engine auto, which in this
mode polishes with swaps and never returns worse than block+swaps), its engine and time, and
J of the baselines ``block``, ``roundrobin`` and ``random`` (procmap.baselines). Checks:

* natural-order stencil: procmap J <= block J
* permuted stencil: procmap J <= 1.10 x block J of the natural-order stencil (procmap recovers
  the locality the numbering hid)
* random patterns: procmap J <= every baseline

    python benchmarks/bench_placement.py [--seed 0] [--threads 1] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np

MACHINES = {192: ("4:8:6", (8, 6, 4)), 1536: ("8:32:6", (16, 12, 8))}
DISTANCES = "1:10:100"
BASELINE_NAMES = ("block", "roundrobin", "random")
RANDOM_SEEDS = (1, 2, 3)


def permuted(graph, seed: int):
    """The graph with rank i renamed perm[i] (a seeded random permutation)."""
    from procmap import CommGraph

    perm = np.random.default_rng(seed).permutation(graph.n)
    src = perm[graph.edge_sources()]
    dst = perm[graph.adjncy]
    return CommGraph.from_edges(src, dst, graph.adjwgt, n=graph.n, symmetric=True)


def random_pattern(n: int, seed: int, degree: float = 6.0):
    """About ``degree * n / 2`` random rank pairs with integer volumes in [1, 1000]."""
    from procmap import CommGraph

    rng = np.random.default_rng(seed)
    pairs = int(round(degree * n / 2))
    src = rng.integers(0, n, pairs)
    dst = rng.integers(0, n, pairs)
    vol = rng.integers(1, 1001, pairs)
    return CommGraph.from_edges(src, dst, vol, n=n)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=0, help="seed of map_tasks and of the random baseline")
    ap.add_argument("--perm-seed", type=int, default=7, help="seed of the rank permutation")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", help="write the raw results here")
    args = ap.parse_args()

    import numba

    import procmap
    from procmap.baselines import baseline
    from procmap.generators import grid_graph
    from procmap.topology import Hierarchy

    numba.set_num_threads(args.threads)
    warm = Hierarchy.parse("2:2:2", "1:10:100")
    procmap.map_tasks(grid_graph((2, 2, 2)), warm, seed=args.seed)  # Numba compile / cache load

    rows, checks = [], []
    for n, (levels, shape) in MACHINES.items():
        topo = Hierarchy.parse(levels, DISTANCES)
        assert topo.k == n == int(np.prod(shape))
        stencil = grid_graph(shape)
        cases = [("stencil", stencil), ("stencil-perm", permuted(stencil, args.perm_seed))]
        cases += [(f"random-s{s}", random_pattern(n, s)) for s in RANDOM_SEEDS]
        natural_block = None
        for label, g in cases:
            t0 = time.perf_counter()
            m = procmap.map_tasks(g, topo, seed=args.seed)
            t = time.perf_counter() - t0
            ev = procmap.evaluate(g, topo, m.pes)
            base = {b: procmap.evaluate(g, topo, baseline(b, g.n, topo, seed=args.seed)).J
                    for b in BASELINE_NAMES}
            row = {"n": n, "machine": levels, "pattern": label, "edges": g.m, "J": ev.J,
                   "valid": bool(ev.valid), "engine": m.engine, "time": t, **{f"J_{b}": base[b] for b in base}}
            rows.append(row)
            name = f"{levels} {label}"
            if label == "stencil":
                natural_block = base["block"]
                checks.append((f"{name}: J {ev.J} <= block {base['block']}", ev.J <= base["block"] and ev.valid))
            elif label == "stencil-perm":
                bound = 1.10 * natural_block
                checks.append((f"{name}: J {ev.J} <= 1.10 x natural-order block {natural_block} = {bound:.0f}",
                               ev.J <= bound and ev.valid))
            else:
                best = min(base.values())
                checks.append((f"{name}: J {ev.J} <= every baseline (best baseline {best})",
                               all(ev.J <= v for v in base.values()) and ev.valid))

    print("| machine | pattern | edges | procmap J | engine | t[s] | block J | roundrobin J | random J | J / block |")
    print("|---|---|---:|---:|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['machine']} | {r['pattern']} | {r['edges']} | {r['J']}{'' if r['valid'] else ' !'} | "
              f"{r['engine']} | {r['time']:.2f} | {r['J_block']} | {r['J_roundrobin']} | {r['J_random']} | "
              f"{r['J'] / r['J_block']:.3f} |")
    print()
    for text, ok in checks:
        print(f"{'PASS' if ok else 'FAIL'} {text}")
    invalid = [f"{r['machine']} {r['pattern']}" for r in rows if not r["valid"]]
    print("invalid placements (a PE over capacity): " + (", ".join(invalid) if invalid else "none"))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"distances": DISTANCES, "seed": args.seed, "perm_seed": args.perm_seed,
                       "rows": rows, "checks": [{"check": c, "pass": bool(ok)} for c, ok in checks]},
                      f, indent=1)


if __name__ == "__main__":
    main()
