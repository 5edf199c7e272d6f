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

import math
import os
import resource
import sys

__all__ = ["PeakMemory", "host_peak_bytes", "host_rss_bytes", "capacity_bytes",
           "largest_n"]


def host_peak_bytes() -> int:
    """This process's maximum resident set size so far, in bytes."""
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(r) if sys.platform == "darwin" else int(r) * 1024   # Linux: KiB


def host_rss_bytes() -> int:
    """This process's resident set size now, in bytes (0 where /proc is missing)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def capacity_bytes(gpu: bool) -> int:
    """Memory this process could hold now: on GPU ranks the device's free memory plus what
    CuPy's pool already holds; on CPU ranks the host's available memory (``MemAvailable``)
    plus this process's resident set (shared by the ranks of a node: divide by them)."""
    if gpu:  # pragma: no cover - needs a GPU
        import cupy
        free, _ = cupy.cuda.runtime.memGetInfo()
        return int(free) + int(cupy.get_default_memory_pool().total_bytes())
    avail = 0
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    avail = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return avail + host_rss_bytes()


def largest_n(n: int, local_bytes: float, peak_bytes: float, capacity: float,
              copies: int = 1) -> int:
    """The largest order n' whose run fits in ``capacity`` bytes per rank, extrapolated from
    one run at order ``n``: ``copies`` matrices of ``local_bytes`` each (they grow as n'^2 on
    a fixed grid) and the rest of ``peak_bytes`` (workspace: O(n nb) per rank, grows as n').
    Solves ``copies local x^2 + rest x = capacity`` for ``x = n'/n``. Not collective."""
    quad = copies * float(local_bytes)
    if quad <= 0 or capacity <= 0:
        return 0
    rest = max(0.0, float(peak_bytes) - quad)
    x = (-rest + math.sqrt(rest * rest + 4.0 * quad * capacity)) / (2.0 * quad)
    return int(n * x)


class PeakMemory:
    """Context manager measuring this rank's peak memory while entered (see the module)."""

    def __init__(self, device):
        """``device``: a Backend, or 'cpu' / 'gpu'."""
        self.gpu = bool(getattr(device, "is_gpu", device == "gpu"))
        self.host_bytes = None
        self.host_start = 0     # resident set when the block began (its baseline)
        self.device_bytes = None
        self._hook = None

    def __enter__(self) -> "PeakMemory":
        self.host_start = host_rss_bytes()
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
