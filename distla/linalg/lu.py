"""LU factorization of general matrices: partial pivoting (pdgetrf), CALU with tournament
pivoting, and no pivoting (GENP), with solves.

One right-looking blocked loop over block columns ``k`` (width ``nb``, ``mb == nb``) for all
three pivoting modes; only the panel differs:

* ``"partial"`` (GEPP, ScaLAPACK pdgetrf): the panel's active rows are gathered along the
  process column (one allgather), and every rank of that column factors the same tall panel
  with LAPACK/cuSOLVER getrf (identical pivots everywhere), keeping its own rows. One
  collective per panel instead of one per column.
* ``"tournament"`` (CALU): TSLU (:mod:`distla.linalg._tslu`) picks the ``nb`` pivot rows by a
  binary or flat tree of GEPPs on candidate rows; they are swapped to the top and the panel is
  factored without pivoting (``L21 = A21 U11^-1``). Fewer and smaller messages than GEPP.
  Stability trade-off: the worst-case growth-factor bound is larger than GEPP's ``2^(n-1)``
  (Grigori, Demmel and Xiang: ``2^(n(H+1)-1)`` for a reduction tree of height H; the flat
  tree has H = 1), but CALU is as stable as GEPP in practice; check
  :meth:`LUFactor.growth_factor`. With one process row the tree has a single leaf and the
  panel is exactly GEPP's.
* ``"none"`` (GENP): the diagonal block is factored without pivoting and broadcast down the
  process column; no swaps. Only safe for matrices that need no pivoting (diagonally dominant,
  or randomized by RBT, :mod:`distla.linalg.rbt`).

Then, every step: the factored panel and the pivots are broadcast along process rows; the
panel's row interchanges are applied to the trailing columns (pdlaswp: row pieces exchanged
pairwise between process rows, one grouped exchange per step; LAPACK laswp in place when one
process row holds every row); the process row owning block
row ``k`` computes ``U12 = L11^-1 A12`` and broadcasts it down process columns; the trailing
matrix gets one GEMM ``A22 -= L21 U12``. With ``lookahead=1`` the next block column is updated
first and its panel factored (and its broadcast started) before the rest of the update.
The interchanges of the already factored L columns are deferred to the end: one composed
permutation per block column (each row moves once) instead of one pass per later step.

Pivot vector (``LUFactor.piv``): LAPACK's ipiv, 0-based and global: row ``i`` was interchanged
with row ``piv[i]`` (``piv[i] >= i``), applied in order ``i = 0, 1, ..., min(m, n) - 1``.
``LUFactor.perm`` is the same as a permutation: ``P A = L U`` with ``(P A)[i] = A[perm[i]]``.

Algorithm notes: docs/lu.md.
"""
from __future__ import annotations

import math
import numbers
import warnings

import numpy as np

from ..errors import LinAlgWarning, SingularMatrixError, agree, collective
from ..matrix import DistMatrix, check_compatible
from ..pblas import normalize_trans, shares_storage, triangular_solve
from ..trace import trace
from ..validate import (
    _first_nonfinite,
    check_finite_result,
    check_flags,
    check_writable,
    signature,
    writable_everywhere,
)
from ..validate import check_finite as check_finite_
from ._lu_loop import LULoop
from ._pivoting import ipiv_to_perm, largest_multiplier, permute_rows
from .condition import (
    lapack_rcond,
    rcond_estimate,
    solve_and_rcond,
    warn_if_ill_conditioned,
    warn_if_subnormal_scale,
)
from .methods import GEMM_MODES, PIVOTING, check_gemm_mode, pivoting_name
from .mixed import (
    check_mixed,
    check_refinement_options,
    double_info,
    mixed_solve,
)

__all__ = ["LUFactor", "lu_factor", "lu_solve", "lu_solve_rcond", "solve_lu", "PIVOTING",
           "GEMM_MODES", "default_pivot_threshold", "REFINED_PIVOT_THRESHOLD"]

#: GENP whose solutions are refined in a higher precision (RBT, mixed precision): the smallest
#: accepted |u_jj| / max_i |a_ij^(j)| (moderate growth is refined away; docs/lu.md)
REFINED_PIVOT_THRESHOLD = 1e-10


