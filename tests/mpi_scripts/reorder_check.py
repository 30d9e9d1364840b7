"""Run under mpirun with 4 ranks: reorder with a given hierarchy and known matrices.

    mpirun -n 4 --oversubscribe python -m mpi4py reorder_check.py MATRIX.comm

Cases, all in one job (each prints ``CASE <json>`` per rank):

* ``rows``: hierarchy 2:2, each rank passes its own row; 0-2 and 1-3 talk heavily.
* ``file``: the same matrix read from MATRIX.comm on the root only (others pass None).
* ``dense``: a dense matrix on the root where 0-1 and 2-3 talk heavily but the
  processes sit on PEs [0, 2, 1, 3] (``pes=``, one int per rank).
* ``discovered``: no hierarchy: runtime discovery (unbound ranks: node level only).
* ``error``: rank 3 passes a row naming rank 9; every rank must raise ProcmapError.
"""
import json
import sys

import numpy as np
from mpi4py import MPI

from procmap.errors import ProcmapError
from procmap.launcher_hooks.mpi import reorder

comm = MPI.COMM_WORLD
r, n = comm.Get_rank(), comm.Get_size()
assert n == 4, f"needs 4 ranks, got {n} (mpi4py/mpirun mismatch?)"

HEAVY = {0: 2, 2: 0, 1: 3, 3: 1}


def report(case, newcomm, plan):
    # Check on every rank that the new communicator follows the plan, then report.
    print("CASE " + json.dumps({
        "case": case,
        "rank": r,
        "newcomm_rank": newcomm.Get_rank(),
        "newcomm_size": newcomm.Get_size(),
        "new_rank": plan.new_rank.tolist(),
        "task_pe": np.asarray(plan.task_pe).tolist(),
        "pe_of_rank": plan.pe_of_rank.tolist(),
        "levels": list(plan.hierarchy.levels),
        "capacities": plan.hierarchy.capacities.tolist(),
        "source": plan.source,
        "J": plan.J,
        "J_identity": plan.J_identity,
        # the rank the new communicator gives to each old rank, seen from here
        "seen": comm.allgather(newcomm.Get_rank()),
        # only the root may have loaded the engines
        "heavy": sorted(m for m in ("numba", "pymetis", "procmap.api", "procmap.engines")
                        if m in sys.modules),
    }), flush=True)
    newcomm.Free()


row = {HEAVY[r]: 1000, (r + 1) % n: 1}
newcomm, plan = reorder(comm, row, "2:2", return_plan=True)
report("rows", newcomm, plan)

newcomm, plan = reorder(comm, sys.argv[1] if r == 0 else None, "2:2", return_plan=True)
report("file", newcomm, plan)

dense = None
if r == 0:
    dense = np.zeros((n, n), dtype=np.int64)
    dense[0, 1] = dense[2, 3] = 500
    dense[0, 2] = dense[1, 3] = 1
newcomm, plan = reorder(comm, dense, "2:2", pes=[0, 2, 1, 3][r], return_plan=True)
report("dense", newcomm, plan)

newcomm, plan = reorder(comm, row, return_plan=True)
report("discovered", newcomm, plan)

try:
    reorder(comm, {9: 5} if r == 3 else row, "2:2")
except ProcmapError as exc:
    print("CASE " + json.dumps({"case": "error", "rank": r, "error": str(exc)}), flush=True)
else:
    print("CASE " + json.dumps({"case": "error", "rank": r, "error": None}), flush=True)
