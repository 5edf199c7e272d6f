"""Where a mixed-precision solve's refinement spends its time on one device (diagnosis).

    python3 benchmarks/gpu/refine_probe.py --n 32768 --nb 1024 [--factor-dtype fp16]

A traced mixed Cholesky and LU solve (cond 1e2, one right-hand side; phases of
:mod:`distla.linalg.refine` and :mod:`distla.linalg.mixed`, device seconds), then each piece
alone, device synchronized: the float64 residual GEMV, ``|A| |x|`` (the componentwise check),
one solve with the float32 factors (with its casts), the scaled residual. JSON lines with
``--json``.
"""
from __future__ import annotations

import argparse
import functools
import json

import numpy as np
from probe_timing import timed as timed_on

from distla import DistMatrix, ProcessGrid, linalg, problems
from distla.linalg.refine import scaled_residual
from distla.trace import Tracer
from distla.vector import abs_product, componentwise_error, residual


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=32768)
    ap.add_argument("--nb", type=int, default=1024)
    ap.add_argument("--factor-dtype", default="fp16")
    ap.add_argument("--device", default="gpu")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    g = ProcessGrid()
    n, nb, fd = a.n, a.nb, a.factor_dtype
    A = problems.conditioned_matrix(g, n, nb, cond=1e2, spd=True, device=a.device)
    be = A.backend
    timed = functools.partial(timed_on, be, reps=3)      # (best seconds, result)
    B = DistMatrix.random(g, (n, 1), (nb, nb), device=a.device, seed=3)
    rows = []

    def rec(what, s, **kw):
        rows.append(dict(bench="refine_probe", impl=what, n=n, nb=nb, ranks=g.size,
                         device=a.device, seconds=s, tflops=None, factor_dtype=fd, **kw))
        extra = " ".join(f"{k}={v}" for k, v in kw.items())
        print(f"{what:44s} {s:9.4f} s {extra}", flush=True)

    for meth, fn in (("cholesky", linalg.solve_cholesky), ("gepp", linalg.solve_lu)):
        def run():
            return fn(A, B, precision="mixed", factor_dtype=fd, return_info=True,
                      check_rcond=False)
        run()
        s, (X, info) = timed(run, reps=2)
        rec(f"mixed {meth} solve", s, iters=info.iterations,
            times={k: round(v, 4) for k, v in info.times.items()})
        with Tracer(device=a.device) as tr:
            run()
        be.synchronize()
        if g.rank == 0:
            print(tr.table(), flush=True)
        dev, host, cnt = tr.seconds(), tr.host_seconds(), tr.counts()
        for ph in sorted(dev):
            rec(f"traced mixed {meth} {ph}", dev[ph], host_s=round(host[ph], 5),
                calls=cnt[ph])
    X = B.copy()
    s, R = timed(lambda: residual(A, X, B))
    rec("float64 residual GEMV", s)
    s, _ = timed(lambda: residual(A, X, B, with_abs=True))
    rec("float64 residual and |A| |x| (with_abs)", s)
    from distla.vector import _gemv_rows, replicate
    s, _ = timed(lambda: replicate(X))
    rec("  replicate(x)", s)
    s, _ = timed(lambda: _gemv_rows(A, X, absolute=False))
    rec("  _gemv_rows (cuBLAS)", s)
    s, _ = timed(lambda: _gemv_rows(A, X, absolute=False, pair=True))
    rec("  _gemv_rows pair (fused kernel)", s)
    xf = replicate(X)
    s, _ = timed(lambda: be.gemv_abs(A.local, xf))
    rec("  gemv_abs kernel and sums", s)
    s, _ = timed(lambda: A.grid.comms(A.device).row.allreduce(xf, "sum"))
    rec("  row allreduce of n x 1", s)
    s, _ = timed(lambda: abs_product(A, X, B))
    rec("|A| |x| (componentwise check)", s)
    s, _ = timed(lambda: componentwise_error(A, X, B, R))
    rec("componentwise_error", s)
    s, _ = timed(lambda: scaled_residual(R, X, 1.0, 1e-16))
    rec("scaled_residual", s)
    L = linalg.cholesky(A.astype(np.float32), check_finite=False, check_symmetric=False,
                        gemm=be.lowp_mode(fd))
    s, _ = timed(lambda: linalg.cho_solve((L, True), R.astype(np.float32), overwrite_b=True,
                                          check_finite=False).astype(np.float64))
    rec("float32 cho_solve with casts", s)
    if a.json and g.rank == 0:
        with open(a.json, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)


if __name__ == "__main__":
    main()
