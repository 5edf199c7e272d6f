"""Candidate kernels for the refinement's two passes over A and its triangular solves, timed
beside what distla uses now (diagnosis, one GPU).

    python3 benchmarks/gpu/refine_kernels_probe.py --n 32768

* residual pass: cuBLAS GEMV ``A x`` (float64) and distla's ``|A| |x|`` (the componentwise
  check) against one fused kernel that reads A once for both (``y = A x``, ``ya = |A| |x|``,
  partial sums per column chunk then a deterministic sum over chunks);
* one-column triangular solves with an n x n float32 / float64 factor: cuBLAS trsm (what the
  backend calls) and a blocked sweep (trsm on nb x nb diagonal blocks, GEMV on the panel
  below), for L and L^T.
Each best of --reps, device synchronized. JSON lines with ``--json``.
"""
from __future__ import annotations

import argparse
import json

import cupy as cp
import numpy as np
from probe_timing import best

_SRC = r"""
extern "C" __global__ void gemv_abs(const double* A, long long ld, long long m, long long n,
                                    const double* x, double* py, double* pa, long long chunk) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    long long c = blockIdx.y;
    if (i >= m) return;
    long long j0 = c * chunk, j1 = min(n, j0 + chunk);
    double s = 0.0, sa = 0.0;
    const double* a = A + i + j0 * ld;
    #pragma unroll 8
    for (long long j = j0; j < j1; ++j, a += ld) {
        double v = *a, xj = x[j];
        s += v * xj;
        sa += fabs(v) * fabs(xj);
    }
    py[c * m + i] = s;
    pa[c * m + i] = sa;
}
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=32768)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    n = a.n
    rows = []

    def rec(what, s, nbytes=None, **kw):
        bw = None if nbytes is None else round(nbytes / s / 1e12, 2)
        rows.append(dict(bench="refine_kernels_probe", impl=what, n=n, ranks=1, device="gpu",
                         seconds=s, tflops=None, tb_per_s=bw, **kw))
        print(f"{what:52s} {s * 1e3:8.3f} ms  {bw} TB/s", flush=True)

    from distla.device import get_backend
    from distla.vector import abs_product
    be = get_backend("gpu")
    rng = cp.random.default_rng(1)
    A = cp.asfortranarray(rng.standard_normal((n, n), dtype=cp.float64))
    x = rng.standard_normal((n, 1), dtype=cp.float64)
    rec("cuBLAS dgemv A x (A @ x)", best(lambda: A @ x, a.reps), A.nbytes)
    from mpi4py import MPI

    from distla import DistMatrix, ProcessGrid
    g = ProcessGrid(1, 1, MPI.COMM_SELF)
    D = DistMatrix(g, (n, n), (1024, 1024), dtype=np.float64, device="gpu", local=A)
    X = DistMatrix(g, (n, 1), (1024, 1024), dtype=np.float64, device="gpu", local=x)
    rec("distla abs_product |A| |x|", best(lambda: abs_product(D, X, X), a.reps), A.nbytes)
    mod = cp.RawModule(code=_SRC)
    k = mod.get_function("gemv_abs")
    for chunk in (256, 1024, 4096):
        nc = (n + chunk - 1) // chunk
        py = cp.empty((nc, n))
        pa = cp.empty((nc, n))

        def fused():
            k(((n + 255) // 256, nc), (256,), (A, np.int64(n), np.int64(n), np.int64(n), x,
                                                py, pa, np.int64(chunk)))
            return py.sum(axis=0), pa.sum(axis=0)
        y, ya = fused()
        err = float(cp.abs(y - (A @ x)[:, 0]).max() / cp.abs(A).max() / cp.abs(x).max())
        rec(f"fused A x and |A| |x|, chunk {chunk}", best(fused, a.reps), A.nbytes,
            rel_err=err)
    A = D = None
    for dt in (np.float32, np.float64):
        M = rng.standard_normal((n, n), dtype=dt) / np.sqrt(n)
        L = cp.asfortranarray((cp.tril(M) + cp.eye(n) * 4).astype(dt))
        M = None
        b = rng.standard_normal((n, 1)).astype(dt)
        half = L.nbytes / 2
        for tn in ("N", "T"):
            xb = b.copy()
            rec(f"{np.dtype(dt).name} trsm 1 column L{tn} (backend)",
                best(lambda: be.trsm("L", "L", tn, "N", 1.0, L, xb), a.reps), half)
            for nb in (512, 1024, 2048):
                xs = b.copy()

                def blocked():
                    nblk = (n + nb - 1) // nb
                    order = range(nblk) if tn == "N" else range(nblk - 1, -1, -1)
                    for kb in order:
                        r0, r1 = kb * nb, min(n, kb * nb + nb)
                        if tn == "T" and r1 < n:     # x_k -= L[r1:, k]^T x[r1:]
                            xs[r0:r1] -= L[r1:, r0:r1].T @ xs[r1:]
                        be.trsm("L", "L", tn, "N", 1.0, L[r0:r1, r0:r1], xs[r0:r1])
                        if tn == "N" and r1 < n:     # x[r1:] -= L[r1:, k] x_k
                            xs[r1:] -= L[r1:, r0:r1] @ xs[r0:r1]
                s = best(blocked, a.reps)
                xs[...] = b
                blocked()
                xr = b.copy()
                be.trsm("L", "L", tn, "N", 1.0, L, xr)
                err = float(cp.abs(xs - xr).max() / cp.abs(xr).max())
                rec(f"{np.dtype(dt).name} blocked trsv nb {nb} L{tn}", s, half, rel_err=err)
        L = None
    if a.json:
        with open(a.json, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)


if __name__ == "__main__":
    main()
