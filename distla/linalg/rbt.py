"""RBT solver: random butterfly transformation + no-pivot LU (GENP) + iterative refinement.

Solve ``A X = B`` with ``A_r = U^T A V`` (U, V recursive random butterflies of depth d), GENP of
``A_r`` and ``X = V A_r^-1 U^T B``, then iterative refinement (Parker; Baboulin, Dongarra,
Herrmann, Tomov; docs/rbt.md). The butterflies make pivoting unnecessary with high
probability.

Refinement runs on the ORIGINAL system with the transformed factorization as the solver:
``r = B - A X``, ``X += V A_r^-1 U^T r``, until ``max|r| <= max|x| ||A||_inf eps sqrt(n)`` for
every column (dsgesv's criterion, docs/rbt.md) and at least one correction was applied
(Skeel: one step of working-precision refinement makes the solve componentwise backward
stable). After that it goes on while each correction still halves the residual, down to
``max|r| <= max|x| ||A||_inf eps``, so that mixed precision ends at double's backward error.
Before convergence, three corrections in a row that do not halve the best residual end the
refinement as failed (like LAPACK dgerfs' stagnation test), as does ``max_iter``.

Refining on ``(A_r, U^T b)`` instead (MAGMA, SLATE) leaves the rounding of the final
``X = V Y`` uncorrected, which ruins the componentwise backward error of structured matrices
(diagonal: 1e-13 instead of 1e-16). Refining on A corrects it, needs no copy of ``A_r`` (GENP
factors it in place; A is the caller's and is not modified) and costs only two O(d n nrhs)
butterfly applications per iteration besides the residual and the triangular solves.

When refinement does not converge, or GENP meets a tiny or zero pivot, the partial-pivoting
solve runs instead (``fallback=True``, as SLATE's gesv_rbt) with a warning and a note in the
diagnostics, or an exception is raised (``fallback=False``).

``precision="mixed"`` factors ``A_r`` in float32 and refines in float64 (LAPACK dsgesv style);
when that does not converge it retries with a float64 GENP (``A_r`` recomputed), then falls
back as above. ``factor_dtype`` picks the trailing updates' precision as for every mixed solve
(:mod:`distla.linalg.mixed`): 'fp32' (on GPU ranks 3xTF32 tensor-core products, ~float32
accuracy), or on GPU ranks 'tf32', 'fp16', 'bf16'. The corrections are
GMRES-IR (GMRES on ``A d = r`` preconditioned by the float32 factors applied in float64):
GENP growth makes plain refinement with float32 factors slow or stall. That growth rises with
n on random matrices, and from n ~ 16384 the float32 factors no longer precondition usefully;
the first correction that fails to halve the residual hands over to float64 GENP.

n not a multiple of 2^d: A is padded to ``[[A, 0], [0, max|A| I]]`` (the identity scaled to A,
so that matrices scaled near underflow survive the mixing), B with zero rows.
All public functions are collective over A's grid.
"""
from __future__ import annotations

import contextlib
import math
import numbers
import time
import warnings
from dataclasses import dataclass, field

import numpy as np

from ..errors import ConvergenceError, SingularMatrixError, collective, signature
from ..matrix import DistMatrix, check_compatible
from ..trace import trace
from ..validate import check_finite as check_finite_
from ..validate import check_finite_result, check_flags
from ..vector import all_columns, fanin_trsv
from ..vector import replicate as _replicate  # noqa: F401 - tests reach it here
from ..vector import residual as _residual  # noqa: F401 - tests reach it here
from ._butterfly import (
    Butterfly,
    pad_matrix,
    padded_size,
    random_butterflies,
    two_sided,
)
from .condition import refined_rcond, warn_if_ill_conditioned, warn_if_subnormal_scale
from .lu import REFINED_PIVOT_THRESHOLD, LUFactor, lu_factor, lu_solve, warn_if_large_growth
from .mixed import check_mixed, check_refinement_options, low_dtype, slowest_times
from .refine import Refinement, refine

__all__ = ["rbt_solve", "rbt_transform", "RBTInfo", "RBTFallbackWarning", "Butterfly"]


class RBTFallbackWarning(RuntimeWarning):
    """The RBT solve fell back to the partial-pivoting solve (see ``RBTInfo.reason``)."""


