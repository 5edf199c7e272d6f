"""The device seam: every local kernel the algorithms use, for CPU and GPU ranks.

``get_backend('cpu' | 'gpu')`` returns a :class:`CpuBackend` (NumPy + SciPy's BLAS/LAPACK by
pointer) or a :class:`GpuBackend` (CuPy + cuBLAS/cuSOLVER + a few fused CUDA kernels). Both
have one interface (:class:`Backend`): storage (``xp``, ``empty``, ``asarray``, ``to_host``),
in-place BLAS/LAPACK-style kernels on column-major views (``gemm``, ``syrk``, ``trsm``,
``potrf``, ``getrf``, ``getrf_nopiv``, ``laswp``), row gathers (``take_rows``, ``put_rows``,
``take``), the butterfly kernels (``axpby``, ``butterfly_quad``) and streams (``stream``,
``current_stream``: on the CPU, in-order host queues). Distributed algorithms call only these,
``xp`` and the data communicators, so one body runs on both devices.

Nothing here communicates, except that choosing a GPU reads the node-local rank.
"""
from __future__ import annotations

import functools
import os

import numpy as np

from .base import Backend
from .cpu import CpuBackend

__all__ = ["Backend", "CpuBackend", "GpuBackend", "get_backend", "gpu_available",
           "node_local_rank", "array_device", "DEVICES"]

DEVICES = ("cpu", "gpu")


def __getattr__(name):  # GpuBackend imports CuPy-facing code lazily
    if name == "GpuBackend":
        from .gpu import GpuBackend
        return GpuBackend
    raise AttributeError(name)


def gpu_available() -> bool:
    """True when CuPy imports and sees at least one CUDA device (no exception either way)."""
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # noqa: BLE001 - no CuPy, no driver, no device
        return False


def node_local_rank(comm=None) -> int:
    """This rank's index among the ranks on its node (shared-memory split of ``comm``; the
    launcher's variables when no communicator is given). Collective over ``comm`` if given."""
    if comm is not None:
        from mpi4py import MPI
        local = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())
        r = local.Get_rank()
        local.Free()
        return r
    for var in ("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID",
                "PMI_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_RANK"):
        if var in os.environ:
            return int(os.environ[var])
    return 0


_gpu_selected = False


@functools.lru_cache(maxsize=None)
def _backend(name: str) -> Backend:
    if name == "gpu":
        from .gpu import GpuBackend
        return GpuBackend()
    return CpuBackend()


def get_backend(device: str = "cpu", comm=None) -> Backend:
    """The backend for ``device`` ('cpu' or 'gpu'). The first GPU request selects this rank's
    GPU from its node-local rank (``comm``'s shared-memory split when given). Raises
    ValueError for an unknown device or a GPU request where CuPy or a GPU is missing."""
    global _gpu_selected
    if device not in DEVICES:
        raise ValueError(f"device must be 'cpu' or 'gpu', not {device!r}")
    if device == "gpu":
        if not gpu_available():
            raise ValueError("device='gpu' needs CuPy and a CUDA GPU on every rank "
                             "(pip install 'distla[gpu]'); none was found on this rank")
        if not _gpu_selected:
            import cupy
            ndev = cupy.cuda.runtime.getDeviceCount()
            cupy.cuda.Device(node_local_rank(comm) % ndev).use()
            _gpu_selected = True
    return _backend(device)


def array_device(a) -> str:
    """'cpu' for a NumPy array, 'gpu' for a CuPy array."""
    if isinstance(a, np.ndarray):
        return "cpu"
    if type(a).__module__.startswith("cupy"):
        return "gpu"
    raise TypeError(f"expected a NumPy or CuPy array, got {type(a).__name__}")
