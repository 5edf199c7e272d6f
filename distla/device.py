"""The array-namespace seam: NumPy + SciPy LAPACK on 'cpu', CuPy + cuBLAS/cuSOLVER on 'gpu'.

Local kernels work in place on 2-D column-major views (a sub-block of a rank's local matrix,
with its leading dimension), BLAS-style: ``gemm, syrk, trsm, potrf, getrf``. Distributed
algorithms call only these and ``xp``; they are written once for both devices.
Nothing here communicates, except that choosing a GPU reads the node-local rank.
"""
from __future__ import annotations

import functools
import os

import numpy as np

from . import _scipy_blas

__all__ = ["Backend", "get_backend", "gpu_available", "gpu_stream", "DEVICES"]

DEVICES = ("cpu", "gpu")


def gpu_available() -> bool:
    """True when CuPy imports and sees at least one CUDA device (no exception either way)."""
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # noqa: BLE001 - no CuPy, no driver, no device
        return False


def gpu_stream(priority: str = "default"):
    """A new non-blocking CuPy stream. ``priority``: 'high' (the device's greatest priority:
    the block scheduler prefers its kernels when SMs free up, so short critical-path kernels
    -- panels, communication -- are not queued behind a large GEMM on another stream) or
    'default'. ``DISTLA_STREAM_PRIORITY=0`` in the environment makes every stream default
    (for A/B timing). GPU only, not collective."""
    import cupy
    if priority == "high" and os.environ.get("DISTLA_STREAM_PRIORITY", "1") != "0":
        try:  # CUDA clamps a priority beyond the device's range to its greatest (-5 on H200)
            return cupy.cuda.Stream(non_blocking=True, priority=-1000)
        except TypeError:  # pragma: no cover - a CuPy without stream priorities
            pass
    return cupy.cuda.Stream(non_blocking=True)


def node_local_rank(comm=None) -> int:
    """This rank's index among the ranks on its node (shared-memory split of ``comm``; the
    launcher's variables when no communicator is given)."""
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