def default_pivot_threshold(dtype) -> float:
    """GENP's default ``pivot_threshold`` for factors used as they are: ``sqrt(eps)`` of the
    dtype's precision (1.5e-8 for float64, 3.5e-4 for float32), so that element growth
    leaves at least about half of the digits (docs/lu.md)."""
    return float(np.sqrt(np.finfo(np.dtype(dtype)).eps))


# --------------------------------------------------------------------------------------------
class LUFactor:
    """The result of :func:`lu_factor`.

    ``lu``: DistMatrix in A's layout, unit L strictly below the diagonal, U on and above.
    ``piv``: int64 NumPy array of length ``min(m, n)``, the same on every rank (LAPACK ipiv,
    0-based: row i was interchanged with row piv[i], in order i = 0, 1, ...).
    ``perm``: int64 array of length m with ``(P A)[i] = A[perm[i]]`` and ``P A = L U``.
    ``pivoting``: 'partial' | 'tournament' | 'none'; ``tree``: the tournament tree.
    """

    def __init__(self, lu: DistMatrix, piv: np.ndarray, pivoting: str, max_abs_a: float,
                 tree: str | None = None):
        self.lu = lu
        lu.lu_factor = True         # (logdet, which reads a Cholesky factor, refuses it)
        lu.cholesky_lower = None    # (A's storage may have held a Cholesky factor before)
        self.piv = piv
        self.pivoting = pivoting
        self.tree = tree
        self.max_abs_a = float(max_abs_a)
        self.anorm = None          # ||A||_1, set by lu_factor
        self._perm = None
        self._rcond = None
        self._growth = None         # growth_factor(), once read
        self.max_multiplier = None  # max |l_ij| (GENP with its pivot checks; 1 for GEPP)

    def rcond(self, anorm: float | None = None) -> float:
        """Collective: reciprocal 1-norm condition estimate of A (pdgecon; cached), the same
        float on every rank. ``anorm``: ``||A||_1`` to use instead of the one recorded at
        factorization (:func:`distla.linalg.rcond` passes its A's); the factor is not
        changed by it."""
        if self.lu.m != self.lu.n:       # (descriptors: every rank raises alike)
            raise ValueError(f"rcond needs a square factorization, got {self.lu.shape}")
        if anorm is not None and anorm != self.anorm:
            return rcond_estimate(anorm, self.lu, *_inverse_ops(self), inverses=False,
                                  local=lapack_rcond(self.lu, anorm, "lu"))
        if self._rcond is None:
            if self.anorm is None:
                raise ValueError("this LUFactor has no ||A||_1; use distla.linalg.rcond(A, F)")
            self._rcond = rcond_estimate(self.anorm, self.lu, *_inverse_ops(self),
                                         inverses=False,
                                         local=lapack_rcond(self.lu, self.anorm, "lu"))
        return self._rcond

    @property
    def shape(self):
        return self.lu.shape

    @property
    def perm(self) -> np.ndarray:
        if self._perm is None:
            self._perm = ipiv_to_perm(self.piv, self.lu.m)
        return self._perm

    def growth_factor(self) -> float:
        """Collective: ``max |U| / max |A|`` (the element growth of the elimination; GEPP's
        bound is ``2^(n-1)``, tournament pivoting's is larger, GENP's unbounded). Returns inf
        for a zero A. One read of U, a block column at a time (no temporaries for real U)."""
        if self._growth is None:
            U = self.lu
            loc = float(U.backend.to_host(U.backend.upper_max_abs(
                U.local, U.row_indices(), U.col_indices(), U.nb))) if U.local.size else 0.0
            mu = U.grid.allreduce(loc, "max")
            self._growth = mu / self.max_abs_a if self.max_abs_a > 0 else math.inf
        return self._growth

    def solve(self, B: DistMatrix, trans: bool = False, overwrite_b: bool = False):
        """Collective: same as :func:`lu_solve` (``self``, B)."""
        return lu_solve(self, B, trans=trans, overwrite_b=overwrite_b)

    def __repr__(self) -> str:
        return f"LUFactor(pivoting={self.pivoting!r}, lu={self.lu!r})"


