"""Where a mixed-precision solve spends its time on one device (diagnosis, not a benchmark).

    python3 benchmarks/gpu/profile_mixed.py --n 16384 32768 --nb 1024 [--device gpu]

For each n, on a well-conditioned SPD matrix (cond 1e2) and one right-hand side, prints the
seconds (device synchronized) of: the float64 Cholesky and LU factorizations and their solves;
the float32 copy; the float32 factorizations with every update mode; one solve with float32
factors; one float64 residual; then the mixed solves' own ``info.times`` and iterations, and a
traced fp16 Cholesky (seconds per phase). JSON lines with ``--json``.
"""
from __future__ import annotations

import argparse
import json

import numpy as np
from probe_timing import timed

from distla import DistMatrix, ProcessGrid, linalg, problems
from distla.trace import Tracer
from distla.vector import residual


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, nargs="+", default=[16384])
    ap.add_argument("--nb", type=int, default=1024)
    ap.add_argument("--device", default="gpu")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    g = ProcessGrid()
    rows = []

    def rec(n, what, s, **kw):
        rows.append(dict(bench="profile_mixed", impl=what, n=n, ranks=g.size, device=a.device,
                         seconds=s, tflops=None, **kw))
        extra = " ".join(f"{k}={v}" for k, v in kw.items())
        print(f"{n:6d} {what:38s} {s:9.4f} s {extra}", flush=True)

    for n in a.n:
        A = problems.conditioned_matrix(g, n, a.nb, cond=1e2, spd=True, device=a.device)
        be = A.backend
        B = DistMatrix.random(g, (n, 1), (a.nb, a.nb), device=a.device, seed=3)
        s, L = timed(be, lambda: linalg.cholesky(A, check_finite=False, check_symmetric=False))
        rec(n, "float64 cholesky", s)
        s, _ = timed(be, lambda: linalg.cho_solve((L, True), B, check_finite=False))
        rec(n, "float64 cho_solve 1 rhs", s)
        L = None
        s, F = timed(be, lambda: linalg.lu_factor(A, check_finite=False))
        rec(n, "float64 lu_factor", s)
        s, _ = timed(be, lambda: linalg.lu_solve(F, B, check_finite=False))
        rec(n, "float64 lu_solve 1 rhs", s)
        F = None
        s, A32 = timed(be, lambda: A.astype(np.float32))
        rec(n, "astype float32", s)
        for fd in be.LOWP:
            mode = be.lowp_mode(fd)
            s, L32 = timed(be, lambda: linalg.cholesky(A32, check_finite=False,
                                                       check_symmetric=False, gemm=mode))
            rec(n, f"float32 cholesky {fd}", s, mode=mode)
            s, F32 = timed(be, lambda: linalg.lu_factor(A32, check_finite=False, gemm=mode))
            rec(n, f"float32 lu_factor {fd}", s, mode=mode)
        B32 = B.astype(np.float32)
        s, _ = timed(be, lambda: linalg.cho_solve((L32, True), B32, check_finite=False))
        rec(n, "float32 cho_solve 1 rhs", s)
        s, _ = timed(be, lambda: linalg.lu_solve(F32, B32, check_finite=False))
        rec(n, "float32 lu_solve 1 rhs", s)
        s, _ = timed(be, lambda: residual(A, B, B))
        rec(n, "float64 residual 1 rhs", s)
        L32 = F32 = A32 = None
        for meth, fn in (("cholesky", linalg.solve_cholesky), ("gepp", linalg.solve_lu)):
            for fd in be.LOWP:
                s, (X, info) = timed(be, lambda: fn(A, B, precision="mixed", factor_dtype=fd,
                                                    return_info=True, check_rcond=False), 1)
                rec(n, f"mixed {meth} {fd}", s, iters=info.iterations,
                    gmres=info.gmres_iterations, fallback=info.fallback,
                    times={k: round(v, 4) for k, v in info.times.items()})
        with Tracer(device=a.device) as tr:
            A32 = A.astype(np.float32)
            linalg.cholesky(A32, check_finite=False, check_symmetric=False,
                            gemm=be.lowp_mode(be.LOWP[-1]))
        if g.rank == 0:
            print(tr.table(), flush=True)
        A = A32 = None
    if a.json and g.rank == 0:
        with open(a.json, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)


if __name__ == "__main__":
    main()
