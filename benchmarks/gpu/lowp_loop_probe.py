"""Is a low-precision factorization bound by the host, the panel or the GEMMs? (diagnosis)

    python3 benchmarks/gpu/lowp_loop_probe.py --n 32768 --nb 1024 [--json OUT]

On one GPU, for the float32 Cholesky and LU of an n x n well-conditioned matrix in each update
mode, prints: the host seconds until the call returns (kernels still queued) beside the
synchronized total; the per-phase table of a traced run (host and device seconds); and the
floors measured in the same run: the trailing-update GEMMs alone (the same shapes, operands
prepared once) and one nb-wide panel's kernels alone. JSON lines with ``--json``.
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np

from distla import ProcessGrid, linalg, problems
from distla.trace import Tracer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=32768)
    ap.add_argument("--nb", type=int, default=1024)
    ap.add_argument("--modes", nargs="+", default=["tf32", "fp16"])
    ap.add_argument("--device", default="gpu")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    g = ProcessGrid()
    n, nb = a.n, a.nb
    A = problems.conditioned_matrix(g, n, nb, cond=1e2, spd=True, device=a.device)
    be = A.backend
    A32 = A.astype(np.float32)
    A = None
    rows = []

    def rec(what, s, **kw):
        rows.append(dict(bench="lowp_loop_probe", impl=what, n=n, nb=nb, ranks=g.size,
                         device=a.device, seconds=s, tflops=None, **kw))
        extra = " ".join(f"{k}={v}" for k, v in kw.items())
        print(f"{what:44s} {s:9.4f} s {extra}", flush=True)

    def run(fn, reps=2):
        best = (float("inf"), 0.0)
        for _ in range(reps):
            W = A32.copy()
            be.synchronize()
            t = time.perf_counter()
            fn(W)
            h = time.perf_counter() - t
            be.synchronize()
            best = min(best, (time.perf_counter() - t, h))
        return best

    for mode in ["native"] + a.modes:
        for name, fn in (("cholesky", lambda W: linalg.cholesky(
                W, check_finite=False, check_symmetric=False, overwrite_a=True, gemm=mode)),
                ("lu_factor", lambda W: linalg.lu_factor(W, check_finite=False,
                                                         overwrite_a=True, gemm=mode))):
            tot, host = run(fn)
            rec(f"{name} {mode}", tot, host_return_s=round(host, 4))
    for mode in a.modes:
        for name, fn in (("cholesky", lambda W: linalg.cholesky(
                W, check_finite=False, check_symmetric=False, overwrite_a=True, gemm=mode)),
                ("lu_factor", lambda W: linalg.lu_factor(W, check_finite=False,
                                                         overwrite_a=True, gemm=mode))):
            W = A32.copy()
            be.synchronize()
            with Tracer(device=a.device) as tr:
                fn(W)
            be.synchronize()
            print(f"--- traced {name} {mode}")
            print(tr.table(), flush=True)
            dev, host, cnt = tr.seconds(), tr.host_seconds(), tr.counts()
            for ph in sorted(dev):
                rec(f"traced {name} {mode} {ph}", dev[ph], host_s=round(host[ph], 5),
                    calls=cnt[ph])
    # floors: the trailing GEMMs alone (square trailing matrix per step, as update_lowp does)
    C = A32.local
    for mode in a.modes:
        def gemms():
            for k in range(n // nb - 1):
                r = (k + 1) * nb
                P = C[r:, k * nb:r]
                a2, b2, sc = be.lowp_operands(P, P.T, mode)
                be.gemm_lowp("N", "N", -1e-9, a2, b2, 1.0, C[r:, r:], mode, sc)
        be.synchronize()
        t = time.perf_counter()
        gemms()
        h = time.perf_counter() - t
        be.synchronize()
        t = time.perf_counter()
        gemms()
        be.synchronize()
        s = time.perf_counter() - t
        fl = sum(2.0 * (n - (k + 1) * nb) ** 2 * nb for k in range(n // nb - 1))
        rec(f"trailing gemms alone {mode}", s, host_return_s=round(h, 4),
            tflops_gemm=round(fl / s / 1e12, 1))
    # one panel's kernels alone (cuSOLVER float32 potrf of nb, tall getrf of n x nb)
    D = C[:nb, :nb].copy(order="F")
    for what, fn in (("spotrf nb", lambda: be.potrf("L", D.copy(order="F"))),
                     ("sgetrf n x nb", lambda: be.getrf(C[:, :nb].copy(order="F"))),
                     ("sgetrf_recursive n x nb", lambda: be.getrf_recursive(
                         C[:, :nb].copy(order="F")))):
        fn()
        be.synchronize()
        t = time.perf_counter()
        for _ in range(5):
            fn()
        be.synchronize()
        rec(what, (time.perf_counter() - t) / 5)
    if a.json and g.rank == 0:
        with open(a.json, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)


if __name__ == "__main__":
    main()
