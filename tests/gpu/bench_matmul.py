"""GPU matmul rate: distla SUMMA on all ranks vs CuPy on one GPU (rank 0), same run."""
import argparse
import time

import numpy as np
from mpi4py import MPI

from distla import DistMatrix, ProcessGrid
from distla.pblas import matmul

p = argparse.ArgumentParser()
p.add_argument("--n", type=int, default=32768)
p.add_argument("--nb", type=int, default=2048)
p.add_argument("--reps", type=int, default=3)
a = p.parse_args()
comm = MPI.COMM_WORLD
import cupy as cp
grid = ProcessGrid()
n, nb = a.n, a.nb
A = DistMatrix.random(grid, (n, n), (nb, nb), seed=1, device="gpu")
B = DistMatrix.random(grid, (n, n), (nb, nb), seed=2, device="gpu")
best = 1e9
for r in range(a.reps):
    cp.cuda.Device().synchronize(); comm.Barrier(); t = time.perf_counter()
    C = matmul(A, B)
    cp.cuda.Device().synchronize(); comm.Barrier(); best = min(best, time.perf_counter() - t)
    del C
rate = 2 * n ** 3 / best / 1e12
ref = None
if comm.rank == 0:
    del A, B
    cp.get_default_memory_pool().free_all_blocks()
    x = cp.random.standard_normal((n, n)); y = cp.random.standard_normal((n, n))
    rb = 1e9
    for r in range(a.reps):
        cp.cuda.Device().synchronize(); t = time.perf_counter(); z = x @ y; cp.cuda.Device().synchronize()
        rb = min(rb, time.perf_counter() - t); del z
    ref = 2 * n ** 3 / rb / 1e12
    print(f"matmul n={n} nb={nb} grid={grid.nprow}x{grid.npcol}: distla {rate:.1f} TFLOP/s ({best:.3f} s); "
          f"cupy 1 GPU {ref:.1f} TFLOP/s; ratio {rate / ref:.2f}", flush=True)
