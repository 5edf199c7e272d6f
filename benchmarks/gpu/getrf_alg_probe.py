"""cuSOLVER's LU variants on one GPU: the legacy ``cusolverDnDgetrf`` (what distla calls)
against the 64-bit ``cusolverDnXgetrf`` with each algorithm ``cusolverDnSetAdvOptions``
accepts for GETRF (CUSOLVER_ALG_0, ALG_1), on square matrices and on tall panels (the LU
loop's panel shapes), float64 and float32; best of ``--reps``, device synchronized.

    python3 benchmarks/gpu/getrf_alg_probe.py [--json FILE]

The 64-bit API is called through ctypes on the libcusolver that CuPy loaded, with CuPy's
handle and stream. Pivots are compared with the legacy call's (a mismatch is printed), and
the 4096 x 4096 factors' backward error is checked. Every copy is column-major: the legacy
call on a C-ordered copy goes through two conversions (distla's seam makes the operand
column-major first), which once made the legacy call look slower. One process."""
from __future__ import annotations

import argparse
import ctypes

import cupy
import numpy as np

from distla.bench import common
from distla.device import get_backend

_P, _I64, _SZ = ctypes.c_void_p, ctypes.c_int64, ctypes.c_size_t


def _lib():
    be = get_backend("gpu")
    be._solver()     # CuPy loads libcusolver
    with open("/proc/self/maps") as f:
        paths = {ln.split()[-1] for ln in f if "libcusolver.so" in ln}
    path = sorted(p for p in paths if "Mg" not in p)[0]
    return ctypes.CDLL(path), be


def xgetrf(lib, handle, params, a, ipiv, info):
    m, n = a.shape
    dt = 1 if a.dtype == np.float64 else 0          # CUDA_R_64F / CUDA_R_32F
    dws, hws = _SZ(), _SZ()
    st = lib.cusolverDnXgetrf_bufferSize(_P(handle), params, _I64(m), _I64(n), dt,
                                         _P(a.data.ptr), _I64(m), dt, ctypes.byref(dws),
                                         ctypes.byref(hws))
    assert st == 0, f"bufferSize status {st}"
    dbuf = cupy.empty(max(1, dws.value), np.uint8)
    hbuf = ctypes.create_string_buffer(max(1, hws.value))
    st = lib.cusolverDnXgetrf(_P(handle), params, _I64(m), _I64(n), dt, _P(a.data.ptr),
                              _I64(m), _P(ipiv.data.ptr), dt, _P(dbuf.data.ptr),
                              _SZ(dws.value), hbuf, _SZ(hws.value), _P(info.data.ptr))
    assert st == 0, f"Xgetrf status {st}"


def _lu_error(a, lu, piv):
    """``||P A - L U||_F / ||A||_F`` with LAPACK-style 0-based swaps ``piv``."""
    pa = a.copy()
    for i, p in enumerate(piv):
        if p != i:
            pa[[i, p]] = pa[[p, i]]
    L = np.tril(lu, -1) + np.eye(lu.shape[0])
    return float(np.linalg.norm(pa - L @ np.triu(lu)) / np.linalg.norm(a))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json")
    a = ap.parse_args()
    lib, be = _lib()
    handle = be._solver()
    rows = []
    for dtype in (np.float64, np.float32):
        shapes = [(4096, 4096), (8192, 8192), (16384, 16384), (32768, 32768),
                  (65536, 1024), (32768, 1024), (16384, 1024), (32768, 512), (65536, 1536)]
        for m, n in shapes:
            A = cupy.asfortranarray(cupy.random.default_rng(1).standard_normal((m, n),
                                                                               dtype=dtype))
            ref = {}

            def F():
                return A.copy(order="F")

            def legacy(W):
                ref["piv"], info = be.getrf(W)
            t = common.best_local(legacy, "gpu", a.reps, warmup=1, setup=F)
            fl = m * n * n - n ** 3 / 3 if m >= n else n * m * m - m ** 3 / 3
            res = {"legacy": t}
            for alg in (0, 1):
                params = _P()
                assert lib.cusolverDnCreateParams(ctypes.byref(params)) == 0
                st = lib.cusolverDnSetAdvOptions(params, 0, alg)    # CUSOLVERDN_GETRF
                if st != 0:
                    print(f"ALG_{alg}: not accepted (status {st})")
                    continue
                ipiv = cupy.empty(min(m, n), np.int64)
                info = cupy.zeros((), np.int32)
                t = common.best_local(lambda W: xgetrf(lib, handle, params, W, ipiv, info),
                                      "gpu", a.reps, warmup=1, setup=F)
                diff = np.flatnonzero(cupy.asnumpy(ipiv - 1 != ref["piv"]))
                res[f"xgetrf_alg{alg}"] = t
                if diff.size:
                    print(f"  ALG_{alg} {m}x{n}: {diff.size} pivots differ from the legacy "
                          f"call's, first at {diff[0]}")
                if m == n == 4096 and alg == 0:
                    W = F()
                    xgetrf(lib, handle, params, W, ipiv, info)
                    err = _lu_error(cupy.asnumpy(A), cupy.asnumpy(W), cupy.asnumpy(ipiv) - 1)
                    print(f"  ALG_0 4096: backward error {err:.2e}")
                lib.cusolverDnDestroyParams(params)
            line = " ".join(f"{k} {v * 1e3:8.2f} ms ({fl / v / 1e12:5.1f} TF)"
                            for k, v in res.items())
            print(f"{np.dtype(dtype).name} {m:6d} x {n:6d}: {line}", flush=True)
            for k, v in res.items():
                rows.append(common.record("getrf_alg", k, n=n, seconds=v, nflops=fl,
                                          device="gpu", dtype=np.dtype(dtype).name, ranks=1)
                            | {"m": m})
    common.append_jsonl(a.json, rows)


if __name__ == "__main__":
    main()
