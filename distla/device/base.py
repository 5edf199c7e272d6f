"""The interface both backends implement (:class:`Backend`), with the argument handling they
share. Kernels work in place on 2-D column-major views (a sub-block of a rank's local matrix,
with its leading dimension), BLAS-style; a non-column-major output goes through a copy.
Nothing here communicates; nothing is collective."""
from __future__ import annotations

import contextlib

import numpy as np

from ..trace import library
from . import _lapack
from .streams import HostStream

# the kernels and device reads a tracer counts as library time (distla.trace.library)
LIBRARY_CALLS = ("copy", "gemm", "syrk", "trsm", "potrf", "getrf", "getrf_nopiv", "laswp",
                 "split_tf32x3", "take_rows", "put_rows", "take", "axpby", "butterfly_quad",
                 "to_host", "synchronize", "info_value", "infos_to_host")


def _mark_library(cls) -> None:
    for name in LIBRARY_CALLS:
        if name in cls.__dict__:
            setattr(cls, name, library(cls.__dict__[name]))


def _diagonal_bands(xp, rows, cols, nb):
    """Yield ``(cs, w, first, last, I, J)`` for each block of ``nb`` local columns of a local
    matrix with increasing global ``rows`` and ``cols`` (host arrays): its columns
    ``cs:cs + w``; ``first`` the local rows wholly above its diagonal band (global row below
    its first column), ``last`` the end of the band (global row at most its last column);
    ``I`` (band rows x 1) and ``J`` (1 x w) the band's global indices as device arrays, for a
    mask of either triangle (None when the band is empty). Local."""
    for cs in range(0, len(cols), nb):
        w = min(nb, len(cols) - cs)
        first = int(np.searchsorted(rows, cols[cs]))
        last = int(np.searchsorted(rows, cols[cs + w - 1], side="right"))
        I = J = None
        if last > first:
            I = xp.asarray(rows[first:last]).reshape(-1, 1)
            J = xp.asarray(cols[cs:cs + w]).reshape(1, -1)
        yield cs, w, first, last, I, J


