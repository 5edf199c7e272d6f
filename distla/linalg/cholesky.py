"""Distributed Cholesky: factor (pdpotrf), solve (pdpotrs / pdposv), log-determinant.

The factorization is ScaLAPACK's right-looking blocked algorithm over the block columns of the
2D block-cyclic layout (lower triangle, square ``nb x nb`` blocks), with lookahead. Step k, for
the diagonal block (k, k) owned by process (pr, pc) = ((rsrc + k) % P, (csrc + k) % Q):

1. panel:  (pr, pc) factors its diagonal block in place (``backend.potrf``);
   the factored block is broadcast down process column pc (``comms.col.bcast``);
   process column pc solves its rows below the diagonal, ``A_ik := A_ik L_kk^-T`` (``trsm``).
2. panel broadcast (two large messages): the ranks of process column pc pack their panel rows
   (transposed, so that every panel row is contiguous) and ``allgather`` them along the
   column; the whole panel (every row below the diagonal, grouped by owning process row,
   padded) is then ``ibcast`` along every process row from column pc. Every rank now holds
   * its own panel rows: the contiguous segment of its process row (no copy), and
   * the panel rows matching its local *columns* (the transposed panel), gathered by index
     from the same buffer (one ``take`` into a preallocated buffer).
3. trailing update: for each local block column j > k, ``A[j*nb:, j] -= L_(j*nb:),k L_j,k^T``
   on the rows at and below the diagonal only: one SYRK on the diagonal block when this rank
   holds it and one GEMM below it (n^3/3 flops overall, no full-square GEMM).

Lookahead (depth d >= 1): the block columns k+1..k+d are updated first, block column k+1 is
factored and its broadcasts started right after its update, and only then the rest of the
trailing matrix is updated; so the panel and its communication overlap the big update. On GPU
ranks the lookahead columns and panels run on a side CUDA stream and the trailing update on the
caller's stream (ordered by events, NCCL on the communicators' own streams); on CPU ranks both
"streams" are the host thread in program order and the row broadcast is a nonblocking MPI
Ibcast, waited for one step later. Panel buffers are preallocated once and reused.

A non-positive leading minor is recorded (GPU: on the device) and the loop runs on unchanged,
so every rank executes the same collectives; the first failing column is agreed once at the
end and raised as :class:`~distla.errors.NotPositiveDefiniteError` on every rank.

Algorithm notes: docs/cholesky.md.
"""
from __future__ import annotations

import numbers

import numpy as np

from ..errors import NotPositiveDefiniteError, collective
from ..matrix import DistMatrix, check_compatible
from ..pblas import diagonal_max_abs, shares_storage, triangular_solve
from ..validate import check_finite as check_finite_
from ..validate import (
    check_finite_result,
    check_flags,
    check_symmetric,
    check_writable,
    signature,
)
from ._potrf_loop import PotrfLoop
from .condition import (
    lapack_rcond,
    rcond_estimate,
    solve_and_rcond,
    subnormal_floor,
    warn_if_ill_conditioned,
    warn_if_subnormal_scale,
)
from .methods import check_gemm_mode
from .mixed import (
    check_mixed,
    check_refinement_options,
    double_info,
    mixed_solve,
)

__all__ = ["cholesky", "cho_factor", "cho_solve", "cho_rcond", "cho_solve_rcond",
           "solve_cholesky", "logdet"]

_TYPES = tuple(np.dtype(t) for t in (np.float32, np.float64, np.complex64, np.complex128))


