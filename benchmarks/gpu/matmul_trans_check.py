"""Correctness check of ``matmul(A, B, transa='T'|'C')`` with few columns on every grid of
the job (real, and complex on CPU ranks; sizes the blocks do not divide, nonzero source,
alpha/beta with C) against NumPy; prints the number of mismatches on each rank.

    mpirun -n R python3 benchmarks/gpu/matmul_trans_check.py [gpu|cpu]
"""
import sys

import numpy as np
from mpi4py import MPI

from distla import DistMatrix, ProcessGrid, pblas
from distla.testing import grid_shapes


def main():
    comm = MPI.COMM_WORLD
    dev = sys.argv[1] if len(sys.argv) > 1 else "cpu"
    bad = 0
    for p, q in grid_shapes(comm.size):
        for order in ("row", "col"):
            g = ProcessGrid(p, q, comm, order=order)
            for dt in (np.float64,) if dev == "gpu" else (np.float64, np.complex128):
                for m, n, k, nb in ((37, 29, 3, 8), (50, 50, 16, 7), (20, 33, 1, 5)):
                    rng = np.random.default_rng(1)
                    a = rng.standard_normal((m, n)).astype(dt)
                    b = rng.standard_normal((m, k)).astype(dt)
                    if dt == np.complex128:
                        a = a + 1j * rng.standard_normal((m, n))
                        b = b + 1j * rng.standard_normal((m, k))
                    c0 = rng.standard_normal((n, k)).astype(dt)
                    A = DistMatrix.from_global(g, a, block=nb, src=(p - 1, q - 1), device=dev)
                    B = DistMatrix.from_global(g, b, block=nb, device=dev)
                    for ta in ("T", "C"):
                        want = (a.T if ta == "T" else a.conj().T) @ b
                        got = pblas.matmul(A, B, transa=ta).to_global(None)
                        bad += not np.allclose(got, want, atol=1e-12)
                        C = DistMatrix.from_global(g, c0, block=(A.nb, B.nb),
                                                   src=(A.rsrc, B.csrc), device=dev)
                        got = pblas.matmul(A, B, transa=ta, C=C, alpha=2.0, beta=0.5)
                        bad += not np.allclose(got.to_global(None), 2 * want + 0.5 * c0,
                                               atol=1e-12)
    print(f"rank {comm.rank}: {bad} mismatches", flush=True)


if __name__ == "__main__":
    main()
