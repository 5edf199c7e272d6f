"""Solve A x = b for a matrix stored in a file (.npy or Matrix Market .mtx).

    mpiexec -n 4 python examples/solve_file.py A.npy                   # b = A @ ones
    mpiexec -n 4 python examples/solve_file.py A.mtx b.npy --method gepp --out x.npy
    mpiexec -n 4 python examples/solve_file.py                         # writes a demo matrix

.npy files are read with MPI-IO: every rank reads only the entries of its own blocks, so a matrix
larger than one rank's memory can be read (the file must be visible to every rank). .mtx files
are text and are parsed on rank 0, then scattered. Without a file, rank 0 first writes a
small demo matrix (1-D Poisson, SPD) to distla_demo_A.npy in the current directory. The same
job from the command line: `mpiexec -n 4 distla solve --matrix A.npy --method cholesky`.
"""
import os
import sys
import time

import _env  # noqa: F401  (threads per rank; must come before NumPy and MPI)
import numpy as np
from _args import Parser, positive_int
from mpi4py import MPI

import distla
from distla import io
from distla.checks import backward_error, solve_residual
from distla.linalg import cho_solve, cholesky, lu_factor, lu_solve, rbt_solve


def solve(method, A, b):
    if method == "cholesky":
        return cho_solve((cholesky(A), True), b)
    if method in ("gepp", "calu"):
        return lu_solve(lu_factor(A, pivoting="partial" if method == "gepp" else "tournament"),
                        b)
    return rbt_solve(A, b)


def main():
    p = Parser(description=__doc__.splitlines()[0])
    p.add_argument("matrix", nargs="?",
                   help="A: .npy or .mtx (default: write and use distla_demo_A.npy)")
    p.add_argument("rhs", nargs="?", help="b: .npy or .mtx (default: A @ ones)")
    p.add_argument("--method", choices=("cholesky", "gepp", "calu", "rbt"), default="cholesky")
    p.add_argument("--nb", type=positive_int, default=64)
    p.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    p.add_argument("--out", help="write x here (.npy or .mtx)")
    args = p.parse_args()

    comm = MPI.COMM_WORLD
    path = args.matrix
    if path is None:
        path = "distla_demo_A.npy"
        if comm.rank == 0:
            n = 500
            demo = 2 * np.eye(n) - np.eye(n, k=1) - np.eye(n, k=-1)
            np.save(path, demo)
            print(f"wrote a {n} x {n} demo matrix to {path}")
        comm.Barrier()

    grid = distla.ProcessGrid(comm=comm)
    blk = (args.nb, args.nb)
    t0 = time.perf_counter()
    A = io.read_matrix(path, grid, blk, device=args.device)   # collective; errors on all ranks
    if A.m != A.n:
        if comm.rank == 0:
            print(f"error: {path} is {A.m} x {A.n}, not square", file=sys.stderr)
        sys.exit(2)
    if args.rhs:
        b = io.read_matrix(args.rhs, grid, blk, device=args.device, dtype=A.dtype)
        ones = None
    else:
        ones = distla.DistMatrix.from_function(grid, (A.n, 1), blk, lambda I, J: 1.0,
                                               dtype=A.dtype, device=args.device)
        b = A @ ones
    comm.Barrier()
    t1 = time.perf_counter()
    x = solve(args.method, A, b)
    A.backend.synchronize()
    comm.Barrier()
    t2 = time.perf_counter()
    resid = solve_residual(A, x, b)
    berr = backward_error(A, x, b)
    err = (x - ones).norm(np.inf) if ones is not None else None   # collective
    if args.out:
        io.write_matrix(args.out, x, vector=x.n == 1)           # gathered on rank 0
    if comm.rank == 0:
        print(f"{os.path.basename(path)}: {A.n} x {A.n} {A.dtype}, method {args.method}, "
              f"grid {grid.nprow}x{grid.npcol}, nb {args.nb}")
        print(f"  read {t1 - t0:.3f} s, solve {t2 - t1:.3f} s")
        print(f"  scaled residual {resid:.3g}, backward error {berr:.3g}")
        if err is not None:
            print(f"  max |x - 1| = {err:.3g}")
        if args.out:
            print(f"  solution written to {args.out}")


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # distla raises the same exception on every rank: report it once
        if MPI.COMM_WORLD.rank == 0:
            print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
