"""``solve(A, B, method=...)``: one entry point over every solver family (like scipy.linalg.solve).

Methods (``method=``): the table in :mod:`distla.linalg.methods` (cholesky, gepp, calu, genp, rbt,
tlr, with aliases).

Extra keywords go to the family's driver (e.g. ``lookahead``, ``tree``, ``depth``, ``seed``,
``tol``, ``max_rank``; ``precision='mixed'``, ``factor_dtype``, ``return_info`` for every
family but TLR: docs/mixed.md). Collective over A's grid.
"""
from __future__ import annotations

from ..errors import collective
from ..matrix import DistMatrix
from ..pblas import norm
from ..validate import signature
from .cholesky import cho_rcond, solve_cholesky
from .lu import LUFactor, lu_factor, solve_lu
from .methods import LU_PIVOTING, METHODS, method_name

__all__ = ["solve", "rcond", "METHODS"]



def solve(A, B, method: str = "gepp", **kw):
    """Collective: solve ``A X = B`` with the chosen method; returns X in B's layout.

    ``return_info=True`` returns ``(X, info)``: a :class:`distla.linalg.mixed.SolveInfo`
    (``RBTInfo`` for ``method='rbt'``).
    """
    with collective(getattr(getattr(A, "grid", None), "comm", None),
                    signature("solve", A, B, method=method, **kw)):
        m = method_name(method)
        if "pivoting" in kw:
            raise ValueError(f"solve: the method chooses the pivoting; pass method='gepp' "
                             f"(partial), 'calu' (tournament) or 'genp' (none) instead of "
                             f"pivoting={kw['pivoting']!r}")
        for X, name in ((A, "A"), (B, "B")):
            if not isinstance(X, DistMatrix):
                raise TypeError(f"solve: {name} must be a DistMatrix, not {type(X).__name__}")
        if A.m == 0 or A.n == 0:
            raise ValueError(f"solve: A is empty ({A.m} x {A.n})")
    if m == "cholesky":
        return solve_cholesky(A, B, **kw)
    if m in ("gepp", "calu", "genp"):
        return solve_lu(A, B, pivoting=LU_PIVOTING[m], **kw)
    if m == "rbt":
        from .rbt import rbt_solve
        return rbt_solve(A, B, **kw)
    from ..tlr import solve as tlr_solve
    return tlr_solve(A, B, **kw)


def rcond(A: DistMatrix, factor=None) -> float:
    """Collective: the reciprocal 1-norm condition estimate ``1 / (||A||_1 ||A^-1||_1)`` of the
    square A (ScaLAPACK's pdgecon / pdpocon), the same float on every rank; 0.0 when A is
    numerically singular.

    ``factor``: what :func:`lu_factor` (an :class:`LUFactor`), :func:`cholesky` (the lower
    factor L) or :func:`cho_factor` (``(factor, lower)``) returned for A; without it A is
    factored by LU with partial pivoting (on a copy). A few solves with the factors on n x 2
    blocks (Higham-Tisseur block estimator; docs/condition.md)."""
    with collective(getattr(getattr(A, "grid", None), "comm", None),
                    signature("rcond", A, factor=type(factor).__name__)):
        if not isinstance(A, DistMatrix):
            raise TypeError(f"rcond needs a DistMatrix, not {type(A).__name__}")
        if A.m != A.n:
            raise ValueError(f"rcond needs a square matrix, got shape {A.shape}")
        if not (factor is None or isinstance(factor, (LUFactor, DistMatrix)) or
                (isinstance(factor, tuple) and len(factor) == 2)):
            raise TypeError("factor must be what lu_factor, cholesky or cho_factor returned, "
                            f"not {type(factor).__name__}")
    if A.n == 0:
        return float("inf")
    anorm = norm(A, 1)
    if factor is None:
        factor = lu_factor(A)
    if isinstance(factor, LUFactor):
        factor.anorm = anorm
        factor._rcond = None
        return factor.rcond()
    c = factor if isinstance(factor, tuple) else (factor, True)
    return cho_rcond(c, anorm)
