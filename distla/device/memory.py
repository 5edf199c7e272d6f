"""Peak memory of one rank, for benchmarks: the host's maximum resident set and, on GPU ranks,
the high-water mark of the CuPy memory pool (bytes it held from CUDA). Not collective.

    with PeakMemory("gpu") as pk:      # or a Backend
        factor(A)
    pk.host_bytes, pk.device_bytes     # device_bytes: None on CPU ranks

``host_bytes`` is the process's maximum resident set size so far (``getrusage``; the kernel
does not reset it, so it covers everything before the block too). ``device_bytes`` is the
largest ``pool.total_bytes()`` seen while the block ran: a memory hook reads it after every
pool allocation (the pool only grows between ``free_all_blocks`` calls, so it is also read at
both ends). Free the pool's cached blocks before entering to see what the block itself needs.
"""
from __future__ import annotations

import resource
import sys

__all__ = ["PeakMemory", "host_peak_bytes"]


def host_peak_bytes() -> int:
    """This process's maximum resident set size so far, in bytes."""
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(r) if sys.platform == "darwin" else int(r) * 1024   # Linux: KiB


class PeakMemory:
    """Context manager measuring this rank's peak memory while entered (see the module)."""

    def __init__(self, device):
        """``device``: a Backend, or 'cpu' / 'gpu'."""
        self.gpu = bool(getattr(device, "is_gpu", device == "gpu"))
        self.host_bytes = None
        self.device_bytes = None
        self._hook = None

    def __enter__(self) -> "PeakMemory":
        if self.gpu:
            self._hook = _pool_hook()
            self._hook.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.host_bytes = host_peak_bytes()
        if self._hook is not None:
            self._hook.__exit__(*exc)
            self._hook.note()
            self.device_bytes = int(self._hook.peak)
            self._hook = None


def _pool_hook():  # pragma: no cover - needs a GPU
    """A CuPy memory hook tracking the default pool's ``total_bytes`` high-water mark."""
    import cupy
    from cupy.cuda import memory_hook

    class _PoolPeak(memory_hook.MemoryHook):
        name = "DistlaPoolPeak"

        def __init__(self, pool):
            self.pool = pool
            self.peak = pool.total_bytes()

        def note(self):
            t = self.pool.total_bytes()
            if t > self.peak:
                self.peak = t

        def malloc_postprocess(self, **kwargs):
            self.note()

        def alloc_postprocess(self, **kwargs):
            self.note()

    return _PoolPeak(cupy.get_default_memory_pool())
