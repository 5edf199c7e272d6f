"""GPU ranks: CuPy storage, cuBLAS/cuSOLVER on the current stream, and a few fused CUDA
kernels (row gathers, butterflies, the TF32 split). Not collective."""
from __future__ import annotations  # pragma: no cover - needs a GPU

import contextlib
import functools

import numpy as np

from . import _lapack, _panel_cuda
from .base import Backend, HostBuffer, _contiguous
from .streams import GpuStream

_CUBLAS_TF32_TENSOR_OP_MATH = 3   # cublasMath_t: single precision through TF32 tensor cores
_CUDA_R_32F, _CUDA_R_16F, _CUDA_R_16BF = 0, 2, 14        # cudaDataType
_CUBLAS_COMPUTE_32F = 68                                # cublasComputeType_t
_CUBLAS_GEMM_DEFAULT = -1
_CUBLAS_POINTER_MODE_HOST, _CUBLAS_POINTER_MODE_DEVICE = 0, 1


class GpuBackend(Backend):  # pragma: no cover - needs a GPU
    name = "gpu"
    is_gpu = True
    host_lapack = False

    def __init__(self):
        super().__init__()
        import cupy
        from cupy_backends.cuda.libs import cublas, cusolver
        self.xp, self._cublas, self._cusolver = cupy, cublas, cusolver
        self._scalars = {}     # float32 device scalars by value (_device_scalar)
        self._host_scalars = {}    # (value, dtype char) -> host array (cuBLAS alpha/beta)
        self._leaf = None          # the LU panel's leaf kernel (getf2_leaf), made at first use

    # ---- first use ---------------------------------------------------------------------------
    def preload(self, dtype=np.float64) -> None:
        # every kernel family of a Cholesky or LU solve and its checks, once, on 64 x 64
        # (what stays for the real call: CuPy's size-class variants of its own kernels)
        xp, dt = self.xp, np.dtype(dtype)
        n = 64
        a = xp.asfortranarray(xp.eye(n, dtype=dt) * n + 1)
        x = xp.ones((n, 1), dtype=dt, order="F")
        self.gemv_abs(a, x, absolute=True, rowsums=True)
        self.column_abs_stats(a)
        c = self.empty((n, n), dt)
        self.gemm("N", "N", 1.0, a, a, 0.0, c)
        self.syrk("L", "N", 1.0, a, 0.0, c)
        self.copy(c, a)
        self.potrf("L", c)
        self.trsm("L", "L", "N", "N", 1.0, c, x)
        self.trsm("L", "L", "T", "N", 1.0, c, x)
        self.zero_above(c, np.arange(n), np.arange(n))
        self.copy(c, a)
        piv, info = self.getrf(c)
        self.laswp(x, self.to_host(piv), 0)
        float(xp.abs(c).max()), float(c.sum())
        self.synchronize()

    def preload_async(self, dtype=np.float64):
        import os
        import threading
        if os.environ.get("DISTLA_PRELOAD", "1") == "0":
            return None
        dev = self.xp.cuda.Device().id

        def run():
            try:
                with self.xp.cuda.Device(dev):
                    self.preload(dtype)
            except Exception:  # noqa: BLE001 - the real calls raise it
                pass
        t = threading.Thread(target=run, name="distla-preload", daemon=True)
        t.start()
        return t

    # ---- storage and streams -----------------------------------------------------------------
    def asarray(self, a, dtype=None):
        return self.xp.asfortranarray(self.xp.asarray(a, dtype=dtype))

    def to_host(self, a) -> np.ndarray:
        return a.get(order="F") if isinstance(a, self.xp.ndarray) else np.asarray(a)

    def synchronize(self) -> None:
        self.xp.cuda.get_current_stream().synchronize()

    def free_memory(self) -> int:
        # the device's free memory and what CuPy's pool holds unused
        return int(self.xp.cuda.runtime.memGetInfo()[0]
                   + self.xp.get_default_memory_pool().free_bytes())

    def device_id(self) -> int:
        return self.xp.cuda.runtime.getDevice()

    @contextlib.contextmanager
    def staging(self):
        stager = _PinnedStaging(self.xp)
        try:
            yield stager
        finally:
            stager.stream.synchronize()

    def info_value(self, info) -> int:
        return int(info) if isinstance(info, (int, np.integer)) else int(info.get())

    def infos_to_host(self, infos) -> np.ndarray:
        if not infos:
            return np.zeros(0, dtype=np.int64)
        return self.xp.stack([self.xp.asarray(i).reshape(()) for i in infos]).get() \
            .astype(np.int64)

    def stream(self, priority: str = "default"):
        cp = self.xp
        if priority == "high":
            try:  # CUDA clamps a priority beyond the device's range to its greatest
                return GpuStream(cp.cuda.Stream(non_blocking=True, priority=-1000))
            except TypeError:  # a CuPy without stream priorities
                pass
        return GpuStream(cp.cuda.Stream(non_blocking=True))

    def current_stream(self):
        return GpuStream(self.xp.cuda.get_current_stream())

    # ---- cuBLAS / cuSOLVER --------------------------------------------------------------------
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

    def _gemm(self, transa, transb, alpha, a, b, beta, tf32, c):
        m, n = c.shape
        k = a.shape[1] if transa == "N" else a.shape[0]
        al = np.array(alpha, c.dtype)
        be = np.array(beta, c.dtype)
        f = {"d": self._cublas.dgemm, "f": self._cublas.sgemm}[c.dtype.char]
        h = self._blas()
        tf32 = tf32 and c.dtype == np.float32
        if tf32:  # the handle's math mode is read when the call is queued
            old = self._cublas.getMathMode(h)
            self._cublas.setMathMode(h, _CUBLAS_TF32_TENSOR_OP_MATH)
        try:
            f(h, self._op(transa), self._op(transb), m, n, k, al.ctypes.data, a.data.ptr,
              _lapack.ld(a), b.data.ptr, _lapack.ld(b), be.ctypes.data, c.data.ptr,
              _lapack.ld(c))
        finally:
            if tf32:
                self._cublas.setMathMode(h, old)

    #: a SYRK of order above this is split in halves (two SYRKs and one GEMM for the
    #: off-diagonal quadrant, recursively): cuBLAS's GEMM runs nearer FP64 peak than its SYRK
    #: at large orders (one H200, k = 1024: DSYRK 48.0 TFLOP/s at 16384, split 54.9; 50.1 /
    #: 51.2 at 8192; below 4096 splitting is slower). 0: never split. docs/perf.md
    SYRK_SPLIT = 4096

    def _syrk(self, uplo, trans, alpha, a, beta, c):
        n = c.shape[0]
        if self.SYRK_SPLIT and n > self.SYRK_SPLIT:
            h = (n // 2 + 255) // 256 * 256 if n > 512 else n // 2
            a1, a2 = (a[:h], a[h:]) if trans == "N" else (a[:, :h], a[:, h:])
            self._syrk(uplo, trans, alpha, a1, beta, c[:h, :h])
            self._syrk(uplo, trans, alpha, a2, beta, c[h:, h:])
            other = "T" if trans == "N" else "N"
            if uplo == "L":       # C21 = alpha op(a2) op(a1)^T + beta C21
                self._gemm(trans, other, alpha, a2, a1, beta, False, c[h:, :h])
            else:                 # C12 = alpha op(a1) op(a2)^T + beta C12
                self._gemm(trans, other, alpha, a1, a2, beta, False, c[:h, h:])
            return
        k = a.shape[1] if trans == "N" else a.shape[0]
        al = np.array(alpha, c.dtype)
        be = np.array(beta, c.dtype)
        f = {"d": self._cublas.dsyrk, "f": self._cublas.ssyrk}[c.dtype.char]
        f(self._blas(), self._fill(uplo), self._op(trans), n, k, al.ctypes.data, a.data.ptr,
          _lapack.ld(a), be.ctypes.data, c.data.ptr, _lapack.ld(c))

    #: left solves with at most this many right-hand sides (and a large triangle) run one
    #: column at a time: cuBLAS dtrsm on 2-3 columns took 2.7-4x its 1-column time on an H200
    #: (n = 32768, CUDA 13; records 2026-11-26-h200-rcond-profile.jsonl), the condition
    #: estimator's block size
    PER_COLUMN_RHS = 3
    PER_COLUMN_MIN_ROWS = 4096
    #: a 4-column solve costs about four 1-column ones (above), so the condition estimate's
    #: first block is not fused into the user's solve: with it, the estimate added 61.7 ms to
    #: a Cholesky solve and 92 ms to an LU solve at n = 32768 (one H100), against 62.5 / 64.7
    #: ms apart (records 2026-11-26-h100-checks-gpu.jsonl)
    fuse_few_rhs = False
    scan_zero_rows = False
    #: one H200, n = 32768, nb 1024: a 1-column solve 1.9x (float64) / 1.4x (float32) faster
    #: than cuBLAS trsm, 2-4 columns 2.5-7.6x (record 2026-11-27-h200-trsv-inverse-probe.jsonl)
    inverse_block_solves = True
    #: one H200, float32 (record 2026-11-27-h200-sweep-dot-form.jsonl): L and L^T sweeps
    #: 3.3 + 2.9 ms at n = 65536 with 1024 blocks, 2.5 + 2.5 ms with 2048, whose inversion
    #: takes 8.9 ms instead of 3.8 ms; a mixed solve's refinement makes 10-30 solves
    inverse_block, inverse_block_from = 2048, 49152

    def trsm_inverse_blocks(self, t, S, nb, lower, trans, b):
        # Backend's loop with cuBLAS called straight (2 calls per block: host-bound else)
        if b.dtype.char not in "fd" or t.dtype != b.dtype or b.shape[1] > 16:
            return super().trsm_inverse_blocks(t, S, nb, lower, trans, b)
        cb, n, k = self._cublas, t.shape[0], b.shape[1]
        S = self.xp.ascontiguousarray(S)          # S[kb].T at S's kb-th nb x nb block
        x = self.empty(b.shape, b.dtype)
        if n == 0 or k == 0:
            return x
        one, mone, zero = (self._host_scalar(v, b.dtype) for v in (1.0, -1.0, 0.0))
        gemv = cb.sgemv if b.dtype.char == "f" else cb.dgemv
        gemm = cb.sgemm if b.dtype.char == "f" else cb.dgemm
        N, T = cb.CUBLAS_OP_N, cb.CUBLAS_OP_T
        op = T if trans else N
        h, it = self._blas(), b.itemsize
        lt, lb, lx = _lapack.ld(t), _lapack.ld(b), _lapack.ld(x)
        tp, bp, xp_, sp = t.data.ptr, b.data.ptr, x.data.ptr, S.data.ptr
        forward = lower != trans
        nblk = S.shape[0]
        for kb in (range(nblk) if forward else range(nblk - 1, -1, -1)):
            k0, k1 = kb * nb, min(n, kb * nb + nb)
            w = k1 - k0
            inv = sp + kb * nb * nb * it          # S[kb].T: F-order, leading dimension nb
            bk, xk = bp + k0 * it, xp_ + k0 * it
            r0, r1 = (k1, n) if lower else (0, k0)   # t's block column beside block k
            blk = tp + (k0 * lt + r0) * it           # t[r0:r1, k0:k1]: contiguous columns
            if trans and r1 > r0:                    # b_k -= t[r0:r1, k0:k1]^T x[r0:r1]
                if k == 1:
                    gemv(h, T, r1 - r0, w, mone, blk, lt, xp_ + r0 * it, 1, one, bk, 1)
                else:
                    gemm(h, T, N, w, k, r1 - r0, mone, blk, lt, xp_ + r0 * it, lx, one, bk,
                         lb)
            if k == 1:
                gemv(h, op, w, w, one, inv, nb, bk, 1, zero, xk, 1)
            else:
                gemm(h, op, N, w, k, w, one, inv, nb, bk, lb, zero, xk, lx)
            if not trans and r1 > r0:                # b[r0:r1] -= t[r0:r1, k0:k1] x_k
                if k == 1:
                    gemv(h, N, r1 - r0, w, mone, blk, lt, xk, 1, one, bp + r0 * it, 1)
                else:
                    gemm(h, N, N, r1 - r0, k, w, mone, blk, lt, xk, lx, one, bp + r0 * it, lb)
        return x

    def _host_scalar(self, v, dtype):
        key = (v, np.dtype(dtype).char)
        arr = self._host_scalars.get(key)
        if arr is None:
            arr = self._host_scalars[key] = np.array(v, dtype)
        return arr.ctypes.data

    def _trsm(self, side, uplo, transa, diag, alpha, a, b):
        m, n = b.shape
        al = np.array(alpha, b.dtype)
        cb = self._cublas
        f = {"d": cb.dtrsm, "f": cb.strsm}[b.dtype.char]
        one_by_one = side == "L" and 1 < n <= self.PER_COLUMN_RHS and \
            m >= self.PER_COLUMN_MIN_ROWS
        for j0, j1 in ([(j, j + 1) for j in range(n)] if one_by_one else [(0, n)]):
            f(self._blas(), cb.CUBLAS_SIDE_LEFT if side == "L" else cb.CUBLAS_SIDE_RIGHT,
              self._fill(uplo), self._op(transa),
              cb.CUBLAS_DIAG_UNIT if diag == "U" else cb.CUBLAS_DIAG_NON_UNIT,
              m, j1 - j0, al.ctypes.data, a.data.ptr, _lapack.ld(a), b[:, j0:j1].data.ptr,
              _lapack.ld(b))

    def _potrf(self, uplo, a):
        n = a.shape[0]
        cs, xp = self._cusolver, self.xp
        info = xp.zeros((), dtype=np.int32)
        if n == 0:
            return info
        bs = {"d": cs.dpotrf_bufferSize, "f": cs.spotrf_bufferSize}[a.dtype.char]
        f = {"d": cs.dpotrf, "f": cs.spotrf}[a.dtype.char]
        h = self._solver()
        lda = _lapack.ld(a)
        lwork = bs(h, self._fill(uplo), n, a.data.ptr, lda)
        work = xp.empty(max(1, lwork), dtype=a.dtype)
        f(h, self._fill(uplo), n, a.data.ptr, lda, work.data.ptr, lwork, info.data.ptr)
        return info

    def _getrf(self, a, pivoting: bool = True):
        """cuSOLVER getrf; ``pivoting=False`` passes a null pivot array (its documented
        no-pivoting mode)."""
        m, n = a.shape
        cs, xp = self._cusolver, self.xp
        info = xp.zeros((), dtype=np.int32)
        ipiv = xp.zeros(max(1, min(m, n)), dtype=np.int32)
        if m and n:
            bs = {"d": cs.dgetrf_bufferSize, "f": cs.sgetrf_bufferSize}[a.dtype.char]
            f = {"d": cs.dgetrf, "f": cs.sgetrf}[a.dtype.char]
            h = self._solver()
            lda = _lapack.ld(a)
            lwork = bs(h, m, n, a.data.ptr, lda)
            work = xp.empty(max(1, lwork), dtype=a.dtype)
            f(h, m, n, a.data.ptr, lda, work.data.ptr, ipiv.data.ptr if pivoting else 0,
              info.data.ptr)
        return ipiv[:min(m, n)].astype(np.int64) - 1, info

    def _getrf_nopiv(self, a):
        self._getrf(a, pivoting=False)

    def leaf_max(self, m: int, dtype) -> int:
        dt = np.dtype(dtype)
        return _panel_cuda.widest_leaf(m, dt.itemsize) if dt.char in "fd" else 0

    def getf2_leaf(self, a, lda, c0, w, ipiv, info) -> None:
        # float32/float64: one cooperative kernel per leaf (_panel_cuda); else the library's
        if self._leaf is False or w > self.leaf_max(a.shape[0], a.dtype):
            return super().getf2_leaf(a, lda, c0, w, ipiv, info)
        if self._leaf is None:
            self._leaf = _panel_cuda.LeafKernel(self.xp)
        from cupy_backends.cuda.api.driver import CUDADriverError
        try:
            self._leaf(a, lda, c0, w, ipiv, info)
        except CUDADriverError:    # the cooperative launch refused here (e.g. shared GPU):
            self._leaf = False     # the library's leaves from now on (nothing was written)
            super().getf2_leaf(a, lda, c0, w, ipiv, info)

    # ---- low-precision tensor-core GEMM (docs/mixed.md) -----------------------------------
    LOWP = ("fp32", "tf32", "fp16", "bf16")
    # fp32 (float32-accurate factors, two fp16 GEMMs of scaled halves): no fallback up to
    # cond 1e6, where tf32 and fp16 (about 2^-11) fall back from cond ~1e4 (LU) and cost
    # 1.3x the float64 solve; one H200, n = 65536, with the certificate: LU 2.34x / 2.18x,
    # Cholesky 2.55x / 2.21x the float64 solve at cond 1e2 / 1e6 (fp16: LU 2.89x at 1e2,
    # fallback from 1e4; docs/mixed.md, record 2026-11-28-h200-mixed-fp16x3.jsonl)
    DEFAULT_LOWP = "fp32"

    #: the update mode of float32-accurate factors (factor_dtype 'fp32'): 'fp16x3' (two
    #: fp16 GEMMs of scaled high and low halves) took LU's factorization at n = 65536 from
    #: 2.64 s (tf32x3, one TF32 GEMM of split operands) to 1.69 s, Cholesky's from 1.22 to
    #: 0.71 s, with the same corrections and backward errors (record
    #: 2026-11-28-h200-mixed-fp16x3.jsonl)
    FP32_MODE = "fp16x3"

    def lowp_mode(self, factor_dtype: str) -> str:
        return {"fp32": self.FP32_MODE}.get(factor_dtype, factor_dtype)

    def computes_in_fp32(self, compute: str) -> bool:
        return compute == "native"

    #: drivers whose working-precision ("native") loop also applies the inverse (see
    #: inverse_panel): one H200, n = 65536 in place, nb 2048, alternating, twice: LU 4.273 /
    #: 4.268 s -> 4.178 / 4.197 s, Cholesky 2.057 / 2.064 -> 2.029 / 2.036 s; n = 32768
    #: (loop forced) LU 0.678 -> 0.655 s, Cholesky 0.285 -> 0.271 s, residuals alike
    #: (benchmarks/results/2026-11-28-h200-native-inverse.jsonl). The potrf loop keeps the
    #: trsm for complex matrices (its GEMM would need the conjugate).
    NATIVE_INVERSE = frozenset({"lu", "cholesky"})

    def inverse_panel(self, compute: str, driver: str) -> bool:
        # tensor-core modes: a float32 panel trsm runs on SIMT units at ~13 TFLOP/s, the
        # inverse (0.48 ms at nb 1024) and a TF32 GEMM take 0.8 ms against its 2.6 ms for a
        # 31744-row panel on an H200 (record 2026-11-26-h200-panel-probe.jsonl)
        return compute != "native" or driver in self.NATIVE_INVERSE

    def lowp_buffers(self, compute: str, m: int, k: int, n: int):
        xp = self.xp
        if compute == "tf32x3":
            return (xp.empty(3 * m * k, np.float32), xp.empty(3 * k * n, np.float32))
        if compute == "fp16x3":
            return (xp.empty(3 * m * k, np.float16), xp.empty(3 * k * n, np.float16),
                    xp.empty(1, np.float32))
        if compute in ("fp16", "bf16"):
            dt = np.float16 if compute == "fp16" else np.uint16
            return (xp.empty(m * k, dt), xp.empty(k * n, dt), xp.empty(1, np.float32))
        return None

    def lowp_operands(self, a, b, compute: str, out=None):
        if compute == "fp16x3":
            return self._split_fp16x3(a, b, out)
        if compute not in ("fp16", "bf16"):
            return super().lowp_operands(a, b, compute, out)
        xp = self.xp
        a2, ra = self._scaled_cast(a, compute, None if out is None else out[0])
        b2, rb = self._scaled_cast(b, compute, None if out is None else out[1])
        scale = (xp.empty(1, np.float32) if out is None else out[2])[0]
        _kernels()["scale2"](ra[0], ra[1], rb[0], rb[1], scale)
        return a2, b2, scale

    def _scaled_cast(self, a, compute, buf=None):
        """(fp16 / bf16 (as uint16 bits) copy of ``a / s`` in ``a``'s memory order (into
        ``buf`` when given), (x, i)) with s the power of two > max|a| (1 for a zero or empty
        ``a``): entries < 1, so fp16 cannot overflow, and the scaling is exact; ``x[i - 1]``
        (device arrays) is an entry of largest magnitude, from which the ``scale2`` kernel
        recomputes s. Two kernels (cuBLAS isamax, one cast in memory order); a view that is
        neither C- nor F-contiguous is copied first."""
        xp = self.xp
        dt = np.float16 if compute == "fp16" else np.uint16
        a, order, flat, (amax, i) = self._float32_amax(a)
        out = xp.empty(a.shape, dt, order=order) if buf is None else \
            buf[:a.size].reshape(a.shape, order=order)
        if a.size == 0:
            return out, (amax, i)
        _kernels()["cast16" if compute == "fp16" else "castbf16"](
            flat, amax, i, out.reshape(-1, order=order))
        return out, (amax, i)

    def _float32_amax(self, a):
        """``(a, order, flat, (x, i))``: ``a`` as a C- or F-contiguous float32 array (copied
        only when it is neither or of another dtype), its memory order, its flat view, and an
        entry of largest magnitude as ``x[i - 1]`` on the device (``i = 0``: none)."""
        xp = self.xp
        if a.dtype != np.float32 or not (a.flags.c_contiguous or a.flags.f_contiguous):
            a = xp.ascontiguousarray(a, dtype=np.float32)
        order = "C" if a.flags.c_contiguous else "F"
        flat = a.reshape(-1, order=order)
        if a.size == 0:
            return a, order, flat, (flat, xp.zeros(1, np.int32))
        if a.size < 2 ** 31:      # i?amax's int32 index
            amax, i = flat, xp.empty(1, np.int32)
            h, cb = self._blas(), self._cublas
            old = cb.getPointerMode(h)
            cb.setPointerMode(h, _CUBLAS_POINTER_MODE_DEVICE)   # the index stays on the device
            try:
                cb.isamax(h, a.size, flat.data.ptr, 1, i.data.ptr)
            finally:
                cb.setPointerMode(h, old)
        else:
            amax, i = xp.abs(flat).max().reshape(1), xp.ones(1, np.int32)
        return a, order, flat, (amax, i)

    #: fp16x3: the low halves are stored times 2^LO_SHIFT (|x - hi| <= 2^-11 |x| for x / s
    #: in fp16's normal range), so that they keep fp16's 11 bits
    LO_SHIFT = 11

    def _split_fp16x3(self, a, b, out=None):
        """fp16x3 operands of ``a @ b`` (float32 ``m x k``, ``k x n``): column-major fp16
        ``A3 = [ah, ah, al]`` (m x 3k) and ``B3 = [bh; bl; bh]`` (3k x n) with ``xh`` =
        ``x / s_x`` rounded to fp16 (``s_x`` the power of two above max|x|, so nothing
        overflows) and ``xl = (x / s_x - xh) 2^LO_SHIFT`` rounded to fp16, and the device
        scalar ``s_a s_b``: ``a b = s (ah bh + 2^-LO_SHIFT (ah bl + al bh))`` up to ~2^-21
        max|a| max|b| k (two fp16 tensor-core GEMMs in :meth:`gemm_lowp`)."""
        m, k = a.shape
        n = b.shape[1]
        if out is None:
            out = self.lowp_buffers("fp16x3", m, k, n)
        A3 = out[0][:3 * m * k].reshape((m, 3 * k), order="F")
        B3 = out[1][:3 * k * n].reshape((3 * k, n), order="F")
        split = _kernels()["split16"]
        a, _, _, (amax, ia) = self._float32_amax(a)
        b, _, _, (bmax, ib) = self._float32_amax(b)
        if a.size:   # elementwise kernels walk arrays in C order: transposes of col-major views
            split(a.T, amax, ia, np.float32(2.0 ** self.LO_SHIFT),
                  A3[:, :k].T, A3[:, k:2 * k].T, A3[:, 2 * k:].T)
        if b.size:
            split(b.T, bmax, ib, np.float32(2.0 ** self.LO_SHIFT),
                  B3[:k].T, B3[2 * k:].T, B3[k:2 * k].T)
        scale = out[2][0]
        _kernels()["scale2"](amax, ia, bmax, ib, scale)
        return A3, B3, scale

    def gemm_lowp(self, transa, transb, alpha, a, b, beta, c, compute, scale=None):
        if compute == "fp16x3":
            if c.size == 0:      # (empty operands are not split: no scale)
                return
            if a.shape[1] == 0:
                c *= beta
                return
            if (transa, transb) != ("N", "N"):
                raise ValueError("gemm_lowp: fp16x3 operands are for op 'N', 'N'")
            k = a.shape[1] // 3
            self.gemm_lowp("N", "N", alpha, a[:, :k], b[:k], beta, c, "fp16", scale)
            low = self.xp.multiply(scale, np.float32(2.0 ** -self.LO_SHIFT), dtype=np.float32)
            self.gemm_lowp("N", "N", alpha, a[:, k:], b[k:], 1.0, c, "fp16", low)
            return
        if compute not in ("fp16", "bf16"):
            return super().gemm_lowp(transa, transb, alpha, a, b, beta, c, compute, scale)
        if c.size == 0:
            return
        m, n = c.shape
        k = a.shape[1] if transa == "N" else a.shape[0]
        if k == 0:
            c *= beta
            return
        if c.dtype != np.float32 or not _lapack.is_colmajor(c):
            raise TypeError("gemm_lowp needs a column-major float32 c")
        xp, cb = self.xp, self._cublas
        a, transa = _lapack.colmajor_op(a, transa)
        b, transb = _lapack.colmajor_op(b, transb)
        a, b = self._colmajor(a), self._colmajor(b)
        al = self._device_scalar(alpha) if scale is None else \
            xp.multiply(scale, np.float32(alpha), dtype=np.float32)
        be = self._device_scalar(beta)
        t = _CUDA_R_16F if compute == "fp16" else _CUDA_R_16BF
        h = self._blas()
        old = cb.getPointerMode(h)
        cb.setPointerMode(h, _CUBLAS_POINTER_MODE_DEVICE)   # alpha carries the scale
        try:
            cb.gemmEx(h, self._op(transa), self._op(transb), m, n, k, al.data.ptr,
                      a.data.ptr, t, _lapack.ld(a), b.data.ptr, t, _lapack.ld(b), be.data.ptr,
                      c.data.ptr, _CUDA_R_32F, _lapack.ld(c), _CUBLAS_COMPUTE_32F,
                      _CUBLAS_GEMM_DEFAULT)
        finally:
            cb.setPointerMode(h, old)

    def _device_scalar(self, v):
        """A float32 device scalar of value v, made once per value (never freed, so no stream
        can be handed its memory while a queued kernel still reads it)."""
        if v not in self._scalars:
            self._scalars[v] = self.xp.full((), v, np.float32)
        return self._scalars[v]

    #: columns of A per thread block in :meth:`gemv_abs` (partial sums per chunk, summed after)
    GEMV_CHUNK = 1024

    def gemv_abs(self, a, x, absolute=True, rowsums=False, squares=False):
        # one H100, n = 32768, float64, one column: 2.83 ms with the sums (3.0 TB/s, as fast
        # as cuBLAS dgemv for A x alone) against 17.2 ms for |A| |x| by slabs of xp.abs and
        # GEMMs (records 2026-11-26-h100-refine-probe-before.jsonl / -after.jsonl)
        if a.dtype not in (np.float32, np.float64) or x.dtype != a.dtype or a.ndim != 2 or \
                x.ndim != 2 or not (a.size == 0 or _lapack.is_colmajor(a)):
            return None
        xp = self.xp
        (m, n), k = a.shape, x.shape[1]
        y = xp.zeros((m, k), a.dtype)
        ya = xp.zeros((m, k), a.dtype) if absolute else None
        rowsums = rowsums or squares
        rs = xp.zeros((m, 1), a.dtype) if rowsums else None
        if m == 0 or n == 0 or (k == 0 and not rowsums):
            return y, ya, rs
        mod, c = _gemv_module(), "d" if a.dtype == np.float64 else "f"
        nc = -(-n // self.GEMV_CHUNK)
        grid, it = ((m + 255) // 256, nc), x.itemsize
        for q0 in range(0, max(k, 1), 4):
            kk = min(4, k - q0)
            xq = x[:, q0:q0 + kk] if kk > 0 else xp.zeros((n, 1), a.dtype)   # k = 0: rs only
            K = max(kk, 1)
            py = xp.empty((nc, K, m), a.dtype)
            pa = xp.empty((nc, K, m), a.dtype) if absolute else py
            rows_now = rowsums and q0 == 0
            ps = xp.empty((nc, m), a.dtype) if rows_now else py
            mode = (2 if squares else 1) if rows_now else 0
            mod.get_function(f"distla_gemv_abs_{c}{K}")(
                grid, (256,), (a, np.int64(_lapack.ld(a)), np.int64(m), np.int64(n), xq,
                               np.int64(xq.strides[0] // it), np.int64(xq.strides[1] // it),
                               np.int32(absolute), np.int32(mode), py, pa, ps,
                               np.int64(self.GEMV_CHUNK)))
            if kk > 0:
                y[:, q0:q0 + kk] = py.sum(axis=0).T
                if absolute:
                    ya[:, q0:q0 + kk] = pa.sum(axis=0).T
            if rows_now:
                rs[:, 0] = ps.sum(axis=0)
        return y, ya, rs

    def upper_max_abs(self, a, rows, cols, nb):
        # one kernel over every column, each read down to its diagonal row (the block
        # columns' max_abs calls and masked copies took 3.9 ms at n = 4096 on one H200)
        if a.dtype not in (np.float32, np.float64) or a.ndim != 2 or a.size == 0 or \
                not _lapack.is_colmajor(a):
            return super().upper_max_abs(a, rows, cols, nb)
        xp = self.xp
        lim = xp.asarray(np.searchsorted(rows, cols, side="right").astype(np.int64))
        m, n = a.shape
        sums, maxes = xp.empty(n, a.dtype), xp.empty(n, a.dtype)
        c = "d" if a.dtype == np.float64 else "f"
        _colabs_module().get_function(f"distla_colabs_upto_{c}")(
            (min(n, 65535),), (256,), (a, np.int64(_lapack.ld(a)), lim, np.int64(n), sums,
                                       maxes))
        return maxes.max()

    def max_abs(self, a):
        # CuPy reduces a non-contiguous array to one value with one thread block: max/min
        # of U's block columns took 1 s at n = 32768 on one H200 (30 ms per 31744 x 1024
        # view). Per column first (many blocks; one kernel for column-major a), then the row.
        if a.size == 0:
            return super().max_abs(a)
        return self.column_abs_stats(a)[1].max()

    def column_abs_stats(self, a):
        # one kernel, no temporaries: the slabs of xp.abs / sum / max cost ~3 ms of launches
        # and syncs before an n = 4096 LU whose cuSOLVER call takes 13.6 ms (one H200,
        # benchmarks/gpu/small_n_probe.py)
        if a.dtype not in (np.float32, np.float64) or a.ndim != 2 or \
                not (a.size == 0 or _lapack.is_colmajor(a)):
            return super().column_abs_stats(a)
        xp = self.xp
        m, n = a.shape
        sums, maxes = xp.zeros(n, a.dtype), xp.zeros(n, a.dtype)
        if m and n:
            c = "d" if a.dtype == np.float64 else "f"
            _colabs_module().get_function(f"distla_colabs_{c}")(
                (min(n, 65535),), (256,), (a, np.int64(_lapack.ld(a)), np.int64(m),
                                           np.int64(n), sums, maxes))
        return sums, maxes

    def zero_above(self, a, rows, cols) -> None:
        # one kernel over the local matrix instead of a fill and a tril per block column
        # (12 ms at n = 32768, nb 1024 on one H200; benchmarks/gpu/small_n_probe.py)
        if a.size == 0:
            return
        xp = self.xp
        r, c = xp.asarray(rows, dtype=np.int64), xp.asarray(cols, dtype=np.int64)
        # elementwise kernels walk arrays in C order: the transpose of a column-major view
        at = a.T if _lapack.is_colmajor(a) else a
        if at is a:
            _kernels()["zero_above_c"](r, c, np.int64(a.shape[1]), a)
        else:
            _kernels()["zero_above"](r, c, np.int64(a.shape[0]), at)

    def split_tf32x3(self, a, b, out=None):
        """For float32 ``a (m x k)``, ``b (k x n)`` returns column-major ``A3 = [ah, ah, al]``
        (m x 3k) and ``B3 = [bh; bl; bh]`` (3k x n), ``xh`` = x rounded to TF32 and
        ``xl = x - xh``, so that ``A3 B3 = ah bh + ah bl + al bh = a b`` up to ~2^-22 |a||b|.
        Use with ``gemm(..., tf32=True)``."""
        if not (a.dtype == np.float32 and b.dtype == np.float32):
            raise TypeError("split_tf32x3 needs float32 arrays on a GPU backend")
        xp = self.xp
        m, k = a.shape
        n = b.shape[1]
        if out is None:
            A3 = xp.empty((m, 3 * k), np.float32, order="F")
            B3 = xp.empty((3 * k, n), np.float32, order="F")
        else:
            A3 = out[0][:3 * m * k].reshape((m, 3 * k), order="F")
            B3 = out[1][:3 * k * n].reshape((3 * k, n), order="F")
        split = _kernels()["tf32"]
        # elementwise kernels walk arrays in C order: pass transposes of column-major views
        split(self._colmajor(a).T, A3[:, :k].T, A3[:, k:2 * k].T, A3[:, 2 * k:].T)
        split(self._colmajor(b).T, B3[:k].T, B3[2 * k:].T, B3[k:2 * k].T)
        return A3, B3

    # ---- row movement and elementwise --------------------------------------------------------
    def copy(self, out, a) -> None:
        # CuPy walks an elementwise kernel's index space in C order: copy the transposed
        # (row-major) views of column-major 2-D arrays so that neighbouring threads touch
        # neighbouring addresses
        if out.ndim == 2 and getattr(a, "ndim", 0) == 2:
            out.T[...] = a.T
        else:
            out[...] = a

    def take_rows(self, a, idx, out) -> None:
        if out.size:
            flat, ld = _flat(a)
            _kernels()["gather"](flat, idx.astype(np.int64, copy=False), ld, len(idx), out.T)

    def put_rows(self, a, idx, vals) -> None:
        if vals.size:
            flat, ld = _flat(a)
            _kernels()["scatter"](vals.T, idx.astype(np.int64, copy=False), ld, len(idx), flat)

    def take(self, a, idx, out) -> None:
        self.xp.take(a, idx, axis=0, out=out)

    def axpby(self, x, p, a, b) -> None:
        _kernels()["axpby"](*_colmajor_order(a, b, p, x))

    def butterfly_quad(self, a00, a01, a10, a11, ut, ub, vl, vr) -> None:
        _kernels()["quad"](*_colmajor_order(ut, ub, vl, vr, a00, a01, a10, a11))


def _flat(a):  # pragma: no cover - needs a GPU
    """A column-major CuPy view as a 1-D array over its memory (from a[0, 0] to its last
    element) and its leading dimension: element (i, j) is ``flat[i + j ld]``."""
    import cupy
    isz = a.itemsize
    if a.shape[0] > 1 and a.strides[0] != isz:
        raise ValueError("take_rows/put_rows need a column-major view")
    ld = a.strides[1] // isz if a.shape[1] > 1 else a.shape[0]
    size = (a.shape[1] - 1) * ld + a.shape[0]
    return cupy.ndarray((size,), dtype=a.dtype, memptr=a.data), ld


def _colmajor_order(*args):
    """Kernel arguments transposed when all are 2-D (or scalars): CuPy elementwise kernels walk
    their index space in C order, so on column-major views the transposes make neighbouring
    threads touch neighbouring addresses."""
    if all(getattr(v, "ndim", 0) in (0, 2) for v in args):
        return tuple(v.T if getattr(v, "ndim", 0) == 2 else v for v in args)
    return args


# the power of two s > |m| (1 when m is 0 or not finite): x / s is exact and below 1 in
# magnitude for every |x| <= |m|
_POW2 = """
__device__ float pow2_above(float m) {
    m = fabsf(m);
    if (!(m > 0.0f) || isinf(m)) return 1.0f;
    int e;
    frexpf(m, &e);
    return ldexpf(1.0f, e);
}
"""
# the entry a[ia - 1] (1-based, as cuBLAS i?amax returns it; 0: none)
_AT = "(ia[0] > 0 ? a[ia[0] - 1] : 0.0f)"


# y = A x, ya = |A| |x| (absolute), rs = |A| 1 (rowsums 1; rowsums 2: the squares' sums,
# A.^2 1) for column-major A (m x n, leading dimension ld) and K = 1..4 columns of x
# (element (j, q) at x[j sxj + q sxc]): thread i of
# block column c sums row i over columns [c chunk, (c + 1) chunk), so a warp reads 32
# consecutive entries of one column; the partial sums (c, q, i) are added over c afterwards
# (no atomics: the result does not depend on scheduling)
_GEMV_SRC = r"""
template <typename T, int K>
__device__ void gemv_abs(const T* A, long long ld, long long m, long long n, const T* x,
                         long long sxj, long long sxc, int absolute, int rowsums,
                         T* py, T* pa, T* ps, long long chunk) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    long long c = blockIdx.y;
    if (i >= m) return;
    long long j0 = c * chunk, j1 = min(n, j0 + chunk);
    T s[K], sa[K], r = 0;
    #pragma unroll
    for (int q = 0; q < K; ++q) { s[q] = 0; sa[q] = 0; }
    const T* p = A + i + j0 * ld;
    #pragma unroll 4
    for (long long j = j0; j < j1; ++j, p += ld) {
        T v = *p;
        T av = v < 0 ? -v : v;
        r += rowsums == 2 ? v * v : av;
        #pragma unroll
        for (int q = 0; q < K; ++q) {
            T xv = x[j * sxj + q * sxc];
            s[q] += v * xv;
            sa[q] += av * (xv < 0 ? -xv : xv);
        }
    }
    #pragma unroll
    for (int q = 0; q < K; ++q) {
        py[(c * K + q) * m + i] = s[q];
        if (absolute) pa[(c * K + q) * m + i] = sa[q];
    }
    if (rowsums) ps[c * m + i] = r;
}
#define DISTLA_GEMV_ABS(NAME, T, K) \
extern "C" __global__ void NAME(const T* A, long long ld, long long m, long long n, \
        const T* x, long long sxj, long long sxc, int absolute, int rowsums, T* py, T* pa, \
        T* ps, long long chunk) { \
    gemv_abs<T, K>(A, ld, m, n, x, sxj, sxc, absolute, rowsums, py, pa, ps, chunk); \
}
DISTLA_GEMV_ABS(distla_gemv_abs_d1, double, 1)
DISTLA_GEMV_ABS(distla_gemv_abs_d2, double, 2)
DISTLA_GEMV_ABS(distla_gemv_abs_d3, double, 3)
DISTLA_GEMV_ABS(distla_gemv_abs_d4, double, 4)
DISTLA_GEMV_ABS(distla_gemv_abs_f1, float, 1)
DISTLA_GEMV_ABS(distla_gemv_abs_f2, float, 2)
DISTLA_GEMV_ABS(distla_gemv_abs_f3, float, 3)
DISTLA_GEMV_ABS(distla_gemv_abs_f4, float, 4)
"""


# per column j of column-major A (m x n, leading dimension ld): cs[j] = sum_i |a_ij| and
# cm[j] = max_i |a_ij| (NaN propagates into both). Block b handles columns b, b + gridDim.x,
# ...; its threads stride down the column (a warp reads 32 consecutive entries) and combine
# in shared memory in a fixed order (the result does not depend on scheduling).
_COLABS_SRC = r"""
// per column j of the column-major A: sum and max of |a_ij| over its first m rows, or over
// its first lim[j] rows when lim is given (the rows on or above the diagonal of a factor)
template <typename T>
__device__ void colabs(const T* A, long long ld, long long m, const long long* lim,
                       long long n, T* cs, T* cm) {
    __shared__ T ss[256], sm[256];
    for (long long j = blockIdx.x; j < n; j += gridDim.x) {
        const T* p = A + j * ld;
        const long long mj = lim ? lim[j] : m;
        T s = 0, mx = 0;
        for (long long i = threadIdx.x; i < mj; i += blockDim.x) {
            T v = p[i];
            v = v < 0 ? -v : v;
            s += v;
            if (v > mx || v != v) mx = v;
        }
        ss[threadIdx.x] = s; sm[threadIdx.x] = mx;
        __syncthreads();
        for (int h = blockDim.x / 2; h > 0; h /= 2) {
            if (threadIdx.x < h) {
                T o = sm[threadIdx.x + h];
                ss[threadIdx.x] += ss[threadIdx.x + h];
                if (o > sm[threadIdx.x] || o != o) sm[threadIdx.x] = o;
            }
            __syncthreads();
        }
        if (threadIdx.x == 0) { cs[j] = ss[0]; cm[j] = sm[0]; }
        __syncthreads();
    }
}
extern "C" __global__ void distla_colabs_d(const double* A, long long ld, long long m,
        long long n, double* cs, double* cm) { colabs<double>(A, ld, m, nullptr, n, cs, cm); }
extern "C" __global__ void distla_colabs_f(const float* A, long long ld, long long m,
        long long n, float* cs, float* cm) { colabs<float>(A, ld, m, nullptr, n, cs, cm); }
extern "C" __global__ void distla_colabs_upto_d(const double* A, long long ld,
        const long long* lim, long long n, double* cs, double* cm) {
    colabs<double>(A, ld, 0, lim, n, cs, cm); }
extern "C" __global__ void distla_colabs_upto_f(const float* A, long long ld,
        const long long* lim, long long n, float* cs, float* cm) {
    colabs<float>(A, ld, 0, lim, n, cs, cm); }
"""


@functools.lru_cache(maxsize=None)
def _colabs_module():  # pragma: no cover - needs a GPU
    import cupy
    return cupy.RawModule(code=_COLABS_SRC, options=("-std=c++14",))


@functools.lru_cache(maxsize=None)
def _gemv_module():  # pragma: no cover - needs a GPU
    import cupy
    return cupy.RawModule(code=_GEMV_SRC, options=("-std=c++14",))


@functools.lru_cache(maxsize=None)
def _kernels():  # pragma: no cover - needs a GPU
    """The fused CuPy kernels (compiled on first use; ``distla warmup`` compiles them)."""
    import cupy
    pre = "const ptrdiff_t r = i % nr, c = i / nr; const ptrdiff_t k = idx[r] + c * ld;"
    ek = cupy.ElementwiseKernel
    return {
        # (columns, selected rows) in C order: consecutive threads move consecutive rows
        "gather": ek("raw T a, raw int64 idx, int64 ld, int64 nr", "T out",
                     pre + " out = a[k];", "distla_gather_rows"),
        "scatter": ek("T v, raw int64 idx, int64 ld, int64 nr", "raw T a",
                      pre + " a[k] = v;", "distla_scatter_rows"),
        # a[i, j] = 0 where rows[i] < cols[j]; "zero_above" walks a's transpose (column-major
        # a: i = column * nr + row), "zero_above_c" a C-ordered a (i = row * nc + column)
        "zero_above": ek("raw int64 rows, raw int64 cols, int64 nr", "T a",
                         "if (rows[i % nr] < cols[i / nr]) a = 0;", "distla_zero_above"),
        "zero_above_c": ek("raw int64 rows, raw int64 cols, int64 nc", "T a",
                           "if (rows[i / nc] < cols[i % nc]) a = 0;", "distla_zero_above_c"),
        # output parameters are references: reading x in the body updates it in place
        "axpby": ek("T a, T b, T p", "T x", "x = a * x + b * p", "distla_rbt_axpby"),
        "quad": ek("T ut, T ub, T vl, T vr", "T a00, T a01, T a10, T a11",
                   "T b1 = a00 + a01; T b2 = a10 + a11; T b3 = a00 - a01; T b4 = a10 - a11; "
                   "a00 = ut * vl * (b1 + b2); a01 = ut * vr * (b3 + b4); "
                   "a10 = ub * vl * (b1 - b2); a11 = ub * vr * (b3 - b4);", "distla_rbt_quad"),
        # x / s with s = pow2_above(max|a|), max|a| = |a[ia - 1]| (_AT); castbf16: to bfloat16
        # bits, rounded to nearest even (CuPy has no bfloat16 dtype)
        "cast16": ek("float32 x, raw float32 a, raw int32 ia", "float16 y",
                     "y = (float16)(x / pow2_above(" + _AT + "))", "distla_cast_fp16",
                     preamble=_POW2),
        "castbf16": ek("float32 x, raw float32 a, raw int32 ia", "uint16 y",
                       "unsigned int u = __float_as_uint(x / pow2_above(" + _AT + ")); "
                       "y = (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);",
                       "distla_cast_bf16", preamble=_POW2),
        "scale2": ek("raw float32 a, raw int32 ia, raw float32 b, raw int32 jb", "float32 s",
                     "s = pow2_above(" + _AT + ") * "
                     "pow2_above(jb[0] > 0 ? b[jb[0] - 1] : 0.0f)",
                     "distla_cast_scale", preamble=_POW2),
        # fp16x3: v = x / s (s = pow2_above(max|x|)); hi = fp16(v), lo = fp16((v - hi) sh)
        "split16": ek("float32 x, raw float32 a, raw int32 ia, float32 sh",
                      "float16 hi, float16 hi2, float16 lo",
                      "const float v = x / pow2_above(" + _AT + "); const float16 h = "
                      "(float16)v; hi = h; hi2 = h; lo = (float16)((v - (float)h) * sh);",
                      "distla_split_fp16", preamble=_POW2),
        "tf32": ek("float32 x", "float32 hi, float32 hi2, float32 lo",
                   "const float h = __uint_as_float((__float_as_uint(x) + 0x1000u) & "
                   "0xffffe000u); hi = h; hi2 = h; lo = x - h;", "distla_split_tf32"),
    }


class _PinnedStaging:  # pragma: no cover - needs a GPU
    """:meth:`Backend.staging` on GPU ranks: two pinned host buffers taken in turn, so that
    ``fill`` of one piece overlaps the asynchronous copy of the previous one to the device
    (on a stream of its own; pieces that need a cast or another layout land in a device
    buffer first, then a copy kernel on that stream puts them in place)."""

    def __init__(self, cp):
        self.cp = cp
        self.stream = cp.cuda.Stream(non_blocking=True)
        self.stream.wait_event(cp.cuda.get_current_stream().record())   # dest's allocation
        self.slots = [_Slot(cp), _Slot(cp)]
        self.turn = 0

    def __call__(self, dest, fill, dtype, order: str) -> None:
        dtype = np.dtype(dtype)
        slot = self.slots[self.turn % 2]
        self.turn += 1
        if slot.done is not None:
            slot.done.synchronize()              # its previous copy has left the buffer
        host = slot.host.view(dest.shape, dtype, order)
        fill(host)
        if host.size == 0:
            return
        s = self.stream
        with s:
            if dest.dtype == dtype and _contiguous(dest, order):
                dest.data.copy_from_host_async(host.ctypes.data, host.nbytes, s)
            else:
                tmp = slot.device(dest.shape, dtype, order)
                tmp.data.copy_from_host_async(host.ctypes.data, host.nbytes, s)
                dest[...] = tmp
            slot.done = s.record()


class _Slot:  # pragma: no cover - needs a GPU
    """One stage of :meth:`GpuBackend.staging`: a pinned host buffer, a device buffer for
    pieces that need a cast or another layout, and the event of its last copy."""

    def __init__(self, cp):
        self.cp = cp
        self.host = HostBuffer(cp.cuda.alloc_pinned_memory)
        self.done = None
        self._dev = None

    def device(self, shape, dtype, order):
        nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
        if self._dev is None or self._dev.size < nbytes:
            self._dev = None
            self._dev = self.cp.empty(max(nbytes, 1), self.cp.uint8)
        return self._dev[:nbytes].view(dtype).reshape(shape, order=order)
