"""Ring shift, profiled by procmap: every rank passes data to its right neighbour.

    mpirun -n 8 python -m mpi4py examples/ring_mpi.py ring.comm [--bytes 65536] [--rounds 5]

Each round every rank sends a numpy buffer of ``--bytes`` bytes to ``rank + 1`` with
``Sendrecv`` (buffer API) and a small Python token with ``sendrecv`` (pickle API; the
profiler counts the pickled size). The ``.comm`` file (``src dst bytes``, row = sender)
therefore shows one heavy entry per rank, ``r -> r+1``, a cycle that a mapping should
lay out along the machine hierarchy.
"""
import argparse
import sys

import numpy as np
from mpi4py import MPI

from procmap.launcher_hooks.profiler import CommProfiler


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", help="the .comm file rank 0 writes")
    parser.add_argument("--bytes", type=int, default=65536, help="bytes per round (default 65536)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds (default 5)")
    parser.add_argument("--weight", choices=("bytes", "messages"), default="bytes")
    args = parser.parse_args(argv)

    comm = CommProfiler(MPI.COMM_WORLD)
    rank, size = comm.Get_rank(), comm.Get_size()
    right, left = (rank + 1) % size, (rank - 1) % size
    data = np.full(args.bytes, rank % 256, dtype=np.uint8)
    incoming = np.empty_like(data)
    token = {"hops": 0, "origin": rank}
    for _ in range(args.rounds):
        comm.Sendrecv(data, right, 1, incoming, left, 1)
        data, incoming = incoming, data
        token = comm.sendrecv(token, right, 2, source=left, recvtag=2)
        token["hops"] += 1
    # after `rounds` shifts the data came from rank - rounds
    assert data[0] == (rank - args.rounds) % size % 256
    if rank == 0:
        print(f"ring: {size} ranks, {args.rounds} rounds of {args.bytes} bytes; "
              f"token from rank {token['origin']} after {token['hops']} hops", flush=True)
    comm.write(args.output, weight=args.weight)


if __name__ == "__main__":
    main(sys.argv[1:])
