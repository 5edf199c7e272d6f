"""cuBLAS trsv (through ctypes: CuPy does not wrap it) against the one-column trsm the backend
calls, for the triangular solves of refinement and condition estimation (diagnosis).

    python3 benchmarks/gpu/trsv_probe.py --n 32768 [--json OUT]
"""
from __future__ import annotations

import argparse
import ctypes
import json

import cupy as cp
import numpy as np
from probe_timing import best, cublas_lib


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=32768)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    n = a.n
    from distla.device import get_backend
    be = get_backend("gpu")
    h = cp.cuda.device.get_cublas_handle()
    lib = cublas_lib()
    rows = []
    rng = cp.random.default_rng(2)
    for dt, name in ((np.float32, "cublasStrsv_v2"), (np.float64, "cublasDtrsv_v2")):
        fn = getattr(lib, name)
        M = (rng.standard_normal((n, n)) / np.sqrt(n)).astype(dt)
        L = cp.asfortranarray(cp.tril(M) + cp.eye(n, dtype=dt) * 4)
        M = None
        b = rng.standard_normal((n, 1)).astype(dt)
        for uplo, tr in (("L", "N"), ("L", "T"), ("U", "N"), ("U", "T")):
            T = L if uplo == "L" else cp.asfortranarray(L.T)
            x1 = b.copy()
            t1 = best(lambda: be.trsm("L", uplo, tr, "N", 1.0, T, x1))
            x2 = cp.asfortranarray(b.copy())

            def v():
                from cupy_backends.cuda.libs import cublas
                cublas.setStream(h, cp.cuda.get_current_stream().ptr)
                rc = fn(ctypes.c_void_p(h), ctypes.c_int(1 if uplo == "U" else 0),
                        ctypes.c_int(1 if tr == "T" else 0), ctypes.c_int(0), ctypes.c_int(n),
                        ctypes.c_void_p(T.data.ptr), ctypes.c_int(n),
                        ctypes.c_void_p(x2.data.ptr), ctypes.c_int(1))
                assert rc == 0, rc
            t2 = best(v)
            x1[...] = b
            be.trsm("L", uplo, tr, "N", 1.0, T, x1)
            x2[...] = b
            v()
            err = float(cp.abs(x1 - x2).max() / cp.abs(x1).max())
            for impl, s in (("trsm 1 column (backend)", t1), ("cuBLAS trsv (ctypes)", t2)):
                rows.append(dict(bench="trsv_probe", impl=f"{np.dtype(dt).name} {impl} "
                                 f"{uplo}{tr}", n=n, ranks=1, device="gpu", seconds=s,
                                 tflops=None, tb_per_s=round(T.nbytes / 2 / s / 1e12, 2),
                                 rel_diff=err))
                print(f"{rows[-1]['impl']:44s} {s * 1e3:7.3f} ms {rows[-1]['tb_per_s']} TB/s "
                      f"diff {err:.1e}", flush=True)
            T = None
        L = None
    if a.json:
        with open(a.json, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)


if __name__ == "__main__":
    main()
