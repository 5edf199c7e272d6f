"""Triangular solves with few right-hand sides by inverted diagonal blocks (diagnosis).

    python3 benchmarks/gpu/trsv_inverse_probe.py --n 32768 --nb 1024 [--json OUT]

For a lower triangular L (n x n) with its nb x nb diagonal blocks inverted beforehand, solves
L x = b and L^T x = b block by block: x_k = inv(L_kk) b_k (one GEMV), then the rest of b
updated by the block column below (or the block row left of) the diagonal (one GEMV over a
tall block): 2 n / nb cuBLAS calls made straight through CuPy's cuBLAS bindings, reading L
once. Prints the seconds beside cuBLAS trsm on the same columns, float32 and float64, and
the relative difference of the solutions.
"""
from __future__ import annotations

import argparse
import json

import cupy as cp
import numpy as np
from cupy_backends.cuda.libs import cublas
from probe_timing import best


def solve_inv(L, invs, b, out, trans, nb, h, consts):
    """out = L^-1 b (trans False) or L^-T b; b (n x k, F-order) is overwritten (partial
    sums), out is n x k F-order."""
    n, k = b.shape
    one, mone, zero = consts
    f = cublas.sgemv if L.dtype == np.float32 else cublas.dgemv
    g = cublas.sgemm if L.dtype == np.float32 else cublas.dgemm
    N, T = cublas.CUBLAS_OP_N, cublas.CUBLAS_OP_T
    it, lda = L.itemsize, n
    nblk = (n + nb - 1) // nb
    for kb in (range(nblk) if not trans else range(nblk - 1, -1, -1)):
        k0, k1 = kb * nb, min(n, kb * nb + nb)
        w = k1 - k0
        bk, xk = b.data.ptr + k0 * it, out.data.ptr + k0 * it
        if k == 1:     # x_k = inv(L_kk) b_k  (or inv^T b_k)
            f(h, T if trans else N, w, w, one.ctypes.data, invs[kb].data.ptr, nb, bk, 1,
              zero.ctypes.data, xk, 1)
        else:
            g(h, T if trans else N, N, w, k, w, one.ctypes.data, invs[kb].data.ptr, nb, bk, n,
              zero.ctypes.data, xk, n)
        if not trans and k1 < n:       # b[k1:] -= L[k1:, k0:k1] x_k
            a = L.data.ptr + (k0 * lda + k1) * it
            if k == 1:
                f(h, N, n - k1, w, mone.ctypes.data, a, lda, xk, 1, one.ctypes.data,
                  b.data.ptr + k1 * it, 1)
            else:
                g(h, N, N, n - k1, k, w, mone.ctypes.data, a, lda, xk, n, one.ctypes.data,
                  b.data.ptr + k1 * it, n)
        if trans and k0 > 0:           # b[:k0] -= L[k0:k1, :k0]^T x_k
            a = L.data.ptr + k0 * it
            if k == 1:
                f(h, T, w, k0, mone.ctypes.data, a, lda, xk, 1, one.ctypes.data, b.data.ptr, 1)
            else:
                g(h, T, N, k0, k, w, mone.ctypes.data, a, lda, xk, n, one.ctypes.data,
                  b.data.ptr, n)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=32768)
    ap.add_argument("--nb", type=int, default=1024)
    ap.add_argument("--json")
    a = ap.parse_args()
    n, nb = a.n, a.nb
    h = cp.cuda.device.get_cublas_handle()
    rows = []
    for dt in (np.float32, np.float64):
        rng = cp.random.default_rng(1)
        L = cp.asfortranarray(cp.tril(rng.standard_normal((n, n), dtype=dt)) * (0.5 / np.sqrt(n)))
        L[cp.arange(n), cp.arange(n)] += 1
        nblk = (n + nb - 1) // nb
        from cupyx.scipy.linalg import solve_triangular
        invs = [cp.asfortranarray(solve_triangular(L[i * nb:(i + 1) * nb, i * nb:(i + 1) * nb],
                                                   cp.eye(min(nb, n - i * nb), dtype=dt),
                                                   lower=True)) for i in range(nblk)]
        consts = tuple(np.array(v, dt) for v in (1.0, -1.0, 0.0))
        f = cublas.strsm if dt == np.float32 else cublas.dtrsm
        one = np.array(1.0, dt)
        for k in (1, 2, 4):
            b0 = cp.asfortranarray(rng.standard_normal((n, k), dtype=dt))
            for trans in (False, True):
                def ref():
                    x = b0.copy(order="F")
                    for j in range(k):
                        f(h, cublas.CUBLAS_SIDE_LEFT, cublas.CUBLAS_FILL_MODE_LOWER,
                          cublas.CUBLAS_OP_T if trans else cublas.CUBLAS_OP_N,
                          cublas.CUBLAS_DIAG_NON_UNIT, n, 1, one.ctypes.data, L.data.ptr, n,
                          x.data.ptr + j * n * x.itemsize, n)
                    return x

                def new():
                    x = b0.copy(order="F")
                    out = cp.empty_like(x, order="F")
                    solve_inv(L, invs, x, out, trans, nb, h, consts)
                    return out
                t_ref, t_new = best(ref), best(new)
                xr, xn = ref(), new()
                diff = float(cp.abs(xr - xn).max() / cp.abs(xr).max())
                tag = "LT" if trans else "LN"
                print(f"{np.dtype(dt).name} {tag} k={k}: cuBLAS trsm per column "
                      f"{t_ref * 1e3:.3f} ms, inverse blocks {t_new * 1e3:.3f} ms "
                      f"({t_ref / t_new:.2f}x), rel diff {diff:.1e}", flush=True)
                for impl, s in (("cuBLAS trsm per column", t_ref),
                                ("inverse diagonal blocks", t_new)):
                    rows.append(dict(
                        bench="trsv_inverse_probe", impl=impl, n=n, nb=nb, ranks=1,
                        device=cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
                        dtype=np.dtype(dt).name, op=tag, nrhs=k, seconds=s, tflops=None,
                        rel_diff=diff,
                        command=f"python3 benchmarks/gpu/trsv_inverse_probe.py --n {n} --nb {nb}"))
        L = invs = None
        cp.get_default_memory_pool().free_all_blocks()
    if a.json:
        with open(a.json, "w") as fh:
            fh.writelines(json.dumps(r) + "\n" for r in rows)


if __name__ == "__main__":
    main()
