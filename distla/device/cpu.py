"""CPU ranks: NumPy storage, SciPy's BLAS/LAPACK called by pointer on strided views
(``_lapack``), so a sub-block of a local matrix is updated in place with its leading dimension,
as ScaLAPACK's PBLAS do. Not collective."""
from __future__ import annotations

import numpy as np

from . import _lapack
from .base import Backend


def _l2_cache_bytes() -> int | None:
    """The size of this machine's per-core level-2 cache (Linux sysfs), None if unknown."""
    import glob
    for d in sorted(glob.glob("/sys/devices/system/cpu/cpu0/cache/index*")):
        try:
            with open(f"{d}/level") as f:
                if f.read().strip() != "2":
                    continue
            with open(f"{d}/size") as f:
                text = f.read().strip().upper()
        except OSError:
            continue
        scale = {"K": 1 << 10, "M": 1 << 20}.get(text[-1:], 1)
        try:
            return int(text.rstrip("KM")) * scale
        except ValueError:
            return None
    return None

# elements per quarter-chunk of the butterfly update (keeps the temporaries in cache)
_CHUNK_ELEMS = 1 << 13


class CpuBackend(Backend):
    name = "cpu"
    is_gpu = False
    xp = np

    def asarray(self, a, dtype=None):
        if hasattr(a, "get") and not isinstance(a, np.ndarray):
            a = a.get()
        return np.asfortranarray(a, dtype=dtype)

    def to_host(self, a) -> np.ndarray:
        return a

    # ---- kernels ---------------------------------------------------------------------------
    def _gemm(self, transa, transb, alpha, a, b, beta, tf32, c):
        # one column of c: BLAS gemv, 1.5-2x OpenBLAS's gemm with n = 1 on the few-rhs
        # triangular sweeps (benchmarks/cpu_gemv_probe.py)
        if c.shape[1] == 1 and transb != "C" and min(b.strides) > 0 and c.strides[0] > 0:
            x = b[:, 0] if transb == "N" else b[0, :]
            _lapack.gemv(transa, alpha, a, x, beta, c[:, 0])
            return
        _lapack.gemm(transa, transb, alpha, a, b, beta, c)

    def _syrk(self, uplo, trans, alpha, a, beta, c):
        _lapack.syrk(uplo, trans, alpha, a, beta, c)

    def _trsm(self, side, uplo, transa, diag, alpha, a, b):
        if side == "L" and b.shape[1] == 1 and b.strides[0] > 0:   # one column: BLAS trsv
            if alpha != 1.0:
                b *= alpha
            _lapack.trsv(uplo, transa, diag, a, b[:, 0])
            return
        _lapack.trsm(side, uplo, transa, diag, alpha, a, b)

    def _potrf(self, uplo, a):
        return _lapack.potrf(uplo, a)

    def _getrf(self, a):
        return _lapack.getrf(a)

    def _getrf_nopiv(self, a, leaf: int = 16):
        """Recursive split (trsm + gemm) down to unblocked leaves of ``leaf`` columns."""
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            self._genp_rec(a, leaf)

    def _genp_rec(self, a, leaf):
        m, n = a.shape
        if n <= leaf:
            for j in range(n):
                if j + 1 < m:
                    a[j + 1:, j] /= a[j, j]
                    if j + 1 < n:
                        a[j + 1:, j + 1:] -= np.outer(a[j + 1:, j], a[j, j + 1:])
            return
        n1 = n // 2
        self._genp_rec(a[:, :n1], leaf)
        self.trsm("L", "L", "N", "U", 1.0, a[:n1, :n1], a[:n1, n1:])
        self.gemm("N", "N", -1.0, a[n1:, :n1], a[:n1, n1:], 1.0, a[n1:, n1:])
        self._genp_rec(a[n1:, n1:], leaf)

    # ---- one pass over a matrix: products with a few vectors and absolute values ----------
    # elements of ``a`` per tile: a tile and its |tile| buffer fill half the core's L2 cache
    # (float64), so that every product reads the tile from cache. A tile as large as L2 spilled:
    # 8192 x 4096 local, 2 MB L2, rowsums and four vectors: 78 ms with 2 MB tiles, 47.5 ms
    # with 512 KB ones (a plain sum of the same matrix: 27.5 ms; docs/condition.md)
    GEMV_TILE = max(1 << 13, (_l2_cache_bytes() or 2 << 20) // 32)
    GEMV_TILE_ROWS = 1 << 16    # rows per tile at most (taller matrices: tiles of rows too)

    def gemv_abs(self, a, x, absolute=True, rowsums=False, squares=False):
        # tiles of whole columns (a contiguous block), small enough to stay in cache while
        # each asked product reads them: one pass over memory instead of one per product
        # (2 ranks, 8192 x 4096 local: A times four vectors and |A|'s row sums 2.0x faster
        # than a GEMM and a separate pass; benchmarks/cpu_gemv_probe.py)
        if a.dtype not in (np.float32, np.float64) or x.dtype != a.dtype or a.ndim != 2 or \
                x.ndim != 2 or not (a.size == 0 or _lapack.is_colmajor(a)):
            return None
        (m, n), k = a.shape, x.shape[1]
        y = np.zeros((m, k), a.dtype, order="F")
        ya = np.zeros((m, k), a.dtype, order="F") if absolute else None
        rs = np.zeros((m, 1), a.dtype, order="F") if (rowsums or squares) else None
        if m == 0 or n == 0:
            return y, ya, rs
        mt = min(m, self.GEMV_TILE_ROWS)                      # rows per tile
        w = max(8, self.GEMV_TILE // mt)                      # columns per tile
        x = np.asfortranarray(x)
        buf = np.empty((mt, min(w, n)), a.dtype, order="F")
        ones = np.ones((min(w, n), 1), a.dtype)
        ax = np.asfortranarray(np.abs(x)) if absolute else None
        gemm = self._gemm        # operands column-major and of one dtype by construction
        for i0 in range(0, m, mt):
            i1 = min(m, i0 + mt)
            for j0 in range(0, n, w):
                j1 = min(n, j0 + w)
                t = a[i0:i1, j0:j1]
                if k:
                    gemm("N", "N", 1.0, t, x[j0:j1], 1.0, False, y[i0:i1])
                if absolute or rs is not None:
                    b = buf[:i1 - i0, :j1 - j0]
                    np.multiply(t, t, out=b) if squares and not absolute else np.abs(t, out=b)
                    if absolute:
                        gemm("N", "N", 1.0, b, ax[j0:j1], 1.0, False, ya[i0:i1])
                        if squares:
                            np.multiply(b, b, out=b)
                    if rs is not None:
                        gemm("N", "N", 1.0, b, ones[:j1 - j0], 1.0, False, rs[i0:i1])
        return y, ya, rs

    def laswp(self, a, piv, start: int) -> None:
        if a.dtype.char in "fdFD" and (a.shape[0] <= 1 or a.strides[0] == a.itemsize):
            _lapack.laswp(a, piv, start)
        else:
            super().laswp(a, piv, start)

    # ---- row movement and elementwise ------------------------------------------------------
    def take_rows(self, a, idx, out) -> None:
        np.take(a.T, idx, axis=1, out=out.T)

    def put_rows(self, a, idx, vals) -> None:
        a.T[:, idx] = vals.T

    def take(self, a, idx, out) -> None:
        np.take(a, idx, axis=0, out=out, mode="clip")

    def axpby(self, x, p, a, b) -> None:
        with np.errstate(over="ignore", invalid="ignore"):   # (as butterfly_quad)
            p *= b
            x *= a
            x += p

    def butterfly_quad(self, a00, a01, a10, a11, ut, ub, vl, vr) -> None:
        # entries near the float range overflow here without a NumPy warning: RBT's pivot
        # and finiteness checks then fall back to partial pivoting, with their own warning
        with np.errstate(over="ignore", invalid="ignore"):
            self._butterfly_quad(a00, a01, a10, a11, ut, ub, vl, vr)

    def _butterfly_quad(self, a00, a01, a10, a11, ut, ub, vl, vr) -> None:
        h, w = a00.shape
        step = max(1, _CHUNK_ELEMS // max(1, h))
        for j0 in range(0, w, step):
            j1 = min(w, j0 + step)
            q00, q01, q10, q11 = (q[:, j0:j1] for q in (a00, a01, a10, a11))
            left, right = vl[:, j0:j1], vr[:, j0:j1]
            b1, b3 = q00 + q01, q00 - q01
            b2, b4 = q10 + q11, q10 - q11
            np.add(b1, b2, out=q00)
            np.subtract(b1, b2, out=q10)
            np.add(b3, b4, out=q01)
            np.subtract(b3, b4, out=q11)
            q00 *= ut
            q00 *= left
            q01 *= ut
            q01 *= right
            q10 *= ub
            q10 *= left
            q11 *= ub
            q11 *= right
