"""Where does float32 GENP inside rbt_solve(precision='mixed') lose time against the LU
benchmark's float32 GENP? Times lu_factor(pivoting='none', gemm='tf32x3') with an LUProfile on
(a) a float32 general matrix and (b) the float32 RBT-transformed matrix, same process, each
after an untimed warm-up. mpirun -n 2 python tests/gpu/profile_genp32.py"""
import time

from mpi4py import MPI

from distla import ProcessGrid
from distla.bench import common
from distla.linalg.lu import LUProfile, lu_factor
from distla.linalg.rbt import rbt_transform

comm = MPI.COMM_WORLD
grid = ProcessGrid(2, 1)
n, nb = 65536, 1024
A64 = common.general_matrix(grid, n, nb, seed=1, device="gpu")


def run(label, make):
    for rep in range(2):
        W = make()
        prof = LUProfile(W.backend)
        common.sync("gpu")
        comm.Barrier()
        t0 = time.perf_counter()
        lu_factor(W, pivoting="none", overwrite_a=True, gemm="tf32x3",
                  profile=prof if rep else None)
        common.sync("gpu")
        dt = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
        if rep and comm.rank == 0:
            print(label, f"{dt:.3f} s", {k: round(v, 3) for k, v in prof.times.items()},
                  flush=True)
        del W


run("general float32 ", lambda: A64.astype("float32"))
run("rbt float32     ", lambda: rbt_transform(A64, 2, 0)[0].astype("float32"))
