"""3D halo exchange (7-point Jacobi sweeps) on an MPI Cartesian grid, profiled by procmap.

    mpirun -n 8 python -m mpi4py examples/halo3d_mpi.py halo3d.comm [--n 32] [--iters 10]
    # later runs: place the ranks with the profile of an earlier run
    mpirun -n 8 python -m mpi4py examples/halo3d_mpi.py halo3d.comm --matrix halo3d.comm

Every process owns an ``n x n x n`` block of a periodic 3D grid (process grid from
``MPI.Compute_dims(size, 3)``) with one ghost layer. Each iteration exchanges the six
faces with ``Sendrecv`` (numpy buffers, ``n*n*8`` bytes per face) and does one Jacobi
sweep. The communicator is wrapped in a :class:`CommProfiler`; ``Create_cart`` on the
profiler returns a profiled Cartesian communicator, so the faces are counted per
``COMM_WORLD`` rank. At the end rank 0 writes the ``.comm`` file (``src dst bytes``).

With ``--matrix FILE`` the ranks are first reordered with
:func:`procmap.launcher_hooks.mpi.reorder` (hierarchy discovered at run time, or
``--hierarchy 4:8:6``) and the Cartesian grid is built on the reordered communicator:
task ``t`` of the matrix becomes Cartesian rank ``t``.
"""
import argparse
import sys

import numpy as np
from mpi4py import MPI

from procmap.launcher_hooks.mpi import reorder
from procmap.launcher_hooks.profiler import CommProfiler


def exchange_faces(cart, u):
    """Fill the six ghost faces of ``u`` from the neighbours (periodic grid)."""
    n = u.shape[0] - 2
    for axis in range(3):
        lower, upper = cart.Shift(axis, 1)  # source (lower neighbour), destination (upper)
        inner_hi = [slice(1, n + 1)] * 3
        inner_lo = [slice(1, n + 1)] * 3
        ghost_hi = [slice(1, n + 1)] * 3
        ghost_lo = [slice(1, n + 1)] * 3
        inner_hi[axis], ghost_lo[axis] = n, 0
        inner_lo[axis], ghost_hi[axis] = 1, n + 1
        recv = np.empty((n, n), dtype=u.dtype)
        # my top face goes up; my bottom ghost comes from below
        cart.Sendrecv(np.ascontiguousarray(u[tuple(inner_hi)]), upper, 10 + axis,
                      recv, lower, 10 + axis)
        u[tuple(ghost_lo)] = recv
        # my bottom face goes down; my top ghost comes from above
        cart.Sendrecv(np.ascontiguousarray(u[tuple(inner_lo)]), lower, 20 + axis,
                      recv, upper, 20 + axis)
        u[tuple(ghost_hi)] = recv


def jacobi(u):
    c = u[1:-1, 1:-1, 1:-1]
    new = (u[:-2, 1:-1, 1:-1] + u[2:, 1:-1, 1:-1] + u[1:-1, :-2, 1:-1] + u[1:-1, 2:, 1:-1]
           + u[1:-1, 1:-1, :-2] + u[1:-1, 1:-1, 2:] + c) / 7.0
    u[1:-1, 1:-1, 1:-1] = new


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", help="the .comm file rank 0 writes")
    parser.add_argument("--n", type=int, default=16, help="local block edge (default 16)")
    parser.add_argument("--iters", type=int, default=10, help="iterations (default 10)")
    parser.add_argument("--matrix", help="reorder the ranks with this communication matrix first")
    parser.add_argument("--hierarchy", help="machine hierarchy for --matrix (default: discover)")
    args = parser.parse_args(argv)

    comm = MPI.COMM_WORLD
    if args.matrix:
        comm, plan = reorder(comm, args.matrix if comm.Get_rank() == 0 else None,
                             args.hierarchy, return_plan=True)
        if comm.Get_rank() == 0:
            print(f"reordered with {args.matrix}: J {plan.J_identity} -> {plan.J} "
                  f"on hierarchy {plan.hierarchy} ({plan.source})", flush=True)
    world = CommProfiler(comm)
    dims = MPI.Compute_dims(world.Get_size(), 3)
    cart = world.Create_cart(dims, periods=[True, True, True], reorder=False)
    rng = np.random.default_rng(cart.Get_rank())
    u = np.zeros((args.n + 2,) * 3)
    u[1:-1, 1:-1, 1:-1] = rng.random((args.n,) * 3)
    for _ in range(args.iters):
        exchange_faces(cart, u)
        jacobi(u)
    total = cart.allreduce(float(u[1:-1, 1:-1, 1:-1].sum()))
    sent = sum(world.matrix().values())
    sent_all = cart.allreduce(sent)
    if world.Get_rank() == 0:
        print(f"halo3d: {world.Get_size()} ranks, process grid {dims}, block {args.n}^3, "
              f"{args.iters} iterations, checksum {total:.6f}, {sent_all} bytes sent",
              flush=True)
    world.write(args.output)
    cart.Free()
    if args.matrix:
        comm.Free()


if __name__ == "__main__":
    main(sys.argv[1:])