class Backend:
    """Local storage and kernels for one device kind. ``xp`` is numpy or cupy."""

    def __init__(self, name: str):
        self.name = name
        self.is_gpu = name == "gpu"
        if self.is_gpu:
            import cupy
            from cupy_backends.cuda.libs import cublas, cusolver
            self.xp, self._cublas, self._cusolver = cupy, cublas, cusolver
        else:
            self.xp = np

    # ---- storage ---------------------------------------------------------------------
    def empty(self, shape, dtype=np.float64):
        return self.xp.empty(shape, dtype=dtype, order="F")

    def zeros(self, shape, dtype=np.float64):
        return self.xp.zeros(shape, dtype=dtype, order="F")

    def asarray(self, a, dtype=None):
        """``a`` (NumPy or CuPy) on this device, column-major."""
        if self.is_gpu:
            return self.xp.asfortranarray(self.xp.asarray(a, dtype=dtype))
        if hasattr(a, "get") and not isinstance(a, np.ndarray):
            a = a.get()
        return np.asfortranarray(a, dtype=dtype)

    def to_host(self, a) -> np.ndarray:
        return a.get(order="F") if self.is_gpu else a

    def synchronize(self) -> None:
        if self.is_gpu:
            self.xp.cuda.get_current_stream().synchronize()

    def owns(self, a) -> bool:
        """True when ``a`` is an array of this device's namespace."""
        return isinstance(a, self.xp.ndarray)

    # ---- kernels (in place on column-major views) ------------------------------------
    def gemm(self, transa, transb, alpha, a, b, beta, c, tf32: bool = False) -> None:
        """``c = alpha op(a) op(b) + beta c``. ``tf32=True``: float32 on a GPU through TF32
        tensor cores (10-bit mantissa products; pair with :meth:`split_tf32x3` for float32
        accuracy); ignored elsewhere."""
        if c.size == 0:
            return
        if tf32 and self.is_gpu and c.dtype == np.float32:
            self._call(self._gpu_gemm_tf32, c, transa, transb, alpha, a, b, beta)
            return
        k = a.shape[1] if transa == "N" else a.shape[0]
        if k == 0:
            if beta == 0:
                c[...] = 0  # BLAS: beta = 0 means C is not read (NaN/Inf in C are dropped)
            else:
                c *= beta
            return
        self._call(self._gemm, c, transa, transb, alpha, a, b, beta)

    def split_tf32x3(self, a, b):
        """Operands of a TF32 tensor-core product at ~float32 accuracy ("3xTF32"): for float32
        ``a (m x k)``, ``b (k x n)`` returns column-major ``A3 = [ah, ah, al]`` (m x 3k) and
        ``B3 = [bh; bl; bh]`` (3k x n), ``xh`` = x rounded to TF32 (10 mantissa bits, exact
        in TF32) and ``xl = x - xh`` (exact in float32), so that
        ``A3 B3 = ah bh + ah bl + al bh = a b`` up to ``|al bl| ~ 2^-22 |a||b|`` and the TF32
        rounding of ``xl`` (same order). Use with :meth:`gemm` ``(..., tf32=True)``. GPU
        float32 only (local, not collective)."""
        if not (self.is_gpu and a.dtype == np.float32 and b.dtype == np.float32):
            raise TypeError("split_tf32x3 needs float32 arrays on a GPU backend")
        xp = self.xp
        m, k = a.shape
        n = b.shape[1]
        A3 = xp.empty((m, 3 * k), np.float32, order="F")
        B3 = xp.empty((3 * k, n), np.float32, order="F")
        split = _tf32_split_kernel()
        # CuPy's elementwise kernels walk arrays in C order: hand them the transposes of
        # these column-major views so that consecutive threads touch consecutive addresses
        split(self._colmajor(a).T, A3[:, :k].T, A3[:, k:2 * k].T, A3[:, 2 * k:].T)
        split(self._colmajor(b).T, B3[:k].T, B3[2 * k:].T, B3[k:2 * k].T)
        return A3, B3

    def syrk(self, uplo, trans, alpha, a, beta, c) -> None:
        """``c = alpha a a^T + beta c`` (trans 'N') on the ``uplo`` triangle."""
        if c.size == 0:
            return
        self._call(self._syrk, c, uplo, trans, alpha, a, beta)

    def trsm(self, side, uplo, transa, diag, alpha, a, b) -> None:
        """``b = alpha op(a)^-1 b`` (side 'L') or ``alpha b op(a)^-1`` (side 'R')."""
        if b.size == 0:
            return
        self._call(self._trsm, b, side, uplo, transa, diag, alpha, a)

    def potrf(self, uplo, a):
        """Cholesky of the square view ``a`` in place. Returns LAPACK's info: an int on CPU, a
        device int32 scalar on GPU (read it later with :meth:`info_value`, no sync now)."""
        out = self._call(self._potrf, a, uplo)
        return out

    def getrf(self, a):
        """LU with partial pivoting of the view ``a`` in place. Returns (pivots, info):
        pivots 0-based (row i was swapped with pivots[i]), on the device."""
        return self._call(self._getrf, a)

    def info_value(self, info) -> int:
        return int(info) if not self.is_gpu else int(info.get())

    def _call(self, fn, out, *args):
        """Run ``fn(*args, out)`` in place; strided non-column-major ``out`` goes via a copy."""
        for x in args:  # BLAS reads raw memory: a mixed dtype is garbage or an overrun
            if getattr(x, "ndim", 0) == 2 and x.dtype != out.dtype:
                raise TypeError(f"kernel operands must share one dtype, got {x.dtype} "
                                f"and {out.dtype}")
        args = tuple(self._colmajor(x) if getattr(x, "ndim", 0) == 2 else x for x in args)
        if _scipy_blas.is_colmajor(out):
            return fn(*args, out)
        tmp = self.xp.asfortranarray(out)
        r = fn(*args, tmp)
        out[...] = tmp
        return r

    def _colmajor(self, a):
        return a if _scipy_blas.is_colmajor(a) else self.xp.asfortranarray(a)

    # CPU kernels -------------------------------------------------------------------------
    def _gemm(self, transa, transb, alpha, a, b, beta, c):
        if self.is_gpu:
            return self._gpu_gemm(transa, transb, alpha, a, b, beta, c)
        _scipy_blas.gemm(transa, transb, alpha, a, b, beta, c)

    def _syrk(self, uplo, trans, alpha, a, beta, c):
        if self.is_gpu:
            return self._gpu_syrk(uplo, trans, alpha, a, beta, c)
        _scipy_blas.syrk(uplo, trans, alpha, a, beta, c)

    def _trsm(self, side, uplo, transa, diag, alpha, a, b):
        if self.is_gpu:
            return self._gpu_trsm(side, uplo, transa, diag, alpha, a, b)
        _scipy_blas.trsm(side, uplo, transa, diag, alpha, a, b)

    def _potrf(self, uplo, a):
        if self.is_gpu:
            return self._gpu_potrf(uplo, a)
        return _scipy_blas.potrf(uplo, a)

    def _getrf(self, a):
        if self.is_gpu:
            return self._gpu_getrf(a)
        return _scipy_blas.getrf(a)

    # GPU kernels (cuBLAS / cuSOLVER on the current stream) --------------------------------
    def _blas(self):
        h = self.xp.cuda.device.get_cublas_handle()
        self._cublas.setStream(h, self.xp.cuda.get_current_stream().ptr)
        return h

    def _solver(self):
        h = self.xp.cuda.device.get_cusolver_handle()
        self._cusolver.setStream(h, self.xp.cuda.get_current_stream().ptr)
        return h

    def _op(self, t):
        return self._cublas.CUBLAS_OP_N if t == "N" else self._cublas.CUBLAS_OP_T

    def _fill(self, uplo):
        return self._cublas.CUBLAS_FILL_MODE_LOWER if uplo == "L" else \
            self._cublas.CUBLAS_FILL_MODE_UPPER

    @staticmethod
    def _scalar(x, dtype):
        s = np.array(x, dtype=dtype)
        return s, s.ctypes.data

    def _gpu_gemm(self, transa, transb, alpha, a, b, beta, c, tf32=False):
        m, n = c.shape
        k = a.shape[1] if transa == "N" else a.shape[0]
        al, pa = self._scalar(alpha, c.dtype)
        be, pb = self._scalar(beta, c.dtype)
        f = {"d": self._cublas.dgemm, "f": self._cublas.sgemm}[c.dtype.char]
        h = self._blas()
        if tf32:  # the handle's math mode is read when the call is queued
            old = self._cublas.getMathMode(h)
            self._cublas.setMathMode(h, _CUBLAS_TF32_TENSOR_OP_MATH)
        try:
            f(h, self._op(transa), self._op(transb), m, n, k, pa, a.data.ptr,
              _scipy_blas.ld(a), b.data.ptr, _scipy_blas.ld(b), pb, c.data.ptr,
              _scipy_blas.ld(c))
        finally:
            if tf32:
                self._cublas.setMathMode(h, old)

    def _gpu_gemm_tf32(self, transa, transb, alpha, a, b, beta, c):
        self._gpu_gemm(transa, transb, alpha, a, b, beta, c, tf32=True)

    def _gpu_syrk(self, uplo, trans, alpha, a, beta, c):
        n = c.shape[0]
        k = a.shape[1] if trans == "N" else a.shape[0]
        al, pa = self._scalar(alpha, c.dtype)
        be, pb = self._scalar(beta, c.dtype)
        f = {"d": self._cublas.dsyrk, "f": self._cublas.ssyrk}[c.dtype.char]
        f(self._blas(), self._fill(uplo), self._op(trans), n, k, pa, a.data.ptr,
          _scipy_blas.ld(a), pb, c.data.ptr, _scipy_blas.ld(c))

    def _gpu_trsm(self, side, uplo, transa, diag, alpha, a, b):
        m, n = b.shape
        al, pa = self._scalar(alpha, b.dtype)
        cb = self._cublas
        f = {"d": cb.dtrsm, "f": cb.strsm}[b.dtype.char]
        f(self._blas(), cb.CUBLAS_SIDE_LEFT if side == "L" else cb.CUBLAS_SIDE_RIGHT,
          self._fill(uplo), self._op(transa),
          cb.CUBLAS_DIAG_UNIT if diag == "U" else cb.CUBLAS_DIAG_NON_UNIT,
          m, n, pa, a.data.ptr, _scipy_blas.ld(a), b.data.ptr, _scipy_blas.ld(b))

    def _gpu_potrf(self, uplo, a):
        n = a.shape[0]
        cs, xp = self._cusolver, self.xp
        info = xp.zeros((), dtype=np.int32)
        if n == 0:
            return info
        bs = {"d": cs.dpotrf_bufferSize, "f": cs.spotrf_bufferSize}[a.dtype.char]
        f = {"d": cs.dpotrf, "f": cs.spotrf}[a.dtype.char]
        h = self._solver()
        lda = _scipy_blas.ld(a)
        lwork = bs(h, self._fill(uplo), n, a.data.ptr, lda)
        work = xp.empty(max(1, lwork), dtype=a.dtype)
        f(h, self._fill(uplo), n, a.data.ptr, lda, work.data.ptr, lwork, info.data.ptr)
        return info

    def _gpu_getrf(self, a):
        m, n = a.shape
        cs, xp = self._cusolver, self.xp
        info = xp.zeros((), dtype=np.int32)
        ipiv = xp.zeros(max(1, min(m, n)), dtype=np.int32)
        if m and n:
            bs = {"d": cs.dgetrf_bufferSize, "f": cs.sgetrf_bufferSize}[a.dtype.char]
            f = {"d": cs.dgetrf, "f": cs.sgetrf}[a.dtype.char]
            h = self._solver()
            lda = _scipy_blas.ld(a)
            lwork = bs(h, m, n, a.data.ptr, lda)
            work = xp.empty(max(1, lwork), dtype=a.dtype)
            f(h, m, n, a.data.ptr, lda, work.data.ptr, ipiv.data.ptr, info.data.ptr)
        return ipiv[:min(m, n)].astype(np.int64) - 1, info


_gpu_selected = False


@functools.lru_cache(maxsize=None)
def _backend(name: str) -> Backend:
    return Backend(name)


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
    mod = type(a).__module__
    if mod.startswith("cupy"):
        return "gpu"
    raise TypeError(f"expected a NumPy or CuPy array, got {type(a).__name__}")


_CUBLAS_TF32_TENSOR_OP_MATH = 3   # cublasMath_t: single precision through TF32 tensor cores


@functools.lru_cache(maxsize=None)
def _tf32_split_kernel():  # pragma: no cover - needs a GPU
    """CuPy kernel ``x -> (hi, hi2, lo)``: ``hi = hi2`` = x rounded to nearest TF32,
    ``lo = x - hi``."""
    import cupy
    return cupy.ElementwiseKernel(
        "float32 x", "float32 hi, float32 hi2, float32 lo",
        "const float h = __uint_as_float((__float_as_uint(x) + 0x1000u) & 0xffffe000u);"
        " hi = h; hi2 = h; lo = x - h;", "distla_split_tf32")