# ---------------------------------------------------------------------------------------
# public API
# ---------------------------------------------------------------------------------------
def cholesky(A: DistMatrix, lower: bool = True, overwrite_a: bool = False,
             lookahead: int = 1, check_finite: bool = True,
             check_symmetric: bool = True, gemm: str = "native") -> DistMatrix:
    """Collective: the Cholesky factor of the symmetric (complex: Hermitian) positive definite
    ``A`` (n x n, square ``nb x nb`` blocks, float32/float64, CPU or GPU; complex64/complex128
    on CPU ranks, pzpotrf).

    ``lower=True`` returns L with ``A = L L^H`` (only A's lower triangle is read), otherwise U
    with ``A = U^H U`` (only the upper triangle is read; costs two transposes). The factor has
    A's layout and its other triangle is zero. ``overwrite_a`` lets the lower factorization
    work in A's storage (A then holds L). ``lookahead`` is the lookahead depth (0 = none).
    Phases (panel, bcast, wait, update) are timed by an active :class:`distla.trace.Tracer`.
    ``gemm``: the trailing updates' mode, as :func:`lu_factor`'s (float32 A for all but
    'native'; the diagonal blocks' SYRK stays float32).

    ``check_finite``: NaN/Inf in A raise ValueError first (naming one entry).
    ``check_symmetric``: a matrix that is not symmetric (Hermitian) within ``sqrt(eps)``
    relative to (a lower bound of) ``||A||_F`` raises ValueError (a cheap probe,
    :func:`distla.validate.check_symmetric`, with a few fixed random vectors: it catches
    random and structural asymmetry, not one constructed to be orthogonal to its vectors;
    with ``check_finite`` one pass over A does both); turn it off when only one triangle
    holds the matrix on purpose (the lower one is read).

    Raises :class:`~distla.errors.NotPositiveDefiniteError` on every rank, with ``.index`` the
    0-based global column of the first non-positive leading minor.
    """
    _check_factor_input(A, lookahead, gemm, lower=lower, overwrite_a=overwrite_a,
                        check_finite=check_finite, check_symmetric=check_symmetric)
    _check_values(A, check_finite, check_symmetric, "cholesky")
    if not lower:  # U = (chol of A's upper triangle, read as the lower one of A^T)^T
        L = A.transpose()
        _potrf_lower(L, int(lookahead), gemm)
        _zero_upper(L)
        U = L.transpose()
        U.cholesky_lower = False    # cho_solve / rcond refuse it as a lower factor
        return U
    with collective(A.grid.comm):   # (out of memory on one rank: raised on every rank)
        L = A if overwrite_a else A.copy()
    _potrf_lower(L, int(lookahead), gemm)
    _zero_upper(L)
    L.cholesky_lower = True         # ... and this one as an upper factor
    L.lu_factor = False             # (A's storage may have held lu_factor's LU before)
    return L


def cho_factor(A: DistMatrix, lower: bool = True, overwrite_a: bool = False,
               lookahead: int = 1, check_finite: bool = True, check_symmetric: bool = True):
    """Collective: ``(factor, lower)`` for :func:`cho_solve` (like scipy.linalg.cho_factor)."""
    return cholesky(A, lower=lower, overwrite_a=overwrite_a, lookahead=lookahead,
                    check_finite=check_finite, check_symmetric=check_symmetric), bool(lower)


def check_triangle(C, lower: bool, what: str) -> None:
    """ValueError when ``C`` is a factor from :func:`cholesky` of the other triangle than
    ``lower`` says (an upper factor solved as a lower one gave errors of 1e-2, silently).
    Local: every rank alike."""
    if getattr(C, "lu_factor", False):
        raise ValueError(f"{what}: this is lu_factor's LU matrix, not a Cholesky factor; use "
                         f"lu_solve / rcond(A, F) with the LUFactor")
    made = getattr(C, "cholesky_lower", None)
    if made == "transpose":
        raise ValueError(f"{what}: this is the plain transpose of a complex Cholesky factor, "
                         f"which is not a factor of A (A = L L^H): use the conjugate "
                         f"transpose L.H (or cho_factor's pair as it is)")
    if made is not None and bool(made) != bool(lower):
        name = "L" if made else "U"
        raise ValueError(f"{what}: this is the {'lower' if made else 'upper'} factor of "
                         f"cholesky(A, lower={made}), used as {'lower' if lower else 'upper'}; "
                         f"pass ({name}, {made}), as cho_factor(A, lower={made}) returns")