@dataclass
class RBTInfo:
    """Diagnostics of :func:`rbt_solve` (identical on every rank).

    ``iterations``: refinement corrections applied on the path that produced X (>= 1 unless
    ``refine=False`` / ``max_iter=0``; -1 when X came from the fallback).
    ``converged``: the refinement criterion ``max|r| <= max|x| ||A||_inf eps sqrt(n)`` held,
    the componentwise backward error is at working precision and ``rcond`` (the condition
    estimate of U^T A V, or of A after a fallback) >= eps.
    ``precision``: what produced X, 'mixed' (the low-precision GENP, refined) or 'double'
    (a full-precision GENP or the fallback), as :class:`distla.linalg.mixed.SolveInfo`'s.
    ``fallback``: X came from the partial-pivoting solve; ``reason`` says why (also set when
    mixed precision had to retry in float64). ``factor_dtype``: dtype of the factorization
    that produced X; ``compute``: its updates' precision ('fp32', 'tf32', 'fp16', 'bf16' for
    the low-precision GENP, else the dtype name). On the original system
    (``return_info=True`` only): ``backward_error``,
    LAPACK's componentwise ``max |B - A X| / (|A||X| + |B|)`` (:func:`distla.checks.
    backward_error`); ``residual``, ScaLAPACK's SRESID ``max_j ||A x_j - b_j||_inf /
    (||A||_inf ||x_j||_inf eps n)``; ``normwise_backward_error`` = residual * eps * n.
    ``times``: seconds per phase, the slowest rank's ('transform' = padding, U^T A V, U^T r
    and V d; 'factor'; 'refine' = solves and residuals; 'fallback'; 'total';
    'backward_error', not in the total).
    ``history``: the scaled residual ``max|r| / (max|x| ||A||_inf eps sqrt(n))`` at each
    check (<= 1 means converged). ``gmres_iterations``: for a float32 factorization
    (``precision='mixed'``), the GMRES iterations of each correction (GMRES-IR).
    """

    depth: int
    seed: int
    n_pad: int
    precision: str
    factor_dtype: str = ""
    compute: str = ""
    iterations: int = 0
    converged: bool = False
    rcond: float | None = None
    fallback: bool = False
    reason: str | None = None
    backward_error: float = float("nan")
    normwise_backward_error: float = float("nan")
    residual: float = float("nan")
    times: dict = field(default_factory=dict)
    gmres_iterations: list = field(default_factory=list)
    history: list = field(default_factory=list)


# ---------------------------------------------------------------------------------------
# transform
# ---------------------------------------------------------------------------------------
def _check_depth(depth, n):
    if not isinstance(depth, numbers.Integral) or isinstance(depth, bool) or depth < 0:
        raise ValueError(f"depth must be a non-negative int, not {depth!r}")
    if (1 << int(depth)) > max(2 * n, 4):
        raise ValueError(f"depth {depth} is too large for n = {n}: 2^depth must be <= "
                         f"max(2n, 4)")


def _resolve_seed(seed, comm) -> int:
    """The seed as an int, the same on every rank (rank 0 draws one when ``seed`` is None)."""
    if seed is None:
        s = int(np.random.SeedSequence().entropy % (1 << 63)) if comm.Get_rank() == 0 else None
        return int(comm.bcast(s, root=0))
    if not isinstance(seed, numbers.Integral) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"seed must be a non-negative int or None, not {seed!r}")
    return int(seed)


def rbt_transform(A: DistMatrix, depth: int = 2, seed: int | None = None):
    """Collective: ``(A_r, U, V)`` with ``A_r = U^T [[A, 0], [0, max|A| I]] V`` (n_pad x n_pad,
    n_pad = n rounded up to a multiple of 2^depth, in A's block size and source process) and
    U, V the :class:`Butterfly` objects (packed (depth, n_pad) coefficients, replicated on every
    rank; ``U.seed`` is the seed used, drawn on rank 0 when ``seed`` is None). The butterflies
    depend only on (seed, n, depth): the same on any grid. A is not modified.

    Use ``U.apply_transpose(B)`` for the right-hand side and ``V.apply(Y)`` for the solution.
    """
    from ..pblas import norm
    with collective(A.grid.comm if isinstance(A, DistMatrix) else None,
                    signature("rbt_transform", A, depth=depth, seed=seed)):
        if not isinstance(A, DistMatrix):
            raise TypeError(f"A must be a DistMatrix, not {type(A).__name__}")
        if A.m != A.n:
            raise ValueError(f"rbt_transform needs a square matrix, got {A.shape}")
        _check_depth(depth, A.n)
        if seed is not None:
            _resolve_seed(seed, None)  # validates
    seed = _resolve_seed(seed, A.grid.comm)
    U, V = random_butterflies(A.n, int(depth), seed)
    U.seed = V.seed = seed
    scale = 1.0
    if U.n_pad > A.n:
        amax = norm(A, "max")
        scale = amax if (amax > 0 and math.isfinite(amax)) else 1.0
    Ar = pad_matrix(A, U.n_pad, scale)
    two_sided(Ar, U, V)
    return Ar, U, V


