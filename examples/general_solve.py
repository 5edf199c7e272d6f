"""Solve a general (nonsymmetric) system A x = b with each of distla's LU methods.

    mpiexec -n 4 python examples/general_solve.py               # n=1000, nb=32, CPU ranks
    mpiexec -n 4 python examples/general_solve.py --n 3000 --nb 64 --methods gepp calu
    mpiexec -n 2 python examples/general_solve.py --device gpu --n 20000 --nb 512

Methods:
  gepp  LU with partial pivoting (ScaLAPACK pdgetrf): lu_factor(A, pivoting="partial")
  calu  communication-avoiding LU, tournament pivoting: lu_factor(A, pivoting="tournament")
  rbt   random butterfly transformation + LU without pivoting + iterative refinement
        (rbt_solve; falls back to partial pivoting, with a warning, if refinement fails)

A has independent standard normal entries (the same matrix on any grid), b = A @ ones. For each
method the table shows the time, the rate (2n^3/3 flops), ScaLAPACK's scaled residual
||b - A x||_inf / (||A||_inf ||x||_inf eps n) (pass: <= 1, the LU tester's threshold, 16 for
RBT which stops refining at a backward error near eps) and the componentwise backward error.
"""
import sys
import time
import warnings

import _env  # noqa: F401  (threads per rank; must come before NumPy and MPI)
import numpy as np
from _args import Parser, nonnegative_int, positive_int
from mpi4py import MPI

import distla
from distla.checks import backward_error, solve_residual
from distla.linalg import lu_factor, lu_solve, rbt_solve

THRESH = {"gepp": 1.0, "calu": 1.0, "rbt": 16.0}


def solve(method, A, b):
    if method == "gepp":
        return lu_solve(lu_factor(A, pivoting="partial"), b)
    if method == "calu":
        return lu_solve(lu_factor(A, pivoting="tournament"), b)
    if method == "rbt":
        return rbt_solve(A, b)
    raise ValueError(method)


def main():
    p = Parser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=positive_int, default=1000)
    p.add_argument("--nb", type=positive_int, default=32)
    p.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    p.add_argument("--methods", nargs="+", choices=tuple(THRESH), default=list(THRESH))
    p.add_argument("--seed", type=nonnegative_int, default=0)
    args = p.parse_args()

    comm = MPI.COMM_WORLD
    if comm.rank != 0:
        warnings.simplefilter("ignore")            # one copy of any warning, from rank 0
    grid = distla.ProcessGrid(comm=comm)
    n, nb = args.n, args.nb
    A = distla.DistMatrix.random(grid, (n, n), (nb, nb), seed=args.seed, device=args.device)
    ones = distla.DistMatrix.from_function(grid, (n, 1), (nb, nb), lambda I, J: 1.0,
                                           device=args.device)
    b = A @ ones
    if comm.rank == 0:
        print(f"general solve, n = {n}, nb = {nb}, grid {grid.nprow}x{grid.npcol} "
              f"({comm.size} ranks, {args.device})")
        print(f"{'method':>6} {'seconds':>9} {'GFLOP/s':>8} {'scaled resid':>13} "
              f"{'backward err':>13} {'max|x-1|':>10}  check")
    ok = True
    for method in args.methods:
        A.backend.synchronize()
        comm.Barrier()
        t0 = time.perf_counter()
        x = solve(method, A, b)                    # A and b are left unchanged
        A.backend.synchronize()
        comm.Barrier()
        t = time.perf_counter() - t0
        resid = solve_residual(A, x, b)
        berr = backward_error(A, x, b)
        err = (x - ones).norm(np.inf)
        passed = resid <= THRESH[method]
        ok &= passed
        if comm.rank == 0:
            print(f"{method:>6} {t:9.3f} {2 * n ** 3 / 3 / t / 1e9:8.2f} {resid:13.3g} "
                  f"{berr:13.3g} {err:10.2g}  {'PASSED' if passed else 'FAILED'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
