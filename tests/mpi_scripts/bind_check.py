"""Run under mpirun with a rankfile: report the CPU affinity and the discovered hierarchy.

    mpirun -n 2 --map-by rankfile:file=RF python -m mpi4py bind_check.py

Prints one line per rank: ``BIND <json>`` with the rank, ``os.sched_getaffinity(0)``,
and what runtime discovery (``plan_reorder`` without a hierarchy) made of the job.
"""
import json
import os

from mpi4py import MPI

from procmap.launcher_hooks.mpi import plan_reorder

comm = MPI.COMM_WORLD
r, n = comm.Get_rank(), comm.Get_size()
# Every rank talks to every other one a little, rank 0 <-> 1 a lot.
row = {p: (1000 if {r, p} == {0, 1} else 1) for p in range(n) if p != r}
plan = plan_reorder(comm, row)
newcomm = comm.Split(0, int(plan.new_rank[r]))
print("BIND " + json.dumps({
    "rank": r,
    "affinity": sorted(os.sched_getaffinity(0)),
    "levels": list(plan.hierarchy.levels),
    "capacities": plan.hierarchy.capacities.tolist(),
    "pe_of_rank": plan.pe_of_rank.tolist(),
    "hosts": list(plan.hosts),
    "source": plan.source,
    "new_rank": plan.new_rank.tolist(),
    "newcomm_rank": newcomm.Get_rank(),
}), flush=True)
newcomm.Free()
