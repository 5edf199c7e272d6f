"""``solve(A, B, method=...)``: one entry point over every solver family (like scipy.linalg.solve).

Methods (``method=``): the table in :mod:`distla.linalg.methods` (cholesky, gepp, calu, genp, rbt,
tlr, with aliases).

Extra keywords go to the family's driver (e.g. ``lookahead``, ``tree``, ``depth``, ``seed``,
``tol``, ``max_rank``, ``compression`` (:func:`distla.tlr.solve`'s ``method``: the
method picks the solver here); ``precision='mixed'``, ``factor_dtype``, ``max_iter``,
``fallback`` for every family but TLR: docs/mixed.md). ``return_info=True`` returns
``(X, SolveInfo)`` for every method. Collective over A's grid.

What ``overwrite_a=True`` leaves in A: the LU methods (gepp, calu, genp) their packed factors
(as :func:`distla.lu_factor`), 'cholesky' its factor L in the lower triangle (as
:func:`distla.cholesky`), a solve in mixed precision and 'rbt' an unchanged A (they factor a
copy in another precision, or a transformed one); 'tlr' takes ``overwrite`` instead (its TLR
storage; a dense A is never changed). ``overwrite_b=True`` lets the solve work in B's storage
where it can (X may or may not be B).
"""
from __future__ import annotations

from ..errors import SingularMatrixError, collective
from ..matrix import DistMatrix
from ..pblas import norm
from ..validate import signature
from .cholesky import check_triangle, cho_rcond, solve_cholesky
from .lu import LUFactor, lu_factor, solve_lu
from .methods import LU_PIVOTING, METHODS, method_name
from .mixed import SolveInfo

__all__ = ["solve", "rcond", "METHODS"]



def solver_options(m: str) -> set:
    """The keywords ``solve(method=m)`` passes on to its family's driver (for 'tlr' its
    ``method`` is ``compression``). Local; also the CLI's list of ``-O`` options."""
    import inspect
    if m == "tlr":
        from ..tlr import solve as tlr_solve
        return set(inspect.signature(tlr_solve).parameters) - {"A", "B", "method"} | \
            {"compression"}
    if m == "rbt":
        from .rbt import rbt_solve
        fns = (rbt_solve,)
    elif m == "cholesky":
        fns = (solve_cholesky,)
    else:
        fns = (solve_lu, lu_factor)             # solve_lu passes the rest to lu_factor
    return {p.name for f in fns for p in inspect.signature(f).parameters.values()
            if p.kind is not p.VAR_KEYWORD} - {"A", "B", "pivoting"}


def _check_options(m: str, kw: dict) -> None:
    """TypeError naming ``solve`` and the method (not an internal function, as Python's own
    error did) for a keyword that method does not take. Local."""
    # TLR's precision= is solve()'s own: refused above unless 'double', then dropped
    takes = solver_options(m) | ({"precision"} if m == "tlr" else set())
    bad = sorted(set(kw) - takes)
    if bad:
        raise TypeError(f"solve: method={m!r} takes no option {bad[0]!r} (its options: "
                        f"{', '.join(sorted(takes))})")


def solve(A, B, method: str = "gepp", **kw):
    """Collective: solve ``A X = B`` with the chosen method; returns X in B's layout.
    ``method=None`` is the default, 'gepp' (as scipy.linalg.solve's ``assume_a=None`` means a
    general matrix).

    ``return_info=True`` returns ``(X, info)``: a :class:`distla.linalg.mixed.SolveInfo`
    (``RBTInfo`` for ``method='rbt'``; for 'tlr' its ``details`` hold the TLR factor's
    ``info`` dict). ``max_iter`` and ``fallback`` are refused without ``precision='mixed'``
    (but for 'rbt', which always refines).
    """
    with collective(getattr(getattr(A, "grid", None), "comm", None),
                    signature("solve", A, B, method=method, **kw)):
        m = method_name("gepp" if method is None else method)
        if "pivoting" in kw:
            raise ValueError(f"solve: the method chooses the pivoting; pass method='gepp' "
                             f"(partial), 'calu' (tournament) or 'genp' (none) instead of "
                             f"pivoting={kw['pivoting']!r}")
        for X, name in ((A, "A"), (B, "B")):
            if not isinstance(X, DistMatrix):
                raise TypeError(f"solve: {name} must be a DistMatrix, not {type(X).__name__}")
        if m != "tlr" and "compression" in kw:
            raise ValueError(f"solve: compression= is an option of method='tlr', not "
                             f"{m!r}")
        _check_options(m, kw)
        if m == "tlr" and "compression" in kw:
            from ..tlr.batched import METHODS as compressions
            if kw["compression"] not in compressions:
                raise ValueError(f"solve: compression must be one of "
                                 f"{', '.join(compressions)} (method='tlr'), not "
                                 f"{kw['compression']!r}")
        if m == "tlr" and kw.get("precision", "double") != "double":
            raise ValueError("solve: method='tlr' has no mixed precision (its accuracy is "
                             "tol=...); precision='mixed' is for cholesky, gepp, calu, "
                             "genp and rbt")
    if m == "tlr":          # tlr.solve's own ``method`` (the compression) is ``compression``
        kw.pop("precision", None)
        if "compression" in kw:
            kw["method"] = kw.pop("compression")
    if m == "cholesky":
        return solve_cholesky(A, B, **kw)
    if m in ("gepp", "calu", "genp"):
        return solve_lu(A, B, pivoting=LU_PIVOTING[m], **kw)
    if m == "rbt":
        from .rbt import rbt_solve
        return rbt_solve(A, B, **kw)
    from ..tlr import solve as tlr_solve
    if not kw.get("return_info", False):
        return tlr_solve(A, B, **kw)
    X, details = tlr_solve(A, B, **kw)
    dt = str(A.dtype)
    rc = details.get("rcond") if kw.get("check_rcond", True) else None
    return X, SolveInfo(method="tlr", precision="double", factor_dtype=dt, compute=dt,
                        rcond=None if rc is None else float(rc), details=dict(details))


