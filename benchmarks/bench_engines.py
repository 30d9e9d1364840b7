"""Benchmark: procmap's CPU engines against the PyPI peers on the papers' graph families.

Partition mapping onto the hierarchy 4:8:6 (k = 192) with distances 1:10:100 (``--hierarchy``,
``--distance``) and eps = 0.03
(L_max = ceil(1.03 n / 192)). For every instance (benchmarks/instances.py) it runs

* procmap ``map_tasks(graph, Hierarchy.parse("4:8:6", "1:10:100"), engine=E, eps, seed, device="cpu")`` for
  E in hm, hm-ultra, im (``--engines``),
* the peers (benchmarks/peers.py): KaHIP process_mapping multisection fast and eco (strong with
  ``--peers ...,kahip-strong``: minutes per instance, so not by default), Scotch tleaf
  (QUALITY | BALANCE) and METIS k-way + identity (``--peers``),

and reports J (procmap.evaluate, both directions of every edge), the wall time of the mapping
call alone (graph already in memory; Numba is compiled by a warm-up run on a small graph first)
and validity (max PE load <= L_max; an invalid result is marked ``!`` in the table, and a target
fails unless every mapping of its engine is valid). One thread by default (``numba.set_num_threads``, ``SCOTCH_PTHREAD_NUMBER``).
The end of the report holds the targets of the CPU-engines issue, as PASS/FAIL lines, on the
geometric means over the instances:

* hm-ultra J <= KaHIP eco (and, with kahip-strong, <= KaHIP strong in at most half its time)
* hm J <= 1.05 x KaHIP eco and hm time <= KaHIP fast
* im J <= Scotch quality and im time <= Scotch quality
* im J <= 1.05 x hm J

    python benchmarks/bench_engines.py [--large] [--instances grid2d,rgg17] [--engines hm,im]
        [--peers kahip-fast,kahip-eco,scotch,metis] [--seed 1 | --seeds 1,2,3,4] [--threads 1]
        [--repeat 1] [--hierarchy 4:8:6 --distance 1:10:100] [--json out.json]

``--seeds`` runs every method once per seed: the table's J is then the mean over the seeds
(one seed's J varies by several percent on grids), its time the mean of each seed's time.

``--repeat N`` runs every method N times and reports the best time (J of the last run; the
engines and the one-thread peers are deterministic for a seed).

Timings on a shared machine are noisy (+-20%); run nothing else meanwhile.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import traceback

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

LEVELS = [4, 8, 6]
DISTS = [1, 10, 100]
ENGINES = ("hm", "hm-ultra", "im")
PEERS = ("kahip-fast", "kahip-eco", "kahip-strong", "scotch", "metis")
LABELS = {"hm": "hm", "hm-ultra": "hm-ultra", "im": "im", "kahip-fast": "KaHIP fast",
          "kahip-eco": "KaHIP eco", "kahip-strong": "KaHIP strong", "scotch": "Scotch quality",
          "metis": "METIS+id"}


def _csv(text: str, known) -> list[str]:
    items = [x.strip() for x in text.split(",") if x.strip()]
    bad = [x for x in items if x not in known]
    if bad:
        raise SystemExit(f"unknown name(s) {', '.join(bad)}; known: {', '.join(known)}")
    return items


def _runner(method: str, topo, eps: float):
    """``run(graph, seed) -> task -> PE`` of one method on the machine ``topo``."""
    import procmap
    import peers

    levels, dists = list(topo.levels), [int(d) if float(d).is_integer() else float(d)
                                         for d in topo.distances]
    if method in ENGINES:
        return lambda g, seed: procmap.map_tasks(g, topo, engine=method, eps=eps, seed=seed,
                                                 device="cpu").pes
    if method.startswith("kahip-"):
        mode = method.split("-", 1)[1]
        return lambda g, seed: peers.kahip_process_mapping(g, levels, dists, eps, mode=mode,
                                                           seed=seed)
    if method == "scotch":
        return lambda g, seed: peers.scotch_tleaf(g, levels, dists, eps, quality=True, seed=seed)
    if method == "metis":
        return lambda g, seed: peers.metis_identity(g, int(np.prod(levels)), eps, seed=seed)
    raise KeyError(method)


def environment() -> dict:
    """Where and on what code the numbers were taken (stored in --json; read-only git calls)."""
    import platform
    import subprocess

    info = {"time": time.strftime("%Y-%m-%d %H:%M:%S"), "python": platform.python_version(),
            "machine": platform.machine(), "cpus": os.cpu_count()}
    try:
        info["loadavg_at_start"] = os.getloadavg()
    except OSError:
        pass
    root = os.path.dirname(HERE)
    try:
        info["git_commit"] = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                                            text=True, timeout=10).stdout.strip()
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                                capture_output=True, text=True, timeout=10).stdout
        info["git_modified"] = [line[3:] for line in status.splitlines()]
    except (OSError, subprocess.SubprocessError):
        pass
    versions = {}
    for dist in ("numpy", "scipy", "numba", "kahip", "pyscotch", "pymetis"):
        try:
            from importlib.metadata import version
            versions[dist] = version(dist)
        except Exception:  # noqa: BLE001
            versions[dist] = None
    info["versions"] = versions
    return info


def geomean(values) -> float:
    values = [v for v in values if v is not None and v > 0]
    if not values:
        return float("nan")
    return math.exp(sum(math.log(v) for v in values) / len(values))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--instances", help="comma-separated names (default: the four 2^17-scale ones)")
    ap.add_argument("--large", action="store_true", help="add the 2^20-scale instances")
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--peers", default=",".join(p for p in PEERS if p != "kahip-strong"),
                    help="'' for none; kahip-strong is not in the default")
    ap.add_argument("--eps", type=float, default=0.03)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--seeds", help="comma-separated seeds (overrides --seed): J is the mean over "
                                    "them, the time the mean of each seed's best")
    ap.add_argument("--hierarchy", default=":".join(map(str, LEVELS)),
                    help="machine levels, bottom up (default 4:8:6)")
    ap.add_argument("--distance", default=":".join(map(str, DISTS)),
                    help="distances per level (default 1:10:100)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=1, help="runs per method; the best time is reported")
    ap.add_argument("--json", help="write the raw results here")
    args = ap.parse_args()

    os.environ["SCOTCH_PTHREAD_NUMBER"] = str(args.threads)  # before Scotch loads; >1 is nondeterministic
    import numba

    import procmap
    from instances import INSTANCES, LARGE, SMALL, get
    from procmap.objective import max_block_weight
    from procmap.topology import Hierarchy

    numba.set_num_threads(args.threads)
    names = _csv(args.instances, INSTANCES) if args.instances else list(SMALL)
    if args.large:
        names += [x for x in LARGE if x not in names]
    methods = _csv(args.engines, ENGINES) + _csv(args.peers, PEERS)
    topo = Hierarchy.parse(args.hierarchy, args.distance)
    seeds = [int(x) for x in args.seeds.split(",")] if args.seeds else [args.seed]
    runners = {m: _runner(m, topo, args.eps) for m in methods}

    # warm-up: Numba compilation (or cache load) and the peers' library loading, on a small graph
    from procmap.generators import grid_graph
    small = grid_graph((48, 48))
    t0 = time.perf_counter()
    for m in methods:
        try:
            runners[m](small, seeds[0])
        except Exception as exc:  # noqa: BLE001  (reported again in the real runs)
            print(f"warm-up of {m} failed: {exc}", file=sys.stderr)
    print(f"warm-up (compile / load) {time.perf_counter() - t0:.1f} s; threads {args.threads}; "
          f"hierarchy {args.hierarchy} distances {args.distance}; eps {args.eps}; seeds {seeds}",
          file=sys.stderr)

    env = environment()
    if env.get("git_modified"):
        print(f"note: uncommitted changes in {', '.join(env['git_modified'])}", file=sys.stderr)
    results = []
    for name in names:
        g = get(name, verbose=True)
        lmax = max_block_weight(g.total_vertex_weight, topo.k, args.eps)
        print(f"{name}: n={g.n} m={g.m} L_max={lmax}", file=sys.stderr)
        for m in methods:
            rec = {"instance": name, "method": m, "n": g.n, "m": g.m, "lmax": lmax, "seeds": seeds,
                   "threads": args.threads}
            try:
                per_seed = []
                for seed in seeds:
                    times = []
                    for _ in range(max(1, args.repeat)):
                        t0 = time.perf_counter()
                        pes = runners[m](g, seed)
                        times.append(time.perf_counter() - t0)
                    ev = procmap.evaluate(g, topo, pes, eps=args.eps)
                    per_seed.append({"seed": seed, "time": min(times), "times": times, "J": ev.J,
                                     "cut": ev.cut, "max_load": int(ev.loads.max()),
                                     "valid": bool(ev.valid)})
                rec["per_seed"] = per_seed
                mean_j = sum(r["J"] for r in per_seed) / len(per_seed)
                rec.update(J=per_seed[0]["J"] if len(seeds) == 1 else round(mean_j),
                           time=sum(r["time"] for r in per_seed) / len(per_seed),
                           max_load=max(r["max_load"] for r in per_seed),
                           valid=all(r["valid"] for r in per_seed))
            except Exception as exc:  # noqa: BLE001
                rec.update(error=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc())
            results.append(rec)
            if "error" in rec:
                print(f"  {m:10s} ERROR {rec['error']}", file=sys.stderr)
            else:
                print(f"  {m:10s} J={rec['J']:>10} t={rec['time']:7.2f}s max_load={rec['max_load']}"
                      f"{'' if rec['valid'] else ' INVALID'}", file=sys.stderr)
            sys.stderr.flush()

    load = env.get("loadavg_at_start")
    print(f"{env.get('cpus')} CPUs, load average at start {load[0]:.2f}" if load else f"{env.get('cpus')} CPUs",
          f"| commit {env.get('git_commit', '?')[:10]}"
          + (f" + uncommitted {', '.join(env['git_modified'])}" if env.get("git_modified") else ""),
          f"| threads {args.threads} | hierarchy {args.hierarchy} distances {args.distance} "
          f"| seed{'s' if len(seeds) > 1 else ''} {','.join(map(str, seeds))} | eps {args.eps}")
    print()
    report(results, names, methods)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"environment": env, "levels": list(topo.levels),
                       "distances": list(topo.distances), "eps": args.eps, "seeds": seeds,
                       "threads": args.threads, "results": results}, f, indent=1)


def report(results, names, methods) -> None:
    by = {(r["instance"], r["method"]): r for r in results}
    head = "| instance | " + " | ".join(f"{LABELS[m]} J | {LABELS[m]} t[s]" for m in methods) + " |"
    print(head)
    print("|---|" + "---:|---:|" * len(methods))
    for name in names:
        cells = []
        for m in methods:
            r = by[(name, m)]
            if "error" in r:
                cells += ["error", "-"]
            else:
                cells += [f"{r['J']}{'' if r['valid'] else ' !'}", f"{r['time']:.2f}"]
        print(f"| {name} | " + " | ".join(cells) + " |")
    gj, gt = {}, {}
    for m in methods:
        ok = [by[(x, m)] for x in names if "error" not in by[(x, m)]]
        complete = len(ok) == len(names)
        gj[m] = geomean([r["J"] for r in ok]) if complete else None
        gt[m] = geomean([r["time"] for r in ok]) if complete else None
    cells = []
    for m in methods:
        cells += [f"{gj[m]:.0f}" if gj[m] else "n/a", f"{gt[m]:.2f}" if gt[m] else "n/a"]
    print("| **geo mean** | " + " | ".join(cells) + " |")
    if "kahip-eco" in methods and gj.get("kahip-eco"):
        ref = gj["kahip-eco"]
        cells = []
        for m in methods:
            cells += [f"{gj[m] / ref:.3f}" if gj[m] else "n/a", ""]
        print("| J / KaHIP eco | " + " | ".join(cells) + " |")
    invalid = [f"{r['instance']}/{r['method']} (max load {r['max_load']} > L_max {r['lmax']})"
               for r in results if "error" not in r and not r["valid"]]
    errors = [f"{r['instance']}/{r['method']}: {r['error']}" for r in results if "error" in r]
    print()
    print("invalid mappings: " + ("; ".join(invalid) if invalid else "none"))
    print("errors: " + ("; ".join(errors) if errors else "none"))

    def check(label, *conds):
        needed = [c for c in conds]
        if any(c is None for c in needed):
            print(f"SKIP {label} (method missing or failed)")
            return
        print(f"{'PASS' if all(needed) else 'FAIL'} {label}")

    def valid_all(m):
        return all("error" not in by[(x, m)] and by[(x, m)]["valid"] for x in names)

    def rel(a, b, what, factor=1.0):
        if gj.get(a) is None or gj.get(b) is None or (what == "t" and (gt.get(a) is None or gt.get(b) is None)):
            return None
        x, y = (gj[a], gj[b]) if what == "J" else (gt[a], gt[b])
        return x <= factor * y

    def fmt(a, b, what):
        src = gj if what == "J" else gt
        if src.get(a) is None or src.get(b) is None:
            return ""
        return f"{src[a] / src[b]:.3f}"

    print()
    print("targets (geometric means over the instances above):")
    if "hm-ultra" in methods and "kahip-eco" in methods:
        check(f"hm-ultra J <= KaHIP eco J (ratio {fmt('hm-ultra', 'kahip-eco', 'J')}; all valid: "
              f"{valid_all('hm-ultra')})", rel("hm-ultra", "kahip-eco", "J"), valid_all("hm-ultra"))
    if "hm-ultra" in methods and "kahip-strong" in methods:
        check(f"hm-ultra J <= KaHIP strong J (ratio {fmt('hm-ultra', 'kahip-strong', 'J')}) in at "
              f"most half its time (ratio {fmt('hm-ultra', 'kahip-strong', 't')}; all valid: "
              f"{valid_all('hm-ultra')})", rel("hm-ultra", "kahip-strong", "J"),
              rel("hm-ultra", "kahip-strong", "t", 0.5), valid_all("hm-ultra"))
    if "hm" in methods and "kahip-eco" in methods and "kahip-fast" in methods:
        check(f"hm J <= 1.05 x KaHIP eco J (ratio {fmt('hm', 'kahip-eco', 'J')}) and hm time <= "
              f"KaHIP fast time (ratio {fmt('hm', 'kahip-fast', 't')}; all valid: {valid_all('hm')})",
              rel("hm", "kahip-eco", "J", 1.05), rel("hm", "kahip-fast", "t"), valid_all("hm"))
    if "im" in methods and "hm" in methods:
        check(f"im J <= 1.05 x hm J (ratio {fmt('im', 'hm', 'J')}; all valid: {valid_all('im')})",
              rel("im", "hm", "J", 1.05), valid_all("im"))
    if "im" in methods and "scotch" in methods:
        check(f"im J <= Scotch quality J (ratio {fmt('im', 'scotch', 'J')}) and im time <= Scotch "
              f"time (ratio {fmt('im', 'scotch', 't')}; all valid: {valid_all('im')})",
              rel("im", "scotch", "J"), rel("im", "scotch", "t"), valid_all("im"))


if __name__ == "__main__":
    main()
