"""Where the condition certificate of a mixed-precision solve spends its time (diagnosis):
one GPU, float32 Cholesky factors with fp16 updates of a conditioned SPD matrix, then
``condition.refined_rcond`` with each solve, A^H solve and residual timed (device
synchronized around each), and the whole certificate, best of --reps.

    python3 benchmarks/gpu/certificate_profile.py --n 32768 --nb 1024 [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict

import numpy as np

from distla import ProcessGrid, problems, vector
from distla.linalg import cho_solve, cholesky, condition


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=32768)
    ap.add_argument("--nb", type=int, default=1024)
    ap.add_argument("--cond", type=float, default=1e2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--device", default="gpu")
    ap.add_argument("--json")
    a = ap.parse_args()
    g = ProcessGrid()
    A = problems.conditioned_matrix(g, a.n, a.nb, cond=a.cond, spd=True, device=a.device)
    be = A.backend
    L = cholesky(A.astype(np.float32), overwrite_a=True, check_finite=False,
                 check_symmetric=False, gemm=be.lowp_mode("fp16" if a.device == "gpu" else "fp32"))
    stats = defaultdict(lambda: [0, 0.0, 0])     # calls, seconds, columns

    def timed(name, fn):
        def call(X, *args):
            be.synchronize()
            t = time.perf_counter()
            out = fn(X, *args)
            be.synchronize()
            s = stats[name]
            s[0] += 1
            s[1] += time.perf_counter() - t
            s[2] += X.n if hasattr(X, "n") else 0
            return out
        return call

    def apply(X):
        return cho_solve((L, True), X.astype(np.float32), overwrite_b=True,
                         check_finite=False).astype(A.dtype)
    orig_res = vector.residual
    vector.residual = timed("residual", orig_res)
    anorm = A.norm("inf")
    rows = []
    try:
        for rep in range(a.reps + 1):
            stats.clear()
            be.synchronize()
            t = time.perf_counter()
            rc = condition.refined_rcond(A, anorm, timed("solve", apply),
                                         timed("solve_h", apply))
            be.synchronize()
            total = time.perf_counter() - t
            if rep == 0:
                continue
            row = dict(bench="certificate_profile", impl="refined_rcond", n=a.n, nb=a.nb,
                       ranks=g.size, device=a.device, seconds=total, tflops=None,
                       cond=a.cond, rcond=rc,
                       parts={k: dict(calls=v[0], seconds=round(v[1], 5), columns=v[2])
                              for k, v in stats.items()})
            rows.append(row)
            if g.rank == 0:
                print(f"n={a.n} total {total * 1e3:.1f} ms rcond {rc:.3g} " +
                      " ".join(f"{k}: {v[0]} calls {v[2]} cols {v[1] * 1e3:.1f} ms"
                               for k, v in stats.items()), flush=True)
        # one column's solve alone, for scale
        from distla import DistMatrix
        X = DistMatrix.random(g, (a.n, 1), (a.nb, a.nb), device=a.device, seed=1)
        for k in (1, 2):
            Xk = DistMatrix.random(g, (a.n, k), (a.nb, a.nb), device=a.device, seed=1)
            stats.clear()
            for _ in range(3):
                timed(f"solve {k} col", apply)(Xk)
            s = stats[f"solve {k} col"]
            if g.rank == 0:
                print(f"one float32 cho_solve of {k} column(s): {s[1] / 3 * 1e3:.2f} ms")
            rows.append(dict(bench="certificate_profile", impl=f"cho_solve fp32 {k} col",
                             n=a.n, nb=a.nb, ranks=g.size, device=a.device,
                             seconds=s[1] / 3, tflops=None))
        del X
    finally:
        vector.residual = orig_res
    if a.json and g.rank == 0:
        with open(a.json, "a") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)


if __name__ == "__main__":
    main()
