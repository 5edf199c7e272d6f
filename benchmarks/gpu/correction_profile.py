"""What one classical refinement correction of a mixed-precision Cholesky solve costs on one
GPU, piece by piece (diagnosis): float32 factors with fp16 updates of a conditioned SPD
matrix, then each step of ``mixed._refine``'s loop timed alone with the device synchronized
around it (best of --reps), beside the two kernels that bound it (the float64 residual GEMV
and the float32 inverted-block solve).

    python3 benchmarks/gpu/correction_profile.py --n 65536 --nb 1024 [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import math

import numpy as np
from probe_timing import timed

from distla import DistMatrix, ProcessGrid, problems
from distla.linalg import cho_solve, cholesky
from distla.linalg.refine import scaled_residual
from distla.pblas import inverted_diagonal_solves
from distla.vector import column_scales, residual


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=65536)
    ap.add_argument("--nb", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--device", default="gpu")
    ap.add_argument("--json")
    a = ap.parse_args()
    g = ProcessGrid()
    A = problems.conditioned_matrix(g, a.n, a.nb, cond=1e4, spd=True, device=a.device)
    be = A.backend
    L = cholesky(A.astype(np.float32), overwrite_a=True, check_finite=False,
                 check_symmetric=False,
                 gemm=be.lowp_mode("fp16" if a.device == "gpu" else "fp32"))
    B = DistMatrix.random(g, (a.n, 1), (a.nb, a.nb), device=a.device, seed=3)
    anorm = A.norm("inf")
    eps_sqrtn = np.finfo(np.float64).eps * math.sqrt(a.n)
    rows = []

    def rec(impl, s):
        rows.append(dict(bench="correction_profile", impl=impl, n=a.n, nb=a.nb, ranks=g.size,
                         device=a.device, seconds=s, tflops=None))
        if g.rank == 0:
            print(f"n={a.n} {impl:44s} {s * 1e3:8.3f} ms", flush=True)

    def t(impl, fn):
        s, out = timed(be, fn, a.reps)
        rec(impl, s)
        return out

    with inverted_diagonal_solves():
        x = cho_solve((L, True), B.astype(np.float32), check_finite=False).astype(A.dtype)
        R, _ = t("residual (GEMV + |A||x|)", lambda: residual(A, x, B, with_abs=True))
        t("scaled_residual", lambda: scaled_residual(R, x, anorm, eps_sqrtn))
        s = t("column_scales", lambda: column_scales(R))
        T = t("R.copy()", lambda: R.copy())
        t("T.local /= s", lambda: T.local.__itruediv__(s[None, :]))
        T32 = t("astype(float32)", lambda: T.astype(np.float32))
        X32 = t("cho_solve fp32 (inverted blocks)",
                lambda: cho_solve((L, True), T32.copy(), overwrite_b=True, check_finite=False))
        X = t("astype(float64)", lambda: X32.astype(A.dtype))
        t("X.local *= s", lambda: X.local.__imul__(s[None, :]))
        t("x.local += d.local", lambda: x.local.__iadd__(X.local))

        def whole():
            R, _ = residual(A, x, B, with_abs=True)
            scaled_residual(R, x, anorm, eps_sqrtn)
            sc = column_scales(R)
            T = R.copy()
            T.local /= sc[None, :]
            d = cho_solve((L, True), T.astype(np.float32), overwrite_b=True,
                          check_finite=False).astype(A.dtype)
            d.local *= sc[None, :]
            x.local += d.local * 0.0
        t("one whole correction", whole)
    if a.json and g.rank == 0:
        with open(a.json, "a") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)


if __name__ == "__main__":
    main()
