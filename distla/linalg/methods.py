"""The one table of solver method names and their aliases (API, CLI, warm-up, benchmarks).

=============  ======================================================================
'cholesky'     symmetric positive definite: Cholesky + two triangular solves (pdposv)
'gepp'         general: LU with partial pivoting (pdgesv); alias 'lu', 'partial'
'calu'         general: communication-avoiding LU with tournament pivoting; alias 'tournament'
'genp'         general, no pivoting (only for matrices known to need none); alias 'none'
'rbt'          general: random butterflies + no-pivot LU + iterative refinement
'tlr'          SPD covariance-like: tile low-rank Cholesky at accuracy ``tol``
=============  ======================================================================
"""
from __future__ import annotations

__all__ = ["METHODS", "PIVOTING", "LU_PIVOTING", "method_name", "pivoting_name"]

METHODS = ("cholesky", "gepp", "calu", "genp", "rbt", "tlr")
PIVOTING = ("partial", "tournament", "none")
LU_PIVOTING = {"gepp": "partial", "calu": "tournament", "genp": "none"}

_METHOD_ALIASES = {"chol": "cholesky", "posv": "cholesky", "lu": "gepp", "partial": "gepp",
                   "tournament": "calu", "none": "genp"}
_PIVOTING_ALIASES = {"gepp": "partial", "calu": "tournament", "tslu": "tournament",
                     "genp": "none"}


def method_name(method) -> str:
    """The canonical name of ``method`` (case-insensitive, aliases accepted); ValueError
    naming the choices otherwise."""
    m = str(method).lower()
    m = _METHOD_ALIASES.get(m, m)
    if m not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
    return m


def pivoting_name(pivoting) -> str:
    """The canonical LU pivoting mode ('partial', 'tournament' or 'none'; None means 'none';
    the method names 'gepp', 'calu', 'genp' are accepted); ValueError otherwise."""
    p = "none" if pivoting is None else str(pivoting).lower()
    p = _PIVOTING_ALIASES.get(p, p)
    if p not in PIVOTING:
        raise ValueError(f"pivoting must be one of {PIVOTING}, not {pivoting!r}")
    return p
