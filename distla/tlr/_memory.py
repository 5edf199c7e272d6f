"""Memory of TLR phases: what the device has free, the scratch a phase may take, and a clear
error (the same :class:`distla.DistlaError` on every rank) when a problem will not fit.

Sizes are per rank, in bytes. The workspace of a phase (the stacks of tiles evaluated,
compressed or updated in one batched call) defaults to a fraction of the free memory, agreed
(minimum) over the grid so that every rank cuts its work into the same number of chunks.
"""
from __future__ import annotations

import contextlib
import math
import os

from ..errors import DistlaError, agree

__all__ = ["GiB", "available", "fit_message", "require", "workspace", "release", "Scratch"]

GiB = float(2 ** 30)
_MIN_WORKSPACE = 2 ** 26        # 64 MiB
_MAX_WORKSPACE_CPU = 2 ** 31    # beyond 2 GiB a CPU rank gains nothing from larger stacks


def available(device: str) -> int:
    """Free bytes for new arrays on this rank's ``device`` (local). CPU: the kernel's
    MemAvailable (or physical pages when /proc is absent); GPU: the device's free memory plus
    the blocks CuPy's pool holds unused."""
    if device == "gpu":  # pragma: no cover - needs a GPU
        import cupy
        free, _ = cupy.cuda.runtime.memGetInfo()
        pool = cupy.get_default_memory_pool()
        return int(free + pool.total_bytes() - pool.used_bytes())
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:  # pragma: no cover - non-Linux
        pass
    return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))


def release(device: str) -> None:
    """Return the blocks CuPy's pool holds unused to the device, in every stream's arena
    (local; CPU: nothing). Before one large allocation: the pool's own retry on failure
    releases only the current stream's arena."""
    if device == "gpu":  # pragma: no cover - needs a GPU
        import cupy
        cupy.get_default_memory_pool().free_all_blocks()


class Scratch:
    """A separate CuPy memory pool for a phase's temporaries (local; CPU: no-op). Arrays made
    inside :meth:`active` come from it; results that must outlive the phase are copied out
    (into the default pool) before it is :meth:`released <release>`. Without it, small
    results land inside the default pool's large freed workspace blocks, which then cannot be
    returned to the device: a TLR build of n=1048576 on one H200 had 46 GB so stranded when
    it allocated its 30 GB stack."""

    def __init__(self, device: str):
        self.pool = None
        if device == "gpu":  # pragma: no cover - needs a GPU
            import cupy
            self.pool = cupy.cuda.MemoryPool()

    @contextlib.contextmanager
    def active(self):
        if self.pool is None:
            yield
            return
        import cupy  # pragma: no cover - needs a GPU
        with cupy.cuda.using_allocator(self.pool.malloc):
            yield

    def release(self) -> None:
        if self.pool is not None:  # pragma: no cover - needs a GPU
            self.pool.free_all_blocks()


def workspace(device: str, comm, requested=None, fraction: float = 0.25,
              ranks_per_node: int | None = None) -> int:
    """Collective over ``comm`` (mpi4py): the workspace in bytes every rank uses, the same on
    all: ``requested`` when given, else ``fraction`` of the free memory (shared by the ranks of
    one host on CPU), clipped to [64 MiB, 2 GiB] on CPU and [64 MiB, free / 2] on GPU; the
    minimum over ranks."""
    from mpi4py import MPI
    if requested is not None:
        w = int(requested)
    else:
        free = available(device)
        if device != "gpu":
            local = comm.Split_type(MPI.COMM_TYPE_SHARED) if ranks_per_node is None else None
            share = ranks_per_node or local.Get_size()
            if local is not None:
                local.Free()
            w = min(int(fraction * free / max(1, share)), _MAX_WORKSPACE_CPU)
        else:  # pragma: no cover - needs a GPU
            w = int(fraction * free)
        w = max(w, _MIN_WORKSPACE)
    return int(comm.allreduce(w, op=MPI.MIN))


def fit_message(what: str, need: float, free: float, n: int, n_fit: int) -> str:
    """The text of the out-of-memory error: what needs how much, what is free, which ``n``
    would fit."""
    return (f"TLR {what}: needs ~{need / GiB:.2f} GiB on one rank but only {free / GiB:.2f} "
            f"GiB is free; n = {n} does not fit, n <= {n_fit} would (same tile, tol and "
            f"ranks), or use more ranks, a larger tol or a smaller max_rank")


def require(comm, need: float, free: float, what: str, n: int, scale: float = 2.0):
    """Collective over ``comm``: raise the same :class:`DistlaError` on every rank when any
    rank's ``need`` (bytes) exceeds its ``free``; the message names the largest ``n`` that
    would fit assuming ``need`` grows like ``n ** scale``."""
    err = None
    if need > free:
        n_fit = int(n * (free / need) ** (1.0 / scale)) if need > 0 else n
        err = DistlaError(fit_message(what, need, free, n, n_fit))
    agree(comm, err)


def stack_bytes(count: int, nb: int, width: int, itemsize: int) -> int:
    """Bytes of a ``(count, nb, width)`` stack."""
    return int(count) * int(nb) * int(width) * int(itemsize)


def max_over(comm, value: float) -> float:
    """Collective: the maximum of a host float over ``comm``."""
    from mpi4py import MPI
    return float(comm.allreduce(float(value), op=MPI.MAX))


def tiles_fit(free: float, nb: int, itemsize: int, per_tile: float) -> int:
    """How many ``nb x nb`` tiles of ``per_tile`` arrays each fit in ``free`` bytes (>= 1)."""
    return max(1, math.floor(free / max(1.0, per_tile * nb * nb * itemsize)))



def explained(exc: BaseException, what: str, n: int) -> BaseException:
    """``exc`` unchanged, unless it is an out-of-memory error (NumPy's MemoryError, CuPy's
    OutOfMemoryError): then a :class:`DistlaError` saying which phase ran out and what to do."""
    if isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError":
        return DistlaError(f"TLR {what}: out of memory at n = {n} ({type(exc).__name__}: "
                           f"{exc}); use more ranks, a smaller workspace, a larger tol or a "
                           f"smaller max_rank")
    return exc