def _inverse_ops(F):
    """``(X -> A^-1 X, X -> A^-H X)`` with the factors F, for the condition estimate."""
    return (lambda X: lu_solve(F, X, overwrite_b=True, check_finite=False),
            lambda X: lu_solve(F, X, trans="C", overwrite_b=True, check_finite=False))


# --------------------------------------------------------------------------------------------
def _check_matrix(A, name="A"):
    if not isinstance(A, DistMatrix):
        raise TypeError(f"{name} must be a DistMatrix, not {type(A).__name__}")
    if A.mb != A.nb:
        raise ValueError(f"{name} needs square blocks (mb == nb, as ScaLAPACK's getrf), "
                         f"got {A.block}; redistribute(block=({A.nb}, {A.nb})) first")
    if A.dtype.kind not in "fc":
        raise TypeError(f"{name} must be float32, float64, complex64 or complex128")
    if A.device == "gpu" and A.dtype.kind == "c":
        raise TypeError("complex LU is only available on CPU ranks")


def lu_factor(A: DistMatrix, pivoting: str = "partial", overwrite_a: bool = False,
              tree: str = "binary", lookahead: int = 1, gemm: str = "native",
              check_finite: bool = True, pivot_threshold: float | None = None
              ) -> LUFactor:
    """LU factorization ``P A = L U`` of the ``m x n`` DistMatrix A (square blocks). Collective
    over A's grid.

    ``pivoting``: 'partial' (GEPP, pdgetrf), 'tournament' (CALU; ``tree`` 'binary' or 'flat'
    shapes the reduction over each process column) or 'none' (GENP). ``overwrite_a``: factor in
    A's storage. ``lookahead``: 0 or 1 (values > 1 act as 1: one panel ahead is what hides the
    panel). Phases are timed by an active :class:`distla.trace.Tracer`. ``gemm``: 'native'
    (trailing updates in A's precision) or, for float32 A, a tensor-core mode
    (:data:`GEMM_MODES`, docs/mixed.md): 'tf32x3' (each update one TF32 GEMM of split
    operands, about float32's accuracy at several times float32's rate), 'fp16x3' (the same
    accuracy from two fp16 GEMMs of scaled high and low halves), 'tf32', 'fp16' or
    'bf16' (operands rounded to that format, per-block scaled, float32 accumulation; panels
    stay float32). Devices without tensor cores (CPU ranks) compute all of them in float32.

    ``check_finite``: scan A for NaN/Inf first (ValueError naming one such entry).
    ``pivot_threshold`` (GENP only): a pivot smaller than ``pivot_threshold`` times the
    largest entry of its column at that step (the one partial pivoting would choose, so a
    multiplier ``|l_ij| > 1 / pivot_threshold``) raises :class:`distla.SingularMatrixError`
    saying that the matrix needs pivoting (ValueError with another pivoting, which has no
    use for it); the default (None: ``sqrt(eps)``, :func:`default_pivot_threshold`: 1.5e-8
    in float64, 3.5e-4 in float32) flags element growth that would leave less than about
    half of the digits; solvers that refine GENP's solutions (RBT, mixed precision) use
    :data:`REFINED_PIVOT_THRESHOLD` (1e-10); 0 turns the check off. It costs one pass over
    the factors and two small reductions.

    Raises (on every rank) ``ValueError``/``TypeError`` for bad input before any work, and
    :class:`distla.SingularMatrixError` (``.index`` = 0-based global column of the first
    exactly zero pivot) after the loop: the factorization always runs to the end with the same
    collectives on every rank. A factorization that overflows (non-finite factors from finite
    input) raises :class:`distla.DistlaError`. The factor object's :meth:`LUFactor.rcond`
    estimates the reciprocal condition number.
    """
    with collective(A.grid.comm if isinstance(A, DistMatrix) else None,
                    signature("lu_factor", A, pivoting=pivoting, tree=tree,
                              lookahead=lookahead, gemm=gemm,
                              pivot_threshold=pivot_threshold, overwrite_a=overwrite_a,
                              check_finite=check_finite)):
        _check_matrix(A)
        pivoting = pivoting_name(pivoting)
        if tree not in ("binary", "flat"):
            raise ValueError(f"tree must be 'binary' or 'flat', not {tree!r}")
        if tree != "binary" and pivoting != "tournament":   # (it would do nothing)
            raise ValueError(f"tree={tree!r} shapes tournament pivoting (CALU) only, not "
                             f"pivoting={pivoting!r}")
        if not isinstance(lookahead, numbers.Integral) or isinstance(lookahead, bool) \
                or lookahead < 0:
            raise ValueError(f"lookahead must be a non-negative int, not {lookahead!r}")
        check_flags("lu_factor", overwrite_a=overwrite_a, check_finite=check_finite)
        if overwrite_a:
            check_writable(A, "lu_factor")
        check_gemm_mode(gemm, A)
        if pivot_threshold is not None and pivoting != "none":
            raise ValueError(f"pivot_threshold applies to LU without pivoting (pivoting="
                             f"'none', method 'genp') only, not to pivoting={pivoting!r}")
        pivot_threshold = default_pivot_threshold(A.dtype) if pivot_threshold is None else \
            pivot_threshold
        if not (isinstance(pivot_threshold, numbers.Real) and 0 <= pivot_threshold < 1):
            raise ValueError(f"pivot_threshold must be a number in [0, 1), not "
                             f"{pivot_threshold!r}")
    # ||A||_1 and max |a_ij| in one pass over A, which also proves A finite (NaN and
    # infinities propagate into the sums): only when they are not is A scanned for the entry
    anorm, max_a = A.norm((1, "max"))
    if check_finite and not (np.isfinite(anorm) and np.isfinite(max_a)):
        check_finite_(("A", A), what="lu_factor")   # raises unless a finite sum overflowed
    with collective(A.grid.comm):   # (out of memory on one rank: raised on every rank)
        F = A if overwrite_a else A.copy()
    drv = LULoop(F, pivoting, tree, int(lookahead), compute=gemm)
    piv = drv.run()
    out = LUFactor(F, piv, pivoting, max_a, tree if pivoting == "tournament" else None)
    out.anorm = anorm
    genp_checks = pivoting == "none" and pivot_threshold > 0
    with trace("check"):
        drv.agree_singular()
        if check_finite:   # finite input: non-finite factors mean overflow (checked before
            check_finite_result(F, "lu_factor")     # the pivots, which overflow would blame)
        if genp_checks:
            out.max_multiplier = _check_pivots(F, min(F.m, F.n), float(pivot_threshold))
            _check_growth(out, float(pivot_threshold))
    return out