def cho_rcond(c_and_lower, anorm: float) -> float:
    """Collective: reciprocal 1-norm condition estimate of A from its Cholesky factor and
    ``anorm = ||A||_1`` (pdpocon): a few :func:`cho_solve` calls on n x t blocks (t =
    ``Backend.rcond_vectors``)."""
    C, lower = _factor_and_lower(c_and_lower, "cho_rcond")
    f = (lambda X: cho_solve(c_and_lower, X, overwrite_b=True, check_finite=False))
    return rcond_estimate(anorm, C, f, f, local=lapack_rcond(C, anorm, "cholesky", lower))


def _factor_and_lower(c_and_lower, what: str):
    """``(factor, lower)`` from cho_factor's pair or a factor alone; TypeError otherwise
    (local: every rank passing the same kind of argument raises alike)."""
    if isinstance(c_and_lower, tuple):
        if len(c_and_lower) != 2:
            raise TypeError(f"{what}: c_and_lower must be (factor, lower) as cho_factor "
                            f"returns it, or the factor alone; got a tuple of "
                            f"{len(c_and_lower)}")
        C, lower = c_and_lower
    else:
        C, lower = c_and_lower, True
    if not isinstance(C, DistMatrix):
        raise TypeError(f"{what}: the factor must be a DistMatrix, not {type(C).__name__}")
    return C, lower


def cho_solve(c_and_lower, B: DistMatrix, overwrite_b: bool = False,
              check_finite: bool = True) -> DistMatrix:
    """Collective: solve ``A X = B`` given A's Cholesky factor (pdpotrs).

    ``c_and_lower`` is ``(factor, lower)`` as returned by :func:`cho_factor`, or the lower
    factor L alone. B is n x nrhs on the factor's grid and device, with its dtype; X is
    returned in B's layout (in B's storage when ``overwrite_b`` allows). Two triangular solves
    (:func:`distla.pblas.triangular_solve`).
    """
    C, lower = _factor_and_lower(c_and_lower, "cho_solve")
    with collective(C.grid.comm, signature("cho_solve", C, B, lower=lower,
                                           overwrite_b=overwrite_b, check_finite=check_finite)):
        if not isinstance(lower, (bool, np.bool_)):
            raise TypeError(f"cho_solve: the factor's 'lower' flag must be True or False, "
                            f"not {lower!r}")
        check_triangle(C, lower, "cho_solve")
        _check_rhs(C, B, "cho_solve")
    if check_finite:
        check_finite_(("B", B), what="cho_solve")
    if lower:   # L Y = B, L^H X = Y
        Y = triangular_solve(C, B, lower=True, trans=False, overwrite_b=overwrite_b)
        return triangular_solve(C, Y, lower=True, trans="C", overwrite_b=True)
    # U^H Y = B, U X = Y
    Y = triangular_solve(C, B, lower=False, trans="C", overwrite_b=overwrite_b)
    return triangular_solve(C, Y, lower=False, trans=False, overwrite_b=True)


