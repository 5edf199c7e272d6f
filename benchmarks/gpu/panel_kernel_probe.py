"""The LU panel on one GPU: cuSOLVER's getrf of an ``m x nb`` panel against the recursive
panel with distla's cooperative leaf kernel (``Backend.getrf_recursive``, docs/perf.md),
float32 and float64, with the pivots and factors of both compared.

    python3 benchmarks/gpu/panel_kernel_probe.py [--shapes 32768x1024 ...] [--leaf 32] [--json OUT]
"""
from __future__ import annotations

import argparse

import cupy
import numpy as np
from probe_timing import timed

from distla.bench import common
from distla.device import get_backend


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", nargs="+",
                    default=["32768x1024", "16384x1024", "8192x1024", "4096x512", "32768x256"])
    ap.add_argument("--leaf", type=int, nargs="+", default=[64, 32])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json")
    a = ap.parse_args()
    be = get_backend("gpu")
    rng = cupy.random.default_rng(0)
    rows = []
    for dt in (np.float32, np.float64):
        for shape in a.shapes:
            m, nb = map(int, shape.split("x"))
            src = cupy.asfortranarray(rng.standard_normal((m, nb), dtype=dt))
            ref = src.copy(order="F")
            pref, iref = be.getrf(ref)
            work = cupy.empty_like(src, order="F")

            def lib():
                work[...] = src
                be.getrf(work)
            t = timed(be, lib, a.reps)[0]
            rec = dict(n=m, nb=nb, dtype=np.dtype(dt).name, device="gpu", ranks=1, tflops=None)
            rows.append(common.record("panel_kernel_probe", "cusolver getrf", seconds=t, **rec))
            print(f"{np.dtype(dt).name} {m:6d} x {nb:5d} cuSOLVER getrf {t * 1e3:8.3f} ms",
                  flush=True)
            for leaf in a.leaf:
                def own(leaf=leaf):
                    work[...] = src
                    return be.getrf_recursive(work, leaf)
                p, info = own()
                same = bool((p == pref).all())
                err = float(cupy.abs(work - ref).max() / max(1.0, float(cupy.abs(ref).max())))
                t2 = timed(be, own, a.reps)[0]
                rows.append(common.record("panel_kernel_probe", f"recursive leaf {leaf}",
                                          seconds=t2, same_pivots=same, max_diff=err,
                                          info=int(info), **rec))
                print(f"{np.dtype(dt).name} {m:6d} x {nb:5d} leaf {leaf:3d}      {t2 * 1e3:8.3f} ms"
                      f"  ({t / t2:4.2f}x)  same pivots {same}  max diff {err:.1e}", flush=True)
                ipiv, info = cupy.zeros(nb, np.int32), cupy.zeros((), np.int32)
                t3 = timed(be, lambda leaf=leaf: be.getf2_leaf(work, m, 0, leaf, ipiv, info),
                           a.reps)[0]
                rows.append(common.record("panel_kernel_probe", f"one leaf of {leaf}",
                                          seconds=t3, **rec))
                print(f"{'':14s} one leaf kernel of {leaf} columns: {t3 * 1e6:8.1f} us "
                      f"({t3 * 1e6 / leaf:5.2f} us per column)", flush=True)
                be.getf2_leaf = lambda *args: None     # the recursion's trsm and gemm alone
                t4 = timed(be, own, a.reps)[0]
                del be.getf2_leaf
                rows.append(common.record("panel_kernel_probe", f"recursion without leaves {leaf}",
                                          seconds=t4, **rec))
                print(f"{'':14s} trsm + gemm of the recursion alone: {t4 * 1e3:8.3f} ms",
                      flush=True)
    common.append_jsonl(a.json, rows)


if __name__ == "__main__":
    main()
