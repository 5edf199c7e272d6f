"""Row gather/scatter on a column-major local matrix (LU's row swaps): fancy indexing vs
take/put on transposed views vs the GPU backend's kernels (take_rows/put_rows). One GPU."""
import time

import cupy as cp
import numpy as np

from distla.device import get_backend

be = get_backend("gpu")

m, n, k = 32768, 64512, 1024
a = cp.asfortranarray(cp.random.standard_normal((m, n)))
idx = cp.asarray(np.sort(np.random.default_rng(0).choice(m, k, replace=False)))
out = cp.empty((k, n), order="F")


def t(f, reps=5):
    f()
    cp.cuda.runtime.deviceSynchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        f()
    cp.cuda.runtime.deviceSynchronize()
    return (time.perf_counter() - t0) / reps * 1e3


def fancy_take():
    out[...] = a[idx]


def fancy_put():
    a[idx] = out


def tp_take():
    cp.take(a.T, idx, axis=1, out=out.T)


def tp_put():
    a.T[:, idx] = out.T


ref = a[idx]
be.take_rows(a, idx, out)
assert bool(cp.all(out == ref))
gb = k * n * 8 / 1e9
for name, f in [("fancy take", fancy_take), ("fancy put", fancy_put), ("T take", tp_take),
                ("T put", tp_put), ("kernel take", lambda: be.take_rows(a, idx, out)),
                ("kernel put", lambda: be.put_rows(a, idx, out))]:
    ms = t(f)
    print(f"{name:12s} {ms:8.3f} ms  {gb / ms * 1e3:7.1f} GB/s moved")
