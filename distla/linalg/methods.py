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

import numpy as np

__all__ = ["METHODS", "PIVOTING", "LU_PIVOTING", "GEMM_MODES", "FACTOR_DTYPES", "method_name",
           "pivoting_name", "check_gemm_mode"]

METHODS = ("cholesky", "gepp", "calu", "genp", "rbt", "tlr")
PIVOTING = ("partial", "tournament", "none")
LU_PIVOTING = {"gepp": "partial", "calu": "tournament", "genp": "none"}

_METHOD_ALIASES = {"chol": "cholesky", "posv": "cholesky", "lu": "gepp", "partial": "gepp",
                   "tournament": "calu", "none": "genp"}
_PIVOTING_ALIASES = {"gepp": "partial", "calu": "tournament", "tslu": "tournament",
                     "genp": "none"}


def method_name(method) -> str:
    """The canonical name of ``method`` (a string: case-insensitive, aliases accepted);
    ValueError naming the choices otherwise (None too: its str is the alias 'none')."""
    if not isinstance(method, str):
        raise ValueError(f"method must be a string, one of {', '.join(METHODS)}; "
                         f"got {method!r}")
    m = method.lower()
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


# trailing-update modes of the factorizations (``gemm=``; docs/mixed.md) and the low precisions
# of ``precision='mixed'`` solves (``factor_dtype=``)
GEMM_MODES = ("native", "tf32x3", "fp16x3", "tf32", "fp16", "bf16")
FACTOR_DTYPES = ("fp32", "tf32", "fp16", "bf16")


def check_gemm_mode(gemm, A) -> None:
    """ValueError / TypeError unless ``gemm`` is a mode of :data:`GEMM_MODES` usable on A
    (the low-precision modes need a float32 A)."""
    if gemm not in GEMM_MODES:
        raise ValueError(f"gemm must be one of {', '.join(GEMM_MODES)}, not {gemm!r}")
    if gemm != "native" and A.dtype != np.float32:
        raise TypeError(f"gemm={gemm!r} needs a float32 matrix, not {A.dtype}")
