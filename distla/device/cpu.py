"""CPU ranks: NumPy storage, SciPy's BLAS/LAPACK called by pointer on strided views
(``_lapack``), so a sub-block of a local matrix is updated in place with its leading dimension,
as ScaLAPACK's PBLAS do. Not collective."""
from __future__ import annotations

import numpy as np

from . import _lapack
from .base import Backend

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
        _lapack.gemm(transa, transb, alpha, a, b, beta, c)

    def _syrk(self, uplo, trans, alpha, a, beta, c):
        _lapack.syrk(uplo, trans, alpha, a, beta, c)

    def _trsm(self, side, uplo, transa, diag, alpha, a, b):
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
        p *= b
        x *= a
        x += p

    def butterfly_quad(self, a00, a01, a10, a11, ut, ub, vl, vr) -> None:
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
