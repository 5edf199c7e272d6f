"""Solves with TLR matrices: :func:`cho_solve` (with a factor from :func:`distla.tlr.cholesky`)
and :func:`solve` (factor, then solve). The triangular solves live with the factor,
:mod:`distla.tlr.factor`.
"""
from __future__ import annotations

import numbers
import warnings

import numpy as np

from ..errors import LinAlgWarning, collective
from ..linalg.condition import norm1_estimate as _norm1_estimate
from ..linalg.condition import warn_if_ill_conditioned
from ..matrix import DistMatrix
from ..validate import check_finite as _check_finite
from ..validate import check_flags
from ..validate import check_symmetric as _check_symmetric
from .build import compress
from .cholesky import cholesky
from .factor import TLRCholesky, check_rhs
from .matrix import TLRMatrix

__all__ = ["cho_solve", "solve", "norm1_estimate"]


def cho_solve(L: TLRCholesky, B, check_finite: bool = True):
    """Collective: ``X = A^-1 B`` with the TLR Cholesky factor ``L`` of ``A``.

    ``B`` is either a :class:`~distla.DistMatrix` with ``n`` rows on ``L``'s grid and device
    (any blocking; the result is a DistMatrix in ``B``'s layout; ``B`` is gathered to every
    rank for the solve), or an array of shape ``(n,)`` or ``(n, r)`` replicated on every rank
    (NumPy or CuPy; the result is replicated, same shape, on ``L``'s device).
    ``check_finite``: NaN/Inf in B raise ValueError first (every rank).
    """
    with collective(getattr(getattr(L, "grid", None), "comm", None)):
        if not isinstance(L, TLRCholesky):
            raise TypeError(f"cho_solve needs a TLRCholesky factor (distla.tlr.cholesky), "
                            f"got {type(L).__name__}")
    if check_finite:
        _check_b(L, B, "tlr.cho_solve")
    return L.solve(B)


def _check_b(T, B, what: str) -> None:
    """Collective over T's grid (T: a TLR matrix or factor, or a dense DistMatrix):
    ValueError on every rank if B (a DistMatrix, or an array replicated on every rank:
    checked locally) holds NaN or Inf."""
    if isinstance(B, DistMatrix):
        _check_finite(("B", B), what=what)
        return
    with collective(T.grid.comm):
        xp = T.xp
        bad = xp.argwhere(~xp.isfinite(xp.asarray(B)))
        if bad.size:
            at = tuple(int(i) for i in T.backend.to_host(bad[0]))
            raise ValueError(f"{what}: B contains a non-finite value at index {at} "
                             f"(check_finite=False skips this check)")


