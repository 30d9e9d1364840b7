"""Benchmark: ``procmap map`` end to end, as a user runs it (issue 21).

Runs the command as a subprocess ``--repeat`` times and prints, per run, every
phase of the JSON's ``seconds`` next to the wall time. The phases cover the run
from the process's start (``start-up``: interpreter, ``procmap.cli``, argument
parsing; Linux only), then ``imports``, ``machine``, ``read``, ``warm-up`` (waiting
for the background set-up: Numba's target, CuPy and the CUDA context), ``mapping
set-up`` (map_tasks before its clock: input checks, the device choice), the
mapping's own phases, ``evaluate block`` and ``write``; ``other`` is what none
accounts for (the report, the exit, the subprocess's spawn) and should be near 0.

With ``--ab`` every repetition runs twice, with the overlap of reading and the
one-time set-up (``PROCMAP_OVERLAP=1``) and without (``PROCMAP_OVERLAP=0``).

    python benchmarks/bench_end_to_end.py GRAPH [-H 4:8:6] [--device cpu] [--engine im]
        [--repeat 3] [--ab] [--out /tmp/bench_e2e.map]

Example graph (2M tasks): python -c "from procmap.generators import grid_graph;
from procmap.formats import write_graph; write_graph(grid_graph((2000,1000)), '/tmp/g2m.pmg')"
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from procmap.cli import OUTSIDE_MAPPING


def run_once(cmd: list[str], overlap: str) -> tuple[float, dict]:
    env = {**os.environ, "PROCMAP_OVERLAP": overlap}
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if done.returncode:
        sys.exit(f"failed ({done.returncode}): {' '.join(cmd)}\n{done.stderr}")
    return wall, json.loads(done.stdout)["seconds"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("graph")
    ap.add_argument("-H", "--hierarchy", default="4:8:6")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--engine", default="im")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--ab", action="store_true",
                    help="alternate runs with and without the overlap (PROCMAP_OVERLAP)")
    ap.add_argument("--out", default="/tmp/bench_e2e.map")
    args = ap.parse_args()
    cmd = [sys.executable, "-m", "procmap", "map", args.graph, "-H", args.hierarchy,
           "--device", args.device, "--engine", args.engine, "-o", args.out, "--json", "-q"]
    print("command:", " ".join(cmd[2:]))
    modes = ["1", "0"] if args.ab else [os.environ.get("PROCMAP_OVERLAP", "1")]
    runs = {mode: [] for mode in modes}
    for _ in range(args.repeat):
        for mode in modes:
            runs[mode].append(run_once(cmd, mode))
    for mode in modes:
        print(f"\nPROCMAP_OVERLAP={mode}")
        table(runs[mode])


def table(runs: list[tuple[float, dict]]) -> None:
    phases: list[str] = []
    for _, seconds in runs:
        phases += [k for k in seconds if k not in phases]
    rows = [p for p in phases if p != "total"] + ["total (mapping)", "other", "wall"]
    print(f"{'phase':<18}" + "".join(f"{f'run {i + 1}':>10}" for i in range(len(runs)))
          + f"{'min':>10}")
    for row in rows:
        values = []
        for wall, seconds in runs:
            if row == "wall":
                values.append(wall)
            elif row == "other":  # in no phase: the report, the exit, spawning the process
                values.append(wall - _accounted(seconds))
            elif row == "total (mapping)":
                values.append(seconds.get("total", float("nan")))
            else:
                values.append(seconds.get(row, float("nan")))
        print(f"{row:<18}" + "".join(f"{v:10.3f}" for v in values) + f"{min(values):10.3f}")


def _accounted(seconds: dict) -> float:
    """Seconds the JSON accounts for: the mapping's total plus the phases around it."""
    return seconds.get("total", 0.0) + sum(seconds.get(k, 0.0) for k in OUTSIDE_MAPPING)


if __name__ == "__main__":
    main()