class Backend:
    """Local storage, kernels and streams for one device kind. ``xp`` is numpy or cupy;
    ``name`` 'cpu' or 'gpu'. Subclasses implement the ``_kernel`` methods."""

    name = "?"
    is_gpu = False
    xp = np
    #: whether the local storage is host memory that LAPACK reads in place (one rank's
    #: condition estimate is then LAPACK's own: distla.linalg.condition.lapack_rcond)
    host_lapack = True
    #: whether a triangular solve with a few right-hand sides costs about what one column
    #: does (memory bound: the factor is read once), so that extra columns ride along
    #: (distla.linalg.condition.solve_and_rcond)
    fuse_few_rhs = True
    #: the condition estimator's block size (Higham-Tisseur t; 1 is LAPACK's dlacn2). One
    #: vector: a one-column sweep is a BLAS gemv per block, faster than the skinny GEMMs of
    #: two (2 CPU ranks, n = 8192: the estimate beside a Cholesky solve 0.20 -> 0.15 s), and
    #: its estimates stay within 2x of ||A^-1||_1 on the test matrix types
    rcond_vectors = 1
    #: whether a one-process triangular solve first looks for its right-hand sides' zero
    #: rows, to solve only from the first nonzero one (a scan of host memory; on GPU ranks
    #: it would be a device read per solve)
    scan_zero_rows = True
    #: whether few-column one-process triangular solves inside
    #: :func:`distla.pblas.inverted_diagonal_solves` (condition estimates, refinement) use
    #: inverted diagonal blocks (:meth:`trsm_inverse_blocks`): GEMVs that read the factor
    #: once at memory speed, where the library's trsv/trsm is latency-bound
    inverse_block_solves = False
    #: ... with diagonal blocks of at least this order (a multiple of the matrix's block
    #: size) from this matrix order on: wider blocks mean fewer, longer GEMVs per sweep
    #: against a costlier inversion, done once per factor (None: the matrix's block size)
    inverse_block, inverse_block_from = None, 0

    def inverse_block_size(self, n: int, nb: int) -> int:
        """The order of the diagonal blocks :func:`distla.pblas.inverted_diagonal_solves`
        inverts for an ``n x n`` one-process factor with blocks of ``nb`` (on one process
        any width serves: the blocks need not follow the distribution's). Local."""
        if self.inverse_block is None or n < self.inverse_block_from or \
                nb >= self.inverse_block:
            return nb
        return nb * -(-self.inverse_block // nb)

    def __init__(self):
        self._identities = {}      # dtype -> identity matrix (triangular_inverse)

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        _mark_library(cls)

    # ---- first use ---------------------------------------------------------------------------
    def preload(self, dtype=np.float64) -> None:
        """Load the libraries and kernels a solve uses by running each once on a tiny
        problem (CPU ranks: nothing to load). Not collective."""

    def preload_async(self, dtype=np.float64):
        """:meth:`preload` in a background thread, so that a process's first-use costs
        (GPU ranks: loading cuBLAS, cuSOLVER and distla's kernels, ~0.4 s on an H200) overlap
        what the caller does meanwhile, typically reading the matrix; returns an object with
        ``join()`` (call it before the first device work of the solve), or None where there
        is nothing to load or ``DISTLA_PRELOAD=0``. Errors in the thread are dropped: the
        real calls raise them. Not collective."""
        return None

    @contextlib.contextmanager
    def preloading(self, dtype=np.float64):
        """Context manager: the block (e.g. reading the matrix) runs beside
        :meth:`preload_async`, which is joined on leaving it. Not collective."""
        loader = self.preload_async(dtype)
        try:
            yield
        finally:
            if loader is not None:
                loader.join()

    # ---- storage -------------------------------------------------------------------------
    def free_memory(self) -> int | None:
        """Bytes this rank's device can still allocate (None: not known, CPU ranks). Local."""
        return None

    def empty(self, shape, dtype=np.float64):
        return self.xp.empty(shape, dtype=dtype, order="F")

    def zeros(self, shape, dtype=np.float64):
        return self.xp.zeros(shape, dtype=dtype, order="F")

    def asarray(self, a, dtype=None):
        """``a`` (NumPy, CuPy or a list) on this device, column-major."""
        raise NotImplementedError

    def to_host(self, a) -> np.ndarray:
        """``a`` as a NumPy array (a copy from the GPU; ``a`` itself on the CPU)."""
        raise NotImplementedError

    def owns(self, a) -> bool:
        """True when ``a`` is an array of this device's namespace."""
        return isinstance(a, self.xp.ndarray)

    def synchronize(self) -> None:
        """Wait for all work queued on the current stream."""

    def device_id(self) -> int:
        """The current device's ordinal (-1 on CPU ranks): a cache key for device arrays."""
        return -1

    def info_value(self, info) -> int:
        """A LAPACK info (host int or device scalar) as a host int."""
        return int(info)

    def infos_to_host(self, infos) -> np.ndarray:
        """Many infos (a list of host ints or device scalars) in one device read."""
        return np.array([int(i) for i in infos], dtype=np.int64)

    # ---- host data into device storage, a piece at a time --------------------------------
    @contextlib.contextmanager
    def staging(self):
        """Context manager for filling this backend's storage from host data piece by piece
        (a file read slab by slab). Yields ``put``: ``put(dest, fill, dtype, order)`` calls
        ``fill(buf)`` to write a host array shaped like ``dest``, of ``dtype`` and layout
        ``order`` ('C' or 'F', e.g. the file's), whose values then land in ``dest`` (a view
        of this backend's storage), cast to its dtype; every piece is in place on leaving the
        block. Here (CPU ranks) ``fill`` writes into ``dest`` itself when dtype and layout
        agree, else into one reused buffer. Not collective."""
        yield HostStaging()

    # ---- streams (in-order queues; host queues on the CPU) --------------------------------
    def stream(self, priority: str = "default"):
        """A new stream: 'high' priority lets its kernels (panels, messages) start before a
        big GEMM's queued blocks on another stream. See :mod:`distla.device.streams`."""
        return HostStream()

    def current_stream(self):
        """The stream work is queued on now."""
        return HostStream.CURRENT

    def copy(self, out, a) -> None:
        """``out[...] = a`` (a memory copy; one kernel on GPU ranks)."""
        out[...] = a

    # ---- BLAS/LAPACK-style kernels (in place on column-major views) ------------------------
    def gemm(self, transa, transb, alpha, a, b, beta, c, tf32: bool = False) -> None:
        """``c = alpha op(a) op(b) + beta c``. ``tf32=True``: float32 through TF32 tensor
        cores where the device has them (pair with :meth:`split_tf32x3`); ignored elsewhere."""
        if c.size == 0:
            return
        k = a.shape[1] if transa == "N" else a.shape[0]
        if k == 0:
            if beta == 0:
                c[...] = 0  # BLAS: beta = 0 means C is not read (NaN/Inf in C are dropped)
            else:
                c *= beta
            return
        a, transa = _lapack.colmajor_op(a, transa)    # row-major operands: no copy
        b, transb = _lapack.colmajor_op(b, transb)
        self._call(self._gemm, c, transa, transb, alpha, a, b, beta, tf32)

    def triangular_inverse(self, t, out, uplo: str = "L", diag: str = "N") -> None:
        """``out = t^-1`` for the triangular ``k x k`` view ``t`` (``uplo``, ``diag`` as in
        trsm): the identity solved with ``t``, one TRSM (the tensor-core panels' inverse,
        applied after as a GEMM: docs/mixed.md). The identity is made once per dtype and
        size class and kept. Local."""
        k = t.shape[0]
        eye = self._identities.get(out.dtype)
        if eye is None or eye.shape[0] < k:
            eye = self._identities[out.dtype] = self.asarray(np.eye(k, dtype=out.dtype))
        self.copy(out, eye[:k, :k])
        self.trsm("L", uplo, "N", diag, 1.0, t, out)

    # ---- triangular solves by inverted diagonal blocks (docs/condition.md) ----------------
    #: the batched triangular inversion halves blocks down to at most this size (when nb's
    #: factors of two allow), inverted as general matrices in one batched call
    INVERSE_LEAF = 64

    def triangular_block_inverses(self, t, nb: int, lower: bool, unit: bool):
        """The inverses of the ``nb x nb`` diagonal blocks of the square triangular view
        ``t`` (``lower``; ``unit``: unit diagonal, as trsm's diag 'U'; the other triangle of
        ``t`` is not read), as an array ``S`` of shape ``(nblk, nb, nb)`` with ``S[k].T`` the
        F-ordered inverse of block k (the last block padded with the identity). All blocks at
        once, bottom up: the diagonal leaves of every block inverted in one batched call, then
        ``inv([[A, 0], [B, C]]) = [[A^-1, 0], [-C^-1 B A^-1, C^-1]]`` for all blocks of each
        size at once (batched GEMMs on strided views). Local."""
        xp, n = self.xp, t.shape[0]
        nblk, it = -(-n // nb), np.dtype(t.dtype).itemsize
        M = xp.zeros((nblk, nb, nb), t.dtype)        # the blocks, transposed when upper
        full, ld = n // nb, _lapack.ld(t)
        if full:
            V = xp.lib.stride_tricks.as_strided(t, (full, nb, nb),
                                                ((ld + 1) * nb * it, it, ld * it))
            M[:full] = V if lower else V.transpose(0, 2, 1)
        if full < nblk:
            blk = t[full * nb:, full * nb:]
            w = n - full * nb
            M[full, :w, :w] = blk if lower else blk.T
            M[full, xp.arange(w, nb), xp.arange(w, nb)] = 1   # identity padding
        M = xp.tril(M, -1 if unit else 0)
        if unit:
            M[:, xp.arange(nb), xp.arange(nb)] = 1
        inv = self._lower_inverse_batch(M)    # inv[k] = (lower block k)^-1, lower
        # S[k].T (F-order) = inverse of block k: (lower^-1) for lower, (lower^-1)^T for upper
        return xp.ascontiguousarray(inv.transpose(0, 2, 1) if lower else inv)

    def _lower_inverse_batch(self, M):
        """Inverses of the lower triangular ``M[k]`` (C-contiguous ``(nblk, nb, nb)``)."""
        xp, (nblk, nb, _) = self.xp, M.shape
        it = np.dtype(M.dtype).itemsize
        leaf = nb
        while leaf % 2 == 0 and leaf > self.INVERSE_LEAF:
            leaf //= 2

        def diag(X, s):       # view: X's diagonal s x s sub-blocks, (nblk, nb / s, s, s)
            return xp.lib.stride_tricks.as_strided(
                X, (nblk, nb // s, s, s), (nb * nb * it, (s * nb + s) * it, nb * it, it))
        inv = xp.zeros_like(M)
        diag(inv, leaf)[...] = xp.tril(xp.linalg.inv(xp.ascontiguousarray(diag(M, leaf))))
        s = leaf
        while s < nb:
            Mb, Ib = diag(M, 2 * s), diag(inv, 2 * s)
            Ib[..., s:, :s] = -(Ib[..., s:, s:] @ (Mb[..., s:, :s] @ Ib[..., :s, :s]))
            s *= 2
        return inv

    def trsm_inverse_blocks(self, t, S, nb: int, lower: bool, trans: bool, b):
        """``op(t)^-1 b`` for the square triangular view ``t`` (``lower``; op = transpose
        when ``trans``) and a few columns ``b`` (n x k, column-major; overwritten by partial
        sums), given ``S = triangular_block_inverses(t, nb, lower, unit)``: block by block,
        ``x_k = op(t_kk)^-1 b_k`` (one GEMM with the inverse). Both forms read t's block
        column k outside its diagonal block, whose columns are contiguous: without ``trans``,
        after x_k, the rows still to solve are updated with it (``b_r -= t[r, k] x_k``); with
        ``trans``, before x_k, b_k takes the rows already solved (``b_k -= t[s, k]^T x_s``).
        (Updating with t's block row instead, ``nb``-element pieces of every column, read an
        H200's memory at a third of the rate at n = 65536, docs/condition.md.) Returns x (a
        new column-major array). Less accurate than trsm for ill-conditioned diagonal
        blocks: for estimates and preconditioners. Local."""
        n, nblk = t.shape[0], S.shape[0]
        x = self.empty(b.shape, b.dtype)
        forward = lower != trans
        op = "T" if trans else "N"
        for kb in (range(nblk) if forward else range(nblk - 1, -1, -1)):
            k0, k1 = kb * nb, min(n, kb * nb + nb)
            inv = S[kb].T[:k1 - k0, :k1 - k0]
            r0, r1 = (k1, n) if lower else (0, k0)     # t's block column beside block k
            if trans and r1 > r0:                      # the rows solved before block k
                self.gemm("T", "N", -1.0, t[r0:r1, k0:k1], x[r0:r1], 1.0, b[k0:k1])
            self.gemm(op, "N", 1.0, inv, b[k0:k1], 0.0, x[k0:k1])
            if not trans and r1 > r0:                  # the rows to solve after it
                self.gemm("N", "N", -1.0, t[r0:r1, k0:k1], x[k0:k1], 1.0, b[r0:r1])
        return x

    def syrk(self, uplo, trans, alpha, a, beta, c) -> None:
        """``c = alpha a a^T + beta c`` (trans 'N') on the ``uplo`` triangle."""
        if c.size:
            a, trans = _lapack.colmajor_op(a, trans)      # row-major a: no copy
            self._call(self._syrk, c, uplo, trans, alpha, a, beta)

    def trsm(self, side, uplo, transa, diag, alpha, a, b) -> None:
        """``b = alpha op(a)^-1 b`` (side 'L') or ``alpha b op(a)^-1`` (side 'R')."""
        if b.size:
            self._call(self._trsm, b, side, uplo, transa, diag, alpha, a)

    def potrf(self, uplo, a):
        """Cholesky of the square view ``a`` in place. Returns LAPACK's info: an int on CPU, a
        device int32 scalar on GPU (read later with :meth:`info_value`, no sync now)."""
        return self._call(self._potrf, a, uplo)

    def getrf(self, a):
        """LU with partial pivoting of the view ``a`` in place. Returns (pivots, info):
        pivots 0-based int64 (row i was swapped with pivots[i]), on the device."""
        return self._call(self._getrf, a)

    def getrf_recursive(self, a, leaf: int = 32):
        """LU with partial pivoting of the ``m x n`` (m >= n) column-major view ``a`` in place,
        by recursive halving (docs/perf.md, "Recursive panels"): factor the left half, solve
        the right half's top rows, one GEMM on the rest, factor the right half. Leaves of at
        most ``leaf`` columns are factored by :meth:`getf2_leaf`, which applies each
        interchange to the whole rows of ``a``, so no level applies interchanges of its own.
        Returns ``(pivots, info)`` as :meth:`getrf` (on the device on GPU ranks; nothing is read
        back to the host)."""
        m, n = a.shape
        leaf = min(leaf, self.leaf_max(m, a.dtype))
        if m < n or n == 0 or leaf < 1 or not _lapack.is_colmajor(a):
            return self.getrf(a)
        ipiv = self.xp.zeros(n, dtype=np.int32)
        info = self.xp.zeros((), dtype=np.int32)
        self._getrf_halves(a, _lapack.ld(a), 0, n, leaf, ipiv, info)
        return ipiv.astype(np.int64), (info if self.is_gpu else int(info))

    def _getrf_halves(self, a, lda, c0, w, leaf, ipiv, info) -> None:
        # columns c0 .. c0 + w of getrf_recursive (a method, not a recursive closure: a closure
        # would keep a, a view of the whole matrix, alive in a reference cycle after the call)
        if w <= leaf:
            return self.getf2_leaf(a, lda, c0, w, ipiv, info)
        h = w // 2
        self._getrf_halves(a, lda, c0, h, leaf, ipiv, info)
        top, right = a[c0:c0 + h], slice(c0 + h, c0 + w)
        self.trsm("L", "L", "N", "U", 1.0, top[:, c0:c0 + h], top[:, right])
        self.gemm("N", "N", -1.0, a[c0 + h:, c0:c0 + h], top[:, right], 1.0, a[c0 + h:, right])
        self._getrf_halves(a, lda, c0 + h, w - h, leaf, ipiv, info)

    def leaf_max(self, m: int, dtype) -> int:
        """The widest leaf :meth:`getf2_leaf` factors for an m-row panel of ``dtype`` (0: the
        recursive panel is not worth it here; :meth:`getrf_recursive` calls getrf)."""
        return 1 << 30

    def getf2_leaf(self, a, lda: int, c0: int, w: int, ipiv, info) -> None:
        """The leaf of :meth:`getrf_recursive`: partial pivoting of columns ``c0 .. c0 + w`` of
        the column-major panel ``a`` (rows ``c0`` and below), each interchange applied to the
        whole rows of ``a``. Writes ``ipiv[c0 + i]`` (0-based panel rows) and, for the first
        zero pivot of the panel, ``info`` (1-based column). Here: the library's getrf on the
        leaf, then its interchanges on the other columns."""
        piv, inf = self.getrf(a[c0:, c0:c0 + w])
        piv = np.asarray(self.to_host(piv), dtype=np.int64)
        inf = int(self.info_value(inf))
        if inf and not int(self.info_value(info)):
            info[...] = c0 + inf
        for cols in (slice(0, c0), slice(c0 + w, a.shape[1])):
            if a[c0:, cols].size:
                self.laswp(a[c0:, cols], piv, 0)
        ipiv[c0:c0 + w] = self.xp.asarray(piv + c0, dtype=ipiv.dtype)

    def getrf_nopiv(self, a) -> None:
        """LU without pivoting of the ``m x n`` (m >= n) view ``a`` in place (unit L below the
        diagonal, U on and above). A zero pivot is not reported: it shows as an exact zero on
        U's diagonal (later entries may be inf/NaN)."""
        if a.size:
            self._call(self._getrf_nopiv, a)

    def laswp(self, a, piv, start: int) -> None:
        """LAPACK laswp in place on the column-major view ``a``: row ``start + i`` is
        interchanged with row ``piv[i]`` (0-based rows of ``a``, host ints), i = 0, 1, ....
        Here: the net moves (at most ``2 len(piv)`` rows) gathered and scattered once."""
        if a.size == 0 or len(piv) == 0:
            return
        dest, src = _lapack.swap_moves(piv, start)
        if dest.size:
            vals = self.empty((dest.size, a.shape[1]), a.dtype)
            self.take_rows(a, self.xp.asarray(src), vals)
            self.put_rows(a, self.xp.asarray(dest), vals)

    # ---- low-precision GEMM (mixed-precision factorizations, docs/mixed.md) -----------------
    #: factor precisions (``factor_dtype``) this device factors in; CPU ranks: float32 only
    LOWP = ("fp32",)
    #: the default ``factor_dtype`` of mixed-precision solves
    DEFAULT_LOWP = "fp32"

    def lowp_mode(self, factor_dtype: str) -> str:
        """The trailing-update mode (``lu_factor``/``cholesky`` ``gemm=``) that factors a
        float32 matrix at ``factor_dtype``. CPU ranks: 'native' (float32 BLAS) for all."""
        return "native"

    def inverse_panel(self, compute: str, driver: str) -> bool:
        """Whether the loop ``driver`` ('cholesky' or 'lu') applies a diagonal block's inverse
        instead of a triangular solve with it, in update mode ``compute``: ``L11^-1`` (a trsm
        on the identity) and one GEMM for the Cholesky panel ``L21 = A21 L11^-T`` and for
        LU's ``U12 = L11^-1 A12``. CPU ranks: never (LAPACK's trsm runs at GEMM speed
        there)."""
        return False

    def computes_in_fp32(self, compute: str) -> bool:
        """True when update mode ``compute`` is plain float32 arithmetic on this device (CPU
        ranks: every mode), so that a float32 library call may stand in for it."""
        return True

    def lowp_buffers(self, compute: str, m: int, k: int, n: int):
        """Workspace that :meth:`lowp_operands` may fill (``out=``) for an ``(m x k) @
        (k x n)`` product in mode ``compute``, or None when the mode needs none. A loop that
        keeps the operands beyond the stream they were made on passes one per buffer slot
        (the memory pool could otherwise hand freed operands to the next step's casts while
        another stream still reads them)."""
        return None

    def lowp_operands(self, a, b, compute: str, out=None):
        """``(a2, b2, scale)``: the operands of ``a @ b`` (float32, any strides) prepared once
        for one or more :meth:`gemm_lowp` calls on slices of them. 'tf32x3': split for TF32
        tensor cores; 'fp16'/'bf16' on GPU: cast after dividing by a power of two >= max|x|
        (``scale`` = the product of the two, a device scalar); otherwise unchanged.
        ``out``: :meth:`lowp_buffers` of at least this size, written instead of new arrays."""
        if compute == "tf32x3":
            return (*self.split_tf32x3(a, b, out), None)
        return a, b, None

    def gemm_lowp(self, transa, transb, alpha, a, b, beta, c, compute: str,
                  scale=None) -> None:
        """``c = alpha scale op(a) op(b) + beta c`` for float32 ``c`` with operands from
        :meth:`lowp_operands`, accumulated in float32. compute: 'native', 'tf32x3', 'tf32',
        'fp16', 'bf16'; devices without those tensor cores compute in float32 (CPU ranks:
        the operands are the float32 ones, so this is sgemm)."""
        self.gemm(transa, transb, alpha, a, b, beta, c, tf32=compute in ("tf32", "tf32x3"))

    def split_tf32x3(self, a, b, out=None):
        """Operands of a TF32 tensor-core product at ~float32 accuracy (pair with
        ``gemm(..., tf32=True)``). Devices without TF32 tensor cores: ``(a, b)`` unchanged, so
        that the product is the plain one."""
        return a, b

    # ---- one pass over a matrix: products with a few vectors and absolute values ----------
    def gemv_abs(self, a, x, absolute: bool = True, rowsums: bool = False,
                 squares: bool = False):
        """``(y, ya, rs)`` = ``(a @ x, |a| @ |x|, |a| @ 1)`` for a column-major ``m x n`` ``a``
        and ``x`` (``n x k``, a few columns), reading ``a`` once (``ya``/``rs`` None unless
        asked; ``squares``: ``rs`` holds the rows' sums of squares instead) -- or None when
        this device has no such kernel for these operands (CPU ranks: never; callers then
        take |a| in slabs beside a GEMM). Local."""
        return None

    def max_abs(self, a):
        """``max |a_ij|`` of the 2-D ``a`` (any layout) as a 0-d array of this device (NaN
        if ``a`` holds one), without a temporary the size of ``a`` for real ``a``. Local."""
        xp = self.xp
        if a.size == 0:
            return xp.zeros((), np.finfo(a.dtype).dtype)
        if a.dtype.kind == "c":
            return self.column_abs_stats(a)[1].max()
        return xp.maximum(xp.max(a), -xp.min(a))

    def upper_max_abs(self, a, rows, cols, nb):
        """``max |a_ij|`` over the entries on or above the global diagonal (``rows[i] <=
        cols[j]``; ``rows``, ``cols``: the increasing global indices of a's rows and columns,
        host arrays) as a 0-d array of this device, NaN there propagated: the U of an LU
        factor's local storage. Here one block column (``nb`` local columns) at a time
        (:func:`_diagonal_bands`): the rows wholly above it, then its diagonal band masked.
        Local."""
        xp = self.xp
        top = [xp.zeros((), np.finfo(a.dtype).dtype)]
        for cs, w, first, last, I, J in _diagonal_bands(xp, rows, cols, nb):
            if first:
                top.append(self.max_abs(a[:first, cs:cs + w]))
            if I is not None:
                top.append(self.max_abs(xp.where(I <= J, a[first:last, cs:cs + w], 0)))
        return xp.max(xp.stack(top))

    def lower_column_max_abs(self, a, rows, cols, nb):
        """Per column j of ``a``, ``max |a_ij|`` over the entries strictly below the global
        diagonal (``rows[i] > cols[j]``; increasing host index arrays as for
        :meth:`upper_max_abs`), as a device vector in a's real precision (0 where none, NaN
        propagated): the multipliers of an LU factor's local storage. One block column
        (``nb`` local columns) at a time: the rows wholly below it by
        :meth:`column_abs_stats`, its diagonal band masked. Local."""
        xp = self.xp
        out = xp.zeros(a.shape[1], np.finfo(a.dtype).dtype)
        for cs, w, first, last, I, J in _diagonal_bands(xp, rows, cols, nb):
            if last < a.shape[0]:
                out[cs:cs + w] = self.column_abs_stats(a[last:, cs:cs + w])[1]
            if I is not None:
                band = xp.where(I > J, xp.abs(a[first:last, cs:cs + w]), 0).max(axis=0)
                out[cs:cs + w] = xp.maximum(out[cs:cs + w], band)
        return out

    def column_abs_stats(self, a):
        """``(sums, maxes)``: per column of the 2-D ``a`` (any layout), ``sum_i |a_ij|`` and
        ``max_i |a_ij|`` as 1-D arrays of this device in ``a``'s real precision (NaN in a
        column gives NaN in both), reading ``a`` once. Here: column slabs of at most
        ``ABS_SLAB`` entries, so no temporary is the size of ``a``. Local."""
        xp = self.xp
        m, n = a.shape
        real = np.finfo(a.dtype).dtype
        sums, maxes = xp.zeros(n, real), xp.zeros(n, real)
        if m == 0 or n == 0:
            return sums, maxes
        w = min(n, max(1, self.ABS_SLAB // m))
        buf = xp.empty((w, m), real)       # one temporary, reused (fresh ones page-fault)
        for c in range(0, n, w):
            t = buf[:min(w, n - c)]
            xp.abs(a[:, c:c + w].T, out=t)  # rows of t: columns of a
            t.sum(axis=1, out=sums[c:c + w])
            t.max(axis=1, out=maxes[c:c + w])
        return sums, maxes

    #: entries of ``a`` per temporary in :meth:`column_abs_stats`' slabs
    ABS_SLAB = 1 << 18

    def zero_above(self, a, rows, cols) -> None:
        """In place: ``a[i, j] = 0`` wherever ``rows[i] < cols[j]`` (the strict upper triangle
        of the global matrix that ``a`` is a local part of); ``rows``/``cols`` are the local
        rows' and columns' global indices (host, increasing). Local."""
        n = a.shape[1]
        if a.size == 0:
            return
        first = np.searchsorted(rows, cols)     # column j: local rows [0, first[j]) are above
        step = 256
        for c in range(0, n, step):
            lo, hi = int(first[c]), int(first[min(n, c + step) - 1])
            blk = a[:, c:c + step]
            if lo:
                blk[:lo] = 0
            if hi > lo:                          # the band where the diagonal crosses
                band = blk[lo:hi]
                band[self.xp.asarray(rows[lo:hi, None] < cols[None, c:c + step])] = 0

    # ---- row movement and elementwise kernels ---------------------------------------------
    def take_rows(self, a, idx, out) -> None:
        """``out[...] = a[idx]`` for column-major 2-D ``a`` and ``out`` (``idx`` an int64 index
        array on this device), walking down the selected rows of each column."""
        raise NotImplementedError

    def put_rows(self, a, idx, vals) -> None:
        """``a[idx] = vals`` (distinct ``idx``) for column-major 2-D arrays."""
        raise NotImplementedError

    def take(self, a, idx, out) -> None:
        """``out[...] = a[idx]`` along axis 0 of a C-ordered (row-contiguous) ``a``; ``idx``
        in range (not checked)."""
        raise NotImplementedError

    def axpby(self, x, p, a, b) -> None:
        """In place ``x = a x + b p`` (a, b broadcast against x)."""
        raise NotImplementedError

    def butterfly_quad(self, a00, a01, a10, a11, ut, ub, vl, vr) -> None:
        """In place, the two-sided butterfly on four quarters (docs/rbt.md): with
        b1 = a00 + a01, b2 = a10 + a11, b3 = a00 - a01, b4 = a10 - a11:
        a00 = ut vl (b1 + b2), a01 = ut vr (b3 + b4), a10 = ub vl (b1 - b2),
        a11 = ub vr (b3 - b4). ut, ub: (h, 1) row factors; vl, vr: (1, w) column factors."""
        raise NotImplementedError

    # ---- helpers -----------------------------------------------------------------------------
    def _call(self, fn, out, *args):
        """Run ``fn(*args, out)`` in place; strided non-column-major ``out`` goes via a copy."""
        conv = None
        for i, x in enumerate(args):
            if getattr(x, "ndim", 0) != 2:
                continue
            if x.dtype != out.dtype:  # BLAS reads raw memory: garbage or an overrun
                raise TypeError(f"kernel operands must share one dtype, got {x.dtype} "
                                f"and {out.dtype}")
            if not _lapack.is_colmajor(x):
                conv = conv or list(args)
                conv[i] = self.xp.asfortranarray(x)
        if conv:
            args = tuple(conv)
        if _lapack.is_colmajor(out):
            return fn(*args, out)
        tmp = self.xp.asfortranarray(out)
        r = fn(*args, tmp)
        out[...] = tmp
        return r

    def _colmajor(self, a):
        return a if _lapack.is_colmajor(a) else self.xp.asfortranarray(a)


class HostStaging:
    """:meth:`Backend.staging` on CPU ranks: ``fill`` writes into ``dest`` itself when dtype
    and layout agree, else into one reused host buffer, then copied (cast) into ``dest``."""

    def __init__(self):
        self.host = HostBuffer()

    def __call__(self, dest, fill, dtype, order: str) -> None:
        dtype = np.dtype(dtype)
        if dest.dtype == dtype and _contiguous(dest, order):
            fill(dest)
            return
        buf = self.host.view(dest.shape, dtype, order)
        fill(buf)
        dest[...] = buf


def _contiguous(a, order: str) -> bool:
    """Whether ``a`` is one contiguous run of memory in ``order`` ('C' or 'F')."""
    return bool(a.flags.c_contiguous if order == "C" else a.flags.f_contiguous)


class HostBuffer:
    """One host allocation reused for pieces of any shape and dtype (grown when a piece is
    larger): a fresh array per piece would page-fault its whole size every time."""

    def __init__(self, alloc=None):
        self._alloc = alloc or (lambda nbytes: np.empty(nbytes, np.uint8))
        self._mem, self._capacity = None, 0

    def view(self, shape, dtype, order: str) -> np.ndarray:
        """A ``shape`` array of ``dtype`` in layout ``order`` over the (reused) buffer."""
        dtype = np.dtype(dtype)
        count = int(np.prod(shape))
        nbytes = count * dtype.itemsize
        if self._mem is None or self._capacity < nbytes:
            self._mem, self._capacity = None, 0          # free the old one first
            self._mem, self._capacity = self._alloc(max(nbytes, 1)), max(nbytes, 1)
        return np.frombuffer(self._mem, dtype, count).reshape(shape, order=order)


_mark_library(Backend)
