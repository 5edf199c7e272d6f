"""How fast the inverted-diagonal-block triangular sweep reads a float32 factor on one GPU
(diagnosis): ``Backend.trsm_inverse_blocks`` with one column, forward (L x = b) and
backward (L^T x = b), at the factor's block size and at larger inverse-block sizes, beside
one cuBLAS sgemv over the whole square (the bandwidth floor: a sweep reads half of it) and
cuBLAS strsv. Best of --reps.

    python3 benchmarks/gpu/sweep_gemv_probe.py --n 65536 --nb 1024 2048 4096 [--json OUT]
"""
from __future__ import annotations

import argparse
import json

import cupy as cp
from probe_timing import timed

from distla.device import get_backend


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=65536)
    ap.add_argument("--nb", type=int, nargs="+", default=[1024, 2048, 4096])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--json")
    a = ap.parse_args()
    be = get_backend("gpu")
    n = a.n
    dt = cp.dtype(a.dtype)
    t = cp.zeros((n, n), dt, order="F")
    for j0 in range(0, n, 4096):              # in column slabs: one n x n matrix held
        j1 = min(n, j0 + 4096)
        t[:, j0:j1] = cp.random.standard_normal((n, j1 - j0), dtype=dt) / n
    for j0 in range(0, n, 4096):              # lower triangle only
        j1 = min(n, j0 + 4096)
        t[:, j0:j1] = cp.tril(t[:, j0:j1], -j0)
    t[cp.arange(n), cp.arange(n)] = 1.0
    b = cp.random.standard_normal((n, 1), dtype=dt)
    rows = []

    def rec(impl, s, bytes_read):
        rows.append(dict(bench="sweep_gemv_probe", impl=impl, n=n, ranks=1, device="gpu",
                         dtype=a.dtype, seconds=s, tflops=None,
                         gbytes_per_s=bytes_read / s / 1e9))
        print(f"n={n} {a.dtype} {impl:36s} {s * 1e3:8.3f} ms  {bytes_read / s / 1e9:7.0f} GB/s",
              flush=True)
    half = n * n * dt.itemsize / 2
    x = cp.zeros((n,), dt)
    s, _ = timed(be, lambda: t.dot(b[:, 0], out=x), a.reps)
    rec("cupy gemv whole square", s, 2 * half)
    for nb in a.nb:
        if nb > n:
            continue
        s, S = timed(be, lambda nb=nb: be.triangular_block_inverses(t, nb, True, False), 2)
        rec(f"block inverses nb={nb}", s, 0.0)
        for trans in (False, True):
            s, _ = timed(be, lambda S=S, nb=nb, trans=trans: be.trsm_inverse_blocks(
                t, S, nb, True, trans, b.copy()), a.reps)
            rec(f"inverse-block sweep nb={nb} {'L^T' if trans else 'L'}", s, half)
    for trans in ("N", "T"):
        s, _ = timed(be, lambda trans=trans: be.trsm("L", "L", trans, "N", 1.0, t, b.copy()),
                     a.reps)
        rec(f"trsm 1 column {trans}", s, half)
    if a.json:
        with open(a.json, "a") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)


if __name__ == "__main__":
    main()
