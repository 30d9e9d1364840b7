"""Run the three examples/*_mpi.py programs one after the other in one MPI job.

    mpirun -n 4 --oversubscribe python -m mpi4py run_examples.py OUTDIR

One job instead of four saves the MPI start-up and the imports (seconds each on a
2-core machine). Each example's ``main(argv)`` is called exactly as its command line
would; they write OUTDIR/halo3d.comm, ring.comm, rows_p2p.comm, rows_collective.comm.
"""
import os
import runpy
import sys

from mpi4py import MPI

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(HERE, os.pardir, os.pardir, "examples")
out = sys.argv[1]

RUNS = [
    ("halo3d_mpi.py", [os.path.join(out, "halo3d.comm"), "--n", "4", "--iters", "2"]),
    ("ring_mpi.py", [os.path.join(out, "ring.comm"), "--bytes", "1000", "--rounds", "3"]),
    ("alltoall_rows_mpi.py", [os.path.join(out, "rows_p2p.comm"), "--rows", "2",
                              "--block", "16", "--iters", "2"]),
    ("alltoall_rows_mpi.py", [os.path.join(out, "rows_collective.comm"), "--rows", "2",
                              "--block", "16", "--iters", "2", "--mode", "collective"]),
]

for name, argv in RUNS:
    namespace = runpy.run_path(os.path.join(EXAMPLES, name), run_name="procmap_example")
    namespace["main"](argv)
    MPI.COMM_WORLD.Barrier()
