"""Seconds of one solve with one right-hand side on a grid of GPUs (or CPU ranks): the
few-right-hand-side sweep (pblas._trsv_few) that refinement and condition estimates repeat.

    mpirun -n 2 python3 benchmarks/gpu/solve_sweep_probe.py --n 32768 --nb 1024 [--json F]

Cholesky factor and LU factors of a diagonally dominant matrix, then best of --reps of
cho_solve and lu_solve (device synchronized), and the triangular sweeps alone.
"""
import argparse

from distla import DistMatrix, ProcessGrid, pblas
from distla.bench.common import stream, timed
from distla.linalg import cho_solve, cholesky, lu_factor, lu_solve


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=32768)
    ap.add_argument("--nb", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--device", default="gpu")
    ap.add_argument("--label", default="")
    ap.add_argument("--json")
    a = ap.parse_args()
    g = ProcessGrid()
    n, nb = a.n, a.nb
    A = DistMatrix.from_function(g, (n, n), (nb, nb),
                                 lambda I, J: 1.0 / (1.0 + abs(I - J)) + n * (I == J),
                                 device=a.device)
    B = DistMatrix.random(g, (n, 1), (nb, nb), seed=7, device=a.device)
    L = cholesky(A, check_finite=False, check_symmetric=False)
    F = lu_factor(A, check_finite=False)
    for what, fn in (("cho_solve 1 rhs", lambda: cho_solve((L, True), B, check_finite=False)),
                     ("lu_solve 1 rhs", lambda: lu_solve(F, B, check_finite=False)),
                     ("forward sweep L", lambda: pblas.triangular_solve(L, B, lower=True)),
                     ("backward sweep L^T", lambda: pblas.triangular_solve(L, B, lower=True,
                                                                          trans=True))):
        sec = timed(fn, a.device, comm=g.comm, reps=a.reps)
        stream(a, dict(bench="solve_sweep", impl=what, n=n, nb=nb, ranks=g.size,
                       grid=f"{g.nprow}x{g.npcol}", device=a.device, seconds=sec,
                       tflops=None, label=a.label), g.comm)
        if g.rank == 0:
            print(f"{a.label:8s} {what:22s} {1e3 * sec:8.2f} ms", flush=True)


if __name__ == "__main__":
    main()
