"""Benchmark: engine robustness on the families of issue #22 against a Delaunay reference.

For every family instance (benchmarks/instances.py: ``rmat*``, ``chunglu*``, ``stencil27_*``,
``road*``, ``spread_del*``, ``islands*``; benchmarks/families.py generates them) and every
engine E in hm, hm-ultra, im it runs, on the CPU backend,

    procmap.map_tasks(graph, Hierarchy.parse("4:8:6", "1:10:100"), engine=E, eps=0.03,
                      seed=1, device="cpu")

and the same call on the *reference*: ``procmap.generators.delaunay_graph(n_ref, seed=1)``
with ``n_ref = round(m / 3)``, a Delaunay graph with (within 0.1%) the same number of
edges m as the instance. It reports J, the wall time of the mapping call (graph in
memory, Numba compiled or loaded beforehand), the engine's phase times
(``Mapping.seconds``: ``multisection`` for hm / hm-ultra; ``coarsening``, ``initial
mapping``, ``refinement`` for im), the ratio time / reference time, validity (max PE load
<= L_max) and the issue's target as PASS/FAIL:

    no engine more than 3x its time on a Delaunay graph with the same number of edges
    (the issue sets it at 2^20 on 16 cores; ``--factor`` changes the 3)

Every run happens in a child process (multiprocessing, spawn) that is killed after
``--timeout`` seconds, so a pathological case is reported as ``> T s`` (and FAILs)
instead of hanging the benchmark; the child then is replaced. The child loads the graph
from the instance cache ($PROCMAP_BENCH_CACHE; the reference graphs are cached there as
``delref_<n>.npz``) and warms Numba up on a 200 x 150 grid and a Chung-Lu graph before the timed call, so neither
counts. Threads: ``numba.set_num_threads(--threads)`` in the child.

    python benchmarks/bench_families.py [--instances rmat17,road17] [--large]
        [--engines hm,hm-ultra,im] [--threads 2] [--timeout 120] [--seed 1] [--eps 0.03]
        [--factor 3] [--json out.json]

An engine may be a variant of a preset (benchmarks/variants.py), run beside it in the same
worker: ``--engines 'hm,hm[initial.stalled_start=random]'``.

Default instances: the 2^17 set (``instances.FAMILIES_SMALL``); ``--large`` the 2^20 set.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from variants import context_of, split_specs  # noqa: E402

LEVELS = "4:8:6"
DISTS = "1:10:100"
ENGINES = ("hm", "hm-ultra", "im")
PHASE_ABBREV = {"multisection": "ms", "coarsening": "c", "initial mapping": "i", "refinement": "r",
                "upload": "up", "evaluation": "ev"}


# ------------------------------------------------------------------------------- child side
def _child(conn, threads: int, levels: str, dists: str) -> None:
    """Worker loop: warm up, then map (path, engine, eps, seed) requests until told to stop."""
    try:
        import numba

        numba.set_num_threads(threads)
        import procmap
        from procmap.formats import read_graph
        from procmap.generators import chung_lu_graph, grid_graph
        from procmap.objective import max_block_weight
        from procmap.topology import Hierarchy

        topo = Hierarchy.parse(levels, dists)
        # Numba compile / cache load of every engine, on a grid large enough for the
        # paths of large inputs (splits in worker threads, FM-only levels): after a warm-up
        # on a 48 x 48 grid, the first timed run on 16 cores took seconds more than later ones
        warm = grid_graph((200, 150))
        for e in ENGINES:
            procmap.map_tasks(warm, topo, engine=e, device="cpu", seed=0)
        # and on a power-law graph: its paths (two-hop matching, the streaming start of
        # a graph that does not coarsen) are not a grid's, as `procmap warmup` does
        for e in ENGINES:
            procmap.map_tasks(chung_lu_graph(20000, avg_degree=8), topo, engine=e,
                              device="cpu", seed=0)
        conn.send(("ready", None))
    except Exception:  # noqa: BLE001
        conn.send(("error", traceback.format_exc()))
        return
    graphs: dict[str, object] = {}
    while True:
        msg = conn.recv()
        if msg is None:
            return
        path, engine, eps, seed = msg
        try:
            if path not in graphs:
                graphs.clear()  # one graph at a time: 2^20 instances are large
                graphs[path] = read_graph(path)
            g = graphs[path]
            t0 = time.perf_counter()
            how = {"engine": engine} if engine in ENGINES else {"context": context_of(engine)}
            m = procmap.map_tasks(g, topo, eps=eps, seed=seed, device="cpu", **how)
            t = time.perf_counter() - t0
            ev = m.evaluation
            conn.send(("ok", {"time": t, "J": int(ev.J), "cut": int(ev.cut), "valid": bool(ev.valid),
                              "max_load": int(ev.loads.max()),
                              "lmax": int(max_block_weight(g.total_vertex_weight, topo.k, eps)),
                              "engine_used": m.engine,
                              "seconds": {k: float(v) for k, v in m.seconds.items()}}))
        except Exception:  # noqa: BLE001
            conn.send(("error", traceback.format_exc()))


class Worker:
    """One spawned child that keeps Numba warm; killed and replaced after a timeout."""

    def __init__(self, threads: int, levels: str, dists: str):
        self.args = (threads, levels, dists)
        self.proc = None
        self.conn = None

    def _start(self) -> None:
        ctx = mp.get_context("spawn")
        parent, child = ctx.Pipe()
        self.proc = ctx.Process(target=_child, args=(child, *self.args), daemon=True)
        self.proc.start()
        child.close()
        self.conn = parent
        if not parent.poll(900):  # first compile of every kernel can take minutes
            self.kill()
            raise RuntimeError("worker did not warm up within 900 s")
        kind, payload = parent.recv()
        if kind != "ready":
            self.kill()
            raise RuntimeError(f"worker failed to start:\n{payload}")

    def run(self, path: str, engine: str, eps: float, seed: int, timeout: float) -> dict:
        if self.proc is None or not self.proc.is_alive():
            self._start()
        t0 = time.perf_counter()
        self.conn.send((path, engine, eps, seed))
        if not self.conn.poll(timeout):
            self.kill()
            return {"timeout": True, "time": time.perf_counter() - t0}
        try:
            kind, payload = self.conn.recv()
        except EOFError:
            self.kill()
            return {"error": "worker died (out of memory?)"}
        if kind == "ok":
            return payload
        return {"error": payload.strip().splitlines()[-1], "traceback": payload}

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.join(10)
        self.proc = None
        self.conn = None

    def close(self) -> None:
        if self.proc is not None and self.proc.is_alive():
            try:
                self.conn.send(None)
                self.proc.join(10)
            except (OSError, BrokenPipeError):
                pass
        self.kill()


# ------------------------------------------------------------------------------ parent side
def reference_path(m: int, seed: int, verbose: bool = True) -> tuple[str, int, int]:
    """Path of the cached Delaunay reference with ~m edges: (path, n_ref, m_ref)."""
    from instances import cache_dir
    from procmap.formats import read_graph, write_graph
    from procmap.generators import delaunay_graph

    n_ref = max(3, int(round(m / 3)))
    path = os.path.join(cache_dir(), f"delref_{n_ref}_s{seed}.npz")
    if not os.path.exists(path):
        t0 = time.perf_counter()
        g = delaunay_graph(n_ref, seed=seed)
        os.makedirs(cache_dir(), exist_ok=True)
        write_graph(g, path)
        if verbose:
            print(f"generated reference delaunay_graph({n_ref}) in {time.perf_counter() - t0:.1f} s",
                  file=sys.stderr)
        return path, n_ref, g.m
    return path, n_ref, read_graph(path).m


def instance_path(name: str) -> tuple[str, int, int]:
    from instances import cache_dir, get

    g = get(name, verbose=True)  # generates and caches on first use
    return os.path.join(cache_dir(), f"{name}.npz"), g.n, g.m


def _phases(rec: dict) -> str:
    sec = rec.get("seconds") or {}
    parts = [f"{PHASE_ABBREV.get(k, k)} {v:.2f}" for k, v in sec.items() if k not in ("total", "evaluation")]
    return " / ".join(parts)


def _t(rec: dict, timeout: float) -> str:
    if rec.get("timeout"):
        return f"> {timeout:.0f}"
    if "error" in rec:
        return "error"
    return f"{rec['time']:.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--instances", help="comma-separated instance names (default: the 2^17 family set)")
    ap.add_argument("--large", action="store_true", help="the 2^20 family set (added to --instances)")
    ap.add_argument("--engines", default=",".join(ENGINES),
                    help="presets or variants, e.g. 'hm,hm[initial.stalled_start=random]'")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per mapping call")
    ap.add_argument("--eps", type=float, default=0.03)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--factor", type=float, default=3.0, help="the target's time ratio")
    ap.add_argument("--no-reference", action="store_true", help="skip the Delaunay reference runs")
    ap.add_argument("--json", help="write the raw results here")
    args = ap.parse_args()

    from bench_engines import environment
    from instances import FAMILIES_LARGE, FAMILIES_SMALL, INSTANCES

    names = [x.strip() for x in (args.instances or "").split(",") if x.strip()]
    if not names and not args.large:
        names = list(FAMILIES_SMALL)
    if args.large:
        names += [x for x in FAMILIES_LARGE if x not in names]
    bad = [x for x in names if x not in INSTANCES]
    if bad:
        raise SystemExit(f"unknown instance(s) {', '.join(bad)}; known: {', '.join(INSTANCES)}")
    engines = split_specs(args.engines)
    for e in engines:
        try:
            context_of(e)
        except ValueError as exc:
            raise SystemExit(f"{exc}; engines are {', '.join(ENGINES)} or variants of them "
                             "(benchmarks/variants.py)") from None

    env = environment()
    worker = Worker(args.threads, LEVELS, DISTS)
    t0 = time.perf_counter()
    worker._start()
    print(f"worker warm-up {time.perf_counter() - t0:.1f} s; threads {args.threads}; hierarchy {LEVELS} "
          f"distances {DISTS}; eps {args.eps}; seed {args.seed}; timeout {args.timeout:.0f} s", file=sys.stderr)
    results = []
    ref_cache: dict[str, dict] = {}
    try:
        for name in names:
            path, n, m = instance_path(name)
            if args.no_reference:
                ref = None
            else:
                rpath, n_ref, m_ref = reference_path(m, args.seed)
                ref = {"path": rpath, "n": n_ref, "m": m_ref}
            print(f"{name}: n={n} m={m}" + (f"; reference delaunay n={ref['n']} m={ref['m']}" if ref else ""),
                  file=sys.stderr)
            for e in engines:
                rec = {"instance": name, "engine": e, "n": n, "m": m, "threads": args.threads}
                rec.update(worker.run(path, e, args.eps, args.seed, args.timeout))
                if ref is not None:
                    key = f"{ref['path']}|{e}"
                    if key not in ref_cache:
                        ref_cache[key] = worker.run(ref["path"], e, args.eps, args.seed, args.timeout)
                    rr = ref_cache[key]
                    rec["ref"] = {"n": ref["n"], "m": ref["m"], **{k: rr[k] for k in rr if k != "traceback"}}
                results.append(rec)
                line = f"  {e:9s} t={_t(rec, args.timeout)} s"
                if "J" in rec:
                    line += f" J={rec['J']} [{_phases(rec)}]{'' if rec['valid'] else ' INVALID'}"
                if "error" in rec:
                    line += f" ERROR {rec['error']}"
                if ref is not None:
                    line += f"; reference t={_t(rec['ref'], args.timeout)} s"
                print(line, file=sys.stderr, flush=True)
    finally:
        worker.close()

    load = env.get("loadavg_at_start")
    print(f"{env.get('cpus')} CPUs, load average at start {load[0]:.2f}" if load else f"{env.get('cpus')} CPUs",
          f"| commit {env.get('git_commit', '?')[:10]}"
          + (f" + uncommitted {', '.join(env['git_modified'])}" if env.get("git_modified") else ""),
          f"| threads {args.threads} | seed {args.seed} | eps {args.eps} | {LEVELS} / {DISTS}"
          f" | timeout {args.timeout:.0f} s")
    print()
    report(results, args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"environment": env, "levels": LEVELS, "distances": DISTS, "eps": args.eps,
                       "seed": args.seed, "threads": args.threads, "timeout": args.timeout,
                       "factor": args.factor, "results": results}, f, indent=1)


def verdict(rec: dict, factor: float) -> tuple[str, float | None]:
    """(PASS / FAIL / SKIP, ratio) of one record against the time target."""
    if rec.get("timeout") or "error" in rec:
        return "FAIL", None
    ref = rec.get("ref")
    if not ref or ref.get("timeout") or "error" in ref or "time" not in ref:
        return "SKIP", None
    ratio = rec["time"] / ref["time"] if ref["time"] > 0 else float("inf")
    return ("PASS" if ratio <= factor and rec["valid"] else "FAIL"), ratio


def report(results, args) -> None:
    print("| instance | n | m | engine | J | t[s] | phases [s] | ref n | ref J | ref t[s] | t / ref | valid | "
          f"<= {args.factor:g}x ref |")
    print("|---|---:|---:|---|---:|---:|---|---:|---:|---:|---:|---|---|")
    fails = []
    for r in results:
        status, ratio = verdict(r, args.factor)
        ref = r.get("ref") or {}
        cells = [r["instance"], str(r["n"]), str(r["m"]), r["engine"],
                 str(r.get("J", "-")), _t(r, args.timeout), _phases(r) or "-",
                 str(ref.get("n", "-")), str(ref.get("J", "-")), _t(ref, args.timeout) if ref else "-",
                 f"{ratio:.2f}" if ratio is not None else "-",
                 ("yes" if r.get("valid") else "NO") if "valid" in r else "-", status]
        print("| " + " | ".join(cells) + " |")
        if status == "FAIL":
            why = ("timed out" if r.get("timeout") else r.get("error") if "error" in r
                   else f"{ratio:.2f}x the reference" + ("" if r["valid"] else ", invalid"))
            fails.append(f"{r['instance']}/{r['engine']} ({why})")
    print()
    print(f"target: no engine more than {args.factor:g}x its time on a Delaunay graph with the same m")
    print(("FAIL " + "; ".join(fails)) if fails else "PASS every run")


if __name__ == "__main__":
    main()