#: why GENP's factors can hold NaN where the elimination needed no pivoting
_NONFINITE_CAUSE = ("A holds NaN or Inf (check_finite=False skipped the check that names "
                    "A's entry), or the elimination overflowed")
#: what GENP adds: its overflow comes from a tiny pivot
_GENP_OVERFLOW = " (a tiny pivot: the matrix needs pivoting; use method 'gepp', 'calu' or 'rbt')"


def _check_growth(F, threshold: float) -> None:
    """Collective: raise SingularMatrixError on every rank if GENP's element growth
    ``max |U| / max |A|`` exceeds ``1 / threshold``: its multipliers can all be moderate
    while U grows (Wilkinson's matrix: multipliers 1, growth 2^(n-1)), and the backward error
    grows with it (docs/lu.md). An empty (or zero) A has no growth."""
    if not F.max_abs_a > 0:
        return
    g = F.growth_factor()
    err = None
    if np.isnan(g):
        err = SingularMatrixError(-1, f"the LU factorization without pivoting has NaN in its "
                                  f"factors: {_NONFINITE_CAUSE}{_GENP_OVERFLOW}")
    elif not g <= 1.0 / threshold:
        err = SingularMatrixError(
            -1, f"element growth {g:.2g} in the LU factorization without pivoting "
            f"(max |U| / max |A| > 1 / pivot_threshold = {1.0 / threshold:.2g}): the "
            f"factors would lose the solution's accuracy; the matrix needs pivoting (use "
            f"pivoting='partial' or 'tournament', or method 'gepp', 'calu' or 'rbt')")
    agree(F.lu.grid.comm, err)


