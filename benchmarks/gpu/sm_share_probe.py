"""Does leaving SMs to the high-priority panel stream speed up the factorizations? (diagnosis)

    python3 benchmarks/gpu/sm_share_probe.py --n 32768 --nb 1024 --targets 0 124 116 100

On one GPU, for each SM-count target T (0: cuBLAS's default, every SM), the cuBLAS calls
queued on every stream except the loops' high-priority one go through a second cuBLAS handle
with ``cublasSetSmCountTarget(T)`` (cuBLAS 11.3+, called through ctypes: CuPy does not wrap
it), so that the trailing-update GEMMs leave SMs free for the panel's latency-bound kernels.
Prints the best of --reps seconds of float64 Cholesky and LU and of the float32 ones with
tensor-core updates, per T, all in one process. JSON lines with ``--json``.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import time

import numpy as np
from probe_timing import cublas_lib

from distla import ProcessGrid, linalg, problems
from distla.device import gpu as gpu_mod


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=32768)
    ap.add_argument("--nb", type=int, default=1024)
    ap.add_argument("--targets", type=int, nargs="+", default=[0, 124, 116, 100])
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    g = ProcessGrid()
    n, nb = a.n, a.nb
    A = problems.conditioned_matrix(g, n, nb, cond=1e2, spd=True, device="gpu")
    be = A.backend
    cp = be.xp
    A32 = A.astype(np.float32)
    from cupy_backends.cuda.libs import cublas
    be.gemm("N", "N", 1.0, A.local[:8, :8], A.local[:8, :8], 0.0, A.local[8:16, 8:16].copy(
        order="F"))
    lib = cublas_lib()
    sms = cp.cuda.runtime.getDeviceProperties(0)["multiProcessorCount"]
    high, state = set(), {"T": 0, "h": {}}
    orig_stream, orig_blas = gpu_mod.GpuBackend.stream, gpu_mod.GpuBackend._blas

    def stream(self, priority="default"):
        s = orig_stream(self, priority)
        if priority == "high":
            high.add(s.s.ptr)
        return s

    def blas(self):
        ptr = cp.cuda.get_current_stream().ptr
        T = state["T"]
        if not T or ptr in high:
            return orig_blas(self)
        h = state["h"].get(T)
        if h is None:
            h = state["h"][T] = cublas.create()
            rc = lib.cublasSetSmCountTarget(ctypes.c_void_p(h), ctypes.c_int(T))
            assert rc == 0, rc
        cublas.setStream(h, ptr)
        return h

    gpu_mod.GpuBackend.stream, gpu_mod.GpuBackend._blas = stream, blas
    rows = []
    cases = [
        ("float64 cholesky", A, lambda W: linalg.cholesky(
            W, check_finite=False, check_symmetric=False, overwrite_a=True)),
        ("float64 lu_factor", A, lambda W: linalg.lu_factor(W, check_finite=False,
                                                            overwrite_a=True)),
        ("float32 cholesky tf32", A32, lambda W: linalg.cholesky(
            W, check_finite=False, check_symmetric=False, overwrite_a=True, gemm="tf32")),
        ("float32 lu_factor tf32", A32, lambda W: linalg.lu_factor(
            W, check_finite=False, overwrite_a=True, gemm="tf32")),
        ("float32 lu_factor fp16", A32, lambda W: linalg.lu_factor(
            W, check_finite=False, overwrite_a=True, gemm="fp16")),
    ]
    for what, M, fn in cases:
        for T in a.targets:
            state["T"] = T
            best = float("inf")
            for _ in range(a.reps):
                W = M.copy()
                be.synchronize()
                t = time.perf_counter()
                fn(W)
                be.synchronize()
                best = min(best, time.perf_counter() - t)
                W = None
            fl = (1 / 3 if "cholesky" in what else 2 / 3) * n ** 3
            rows.append(dict(bench="sm_share_probe", impl=what, n=n, nb=nb, ranks=g.size,
                             device="gpu", seconds=best, tflops=fl / best / 1e12,
                             sm_target=T, sms=sms))
            print(f"{what:26s} sm_target={T:4d} of {sms}: {best:.4f} s "
                  f"{fl / best / 1e12:6.1f} TFLOP/s", flush=True)
    state["T"] = 0
    if a.json and g.rank == 0:
        with open(a.json, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)


if __name__ == "__main__":
    main()
