"""Times the batched CUDA QR / Jacobi kernels against CuPy's stacked linalg on the shapes of
one TLR panel compression at n=65536, tile 1024 (63 tiles, sample width ~48). One GPU."""
import time

import cupy as cp

from distla.tlr import _cuda


def timed(fn, reps=5):
    fn()
    cp.cuda.Device().synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    cp.cuda.Device().synchronize()
    return (time.perf_counter() - t0) / reps * 1e3


for t, m, w in ((63, 1024, 48), (63, 1024, 64), (127, 2048, 48), (63, 1024, 16)):
    A = cp.random.standard_normal((t, m, w))
    M = cp.random.standard_normal((t, w, w))
    D = cp.random.standard_normal((t, m, m))
    Om = cp.random.standard_normal((m, w))
    print(f"t={t} m={m} w={w}: qr(Q,R) {timed(lambda: _cuda.qr(A)):.3f} ms, "
          f"qr(R) {timed(lambda: _cuda.qr(A, want_q=False)):.3f} ms, "
          f"jacobi svd {timed(lambda: _cuda.svd(M)):.3f} ms, "
          f"cupy qr {timed(lambda: cp.linalg.qr(A), 1):.3f} ms, "
          f"cupy svd {timed(lambda: cp.linalg.svd(M), 1):.3f} ms, "
          f"D@Om {timed(lambda: cp.matmul(D, Om)):.3f} ms", flush=True)
