"""What describing a call's arguments for the ranks' agreement costs one rank (diagnosis):
the default solve of a 64 x 64 system on one CPU rank, the number of argument descriptions
it makes, and its best CPU time of 200.

    cd /tmp; PYTHONPATH=TREE python /path/to/benchmarks/signature_cost.py
"""
import time

import numpy as np
from mpi4py import MPI

from distla import DistMatrix, ProcessGrid, errors, linalg


def main():
    g = ProcessGrid(1, 1, MPI.COMM_SELF)
    r = np.random.default_rng(0)
    a = r.standard_normal((64, 64)) + 64 * np.eye(64)
    b = r.standard_normal((64, 1))
    A = DistMatrix.from_global(g, a, block=128)
    B = DistMatrix.from_global(g, b, block=128)
    calls = [0]
    orig = errors.describe

    def counting(x):
        calls[0] += 1
        return orig(x)
    errors.describe = counting
    linalg.solve(A, B)
    calls[0] = 0
    for _ in range(50):
        linalg.solve(A, B)
    errors.describe = orig
    best = np.inf
    for _ in range(200):
        t = time.thread_time()
        linalg.solve(A, B)
        best = min(best, time.thread_time() - t)
    print("describe calls per solve", calls[0] / 50, "solve us", round(best * 1e6))


if __name__ == "__main__":
    main()