def solve_cholesky(A: DistMatrix, B: DistMatrix, overwrite_a: bool = False,
                   overwrite_b: bool = False, lookahead: int = 1, check_finite: bool = True,
                   check_symmetric: bool = True, check_rcond: bool = True,
                   precision: str = "double", factor_dtype=None, max_iter: int | None = None,
                   fallback: bool | None = None, return_info: bool = False) -> DistMatrix:
    """Collective: solve ``A X = B`` for symmetric positive definite A (pdposv): Cholesky
    factor, then :func:`cho_solve`. Input errors are raised before any work (``check_finite``,
    ``check_symmetric``: see :func:`cholesky`). ``check_rcond``: estimate the condition number
    from the factor and warn with :class:`distla.LinAlgWarning` when rcond < eps.
    ``overwrite_a``: A's lower triangle may hold the factor L afterwards (not with
    ``precision='mixed'``, which leaves A unchanged); ``overwrite_b``: X may be B's storage.

    ``precision='mixed'`` (float64 or complex128 A): Cholesky of a float32 (complex64) copy
    with updates in
    ``factor_dtype`` ('fp32'; GPU ranks also 'tf32', 'fp16', 'bf16'; default 'fp32',
    float32-accurate factors, on every device), refined to float64,
    with the float64 solve as fallback (dsposv-style; :mod:`distla.linalg.mixed`;
    ``max_iter``, ``fallback``: given without it, ValueError). ``return_info=True`` returns
    ``(X, SolveInfo)``."""
    with collective(A.grid.comm if isinstance(A, DistMatrix) else None,
                    signature("solve_cholesky", A, B, lookahead=lookahead,
                              precision=precision, factor_dtype=factor_dtype,
                              overwrite_a=overwrite_a, overwrite_b=overwrite_b,
                              check_finite=check_finite, check_symmetric=check_symmetric,
                              check_rcond=check_rcond, max_iter=max_iter, fallback=fallback,
                              return_info=return_info)):
        _validate_factor_input(A, lookahead)
        _check_rhs(A, B, "solve_cholesky")
        fd = check_mixed(A, precision, factor_dtype, "solve_cholesky")
        max_iter, fallback = check_refinement_options(max_iter, fallback, "solve_cholesky",
                                                        refines=fd is not None)
        check_flags("solve_cholesky", overwrite_a=overwrite_a, overwrite_b=overwrite_b,
                    check_finite=check_finite, check_symmetric=check_symmetric,
                    check_rcond=check_rcond, return_info=return_info)
    anorm, asym = _check_values(A, check_finite, check_symmetric, "solve_cholesky", gap=True)
    if check_finite:
        check_finite_(("B", B), what="solve_cholesky")
    if fd is not None:
        # refinement's residuals read all of A: make it what the factorization reads, its
        # lower triangle, unless A is symmetric to rounding (no copy of A then); within the
        # probe's tolerance only, the mixed answer solved all of A, the float64 one its lower
        # triangle (apart by the asymmetry times the condition number)
        if asym is None or asym > _ROUNDING_ASYMMETRY * A.n * np.finfo(A.dtype).eps:
            A = _hermitian_from_lower(A)
        X, info = _solve_mixed(A, B, fd, lookahead, max_iter, fallback, check_rcond)
        if check_finite:    # finite A and B: a non-finite X means the solves overflowed
            check_finite_result(X, "solve_cholesky")
        return (X, info) if return_info else X
    # Hermitian A: ||A||_1 = ||A||_inf, a by-product of the symmetry probe when it ran
    if check_rcond and anorm is None:      # (the triangle the factorization reads: the
        anorm = hermitian_norm_inf(A)      # other may hold anything without the probe)
    if overwrite_a and shares_storage(B, A):   # factoring in place would overwrite B
        B, overwrite_b = B.copy(), True
    # Hermitian positive definite: max|a_ij| = max_i a_ii (>= ||A||_inf / n: skipped above)
    if anorm is None or anorm < subnormal_floor(A.dtype) * A.n:
        warn_if_subnormal_scale(diagonal_max_abs(A), A.dtype, "solve_cholesky")
    L = cholesky(A, lower=True, overwrite_a=overwrite_a, lookahead=lookahead,
                 check_finite=False, check_symmetric=False)
    rc = None
    if not check_rcond:
        X = cho_solve((L, True), B, overwrite_b=overwrite_b, check_finite=False)
    else:
        X, rc = cho_solve_rcond((L, True), B, anorm, check_finite=False,
                                overwrite_b=overwrite_b)
        warn_if_ill_conditioned(rc, A.dtype, "solve_cholesky")
    if check_finite:        # finite A and B: a non-finite X means the solves overflowed
        check_finite_result(X, "solve_cholesky")
    return (X, double_info(A, "cholesky", rc)) if return_info else X