def warn_if_large_growth(F, what: str) -> None:
    """Collective: warn with :class:`distla.LinAlgWarning` (every rank) when the element
    growth of F's elimination exceeds ``1 / sqrt(eps)``: the backward error bound
    ``n growth eps`` then leaves less than half of the digits (GEPP's rare worst cases,
    such as Wilkinson's matrix with growth 2^(n-1); LAPACK's xGESVX reports it as RPVGRW).
    Without pivoting the bound is ``n eps max|L| max|U| / max|A|``: the largest multiplier
    (when ``lu_factor`` measured it) multiplies the growth, as each may stay below its own
    limit while their product does not (a standard-normal A of n = 300: multipliers 6e4,
    growth 3e4, scaled residual 300 times ScaLAPACK's threshold)."""
    if not F.max_abs_a > 0:
        return
    g = F.growth_factor()
    mult = F.max_multiplier if F.pivoting == "none" and F.max_multiplier is not None else 1.0
    limit = 1.0 / np.sqrt(np.finfo(F.lu.dtype).eps)
    if np.isnan(g):
        warnings.warn(f"{what}: the LU factors hold NaN: {_NONFINITE_CAUSE}; the result is "
                      f"not a solution", LinAlgWarning, stacklevel=3)
    elif mult > 1.0 and not g * mult <= limit:
        warnings.warn(f"{what}: large element growth in the LU factorization without "
                      f"pivoting (max |L| max |U| / max |A| = {mult:.3g} x {g:.3g} > "
                      f"{limit:.2g}): the result may not be accurate; pivoting "
                      f"(method='gepp' or 'calu') or method='rbt' may do better",
                      LinAlgWarning, stacklevel=3)
    elif not g <= limit:
        warnings.warn(f"{what}: large element growth in the LU factorization (max |U| / "
                      f"max |A| = {g:.3g} > {limit:.2g}): the result may not be accurate; "
                      f"method='rbt' or a refined solve may do better", LinAlgWarning,
                      stacklevel=3)


def _check_pivots(F, kmax: int, threshold: float) -> float:
    """Collective: raise SingularMatrixError on every rank if a GENP pivot is tiny relative
    to its column (a multiplier above ``1 / threshold``; docs/lu.md); else return the largest
    multiplier ``max |l_ij|`` (the same on every rank)."""
    growth = largest_multiplier(F, kmax)
    bad = np.flatnonzero(~(growth <= 1.0 / threshold))
    err = None
    hit = None
    if bad.size:        # (NaN and overflow count as infinite multipliers: name them)
        hit = F.grid.comm.allgather(_first_nonfinite(F))
        hit = next((h for h in hit if h is not None), None)
    if hit is not None:
        err = SingularMatrixError(int(bad[0]), f"the LU factorization without pivoting has a "
                                  f"non-finite value ({hit[2].real if hit[2].imag == 0 else hit[2]}"
                                  f") at ({hit[0]}, {hit[1]}): {_NONFINITE_CAUSE}{_GENP_OVERFLOW}")
    elif bad.size:
        j = int(bad[0])
        err = SingularMatrixError(
            j, f"tiny pivot at column {j} (0-based) of the LU factorization without pivoting: "
            f"|U[{j}, {j}]| is {1 / growth[j]:.2g} times the largest entry of its column "
            f"(< pivot_threshold = {threshold:g}); the matrix needs pivoting (use "
            f"pivoting='partial' or 'tournament', or method 'gepp', 'calu' or 'rbt'; "
            f"pivot_threshold=0 accepts these factors)")
    agree(F.grid.comm, err)
    return float(growth.max()) if growth.size else 0.0


# --------------------------------------------------------------------------------------------
def _check_rhs(F, B):
    if not isinstance(F, LUFactor):
        raise TypeError(f"expected an LUFactor from lu_factor, not {type(F).__name__}")
    A = F.lu
    check_compatible(A, B, "lu_solve")
    if getattr(A, "lu_factor", None) is not True:
        raise ValueError("lu_solve: F.lu no longer holds lu_factor's LU matrix (its storage "
                         "was factored again, e.g. by cholesky(..., overwrite_a=True)); "
                         "call lu_factor again")
    if A.m != A.n:
        raise ValueError(f"lu_solve needs a square factorization, got {A.shape}")
    if B.m != A.n:
        raise ValueError(f"B has {B.m} rows, the matrix is {A.n} x {A.n}")