def rcond(A, factor=None) -> float:
    """Collective: the reciprocal 1-norm condition estimate ``1 / (||A||_1 ||A^-1||_1)`` of the
    square A (ScaLAPACK's pdgecon / pdpocon), the same float on every rank; 0.0 when A is
    numerically singular.

    ``factor``: what :func:`lu_factor` (an :class:`LUFactor`), :func:`cholesky` (the lower
    factor L), :func:`cho_factor` (``(factor, lower)``) or :func:`distla.tlr.cholesky` (a
    ``TLRCholesky``) returned for A; without it a DistMatrix A is factored by LU with partial
    pivoting (on a copy), a TLR matrix by TLR Cholesky. A few solves with the factors on n x t
    blocks (Higham-Tisseur block estimator, t = ``Backend.rcond_vectors``; docs/condition.md).
    ``||A||_1`` is exact for a DistMatrix A and estimated by products for a TLR one (``A`` may
    then also be None, for ``L L^T`` itself)."""
    from ..tlr import TLRCholesky, TLRMatrix
    from ..tlr import cholesky as tlr_cholesky
    from ..tlr import norm1_estimate as tlr_norm1
    grid = getattr(A if A is not None else factor, "grid", None)
    with collective(getattr(grid, "comm", None),
                    signature("rcond", A, factor=type(factor).__name__)):
        tlr = isinstance(factor, TLRCholesky) or isinstance(A, TLRMatrix)
        if not (isinstance(A, (DistMatrix, TLRMatrix)) or (A is None and tlr)):
            raise TypeError(f"rcond needs a DistMatrix or a TLR matrix, not "
                            f"{type(A).__name__}")
        if A is not None and A.shape[0] != A.shape[1]:
            raise ValueError(f"rcond needs a square matrix, got shape {A.shape}")
        if isinstance(A, TLRMatrix) and A.factored:
            raise TypeError("rcond: A is a TLR factor; pass it as factor= (A=None)")
        if not (factor is None or isinstance(factor, (LUFactor, DistMatrix, TLRCholesky)) or
                (isinstance(factor, tuple) and len(factor) == 2)):
            raise TypeError("factor must be what lu_factor, cholesky, cho_factor or "
                            f"tlr.cholesky returned, not {type(factor).__name__}")
        if tlr and not (factor is None or isinstance(factor, TLRCholesky)):
            raise TypeError("rcond: a TLR matrix needs its TLR Cholesky factor "
                            "(distla.tlr.cholesky)")
        if isinstance(factor, TLRCholesky) and A is not None and factor.n != A.shape[0]:
            raise ValueError(f"rcond: the factor is {factor.n} x {factor.n}, A {A.shape}")
        dense = factor.lu if isinstance(factor, LUFactor) else \
            factor[0] if isinstance(factor, tuple) else factor
        if isinstance(dense, DistMatrix) and A is not None and dense.shape != A.shape:
            raise ValueError(f"rcond: the factor is {dense.shape[0]} x {dense.shape[1]}, "
                             f"A {A.shape[0]} x {A.shape[1]}: not A's factor")
        if isinstance(dense, DistMatrix) and isinstance(A, DistMatrix) and \
                (dense.grid != A.grid or dense.device != A.device):
            raise ValueError("rcond: A and the factor live on different grids or devices (as "
                             "lu_solve and cho_solve, rcond needs them together)")
        if isinstance(factor, DistMatrix):
            check_triangle(factor, True, "rcond")
        elif isinstance(factor, tuple) and len(factor) == 2:
            check_triangle(factor[0], factor[1], "rcond")
    if tlr:
        anorm = None if A is None else (A.norm(1) if isinstance(A, DistMatrix) else
                                        tlr_norm1(A))
        if factor is None:
            factor = tlr_cholesky(A)
        return factor.rcond(anorm) if anorm is not None else factor.rcond()
    if A.n == 0:
        return 1.0      # (LAPACK's xGECON / xPOCON for n = 0)
    anorm = norm(A, 1)
    if anorm == 0:
        return 0.0
    if factor is None:
        try:
            factor = lu_factor(A)
        except SingularMatrixError:     # an exactly zero pivot (raised on every rank)
            return 0.0
    given = factor is not None
    if isinstance(factor, LUFactor):
        rc = factor.rcond(anorm)        # (the factor keeps its own ||A||_1 and estimate)
    else:
        rc = cho_rcond(factor, anorm)   # a bare factor is L (cho_solve refuses a bare U)
    # every vector has ||A^-1 x||_1 >= ||x||_1 / ||A||_1, so A's own factors never estimate
    # above 1 (beyond rounding): more means the factor is another matrix's
    if given and rc > FOREIGN_FACTOR_RCOND:
        with collective(A.grid.comm):
            raise ValueError(f"rcond: the estimate {rc:.3g} exceeds 1, which A's own factor "
                             f"cannot give: the factor was computed from another matrix")
    return rc


#: an rcond estimate above this from a given factor proves it is not A's (see :func:`rcond`)
FOREIGN_FACTOR_RCOND = 1.5
