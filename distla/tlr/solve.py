"""Solves with TLR matrices: :func:`cho_solve` (with a factor from :func:`distla.tlr.cholesky`)
and :func:`solve` (factor, then solve). The triangular solves live with the factor,
:mod:`distla.tlr.factor`.
"""
from __future__ import annotations

from ..errors import collective
from ..matrix import DistMatrix
from .build import compress
from .cholesky import cholesky
from .factor import TLRCholesky
from .matrix import TLRMatrix

__all__ = ["cho_solve", "solve"]


def cho_solve(L: TLRCholesky, B):
    """Collective: ``X = A^-1 B`` with the TLR Cholesky factor ``L`` of ``A``.

    ``B`` is either a :class:`~distla.DistMatrix` with ``n`` rows on ``L``'s grid and device
    (any blocking; the result is a DistMatrix in ``B``'s layout; ``B`` is gathered to every
    rank for the solve), or an array of shape ``(n,)`` or ``(n, r)`` replicated on every rank
    (NumPy or CuPy; the result is replicated, same shape, on ``L``'s device).
    """
    with collective(getattr(getattr(L, "grid", None), "comm", None)):
        if not isinstance(L, TLRCholesky):
            raise TypeError(f"cho_solve needs a TLRCholesky factor (distla.tlr.cholesky), "
                            f"got {type(L).__name__}")
    return L.solve(B)


def solve(A, B, *, tol=1e-8, max_rank=None, method="svd", overwrite=False):
    """Collective: ``A^-1 B`` for a TLR matrix ``A`` (or a dense symmetric DistMatrix, which is
    first compressed with ``tol``, ``max_rank``, ``method``); ``B`` as in :func:`cho_solve`.
    ``overwrite`` lets the factorization reuse ``A``'s TLR storage."""
    if isinstance(A, DistMatrix):
        A, overwrite = compress(A, tol=tol, max_rank=max_rank, method=method), True
    elif not isinstance(A, TLRMatrix) or A.factored:
        with collective(getattr(getattr(A, "grid", None), "comm", None)):
            raise TypeError(f"solve needs a TLRMatrix or a DistMatrix, got {type(A).__name__}")
    return cho_solve(cholesky(A, overwrite=overwrite), B)
