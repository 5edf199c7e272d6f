"""Where the condition estimate's time goes on one rank (GPU or CPU): the whole Cholesky
rcond (three applies of A^-1 to n x 3 and n x 2 blocks) beside its parts -- building the
blocks, the replicated gathers, cho_solve on 1, 2 and 3 columns -- and the local triangular
solves themselves: the backend's trsm (cuBLAS dtrsm / LAPACK) on 1-4 columns, L and L^T, and
per-column cuBLAS dtrsv where CuPy exposes it. The factorization is the reference row.

    mpirun -n 1 python3 benchmarks/gpu/profile_rcond.py --device gpu --n 16384 32768 --json OUT

On one H200 at n = 32768 the estimate took 0.079 s while a one-column cho_solve took 0.006 s:
three applies should cost about 0.02 s if a 2-3 column solve cost what a one-column one does.
"""
import argparse
import json

import numpy as np
from mpi4py import MPI

from distla import DistMatrix, ProcessGrid
from distla.bench.common import timed
from distla.linalg import cho_rcond, cho_solve, cholesky
from distla.linalg.condition import _block, first_block
from distla.pblas import norm


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="gpu")
    p.add_argument("--n", type=int, nargs="+", default=[16384, 32768])
    p.add_argument("--nb", type=int, default=1024)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--json")
    a = p.parse_args()
    comm = MPI.COMM_WORLD
    if comm.size != 1:
        raise SystemExit("profile_rcond.py runs on one rank (the 1x1 local solve paths)")
    g = ProcessGrid(comm=comm)
    cmd = f"mpirun -n 1 python3 benchmarks/gpu/profile_rcond.py --device {a.device} " \
          f"--n {' '.join(map(str, a.n))} --nb {a.nb} --reps {a.reps}"
    rows = []
    for n in a.n:
        rows += profile(g, n, a, cmd)
    if a.json:
        with open(a.json, "a") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)


def factor(g, n, a):
    """(L, ||A||_1, factorization seconds) for the test SPD matrix; A is freed on return."""
    A = DistMatrix.from_function(g, (n, n), (a.nb, a.nb),
                                 lambda I, J: 1.0 / (1.0 + abs(I - J)) + n * (I == J),
                                 device=a.device)
    anorm = norm(A, 1)
    t = timed(lambda: cholesky(A, check_finite=False, check_symmetric=False), a.device,
              g.comm, reps=2)
    return cholesky(A, check_finite=False, check_symmetric=False), anorm, t


def profile(g, n, a, cmd):
    """The records of one n."""
    rows = []
    L, anorm, t_fact = factor(g, n, a)
    be, xp = L.backend, L.xp

    def best(fn, reps):
        return timed(fn, a.device, g.comm, reps)

    t = {"cholesky factorization (reference)": t_fact,
         "rcond (cho_rcond, whole)": best(lambda: cho_rcond((L, True), anorm), a.reps)}
    X3 = first_block(n, np.float64)
    t["_block: n x 3 host -> DistMatrix"] = best(lambda: _block(L, X3), a.reps)
    D3 = _block(L, X3)
    t["to_global(None): n x 3 -> host"] = best(lambda: D3.to_global(None), a.reps)
    for k in (1, 2, 3):
        Dk = _block(L, X3[:, :k])
        t[f"cho_solve, {k} column(s)"] = best(
            lambda Dk=Dk: cho_solve((L, True), Dk, check_finite=False), a.reps)
    for k in (1, 2, 3, 4):
        b = xp.asfortranarray(xp.ones((n, k)))
        for tr in ("N", "T"):
            t[f"backend trsm L{'^T' if tr == 'T' else ''}, {k} column(s)"] = best(
                lambda b=b, tr=tr: be.trsm("L", "L", tr, "N", 1.0, L.local, b), a.reps)
    if a.device == "gpu":
        from cupy.cuda import device as cdev
        from cupy_backends.cuda.libs import cublas
        if hasattr(cublas, "dtrsv"):
            h = cdev.get_cublas_handle()
            x = xp.ones(n)

            def trsv(k):
                for _ in range(k):
                    cublas.dtrsv(h, cublas.CUBLAS_FILL_MODE_LOWER, cublas.CUBLAS_OP_N,
                                 cublas.CUBLAS_DIAG_NON_UNIT, n, L.local.data.ptr,
                                 L.local.shape[0], x.data.ptr, 1)
            for k in (1, 3):
                t[f"cuBLAS dtrsv x {k} (L, one column each)"] = best(lambda k=k: trsv(k), a.reps)
        else:
            print("cupy_backends.cuda.libs.cublas has no dtrsv: per-column row skipped")
    for name, s in t.items():
        print(f"n={n:6d}  {name:45s} {1e3 * s:9.2f} ms  {100 * s / t_fact:6.1f}%")
        rows.append({"bench": "rcond-profile", "impl": name, "n": n, "nb": a.nb,
                     "ranks": 1, "device": a.device, "seconds": s, "tflops": None,
                     "percent_of_factorization": 100 * s / t_fact, "command": cmd})
    return rows


if __name__ == "__main__":
    main()
