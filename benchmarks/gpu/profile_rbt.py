"""Profile one RBT solve (cProfile on rank 0, under a synchronizing distla.trace.Tracer, so
time lands in the phase that queued the work).
mpirun -n 2 python benchmarks/gpu/profile_rbt.py --n 65536"""
import argparse
import cProfile
import pstats

from mpi4py import MPI

from distla import DistMatrix, ProcessGrid
from distla.bench import common
from distla.linalg import rbt_solve
from distla.trace import Tracer

p = argparse.ArgumentParser()
p.add_argument("--n", type=int, default=65536)
p.add_argument("--nb", type=int, default=1024)
p.add_argument("--grid", default="2x1")
p.add_argument("--precision", default="double")
a = p.parse_args()
comm = MPI.COMM_WORLD
P, Q = map(int, a.grid.split("x"))
grid = ProcessGrid(P, Q)
for n in (4 * a.nb, a.n):
    A = common.general_matrix(grid, n, a.nb, seed=1, device="gpu")
    B = DistMatrix.random(grid, (n, 1), (a.nb, a.nb), seed=2, device="gpu")
    prof = cProfile.Profile()
    prof.enable()
    with Tracer(device="gpu", sync=True) as tr:
        X, info = rbt_solve(A, B, precision=a.precision, return_info=True)
    prof.disable()
    if comm.rank == 0 and n == a.n:
        print(tr.table(), flush=True)
        pstats.Stats(prof).sort_stats("cumulative").print_stats(28)
    del A, B, X
