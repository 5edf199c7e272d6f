"""Rates of float32 GEMM on one GPU through distla's backend: FP32 (SIMT) vs TF32 tensor cores
vs FP64, at an LU trailing-update shape (m = n = 16384, k = 1024; TF32 with k = 3 * 1024 as
the 3xTF32 update runs it)."""
import time

import cupy as cp

from distla.device import get_backend

be = get_backend("gpu")


def rate(dtype, k, tf32):
    m = n = 16384
    a = cp.asfortranarray(cp.random.rand(m, k).astype(dtype))
    b = cp.asfortranarray(cp.random.rand(k, n).astype(dtype))
    c = cp.zeros((m, n), dtype, order="F")
    be.gemm("N", "N", -1.0, a, b, 1.0, c, tf32=tf32)
    cp.cuda.Device().synchronize()
    t0 = time.perf_counter()
    for _ in range(5):
        be.gemm("N", "N", -1.0, a, b, 1.0, c, tf32=tf32)
    cp.cuda.Device().synchronize()
    return 2.0 * m * n * k * 5 / (time.perf_counter() - t0) / 1e12


print(f"fp64 k=1024: {rate(cp.float64, 1024, False):.1f} TFLOP/s; "
      f"fp32 k=1024: {rate(cp.float32, 1024, False):.1f}; "
      f"tf32 k=3072: {rate(cp.float32, 3072, True):.1f} (3xTF32 equivalent "
      f"{rate(cp.float32, 3072, True) / 3:.1f})", flush=True)