def _permute(B, dest, src):
    """Collective: B[dest[t]] = old B[src[t]] (rows; global indices, any order)."""
    o = np.argsort(dest, kind="stable")
    g = B.grid
    permute_rows(B.local, np.asarray(dest)[o], np.asarray(src)[o], mb=B.mb, rsrc=B.rsrc,
                 nprow=g.nprow, myrow=g.myrow, comm=g.comms(B.device).col,
                 segs=[slice(0, B.local.shape[1])], backend=B.backend)


def _solve_comm(F, B):
    """The communicator a solve with factors ``F`` agrees on: the factors' grid's (ranks
    passing B on different grids then fail together there), else B's."""
    lu = getattr(F, "lu", None)
    if isinstance(lu, DistMatrix):
        return lu.grid.comm
    return B.grid.comm if isinstance(B, DistMatrix) else None


def lu_solve(F: LUFactor, B: DistMatrix, trans=False, overwrite_b: bool = False,
             check_finite: bool = True) -> DistMatrix:
    """Solve ``A X = B``, ``A^T X = B`` or ``A^H X = B`` from ``F = lu_factor(A)``.
    ``trans``: ``False``/``0``/``'N'``, ``True``/``1``/``'T'`` (transpose) or ``2``/``'C'``
    (conjugate transpose; the same as ``'T'`` for real matrices), as SciPy's ``lu_solve``.
    Collective over the grid. B: n x nrhs DistMatrix on the same grid, device and dtype (in
    another row blocking than A's (``mb``, ``rsrc``) it is redistributed to A's first).
    Returns X in B's layout (in B's storage if ``overwrite_b`` and B has A's row blocking;
    otherwise a new matrix, B unchanged). Row interchanges are applied to B by one pairwise
    exchange along process columns, then the unit-lower and upper triangular solves
    (:func:`distla.pblas.triangular_solve`)."""
    with collective(_solve_comm(F, B),
                    signature("lu_solve", getattr(F, "lu", F), B, trans=trans,
                              overwrite_b=overwrite_b, check_finite=check_finite)):
        t = normalize_trans(trans)
        _check_rhs(F, B)
    if check_finite:
        check_finite_(("B", B), what="lu_solve")
    A = F.lu
    B0 = B
    if overwrite_b:         # B a view of the factor: solve in a copy, keep the factor intact
        overwrite_b = not shares_storage(B, A) and writable_everywhere(B)   # (read-only B too)
    if (B.mb, B.rsrc) != (A.mb, A.rsrc):   # work in A's row blocking, answer in B's layout
        B, overwrite_b = B.redistribute(block=(A.mb, B.nb), src=(A.rsrc, B.csrc)), True
    X = B if overwrite_b else B.copy()
    conj = t == "C" and A.dtype.kind == "c"
    trans = t != "N"
    if conj:  # A^H x = b  <=>  A^T conj(x) = conj(b)
        X.local[...] = X.xp.conj(X.local)
    perm = F.perm
    moved = np.flatnonzero(perm != np.arange(A.m))
    if not trans:
        _permute(X, moved, perm[moved])
        X = triangular_solve(A, X, lower=True, unit_diagonal=True, overwrite_b=True)
        X = triangular_solve(A, X, lower=False, overwrite_b=True)
    else:
        X = triangular_solve(A, X, lower=False, trans=True, overwrite_b=True)
        X = triangular_solve(A, X, lower=True, trans=True, unit_diagonal=True, overwrite_b=True)
        _permute(X, perm[moved], moved)
    if conj:
        X.local[...] = X.xp.conj(X.local)
    if not X.same_layout(B0):
        X = X.redistribute(block=B0.block, src=B0.src)
    return X