# ---------------------------------------------------------------------------------------
# GENP solve for a few right-hand sides (fan-in triangular solves: the factor never moves)
# ---------------------------------------------------------------------------------------
# Up to this many right-hand sides the refinement solves use _genp_solve_few; above it,
# lu_solve (pdtrsm-style, which broadcasts the factor's panels along process rows).
_FEW_RHS = 32


def _genp_solve_few(F, C: DistMatrix) -> DistMatrix:
    """Collective: ``A^-1 C`` from a no-pivoting factorization ``F`` (L U = A) for a few
    right-hand sides, in C's layout (C's rows blocked like A's): two fan-in triangular solves
    (:func:`distla.vector.fanin_trsv`) instead of lu_solve's panel broadcasts. The result rows
    are summed along process rows once at the end (each row is known on one rank of its
    process row)."""
    LU = F.lu
    Y = fanin_trsv(LU, all_columns(C), lower=True)
    Xr = fanin_trsv(LU, Y, lower=False)
    LU.grid.comms(LU.device).row.allreduce(Xr, "sum")
    X = C._like(local=C.backend.empty(C.local_shape, C.dtype))
    if X.local.size:
        X.local[...] = Xr[:, LU.xp.asarray(C.col_indices())]
    return X


@contextlib.contextmanager
def _clock(times: dict, key: str):
    """Trace phase ``rbt.<key>`` and add its host seconds to ``times[key]`` (no device sync:
    on GPU ranks these are launch times unless the phase ends in a host read; a
    :class:`distla.trace.Tracer` gives device times)."""
    t = time.perf_counter()
    with trace("rbt." + key):
        yield
    times[key] = times.get(key, 0.0) + time.perf_counter() - t


def _rbt_inverse(F, U: Butterfly, V: Butterfly, wdt, times: dict, adjoint: bool = False):
    """``solve(R) = V A_r^-1 U^T R`` (n rows in R's layout, R's dtype ``wdt``) from the GENP
    factors F of A_r = U^T A V, for :func:`distla.linalg.refine.refine`; ``adjoint``:
    ``U A_r^-H V^T R`` (``A^-H R``: the butterflies are real)."""
    sdt = F.lu.dtype
    first, last = (V, U) if adjoint else (U, V)

    def solve(R):
        with _clock(times, "transform"):
            C = first.apply_transpose(R)
            C = C.astype(sdt) if sdt != wdt else C
        if adjoint:
            S = lu_solve(F, C, trans=2, overwrite_b=True, check_finite=False)
        else:
            S = _genp_solve_few(F, C) if C.n <= _FEW_RHS else \
                lu_solve(F, C, overwrite_b=True, check_finite=False)
        S = S.astype(wdt) if sdt != wdt else S
        if not S.same_layout(R):
            S = S.redistribute(block=R.block, src=R.src)
        with _clock(times, "transform"):
            return last.apply(S)
    return solve


# ---------------------------------------------------------------------------------------
# one attempt: GENP of U^T A V in one precision + refinement on the original system
# ---------------------------------------------------------------------------------------
@dataclass
class _Path:
    ref: Refinement | None        # None: GENP met a tiny or zero pivot (or overflow)
    reason: str | None
    zero_pivot: int | None = None


