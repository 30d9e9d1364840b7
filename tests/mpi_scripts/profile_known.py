"""Run under mpirun with 4 ranks: send known traffic through a CommProfiler.

    mpirun -n 4 --oversubscribe python -m mpi4py profile_known.py BYTES.comm MESSAGES.comm

tests/test_mpi.py::expected_traffic states the same traffic as a formula; keep both in step.
Every rank also prints one line ``ROW {"rank": r, "row": {...}}`` with its local bytes row.
"""
import json
import sys

import numpy as np
from mpi4py import MPI

from procmap.launcher_hooks.profiler import CommProfiler

world = MPI.COMM_WORLD
assert world.Get_size() == 4, f"needs 4 ranks, got {world.Get_size()} (mpi4py/mpirun mismatch?)"
prof = CommProfiler(world)
r, n = world.Get_rank(), world.Get_size()
right, left = (r + 1) % n, (r - 1) % n
opposite = (r + 2) % n

# 1. Send/Recv of a numpy array: (r+1)*100 float64 to the right.
prof.Send(np.arange((r + 1) * 100, dtype=np.float64), dest=right, tag=1)
buf = np.empty((left + 1) * 100, dtype=np.float64)
prof.Recv(buf, source=left, tag=1)
assert buf[-1] == (left + 1) * 100 - 1

# 2. Isend of a bytearray of 37*r+5 bytes to the opposite rank.
req = prof.Isend(bytearray(37 * r + 5), opposite, 2)
got = bytearray(37 * opposite + 5)
prof.Recv(got, opposite, 2)
req.Wait()

# 3. Sendrecv with an explicit [buf, count, datatype] spec: 10 doubles (80 bytes) to the left.
send = np.ones(50, dtype=np.float64)
recv = np.zeros(50, dtype=np.float64)
prof.Sendrecv([send, 10, MPI.DOUBLE], left, 3, [recv, 10, MPI.DOUBLE], right, 3)

# 4. Pickle send of a known object to the right (the test computes its pickle size).
prof.send({"rank": r, "payload": "x" * (10 * r)}, dest=right, tag=4)
obj = prof.recv(source=left, tag=4)
assert obj["rank"] == left

# 5. [buf, datatype] spec: 6 int32 (24 bytes) to the opposite rank with Ssend/Irecv.
ints = np.arange(6, dtype=np.int32)
rreq = prof.Irecv([np.empty(6, dtype=np.int32), MPI.INT], opposite, 5)
prof.Ssend([ints, MPI.INT], opposite, 5)
rreq.Wait()

# 6. Sends to PROC_NULL are not traffic.
prof.Send(np.zeros(1000), MPI.PROC_NULL)

# 7. A row communicator with reversed keys: peers are translated to world ranks.
row = prof.Split(color=r // 2, key=-r)
partner = 1 - row.Get_rank()
row.Sendrecv_replace(np.zeros(3, dtype=np.int32), partner, 7)   # 12 bytes to world r^1

# 8. issend of a small object to the left, matched by recv.
req = prof.issend([r] * 3, left, 8)
prof.recv(source=right, tag=8)
req.Wait()

# 9. Traffic recorded by hand (what a collective would carry): 1000 bytes in 3 messages.
prof.record(opposite, 1000, messages=3)

# 10. Nothing counted while disabled.
prof.enabled = False
prof.Sendrecv(np.zeros(625), right, 10, np.zeros(625), left, 10)
prof.enabled = True

# 11. Collectives are never counted.
prof.Allreduce(MPI.IN_PLACE, np.ones(100), op=MPI.SUM)
prof.Barrier()

print("ROW " + json.dumps({"rank": r, "row": {str(k): v for k, v in prof.matrix().items()}}),
      flush=True)
prof.write(sys.argv[1])
prof.write(sys.argv[2], weight="messages")
row.Free()