def lu_solve_rcond(F: LUFactor, B: DistMatrix, check_finite: bool = True,
                   overwrite_b: bool = False):
    """Collective: ``(lu_solve(F, B), F.rcond())`` for less than the two cost apart: up to
    13 right-hand sides, the estimator's first block (3 columns) is solved in the same
    triangular sweeps as B, so the estimate adds two solves instead of three
    (:func:`distla.linalg.condition.solve_and_rcond`). The estimate is cached in F.
    ``overwrite_b`` as in :func:`lu_solve`."""
    with collective(_solve_comm(F, B),
                    signature("lu_solve_rcond", getattr(F, "lu", F), B,
                              check_finite=check_finite, overwrite_b=overwrite_b)):
        _check_rhs(F, B)
        if F.anorm is None:
            raise ValueError("this LUFactor has no ||A||_1; use distla.linalg.rcond(A, F)")
    if check_finite:
        check_finite_(("B", B), what="lu_solve")
    X, rc = solve_and_rcond(      # (no inverted diagonal blocks: docs/condition.md)
        B, F.lu, lambda M: lu_solve(F, M, overwrite_b=True, check_finite=False), F.anorm,
        *_inverse_ops(F), inverses=False, local=lapack_rcond(F.lu, F.anorm, "lu"),
        overwrite_b=overwrite_b)
    F._rcond = rc
    return X, rc


def solve_lu(A: DistMatrix, B: DistMatrix, pivoting: str = "partial", trans=False,
             overwrite_a: bool = False, overwrite_b: bool = False, check_finite: bool = True,
             check_rcond: bool = True, precision: str = "double", factor_dtype=None,
             max_iter: int | None = None, fallback: bool | None = None,
             return_info: bool = False, **kw) -> DistMatrix:
    """Collective: solve ``A X = B`` by :func:`lu_factor` + :func:`lu_solve` (A square).
    Extra keywords (``tree``, ``lookahead``) go to :func:`lu_factor`. ``overwrite_a``: A may
    hold the packed LU factors afterwards (as :func:`lu_factor`'s; not with
    ``precision='mixed'``, which leaves A unchanged); ``overwrite_b``: X may be B's storage.
    ``check_finite``: NaN/Inf in A or B raise ValueError first. ``check_rcond``: estimate the
    condition number from the factors (a few O(n^2) solves) and warn with
    :class:`distla.LinAlgWarning` when rcond < eps, like ``scipy.linalg.solve``.

    ``precision='mixed'`` (float64/complex128 A, ``trans=False``): LU of a float32 copy with
    updates in ``factor_dtype`` ('fp32'; GPU ranks also 'tf32', 'fp16', 'bf16'; default 'fp32'
    (float32-accurate factors) on every device), refined to A's precision, with the float64
    solve as fallback (:mod:`distla.linalg.mixed`; ``max_iter``, ``fallback``: given without
    it, ValueError). ``return_info=True`` returns ``(X, SolveInfo)``."""
    with collective(A.grid.comm if isinstance(A, DistMatrix) else None,
                    signature("solve_lu", A, B, pivoting=pivoting, trans=trans,
                              precision=precision, factor_dtype=factor_dtype,
                              overwrite_a=overwrite_a, overwrite_b=overwrite_b,
                              check_finite=check_finite, check_rcond=check_rcond,
                              max_iter=max_iter, fallback=fallback, return_info=return_info,
                              **kw)):
        _check_matrix(A)
        if A.m != A.n:
            raise ValueError(f"solve_lu needs a square matrix, got {A.shape}")
        if not isinstance(B, DistMatrix):
            raise TypeError(f"B must be a DistMatrix, not {type(B).__name__}")
        if B.m != A.n:
            raise ValueError(f"B has {B.m} rows, A is {A.n} x {A.n}")
        check_compatible(A, B, "solve_lu")     # the same classes as every other solver
        fd = check_mixed(A, precision, factor_dtype, "solve_lu")
        max_iter, fallback = check_refinement_options(max_iter, fallback, "solve_lu",
                                                        refines=fd is not None)
        check_flags("solve_lu", overwrite_a=overwrite_a, overwrite_b=overwrite_b,
                    check_finite=check_finite, check_rcond=check_rcond,
                    return_info=return_info)
        if fd is not None and "gemm" in kw:
            raise ValueError(f"solve_lu: precision='mixed' sets the updates' precision "
                             f"through factor_dtype (one of {', '.join(A.backend.LOWP)} here), "
                             f"not gemm={kw['gemm']!r}")
        t = normalize_trans(trans)
        if fd is not None and t != "N":
            raise ValueError("solve_lu: precision='mixed' solves A X = B only (trans=False)")
    method = _METHOD[pivoting_name(pivoting)]
    if fd is not None:
        if check_finite:
            check_finite_(("A", A), ("B", B), what="solve_lu")
        X, info = _solve_mixed(A, B, pivoting, fd, max_iter, fallback, check_rcond, kw)
        if check_finite:    # finite A and B: a non-finite X means the solves overflowed
            check_finite_result(X, "solve_lu")
        return (X, info) if return_info else X
    if check_finite:      # A's own check rides on the factorization's pass for ||A||_1
        check_finite_(("B", B), what="solve_lu")
    if overwrite_a and shares_storage(B, A):   # factoring in place would overwrite B
        B, overwrite_b = B.copy(), True
    F = lu_factor(A, pivoting=pivoting, overwrite_a=overwrite_a, check_finite=check_finite,
                  **kw)
    if check_rcond and t == "N":   # the estimate's first solve rides along
        X, _ = lu_solve_rcond(F, B, check_finite=False, overwrite_b=overwrite_b)
    else:
        X = lu_solve(F, B, trans=trans, overwrite_b=overwrite_b, check_finite=False)
    if check_rcond:       # (the growth: one read of U, kept for the growth warning)
        growth = F.growth_factor() if F.max_abs_a > 0 else None
        warn_if_ill_conditioned(F.rcond(), A.dtype, "solve_lu", growth=growth)
    warn_if_large_growth(F, "solve_lu")     # (GENP: with its largest multiplier)
    warn_if_subnormal_scale(F.max_abs_a, A.dtype, "solve_lu")
    if check_finite:        # finite A and B: a non-finite X means the solves overflowed
        check_finite_result(X, "solve_lu")
    return (X, double_info(A, method, F.rcond() if check_rcond else None)) if return_info \
        else X