def _genp_refine(A: DistMatrix, B: DistMatrix, fdt, compute, depth: int, seed: int,
                 max_iter: int, anorm: float, times: dict, check_rcond: bool = True) -> _Path:
    """Collective: ``A_r = U^T A V`` in precision ``fdt``, its GENP (in place; a
    low-precision GENP runs its updates at ``compute``, :meth:`Backend.lowp_mode`), then
    refinement on the ORIGINAL system in A's precision (:func:`distla.linalg.refine.refine`;
    GMRES-IR when ``fdt`` is lower than A's precision, with the factors applied in A's
    precision: GMRES needs M^-1 to be one fixed linear operator to working accuracy,
    Carson-Higham)."""
    from ..pblas import norm
    label = f"{fdt} GENP"
    with _clock(times, "transform"):
        Ar, U, V = rbt_transform(A, depth, seed)   # recomputed for a retry: cheaper than a copy
        if fdt != A.dtype and norm(Ar, "max") >= float(np.finfo(fdt).max) / 4:
            return _Path(None, f"{label}: max|U^T A V| overflows {fdt}")
        Ar = Ar.astype(fdt) if fdt != A.dtype else Ar
    low = fdt != A.dtype
    try:
        with _clock(times, "factor"):
            F = lu_factor(Ar, pivoting="none", overwrite_a=True, check_finite=False,
                          gemm=A.backend.lowp_mode(compute) if low else "native",
                          pivot_threshold=REFINED_PIVOT_THRESHOLD)
    except SingularMatrixError as e:
        return _Path(None, f"{label}: GENP met a tiny or zero pivot at column {e.index} of "
                     f"U^T A V", e.index)
    del Ar
    if low:
        anorm_r = F.anorm
        F = LUFactor(F.lu.astype(A.dtype), F.piv, F.pivoting, F.max_abs_a, F.tree)
        F.anorm = anorm_r
    t = dict(times)
    solve = _rbt_inverse(F, U, V, A.dtype, times)
    # low-precision factors cannot see A's condition below their own eps: the estimate of
    # A's, their solves verified against A (condition.refined_rcond); GENP's own factors
    # cannot see it below their growth times eps (a matrix of cond 5e15 was estimated above
    # eps): their estimate over the growth, as solve_lu's warning reads it
    rcond = None if not check_rcond else \
        (lambda: F.rcond() / max(1.0, F.growth_factor())) if not low else \
        (lambda: refined_rcond(A, norm(A, 1), solve,
                               _rbt_inverse(F, U, V, A.dtype, times, adjoint=True)))
    if rcond is not None and not low:
        rcond.what = "condition estimate of the GENP factors over their element growth"
    with _clock(times, "refine"):
        ref = refine(A, B, solve, anorm=anorm, max_iter=max_iter, mixes_rows=True,
                     mode="gmres" if low else "ir", label=label, rcond=rcond)
    # what is reported: the transformed matrix's estimate (the certificate above divides it
    # by the growth); cached in F, no extra solve
    ref.estimate = F.rcond() if rcond is not None and not low and ref.rcond is not None \
        else ref.rcond
    # the butterflies inside the solves count as 'transform', not twice
    times["refine"] -= times.get("transform", 0.0) - t.get("transform", 0.0)
    return _Path(ref, ref.reason)


# ---------------------------------------------------------------------------------------
# driver
# ---------------------------------------------------------------------------------------
def _validate(A, B, depth, max_iter, refine, fallback, return_info, check_rcond=True,
              overwrite_a=False, overwrite_b=False):
    if not isinstance(A, DistMatrix) or not isinstance(B, DistMatrix):
        raise TypeError("rbt_solve: A and B must be DistMatrix")
    if A.m != A.n:
        raise ValueError(f"rbt_solve needs a square A, got {A.shape}")
    if A.mb != A.nb:
        raise ValueError(f"rbt_solve needs square blocks (mb == nb, as the LU), got {A.block}; "
                         f"redistribute(block=({A.nb}, {A.nb})) first")
    if B.m != A.n:
        raise ValueError(f"rbt_solve: B has {B.m} rows, A is {A.n} x {A.n}")
    check_compatible(A, B, "rbt_solve")
    if A.dtype.kind not in "fc":
        raise TypeError(f"rbt_solve: unsupported dtype {A.dtype}")
    _check_depth(depth, A.n)
    opts = check_refinement_options(max_iter, fallback, "rbt_solve")
    check_flags("rbt_solve", refine=refine, return_info=return_info, check_rcond=check_rcond,
                overwrite_a=overwrite_a, overwrite_b=overwrite_b)
    return opts



DEFAULT_SEED = 1234567   # rbt_solve's butterflies: the same answer on every run and grid