def solve(A, B, *, tol=1e-8, max_rank=None, method="svd", overwrite=False,
          check_rcond: bool = True, check_finite: bool = True, check_symmetric: bool = True,
          return_info: bool = False):
    """Collective: ``A^-1 B`` for a TLR matrix ``A`` (or a dense symmetric DistMatrix, which is
    first compressed with ``tol``, ``max_rank``, ``method``); ``B`` as in :func:`cho_solve`.
    ``overwrite`` lets the factorization reuse ``A``'s TLR storage.

    A dense A is checked first, as by the dense Cholesky, in one pass: ``check_symmetric``
    (``A == A^T`` within sqrt(eps); the compression reads one triangle, so a nonsymmetric A
    would be solved as another matrix) and ``check_finite`` (NaN/Inf in A, or in a
    DistMatrix B, raise ValueError). ``check_rcond``: estimate the reciprocal condition number
    from the factor (:meth:`TLRCholesky.rcond`; ``||A||_1`` exact for a dense A, estimated
    for a TLR one) and warn with :class:`distla.LinAlgWarning` when it is below the
    compression's accuracy (``tol``; eps without one): the forward error can then reach 1.
    ``return_info``: return ``(X, info)``, the factor's ``info`` dict (times, memory, and
    ``rcond`` when estimated)."""
    with collective(getattr(getattr(A, "grid", None), "comm", None)):
        check_flags("tlr.solve", overwrite=overwrite, check_rcond=check_rcond,
                    check_finite=check_finite, check_symmetric=check_symmetric,
                    return_info=return_info)
    anorm, scale = None, 0
    if isinstance(A, DistMatrix):
        with collective(A.grid.comm):
            if A.m != A.n:
                raise ValueError(f"solve needs a square matrix, got {A.shape}")
            if tol is not None and not (isinstance(tol, numbers.Real) and 0 < tol < 1):
                raise ValueError(f"tlr.solve: tol must be a number in (0, 1) or None, not "
                                 f"{tol!r}")
            if A.dtype not in (np.float32, np.float64):      # before the symmetry check,
                raise TypeError(f"TLR supports real float32/float64 matrices, not "  # whose
                                f"{A.dtype}")       # advice (check_symmetric=False) won't help
            check_rhs(A, B)      # B before any work (it was checked after the factorization)
        if check_finite:
            _check_b(A, B, "tlr.solve")
        if check_symmetric and A.n:
            _check_symmetric(A, what="tlr.solve", finite=check_finite)
        elif check_finite:
            _check_finite(("A", A), what="tlr.solve")
        # compress and factor 2^-e A, max |2^-e A| in [0.5, 1) (exact): the compression
        # squares entries and singular values, which overflow near 1e+154 and underflow
        # near 1e-154 (a matrix scaled by 1e+300 gave a forward error of 1.6, silently)
        amax = A.norm("max")
        tiny = float(np.finfo(A.dtype).tiny)   # (scaled exactly below, so only entries that
        if 0 < amax < tiny:                    # are subnormal already have lost digits)
            warnings.warn(f"tlr.solve: the matrix's largest entry ({amax:.3g}) is subnormal "
                          f"(below {tiny:.3g}): its entries have lost digits before any work; "
                          f"scale A (and B) by a power of 2 where they are made",
                          LinAlgWarning, stacklevel=2)
        if np.isfinite(amax) and amax > 0:
            scale = -int(np.frexp(amax)[1])        # (an exponent: 2^1039 for 1e-313)
            A = _times_pow2(A, scale)
        if check_rcond:
            anorm = A.norm(1)
        A, overwrite = compress(A, tol=tol, max_rank=max_rank, method=method), True
    elif not isinstance(A, TLRMatrix) or A.factored:
        with collective(getattr(getattr(A, "grid", None), "comm", None)):
            raise TypeError(f"solve needs a TLRMatrix or a DistMatrix, got {type(A).__name__}")
    else:
        with collective(A.grid.comm):
            check_rhs(A, B)
        if check_finite:
            _check_b(A, B, "tlr.solve")
        if check_rcond:
            anorm = norm1_estimate(A)
    accuracy = A.tol
    L = cholesky(A, overwrite=overwrite)
    X = cho_solve(L, B, check_finite=False)
    X = _times_pow2(X, scale)   # (2^-e A)^-1 B = 2^-e A^-1 B ... times 2^-e: A^-1 B
    if check_rcond:
        warn_if_ill_conditioned(L.rcond(anorm), L.dtype, "tlr.solve", accuracy=accuracy)
    return (X, L.info) if return_info else X


def _times_pow2(M, k: int):
    """``2^k M`` (exact), in factors that stay in float range (2^k alone may not: k = 1039
    scales entries of 1e-313); M itself when k is 0."""
    while k:
        step = max(-1000, min(1000, k))
        M, k = M * float(np.ldexp(1.0, step)), k - step
    return M


def norm1_estimate(T: TLRMatrix) -> float:
    """Collective: an estimate (lower bound) of ``||T||_1`` for a TLR matrix (or factor: of
    ``L L^T``) from three products with n x 2-3 blocks (docs/condition.md)."""
    if isinstance(T, TLRCholesky):
        return T.norm1_estimate()
    host = T.backend.to_host

    def mul(X):
        return np.asarray(host(T.matvec(X)))
    return _norm1_estimate(T.n, T.dtype, mul, mul)