_METHOD = {"partial": "gepp", "tournament": "calu", "none": "genp"}


def _solve_mixed(A, B, pivoting, fd, max_iter, fallback, check_rcond, kw):
    """Collective: the mixed-precision LU solve (:func:`distla.linalg.mixed.mixed_solve`)."""
    B0 = B
    if (B.mb, B.rsrc) != (A.mb, A.rsrc):   # refine in A's row blocking
        B = B.redistribute(block=(A.mb, B.nb), src=(A.rsrc, B.csrc))

    def promote(F):
        G = LUFactor(F.lu.astype(A.dtype), F.piv, F.pivoting, F.max_abs_a, F.tree)
        G.anorm = F.anorm
        return G

    def localize(F, rep):   # (the pivots are global, the same on every rank)
        G = LUFactor(rep(F.lu), F.piv, F.pivoting, F.max_abs_a, F.tree)
        G.anorm = F.anorm
        return G

    refined_kw = dict(kw)    # GENP's factors are refined here: moderate growth is fine
    if pivoting_name(pivoting) == "none":
        refined_kw.setdefault("pivot_threshold", REFINED_PIVOT_THRESHOLD)

    def apply(F, C):
        return lu_solve(F, C, overwrite_b=True, check_finite=False)

    def apply_h(F, C):
        return lu_solve(F, C, trans=2, overwrite_b=True, check_finite=False)

    X, info = mixed_solve(
        A, B, method=_METHOD[pivoting_name(pivoting)], factor_dtype=fd,
        factor=lambda A32, gemm: lu_factor(A32, pivoting=pivoting, overwrite_a=True,
                                           check_finite=False, gemm=gemm, **refined_kw),
        apply=apply, apply_h=apply_h, promote=promote, localize=localize,
        max_iter=max_iter, fallback=fallback, check_rcond=check_rcond,
        full=lambda: solve_lu(A, B, pivoting=pivoting, check_finite=False,
                              check_rcond=check_rcond, return_info=True, **kw))
    if not X.same_layout(B0):
        X = X.redistribute(block=B0.block, src=B0.src)
    return X, info
