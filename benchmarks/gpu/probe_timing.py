"""Timing helpers shared by the GPU diagnosis probes of this directory (each probe runs as
``python3 benchmarks/gpu/NAME.py``, so this module is importable beside it). Not collective."""
from __future__ import annotations

import ctypes
import time


def timed(be, fn, reps=2):
    """``(best seconds, result)`` of ``reps`` runs of ``fn()``, the backend ``be``'s device
    synchronized before and after each."""
    best, out = float("inf"), None
    for _ in range(reps):
        out = None
        be.synchronize()
        t = time.perf_counter()
        out = fn()
        be.synchronize()
        best = min(best, time.perf_counter() - t)
    return best, out


def best(fn, reps=5):
    """Best seconds of ``reps`` runs of ``fn()`` after one untimed run, CuPy's current stream
    synchronized after each."""
    import cupy as cp
    fn()
    cp.cuda.get_current_stream().synchronize()
    b = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        cp.cuda.get_current_stream().synchronize()
        b = min(b, time.perf_counter() - t)
    return b


def cublas_lib():
    """The libcublas CuPy loaded (from this process's memory map), for calls CuPy does not
    wrap (through ctypes)."""
    with open("/proc/self/maps") as f:
        paths = {ln.split()[-1] for ln in f if "libcublas.so" in ln and "Lt" not in ln}
    return ctypes.CDLL(sorted(paths)[0])
