"""Solve a generated symmetric positive definite system A x = b on several MPI ranks.

    mpiexec -n 4 python examples/spd_solve.py                 # n=2000, nb=64, CPU ranks
    mpiexec -n 4 python examples/spd_solve.py --n 8000 --nb 128
    mpiexec -n 2 python examples/spd_solve.py --device gpu --n 32768 --nb 1024

A is the Kac-Murdock-Szego matrix a_ij = rho^|i-j| (SPD for |rho| < 1), generated block by
block on the ranks that own each block (the full matrix never exists on one rank). b = A @ ones,
so the exact solution is all ones. Prints the grid, the factor and solve times, the rate, and
ScaLAPACK's scaled residual ||b - A x||_inf / (||A||_inf ||x||_inf eps n) (pass: <= 3, the
threshold of ScaLAPACK's LLT tester). Exits 1 on every rank if the check fails.
"""
import sys
import time

import _env  # noqa: F401  (threads per rank; must come before NumPy and MPI)
import numpy as np
from _args import Parser, positive_int
from mpi4py import MPI

import distla
from distla.checks import solve_residual
from distla.linalg import cho_solve, cholesky


def main():
    p = Parser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=positive_int, default=2000, help="matrix size (default 2000)")
    p.add_argument("--nb", type=positive_int, default=64, help="block size (default 64)")
    p.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    p.add_argument("--rho", type=float, default=0.5, help="KMS parameter, |rho| < 1")
    args = p.parse_args()
    if not abs(args.rho) < 1:      # (NaN too) A would not be positive definite
        p.fail(f"argument --rho: must be a number with |rho| < 1, not {args.rho}")

    comm = MPI.COMM_WORLD
    rank0 = comm.rank == 0
    grid = distla.ProcessGrid(comm=comm)          # the squarest P x Q grid of all ranks
    n, nb = args.n, args.nb

    # A(i, j) = rho^|i-j|: fn gets this rank's global row indices I (m_loc x 1) and column
    # indices J (1 x n_loc) and returns its local block-cyclic piece.
    A = distla.DistMatrix.from_function(grid, (n, n), (nb, nb),
                                        lambda I, J: args.rho ** abs(I - J),
                                        device=args.device)
    ones = distla.DistMatrix.from_function(grid, (n, 1), (nb, nb), lambda I, J: 1.0,
                                           device=args.device)
    b = A @ ones                                   # distributed matmul (SUMMA)

    def synced():
        A.backend.synchronize()
        comm.Barrier()
        return time.perf_counter()

    t0 = synced()
    L = cholesky(A)                                # A = L L^T (A itself is left unchanged)
    t1 = synced()
    x = cho_solve((L, True), b)                    # two triangular solves
    t2 = synced()

    resid = solve_residual(A, x, b)                # the same float on every rank
    err = (x - ones).norm(np.inf)                  # x should be all ones
    gflops = (n ** 3 / 3 + 2 * n * n) / (t2 - t0) / 1e9
    if rank0:
        print(f"distla {distla.__version__}: SPD solve, n = {n}, nb = {nb}, "
              f"grid {grid.nprow}x{grid.npcol} ({comm.size} ranks, {args.device})")
        print(f"  factor {t1 - t0:8.3f} s   solve {t2 - t1:8.3f} s   "
              f"({gflops:.2f} GFLOP/s)")
        print(f"  scaled residual ||b - A x|| / (||A|| ||x|| eps n) = {resid:.3g}  "
              f"({'PASSED' if resid <= 3.0 else 'FAILED'}, threshold 3)")
        print(f"  max |x - 1| = {err:.3g}")
    sys.exit(0 if resid <= 3.0 else 1)


if __name__ == "__main__":
    main()
