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

import numpy as np

from ..errors import collective
from ..matrix import DistMatrix, check_compatible
from ..pblas import norm, triangular_solve
from ..trace import trace
from ..validate import check_finite as check_finite_
from ..validate import check_finite_result, signature
from ._lu_loop import LULoop
from ._pivoting import ipiv_to_perm, permute_rows
from .condition import rcond_estimate, warn_if_ill_conditioned
from .methods import PIVOTING, pivoting_name

__all__ = ["LUFactor", "lu_factor", "lu_solve", "solve_lu", "PIVOTING"]


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
        self.piv = piv
        self.pivoting = pivoting
        self.tree = tree
        self.max_abs_a = float(max_abs_a)
        self.anorm = None          # ||A||_1, set by lu_factor
        self._perm = None
        self._rcond = None

    def rcond(self) -> float:
        """Collective: reciprocal 1-norm condition estimate of A (pdgecon; cached), the same
        float on every rank."""
        if self._rcond is None:
            if self.anorm is None:
                raise ValueError("this LUFactor has no ||A||_1; use distla.linalg.rcond(A, F)")
            self._rcond = rcond_estimate(
                self.anorm, self.lu, lambda X: lu_solve(self, X, overwrite_b=True,
                                                        check_finite=False),
                lambda X: lu_solve(self, X, trans="C", overwrite_b=True, check_finite=False))
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
        for a zero A."""
        U = self.lu
        xp = U.xp
        I = xp.asarray(U.row_indices()).reshape(-1, 1)
        J = xp.asarray(U.col_indices()).reshape(1, -1)
        loc = 0.0
        if U.local.size:
            loc = float(xp.max(xp.where(I <= J, xp.abs(U.local), 0)))
        mu = U.grid.allreduce(loc, "max")
        return mu / self.max_abs_a if self.max_abs_a > 0 else math.inf

    def solve(self, B: DistMatrix, trans: bool = False, overwrite_b: bool = False):
        """Collective: same as :func:`lu_solve` (``self``, B)."""
        return lu_solve(self, B, trans=trans, overwrite_b=overwrite_b)

    def __repr__(self) -> str:
        return f"LUFactor(pivoting={self.pivoting!r}, lu={self.lu!r})"


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


def _max_abs(A) -> float:
    """Collective: max |a_ij| over the whole matrix (in column slabs: no full-size temporary,
    so ``overwrite_a=True`` needs only O(n nb) memory beyond A)."""
    return A.norm("max")


def lu_factor(A: DistMatrix, pivoting: str = "partial", overwrite_a: bool = False,
              tree: str = "binary", lookahead: int = 1, gemm: str = "native",
              check_finite: bool = True) -> LUFactor:
    """LU factorization ``P A = L U`` of the ``m x n`` DistMatrix A (square blocks). Collective
    over A's grid.

    ``pivoting``: 'partial' (GEPP, pdgetrf), 'tournament' (CALU; ``tree`` 'binary' or 'flat'
    shapes the reduction over each process column) or 'none' (GENP). ``overwrite_a``: factor in
    A's storage. ``lookahead``: 0 or 1 (values > 1 act as 1: one panel ahead is what hides the
    panel). Phases are timed by an active :class:`distla.trace.Tracer`. ``gemm``: 'native'
    (trailing updates in A's precision) or 'tf32x3' (float32 only: on GPU ranks each update is
    one TF32 tensor-core GEMM of split operands, three products of 10-bit-mantissa halves,
    about float32's accuracy (~2^-21 relative) at several times float32's rate; CPU ranks
    compute it in float32 as usual).

    ``check_finite``: scan A for NaN/Inf first (ValueError naming one such entry).

    Raises (on every rank) ``ValueError``/``TypeError`` for bad input before any work, and
    :class:`distla.SingularMatrixError` (``.index`` = 0-based global column of the first
    exactly zero pivot) after the loop: the factorization always runs to the end with the same
    collectives on every rank. A factorization that overflows (non-finite factors from finite
    input) raises :class:`distla.DistlaError`. The factor object's :meth:`LUFactor.rcond`
    estimates the reciprocal condition number.
    """
    with collective(A.grid.comm if isinstance(A, DistMatrix) else None,
                    signature("lu_factor", A, pivoting=pivoting, tree=tree,
                              lookahead=lookahead, gemm=gemm)):
        _check_matrix(A)
        pivoting = pivoting_name(pivoting)
        if tree not in ("binary", "flat"):
            raise ValueError(f"tree must be 'binary' or 'flat', not {tree!r}")
        if not isinstance(lookahead, numbers.Integral) or lookahead < 0:
            raise ValueError(f"lookahead must be a non-negative int, not {lookahead!r}")
        if gemm not in ("native", "tf32x3"):
            raise ValueError(f"gemm must be 'native' or 'tf32x3', not {gemm!r}")
        if gemm == "tf32x3" and A.dtype != np.float32:
            raise TypeError(f"gemm='tf32x3' needs a float32 matrix, not {A.dtype}")
    if check_finite:
        check_finite_(("A", A), what="lu_factor")
    anorm = norm(A, 1)
    F = A if overwrite_a else A.copy()
    max_a = _max_abs(F)
    drv = LULoop(F, pivoting, tree, int(lookahead),
                 tf32x3=gemm == "tf32x3" and A.backend.is_gpu)
    piv = drv.run()
    with trace("check"):
        drv.agree_singular()
        if check_finite:   # finite input: non-finite factors mean overflow
            check_finite_result(F, "lu_factor")
    out = LUFactor(F, piv, pivoting, max_a, tree if pivoting == "tournament" else None)
    out.anorm = anorm
    return out


# --------------------------------------------------------------------------------------------
def _check_rhs(F, B):
    if not isinstance(F, LUFactor):
        raise TypeError(f"expected an LUFactor from lu_factor, not {type(F).__name__}")
    A = F.lu
    check_compatible(A, B, "lu_solve")
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


def _norm_trans(trans) -> str:
    """'N', 'T' or 'C' from the accepted spellings (SciPy's 0 / 1 / 2, booleans, letters)."""
    t = {0: "N", 1: "T", 2: "C"}.get(int(trans)) \
        if isinstance(trans, (bool, int, np.integer)) else \
        (trans.upper() if isinstance(trans, str) and trans.upper() in ("N", "T", "C") else None)
    if t is None:
        raise ValueError(f"trans must be False/True, 0/1/2 or 'N'/'T'/'C', not {trans!r}")
    return t


def lu_solve(F: LUFactor, B: DistMatrix, trans=False, overwrite_b: bool = False,
             check_finite: bool = True) -> DistMatrix:
    """Solve ``A X = B``, ``A^T X = B`` or ``A^H X = B`` from ``F = lu_factor(A)``.
    ``trans``: ``False``/``0``/``'N'``, ``True``/``1``/``'T'`` (transpose) or ``2``/``'C'``
    (conjugate transpose; the same as ``'T'`` for real matrices), as SciPy's ``lu_solve``.
    Collective over the grid. B: n x nrhs DistMatrix on the same grid, device and dtype, with
    A's row blocking (``mb``, ``rsrc``). Returns X in B's layout (in B's storage if
    ``overwrite_b``). Row interchanges are applied to B by one pairwise exchange along process
    columns, then the unit-lower and upper triangular solves (:func:`distla.pblas.
    triangular_solve`)."""
    with collective(B.grid.comm if isinstance(B, DistMatrix) else None,
                    signature("lu_solve", getattr(F, "lu", F), B, trans=trans)):
        t = _norm_trans(trans)
        _check_rhs(F, B)
    if check_finite:
        check_finite_(("B", B), what="lu_solve")
    A = F.lu
    B0 = B
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


def solve_lu(A: DistMatrix, B: DistMatrix, pivoting: str = "partial", trans=False,
             overwrite_a: bool = False, overwrite_b: bool = False, check_finite: bool = True,
             check_rcond: bool = True, **kw) -> DistMatrix:
    """Collective: solve ``A X = B`` by :func:`lu_factor` + :func:`lu_solve` (A square).
    Extra keywords (``tree``, ``lookahead``) go to :func:`lu_factor`. ``check_finite``: NaN/Inf
    in A or B raise ValueError first. ``check_rcond``: estimate the condition number from the
    factors (a few O(n^2) solves) and warn with :class:`distla.LinAlgWarning` when
    rcond < eps, like ``scipy.linalg.solve``."""
    with collective(A.grid.comm if isinstance(A, DistMatrix) else None,
                    signature("solve_lu", A, B, pivoting=pivoting, trans=trans, **kw)):
        _check_matrix(A)
        if A.m != A.n:
            raise ValueError(f"solve_lu needs a square matrix, got {A.shape}")
        if not isinstance(B, DistMatrix):
            raise TypeError(f"B must be a DistMatrix, not {type(B).__name__}")
        if B.m != A.n:
            raise ValueError(f"B has {B.m} rows, A is {A.n} x {A.n}")
        if B.dtype != A.dtype or B.device != A.device or B.grid != A.grid:
            raise ValueError("A and B must share grid, device and dtype")
    if check_finite:
        check_finite_(("A", A), ("B", B), what="solve_lu")
    F = lu_factor(A, pivoting=pivoting, overwrite_a=overwrite_a, check_finite=False, **kw)
    X = lu_solve(F, B, trans=trans, overwrite_b=overwrite_b, check_finite=False)
    if check_rcond:
        warn_if_ill_conditioned(F.rcond(), A.dtype, "solve_lu")
    return X