def rbt_solve(A: DistMatrix, B: DistMatrix, depth: int = 2, refine: bool = True,
              seed: int | None = DEFAULT_SEED, max_iter: int = 30, fallback: bool = True,
              precision: str = "double", return_info: bool = False,
              check_finite: bool = True, factor_dtype: str | None = None,
              check_rcond: bool = True, overwrite_a: bool = False, overwrite_b: bool = False):
    """Collective: solve ``A X = B`` by RBT + GENP + iterative refinement.

    A: n x n DistMatrix (float32/float64; square blocks as the LU needs); B: n x nrhs on the
    same grid, device and dtype. Returns X (n x nrhs, in B's layout), or ``(X, RBTInfo)`` with
    ``return_info=True`` (the backward errors on the original system are then computed too:
    three extra distributed products with X). ``refine=False`` applies no correction but
    still checks the first solution against the refinement criterion (so it never silently
    returns an inaccurate answer). ``precision``: 'double' (GENP in A's precision) or
    'mixed' (float32 GENP with updates in ``factor_dtype``, default 'fp32' on every device:
    GENP's growth leaves half-precision factors no use as a preconditioner; float64
    refinement by GMRES-IR; float64 GENP when that does not converge).

    Failure (GENP tiny or zero pivot, refinement not converged): ``fallback=True`` solves
    with partial pivoting and warns (:class:`RBTFallbackWarning`); ``fallback=False`` raises
    SingularMatrixError (tiny or zero pivot) or ConvergenceError, on every rank. A converged
    refinement is accepted only when the componentwise backward error is at working
    precision (``max(10, sqrt(n)) eps``) and the condition estimate of ``U^T A V`` (from its
    GENP factors; for float32 factors, A's own, their solves verified by refinement against
    A: :func:`distla.linalg.condition.refined_rcond`) is at least eps: a numerically
    singular matrix takes the failure path (the partial-pivoting fallback then warns with
    :class:`distla.LinAlgWarning` like :func:`solve_lu`). ``info.rcond`` holds the estimate
    used (in double precision: the GENP factors' estimate over their element growth, as
    :func:`solve_lu` judges GENP). ``check_rcond=False`` skips the estimate (and that
    protection): float32 factors then serve GMRES-IR beyond the range where refinement can
    certify A's condition (float32 RBT stagnates from ``cond(A) ~ 1e7`` and retries with
    float64 GENP; docs/mixed.md). ``overwrite_a`` and ``overwrite_b`` are accepted for
    :func:`distla.linalg.solve`'s sake: A and B are never overwritten (RBT works on ``U^T A
    V``, a new matrix, and refines against the original B). ``check_finite``: NaN/Inf in A
    or B raise ValueError before any work, and a non-finite X from finite A and B (the
    solves overflowed) raises DistlaError. ``seed``: the butterflies' seed, fixed by default
    (``DEFAULT_SEED``) so that a solve gives the same answer (up to rounding) on every run
    and grid shape; ``None`` draws a fresh one (rank 0 draws it).
    """
    grid = A.grid if isinstance(A, DistMatrix) else None
    with collective(grid.comm if grid is not None else None, signature(
            "rbt_solve", A, B, depth=depth, refine=refine, seed=seed, max_iter=max_iter,
            fallback=fallback, precision=precision, return_info=return_info,
            check_finite=check_finite, factor_dtype=factor_dtype, check_rcond=check_rcond,
            overwrite_a=overwrite_a, overwrite_b=overwrite_b)):
        max_iter, fallback = _validate(A, B, depth, max_iter, refine, fallback, return_info,
                                       check_rcond, overwrite_a, overwrite_b)
        compute = check_mixed(A, precision, factor_dtype, "rbt_solve", default="fp32")
        if seed is not None:
            _resolve_seed(seed, None)
    if check_finite:
        check_finite_(("A", A), ("B", B), what="rbt_solve")
    t_start = time.perf_counter()
    B0 = B      # work in A's row blocking (the LU and the residual products need it)
    if (B.mb, B.rsrc) != (A.mb, A.rsrc):
        B = B.redistribute(block=(A.mb, B.nb), src=(A.rsrc, B.csrc))
    seed = _resolve_seed(seed, grid.comm)
    info = RBTInfo(depth=int(depth), seed=seed, n_pad=padded_size(A.n, int(depth)),
                   precision=precision, compute=compute or str(A.dtype))
    if A.n == 0 or B.n == 0:  # nothing to solve
        if A.n:               # but A is factored and checked, as the other methods do
            _solve(A, DistMatrix.zeros(A.grid, (A.n, 1), B.block, dtype=B.dtype,
                                       device=B.device, src=B.src), info,
                   int(max_iter) if refine else 0, fallback, check_rcond)
        X = B0.copy()
        info.converged = True
        if return_info:
            info.backward_error = info.normwise_backward_error = info.residual = 0.0
    else:
        X = _solve(A, B, info, int(max_iter) if refine else 0, fallback, check_rcond)
    if check_finite:    # finite A and B: a non-finite X means the solves overflowed
        check_finite_result(X, "rbt_solve")
    A.backend.synchronize()
    info.times["total"] = time.perf_counter() - t_start
    if return_info and A.n and B.n:
        _backward_errors(A, X, B, info)
    if return_info:     # (each the slowest rank's: the info is the same on every rank)
        info.times = slowest_times(A.grid, info.times)
    if not X.same_layout(B0):
        X = X.redistribute(block=B0.block, src=B0.src)
    return (X, info) if return_info else X


