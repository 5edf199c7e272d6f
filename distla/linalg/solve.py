"""``solve(A, B, method=...)``: one entry point over every solver family (like scipy.linalg.solve).

Methods (``method=``):

=============  ======================================================================
'cholesky'     symmetric positive definite: Cholesky + two triangular solves (pdposv)
'gepp'         general: LU with partial pivoting (pdgesv); alias 'lu', 'partial'
'calu'         general: communication-avoiding LU with tournament pivoting; alias 'tournament'
'genp'         general, no pivoting (only for matrices known to need none); alias 'none'
'rbt'          general: random butterflies + no-pivot LU + iterative refinement
'tlr'          SPD covariance-like: tile low-rank Cholesky at accuracy ``tol``
=============  ======================================================================

Extra keywords go to the family's driver (e.g. ``lookahead``, ``tree``, ``depth``, ``seed``,
``precision``, ``tol``, ``max_rank``). Collective over A's grid.
"""
from __future__ import annotations

from ..errors import collective

__all__ = ["solve", "METHODS"]

_ALIASES = {"cholesky": "cholesky", "chol": "cholesky", "posv": "cholesky",
            "gepp": "gepp", "lu": "gepp", "partial": "gepp",
            "calu": "calu", "tournament": "calu",
            "genp": "genp", "none": "genp",
            "rbt": "rbt", "tlr": "tlr"}
METHODS = ("cholesky", "gepp", "calu", "genp", "rbt", "tlr")


def solve(A, B, method: str = "gepp", **kw):
    """Collective: solve ``A X = B`` with the chosen method; returns X in B's layout.

    ``method='rbt'`` with ``return_info=True`` returns ``(X, RBTInfo)``.
    """
    with collective(getattr(getattr(A, "grid", None), "comm", None)):
        m = _ALIASES.get(str(method).lower())
        if m is None:
            raise ValueError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
    if m == "cholesky":
        from .cholesky import solve_cholesky
        return solve_cholesky(A, B, **kw)
    if m in ("gepp", "calu", "genp"):
        from .lu import solve_lu
        piv = {"gepp": "partial", "calu": "tournament", "genp": "none"}[m]
        return solve_lu(A, B, pivoting=piv, **kw)
    if m == "rbt":
        from .rbt import rbt_solve
        return rbt_solve(A, B, **kw)
    from ..tlr import solve as tlr_solve
    return tlr_solve(A, B, **kw)