#: solve_cholesky's mixed path copies A into the Hermitian matrix of its lower triangle when
#: the symmetry probe's relative asymmetry exceeds this many n eps (rounding level below)
_ROUNDING_ASYMMETRY = 100.0


def hermitian_norm_inf(A: DistMatrix) -> float:
    """Collective: ``||H||_inf`` (= ``||H||_1``) of the Hermitian matrix H whose lower triangle
    is A's (LAPACK's xLANHE('I', 'L'): only the lower triangle and the diagonal's real part
    are read; the strict upper triangle may hold anything, NaN included). One pass per local
    block column: its rows wholly below the block are summed as they are, only the rows
    beside the block's own global columns are masked; two n-vector sums over the grid.
    (Slabs of a few columns, masked whole, took 6.4 s at n = 65536 on one GPU.)"""
    from mpi4py import MPI
    xp = A.xp
    rows_h, cols_h = A.row_indices(), A.col_indices()
    rsum, csum = np.zeros(A.n), np.zeros(A.n)
    a = A.local
    if a.size:
        r_loc = xp.zeros(a.shape[0], np.float64)
        c_loc = xp.zeros(a.shape[1], np.float64)
        for j0 in range(0, a.shape[1], A.nb):       # local block columns: global g0..g1-1
            j1 = min(a.shape[1], j0 + A.nb)
            g0, g1 = int(cols_h[j0]), int(cols_h[j1 - 1]) + 1
            d, s = (int(np.searchsorted(rows_h, g)) for g in (g0, g1))
            if s < a.shape[0]:                       # rows below every column of the block
                below = xp.abs(a[s:, j0:j1])
                r_loc[s:] += below.sum(axis=1, dtype=np.float64)
                c_loc[j0:j1] += below.sum(axis=0, dtype=np.float64)
            if d < s:                                # rows beside the block's columns
                blk = a[d:s, j0:j1]
                r = xp.asarray(rows_h[d:s])[:, None]
                c = xp.asarray(cols_h[j0:j1])[None, :]
                mag = xp.abs(blk)
                if blk.dtype.kind == "c":            # on the diagonal |Re a|
                    mag = xp.where(r == c, xp.abs(blk.real), mag)
                low = xp.where(r >= c, mag, 0)
                r_loc[d:s] += low.sum(axis=1, dtype=np.float64)
                c_loc[j0:j1] += xp.where(r > c, low, 0).sum(axis=0, dtype=np.float64)
        rsum[rows_h] = np.asarray(A.backend.to_host(r_loc))
        csum[cols_h] = np.asarray(A.backend.to_host(c_loc))
    both = np.concatenate([rsum, csum])
    A.grid.comm.Allreduce(MPI.IN_PLACE, both, op=MPI.SUM)
    return float((both[:A.n] + both[A.n:]).max()) if A.n else 0.0


def _hermitian_from_lower(A: DistMatrix) -> DistMatrix:
    """Collective: a new matrix ``tril(A) + tril(A, -1)^H`` with a real diagonal (the
    Hermitian matrix a Cholesky factorization of A reads), in A's layout: one distributed
    transpose."""
    T = A.transpose(conjugate=True)
    if T.local.size:
        xp = A.xp
        rows = xp.asarray(A.row_indices())[:, None]
        cols = xp.asarray(A.col_indices())[None, :]
        T.local[...] = xp.where(rows > cols, A.local, T.local)
        if A.dtype.kind == "c":     # the factorization reads the diagonal's real part only
            T.local[...] = xp.where(rows == cols, A.local.real, T.local)
        else:
            T.local[...] = xp.where(rows == cols, A.local, T.local)
    return T


