"""All-to-all inside row communicators (as in a 2D FFT transpose), profiled by procmap.

    mpirun -n 8 python -m mpi4py examples/alltoall_rows_mpi.py rows.comm [--rows 2]
           [--layout strided|block] [--block 4096] [--iters 3] [--mode p2p|collective]
           [--matrix rows.comm [--hierarchy 2:2]]

The ranks are split into ``--rows`` row communicators with ``comm.Split``. With the
default ``--layout strided`` rank ``r`` belongs to row ``r % rows`` (rows interleave
across the launcher's block placement, the case a mapping improves); ``block`` uses
row ``r // (size / rows)``. Inside each row every rank sends ``--block`` float64 values
to every other member, ``--iters`` times.

The profiler records point-to-point traffic only, and ``Alltoall`` is a collective, so:

* ``--mode p2p`` (default) does the exchange with ``Irecv``/``Isend`` pairs; the
  profiler counts each ``Isend``;
* ``--mode collective`` calls ``Alltoall`` on the row communicator and records the
  traffic explicitly with ``row.record(peer, nbytes)`` for every other member (the
  bytes a pairwise Alltoall moves; a library may route them differently).

Both modes write the same ``.comm`` file. ``Split`` on a profiler returns a profiled
row communicator that records into the same tallies, with peers translated to
``COMM_WORLD`` ranks, so the matrix is over world ranks.

With ``--matrix FILE`` (e.g. the file of an earlier run) the ranks are first reordered
with :func:`procmap.launcher_hooks.mpi.reorder`: the members of a row end up on
processes that are close in the machine, and the program runs on the new communicator.
"""
import argparse
import sys

import numpy as np
from mpi4py import MPI

from procmap.launcher_hooks.mpi import reorder
from procmap.launcher_hooks.profiler import CommProfiler


def exchange_p2p(row, send, recv):
    """Pairwise all-to-all with nonblocking point-to-point messages."""
    me, size = row.Get_rank(), row.Get_size()
    requests = []
    for peer in range(size):
        if peer == me:
            recv[peer] = send[peer]
            continue
        requests.append(row.Irecv(recv[peer], peer, 7))
    for peer in range(size):
        if peer != me:
            requests.append(row.Isend(send[peer], peer, 7))
    MPI.Request.Waitall(requests)


def exchange_collective(row, send, recv):
    """``Alltoall`` (a collective, not seen by the profiler) plus explicit records."""
    row.Alltoall(send, recv)
    me = row.Get_rank()
    for peer in range(row.Get_size()):
        if peer != me:
            row.record(peer, send[peer].nbytes)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", help="the .comm file rank 0 writes")
    parser.add_argument("--rows", type=int, default=2, help="number of row communicators")
    parser.add_argument("--layout", choices=("strided", "block"), default="strided")
    parser.add_argument("--block", type=int, default=4096, help="float64 values per peer")
    parser.add_argument("--iters", type=int, default=3)
    parser.add_argument("--mode", choices=("p2p", "collective"), default="p2p")
    parser.add_argument("--matrix", help="reorder the ranks with this communication matrix first")
    parser.add_argument("--hierarchy", help="machine hierarchy for --matrix (default: discover)")
    args = parser.parse_args(argv)

    comm = MPI.COMM_WORLD
    if args.matrix:
        # task t of the matrix becomes rank t of `comm`; everything below uses `comm`
        comm, plan = reorder(comm, args.matrix if comm.Get_rank() == 0 else None,
                             args.hierarchy, return_plan=True)
        if comm.Get_rank() == 0:
            print(f"reordered with {args.matrix}: J {plan.J_identity} -> {plan.J} "
                  f"on hierarchy {plan.hierarchy} ({plan.source})", flush=True)
    world = CommProfiler(comm)
    rank, size = world.Get_rank(), world.Get_size()
    rows = max(1, min(args.rows, size))
    if args.layout == "strided":
        color = rank % rows
    else:
        color = rank // -(-size // rows)
    row = world.Split(color=color, key=rank)
    members = row.Get_size()
    send = np.empty((members, args.block))
    recv = np.empty_like(send)
    for peer in range(members):
        send[peer] = rank * 1000 + peer  # what `peer` will find in its slot for `rank`
    exchange = exchange_p2p if args.mode == "p2p" else exchange_collective
    for _ in range(args.iters):
        exchange(row, send, recv)
    # slot j holds the data of row member j, addressed to me
    sources = row.allgather(rank)
    expected = np.array([src * 1000 + row.Get_rank() for src in sources], dtype=float)
    assert np.array_equal(recv[:, 0], expected), (recv[:, 0], expected)
    if rank == 0:
        print(f"alltoall_rows: {size} ranks in {rows} {args.layout} rows, {args.iters} x "
              f"{args.block * 8} bytes per pair ({args.mode})", flush=True)
    world.write(args.output)
    row.Free()
    if args.matrix:
        comm.Free()


if __name__ == "__main__":
    main(sys.argv[1:])