def _solve(A, B, info: RBTInfo, max_iter: int, fallback: bool,
           check_rcond: bool = True) -> DistMatrix:
    """Collective: the GENP attempts (float32 then float64 for 'mixed'), else the fallback."""
    from ..pblas import norm
    times = info.times
    times["transform"] = times["factor"] = times["refine"] = 0.0
    anorm = norm(A, "inf")
    reasons, zero_pivot = [], None
    paths = [(A.dtype, str(A.dtype))]
    if info.precision == "mixed":
        paths.insert(0, (low_dtype(A.dtype), info.compute))
    for fdt, compute in paths:
        path = _genp_refine(A, B, fdt, compute, info.depth, info.seed, max_iter, anorm,
                            times, check_rcond)
        info.history = path.ref.history if path.ref else []
        info.gmres_iterations = list(path.ref.gmres_iterations) if path.ref else []
        if path.ref is not None:
            if path.ref.converged:
                info.reason = "; ".join(reasons) if reasons else None
                info.factor_dtype, info.compute = str(fdt), compute
                info.precision = "mixed" if fdt != A.dtype else "double"   # what made X
                info.iterations, info.converged = path.ref.iterations, True
                info.rcond = path.ref.estimate if path.ref.estimate is not None else \
                    path.ref.rcond
                return path.ref.x
        reasons.append(path.reason)
        zero_pivot = path.zero_pivot
        del path
    info.reason = "; ".join(reasons)
    return _fallback(A, B, info, fallback, zero_pivot, check_rcond)


def _fallback(A, B, info: RBTInfo, fallback: bool, zero_pivot,
              check_rcond: bool = True) -> DistMatrix:
    """Collective: raise (``fallback=False``) or warn and solve with partial pivoting."""
    msg = (f"rbt_solve (n={A.n}, depth={info.depth}, seed={info.seed}, "
           f"precision={info.precision}): {info.reason}")
    hint = " (pass fallback=True to solve with partial pivoting instead)"
    if not fallback:
        if zero_pivot is not None:
            raise SingularMatrixError(zero_pivot, msg + hint)
        raise ConvergenceError(msg + hint)
    warnings.warn(msg + "; falling back to the partial-pivoting solve",
                  RBTFallbackWarning, stacklevel=3)
    with _clock(info.times, "fallback"):
        F = lu_factor(A, pivoting="partial", check_finite=False)
        X = lu_solve(F, B, check_finite=False)
        if not X.same_layout(B):
            X = X.redistribute(block=B.block, src=B.src)
        info.rcond = F.rcond() if check_rcond else None
    what = "rbt_solve (partial-pivoting fallback)"
    if check_rcond:
        warn_if_ill_conditioned(info.rcond, A.dtype, what,
                                growth=F.growth_factor() if F.max_abs_a > 0 else None)
    warn_if_large_growth(F, what)           # (what solve_lu warns of the same factors)
    warn_if_subnormal_scale(F.max_abs_a, A.dtype, what)
    info.fallback, info.iterations, info.converged = True, -1, False
    info.factor_dtype = info.compute = str(A.dtype)
    info.precision = "double"
    return X


def _backward_errors(A, X, B, info: RBTInfo) -> None:
    """Collective: the backward errors of X on the original system, into ``info``."""
    from ..checks import backward_error, eps, solve_residual
    with _clock(info.times, "backward_error"):
        info.backward_error = backward_error(A, X, B)
        info.residual = solve_residual(A, X, B)
        info.normwise_backward_error = info.residual * eps(A.dtype) * A.n