def _solve_mixed(A, B, fd, lookahead, max_iter, fallback, check_rcond):
    """Collective: the mixed-precision Cholesky solve (:func:`distla.linalg.mixed.
    mixed_solve`)."""
    B0 = B
    if (B.mb, B.rsrc) != (A.mb, A.rsrc):   # refine in A's row blocking
        B = B.redistribute(block=(A.mb, B.nb), src=(A.rsrc, B.csrc))
    def apply(L, C):
        return cho_solve((L, True), C, overwrite_b=True, check_finite=False)

    X, info = mixed_solve(
        A, B, method="cholesky", factor_dtype=fd,
        factor=lambda A32, gemm: cholesky(A32, overwrite_a=True, lookahead=lookahead,
                                          check_finite=False, check_symmetric=False,
                                          gemm=gemm),
        apply=apply, check_rcond=check_rcond, localize=lambda L, rep: rep(L),
        promote=lambda L: L.astype(A.dtype), max_iter=max_iter, fallback=fallback,
        full=lambda: solve_cholesky(A, B, lookahead=lookahead, check_finite=False,
                                    check_symmetric=False, check_rcond=check_rcond,
                                    return_info=True))
    if not X.same_layout(B0):
        X = X.redistribute(block=B0.block, src=B0.src)
    return X, info


def cho_solve_rcond(c_and_lower, B: DistMatrix, anorm: float, check_finite: bool = True,
                    overwrite_b: bool = False):
    """Collective: ``(cho_solve(c_and_lower, B), cho_rcond(c_and_lower, anorm))`` for less
    than the two cost apart: up to 13 right-hand sides, the estimator's first block is solved
    in the same triangular sweeps as B (:func:`distla.linalg.condition.solve_and_rcond`).
    ``overwrite_b`` as in :func:`cho_solve`."""
    C, _ = _factor_and_lower(c_and_lower, "cho_solve")
    with collective(C.grid.comm, signature("cho_solve_rcond", C, B,
                                           check_finite=check_finite,
                                           overwrite_b=overwrite_b)):
        _check_rhs(C, B, "cho_solve")
    if check_finite:
        check_finite_(("B", B), what="cho_solve")

    def inv(M):   # A^-1 = A^-H
        return cho_solve(c_and_lower, M, overwrite_b=True, check_finite=False)
    lower = c_and_lower[1] if isinstance(c_and_lower, tuple) else True
    return solve_and_rcond(B, C, inv, anorm, inv, inv, overwrite_b=overwrite_b,
                           local=lapack_rcond(C, anorm, "cholesky", lower))


def logdet(L: DistMatrix) -> float:
    """Collective: ``log det A = 2 sum_i log L[i, i]`` from a Cholesky factor of A (lower or
    upper: only the diagonal is read). A float on every rank."""
    with collective(L.grid.comm if isinstance(L, DistMatrix) else None):
        if not isinstance(L, DistMatrix):
            raise TypeError(f"logdet needs a DistMatrix factor, not {type(L).__name__}")
        if L.m != L.n or L.mb != L.nb:
            raise ValueError(f"logdet: the factor must be square with square blocks, got "
                             f"shape {L.shape}, blocks {L.block}")
        if getattr(L, "lu_factor", False):
            raise ValueError("logdet: this is lu_factor's LU matrix; logdet takes a Cholesky "
                             "factor (2 sum log L[i, i]); an LU factor's sum log |U[i, i]| "
                             "needs the pivots' sign as well")
    xp = L.xp
    total = xp.zeros((), dtype=np.float64)
    low = xp.full((), np.inf, dtype=np.float64)        # the smallest diagonal entry here
    for j, cs, w in L.my_block_cols():
        if L.row_owner(j * L.nb) == L.grid.myrow:
            rs = L.local_row_start(j * L.nb)
            d = xp.real(xp.diagonal(L.local[rs:rs + w, cs:cs + w])).astype(np.float64)
            low = xp.minimum(low, xp.min(d))
            with np.errstate(divide="ignore", invalid="ignore"):
                total = total + xp.sum(xp.log(d))
    both = L.backend.to_host(xp.stack([total, -low]))
    s, m = L.grid.allreduce(float(both[0]), "sum"), -L.grid.allreduce(float(both[1]), "max")
    with collective(L.grid.comm):
        if not m > 0:     # NaN too; every rank has the same m
            raise ValueError(f"logdet: the factor's diagonal has an entry {m:.3g} <= 0 (or "
                             f"NaN): not a Cholesky factor of a positive definite matrix")
    return 2.0 * s


