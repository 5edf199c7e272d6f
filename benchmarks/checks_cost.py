"""Cost of the input checks and the condition estimate beside the solve itself.

    mpiexec -n 2 python benchmarks/checks_cost.py --n 8192 --nb 128 --json out.jsonl
    mpirun -n 1 python3 benchmarks/checks_cost.py --device gpu --n 32768 --nb 1024

For Cholesky and LU (partial pivoting): the solve with every check off (the reference row),
the solve with the default checks (check_finite, check_symmetric for Cholesky, the rcond
estimate) and the difference ("every check": a difference of two timings, noisy where the
checks are a few percent), then each check alone timed by itself on the same matrix
(check_finite; check_symmetric, also with finite=True, the one pass a checked Cholesky solve
makes; the rcond estimate; the element growth factor solve_lu checks), and what the
estimate adds to a solve with the factor when it rides along (cho_solve_rcond /
lu_solve_rcond against cho_solve / lu_solve), best of --reps. Prints seconds and the
percentage of the plain solve.
"""
import argparse
import sys

from mpi4py import MPI

from distla import DistMatrix, ProcessGrid
from distla.bench.common import append_jsonl, timed
from distla.linalg import (
    cho_rcond,
    cho_solve,
    cho_solve_rcond,
    cholesky,
    lu_factor,
    lu_solve,
    lu_solve_rcond,
    solve_cholesky,
    solve_lu,
)
from distla.pblas import norm
from distla.validate import check_finite, check_symmetric


def best(fn, reps):
    return timed(fn, DEVICE[0], comm=MPI.COMM_WORLD, reps=reps)


DEVICE = ["cpu"]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=8192)
    p.add_argument("--nb", type=int, default=128)
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    p.add_argument("--json")
    a = p.parse_args()
    comm = MPI.COMM_WORLD
    DEVICE[0] = a.device
    g = ProcessGrid(comm=comm)
    n, nb = a.n, a.nb
    A = DistMatrix.from_function(g, (n, n), (nb, nb),
                                 lambda I, J: 1.0 / (1.0 + abs(I - J)) + n * (I == J),
                                 device=a.device)
    B = DistMatrix.random(g, (n, 1), (nb, nb), seed=7, device=a.device)
    off = dict(check_finite=False, check_rcond=False)
    rows = []

    def rec(impl, sec, flops, ref):
        rows.append({"bench": "checks", "impl": impl, "n": n, "nb": nb, "ranks": comm.size,
                     "grid": f"{g.nprow}x{g.npcol}", "device": a.device, "seconds": sec,
                     "tflops": flops / sec / 1e12 if flops else None,
                     "percent_of_solve": 100 * sec / ref,
                     "command": f"mpiexec -n {comm.size} python benchmarks/checks_cost.py "
                                + " ".join(sys.argv[1:])})

    t_chol = best(lambda: solve_cholesky(A, B, check_symmetric=False, **off), a.reps)
    rec("solve_cholesky (no checks)", t_chol, n ** 3 / 3, t_chol)
    t_all = best(lambda: solve_cholesky(A, B), a.reps)
    rec("solve_cholesky (default checks)", t_all, n ** 3 / 3, t_chol)
    rec("every check (default - none)", max(t_all - t_chol, 1e-9), 0, t_chol)
    rec("check_finite A,B", best(lambda: check_finite(("A", A), ("B", B)), a.reps),
        0, t_chol)
    rec("check_symmetric", best(lambda: check_symmetric(A), a.reps), 0, t_chol)
    rec("check_symmetric + finite + norm", best(lambda: check_symmetric(A, finite=True),
                                                 a.reps), 0, t_chol)
    L = cholesky(A, check_finite=False, check_symmetric=False)
    anorm = norm(A, 1)
    rec("rcond (Cholesky)", best(lambda: cho_rcond((L, True), anorm), a.reps), 0, t_chol)
    t1 = best(lambda: cho_solve((L, True), B, check_finite=False), a.reps)
    t2 = best(lambda: cho_solve_rcond((L, True), B, anorm, check_finite=False), a.reps)
    rec("rcond added to cho_solve (fused)", max(t2 - t1, 1e-9), 0, t_chol)
    t_lu = best(lambda: solve_lu(A, B, **off), a.reps)
    rec("solve_lu (no checks)", t_lu, 2 * n ** 3 / 3, t_lu)
    t_all = best(lambda: solve_lu(A, B), a.reps)
    rec("solve_lu (default checks)", t_all, 2 * n ** 3 / 3, t_lu)
    rec("every check (default - none)", max(t_all - t_lu, 1e-9), 0, t_lu)
    rec("check_finite A,B", best(lambda: check_finite(("A", A), ("B", B)), a.reps),
        0, t_lu)
    F = lu_factor(A, check_finite=False)
    rec("rcond (LU)", best(lambda: (setattr(F, "_rcond", None), F.rcond()), a.reps),
        0, t_lu)
    t1 = best(lambda: lu_solve(F, B, check_finite=False), a.reps)
    t2 = best(lambda: (setattr(F, "_rcond", None), lu_solve_rcond(F, B, check_finite=False)),
              a.reps)
    rec("rcond added to lu_solve (fused)", max(t2 - t1, 1e-9), 0, t_lu)
    rec("growth factor (LU)", best(F.growth_factor, a.reps), 0, t_lu)
    if comm.rank == 0:
        for r in rows:
            print(f"{r['impl']:<28} {r['seconds']:9.4f} s  {r['percent_of_solve']:6.2f} % "
                  f"of the solve")
        append_jsonl(a.json, rows)
    g.free() if hasattr(g, "free") else None


if __name__ == "__main__":
    main()