# ---------------------------------------------------------------------------------------
# input checks
# ---------------------------------------------------------------------------------------
def _validate_factor_input(A, lookahead):
    if not isinstance(A, DistMatrix):
        raise TypeError(f"cholesky needs a DistMatrix, not {type(A).__name__}")
    if A.m != A.n:
        raise ValueError(f"cholesky needs a square matrix, got shape {A.shape}")
    if A.mb != A.nb:
        raise ValueError(f"cholesky needs square blocks (mb == nb), got {A.block}; "
                         f"redistribute(block=({A.nb}, {A.nb})) first")
    if A.dtype not in _TYPES:
        raise TypeError(f"cholesky supports float32, float64, complex64 and complex128 "
                        f"(Hermitian), not {A.dtype}")
    if not isinstance(lookahead, numbers.Integral) or isinstance(lookahead, bool) \
            or lookahead < 0:
        raise ValueError(f"lookahead must be a non-negative int, not {lookahead!r}")


def _check_factor_input(A, lookahead, gemm="native", **options):
    """Collective: A and the options are valid and the same on every rank (``options``: the
    caller's other arguments, in the signature only)."""
    if not isinstance(A, DistMatrix):
        raise TypeError(f"cholesky needs a DistMatrix, not {type(A).__name__}")
    with collective(A.grid.comm, signature("cholesky", A, lookahead=lookahead, gemm=gemm,
                                           **options)):
        _validate_factor_input(A, lookahead)
        check_gemm_mode(gemm, A)
        check_flags("cholesky", **options)
        if options.get("overwrite_a"):
            check_writable(A, "cholesky")


def _check_values(A, finite: bool, symmetric: bool, what: str, gap: bool = False):
    """Collective: the NaN/Inf scan and the symmetry probe, as asked, in one pass over A when
    both are. Returns ``||A||_inf`` when the probe ran (it comes from the same pass), else
    None; with ``gap`` ``(that, the probe's relative asymmetry or None)``."""
    if symmetric and A.n:
        out = check_symmetric(A, what=what, finite=finite, return_gap=True)
        return out if gap else out[0]
    if finite:
        check_finite_(("A", A), what=what)
    return (None, None) if gap else None


def _check_rhs(C, B, what):
    check_compatible(C, B, what)
    if C.m != C.n or C.mb != C.nb:
        raise ValueError(f"{what}: the matrix must be square with square blocks, got shape "
                         f"{C.shape}, blocks {C.block}")
    if B.m != C.n:
        raise ValueError(f"{what}: B has {B.m} rows, the matrix is {C.shape}")


# ---------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------
def _zero_upper(L):
    """Zero the strict upper triangle of L (local, no communication)."""
    L.backend.zero_above(L.local, L.row_indices(), L.col_indices())


def _potrf_lower(A: DistMatrix, lookahead: int, gemm: str = "native") -> None:
    """In-place lower Cholesky of A's storage (upper triangle: garbage). Collective; raises
    NotPositiveDefiniteError on every rank on failure."""
    with collective(A.grid.comm):   # its workspace, allocated before any message
        loop = PotrfLoop(A, lookahead, gemm)
    fail = loop.run()
    if fail < A.n:
        raise NotPositiveDefiniteError(fail)
