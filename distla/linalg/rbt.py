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

When refinement does not converge, or GENP meets an exactly zero pivot, the partial-pivoting
solve runs instead (``fallback=True``, as SLATE's gesv_rbt) with a warning and a note in the
diagnostics, or an exception is raised (``fallback=False``).

``precision="mixed"`` factors ``A_r`` in float32 and refines in float64 (LAPACK dsgesv style);
when that does not converge it retries with a float64 GENP (``A_r`` recomputed), then falls
back as above. On GPU ranks the float32 trailing updates run on TF32 tensor cores with split
operands (``lu_factor(..., gemm='tf32x3')``: ~float32 accuracy), since FP32 GEMMs without
tensor cores are no faster than FP64 ones on current data-center GPUs. The corrections are
GMRES-IR (GMRES on ``A d = r`` preconditioned by the float32 factors applied in float64):
GENP growth makes plain refinement with float32 factors slow or stall. That growth rises with
n on random matrices, and from n ~ 16384 the float32 factors no longer precondition usefully;
the first correction that fails to halve the residual hands over to float64 GENP.

n not a multiple of 2^d: A is padded to ``[[A, 0], [0, max|A| I]]`` (the identity scaled to A,
so that matrices scaled near underflow survive the mixing), B with zero rows.
All public functions are collective over A's grid.
"""
from __future__ import annotations

import math
import numbers
import time
import warnings
from dataclasses import dataclass, field

import numpy as np
import scipy.linalg

from ..errors import ConvergenceError, SingularMatrixError, collective
from ..matrix import DistMatrix, check_compatible
from ..validate import check_finite as check_finite_
from ._butterfly import (
    Butterfly,
    pad_matrix,
    padded_size,
    random_butterflies,
    two_sided,
)
from .condition import warn_if_ill_conditioned

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
    ``fallback``: X came from the partial-pivoting solve; ``reason`` says why (also set when
    mixed precision had to retry in float64). ``factor_dtype``: dtype of the factorization
    that produced X. On the original system (``return_info=True`` only): ``backward_error``,
    LAPACK's componentwise ``max |B - A X| / (|A||X| + |B|)`` (:func:`distla.checks.
    backward_error`); ``residual``, ScaLAPACK's SRESID ``max_j ||A x_j - b_j||_inf /
    (||A||_inf ||x_j||_inf eps n)``; ``normwise_backward_error`` = residual * eps * n.
    ``times``: seconds per phase ('transform' = padding, U^T A V, U^T r and V d; 'factor';
    'refine' = solves and residuals; 'fallback'; 'total'; 'backward_error', not in the total).
    ``history``: the scaled residual ``max|r| / (max|x| ||A||_inf eps sqrt(n))`` at each
    check (<= 1 means converged). ``gmres_iterations``: for a float32 factorization
    (``precision='mixed'``), the GMRES iterations of each correction (GMRES-IR).
    """

    depth: int
    seed: int
    n_pad: int
    precision: str
    factor_dtype: str = ""
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


def _sync(A):
    A.backend.synchronize()
    return time.perf_counter()


def rbt_transform(A: DistMatrix, depth: int = 2, seed: int | None = None):
    """Collective: ``(A_r, U, V)`` with ``A_r = U^T [[A, 0], [0, max|A| I]] V`` (n_pad x n_pad,
    n_pad = n rounded up to a multiple of 2^depth, in A's block size and source process) and
    U, V the :class:`Butterfly` objects (packed (depth, n_pad) coefficients, replicated on every
    rank; ``U.seed`` is the seed used, drawn on rank 0 when ``seed`` is None). The butterflies
    depend only on (seed, n, depth): the same on any grid. A is not modified.

    Use ``U.apply_transpose(B)`` for the right-hand side and ``V.apply(Y)`` for the solution.
    """
    from ..pblas import norm
    with collective(A.grid.comm if isinstance(A, DistMatrix) else None):
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
# helpers on column maxima
# ---------------------------------------------------------------------------------------
def _colmax(X: DistMatrix):
    """Device vector (X's local columns) of max_i |X[i, j]| over all rows, NaN as +inf (so
    that MPI's max cannot drop it). Collective over the process column."""
    xp = X.xp
    if X.local.shape[0]:
        m = xp.abs(X.local).max(axis=0)
        m = xp.ascontiguousarray(xp.where(xp.isnan(m), np.inf, m))
    else:
        m = xp.zeros(X.local.shape[1], dtype=np.finfo(X.dtype).dtype)
    X.grid.comms(X.device).col.allreduce(m, "max")
    return m


def _global_max(grid, value: float) -> float:
    """Collective over the grid: max of a host float (NaN counts as +inf)."""
    from mpi4py import MPI
    v = float("inf") if not value == value else float(value)
    return float(grid.comm.allreduce(v, op=MPI.MAX))


def _scaled_residual(R, Y, anorm, eps_sqrtn) -> float:
    """Collective: max_j (max|r_j| / anorm / max|y_j|) / (eps sqrt n)."""
    xp = R.xp
    rmax, ymax = _colmax(R), _colmax(Y)
    tiny = np.finfo(np.float64).tiny
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        ratio = xp.where(rmax == 0, 0.0, (rmax / max(anorm, tiny)) / ymax / eps_sqrtn)
        ratio = xp.where(xp.isfinite(rmax) & xp.isfinite(ymax), ratio, np.inf)
        loc = float(R.backend.to_host(xp.nan_to_num(ratio, nan=np.inf).max())) \
            if ratio.size else 0.0
    return _global_max(R.grid, loc)


# ---------------------------------------------------------------------------------------
# residual: a distributed GEMV (O(n nrhs) communication)
# ---------------------------------------------------------------------------------------
def _replicate(X: DistMatrix):
    """Collective: the whole ``X`` (m x k, device array) on every rank, by an allgather of the
    local pieces along process columns, then one along process rows (padded to equal
    sizes). Meant for skinny X: moves O(m k) data."""
    from .. import layout as lay
    grid, xp = X.grid, X.xp
    comms = grid.comms(X.device)
    (m, k), (mb, nb), (rs, cs) = X.shape, X.block, X.src
    P, Q = grid.nprow, grid.npcol
    mloc, kloc = X.local_shape
    maxm = max(lay.numroc(m, mb, p, rs, P) for p in range(P))
    maxk = max(lay.numroc(k, nb, q, cs, Q) for q in range(Q))
    cols = xp.empty((kloc, m), dtype=X.dtype)  # my columns of X, all rows
    if kloc and maxm:
        send = xp.zeros((kloc, maxm), dtype=X.dtype)
        send[:, :mloc] = X.local.T
        recv = xp.empty((P, kloc, maxm), dtype=X.dtype)
        comms.col.allgather(send, recv)
        for p in range(P):
            rows = X.row_indices(p)
            if rows.size:
                cols[:, xp.asarray(rows)] = recv[p, :, :rows.size]
    full = xp.empty((m, k), dtype=X.dtype)
    if maxk and m:
        send = xp.zeros((maxk, m), dtype=X.dtype)
        send[:kloc] = cols
        recv = xp.empty((Q, maxk, m), dtype=X.dtype)
        comms.row.allgather(send, recv)
        for q in range(Q):
            cidx = X.col_indices(q)
            if cidx.size:
                full[:, xp.asarray(cidx)] = recv[q, :cidx.size].T
    return full


def _residual(A: DistMatrix, X: DistMatrix, B: DistMatrix) -> DistMatrix:
    """Collective: ``B - A X`` in B's layout (B's rows blocked like A's). X is replicated
    (O(n nrhs) data), every rank multiplies its local block of A, and the partial products
    are summed along process rows: the matrix itself never moves (SUMMA would broadcast all
    of A for one matrix-vector product)."""
    xp = A.xp
    xf = _replicate(X)
    y = xp.ascontiguousarray(A.local @ xf[xp.asarray(A.col_indices())])  # mloc x nrhs
    A.grid.comms(A.device).row.allreduce(y, "sum")
    R = B.copy()
    if R.local.size:
        R.local -= y[:, xp.asarray(B.col_indices())]
    return R


# ---------------------------------------------------------------------------------------
# GENP solve for a few right-hand sides (fan-in triangular solves: the factor never moves)
# ---------------------------------------------------------------------------------------
# Up to this many right-hand sides the refinement solves use _genp_solve_few; above it,
# lu_solve (pdtrsm-style, which broadcasts the factor's panels along process rows).
_FEW_RHS = 32


def _all_columns(C: DistMatrix):
    """Collective over process rows: my local rows of C with ALL its columns (mloc x k,
    column-major device array), by one allgather of the column pieces along the process row."""
    from .. import layout as lay
    grid, xp = C.grid, C.xp
    Q = grid.npcol
    mloc, kloc = C.local_shape
    k = C.n
    maxk = max(lay.numroc(k, C.nb, q, C.csrc, Q) for q in range(Q))
    out = C.backend.zeros((mloc, k), C.dtype)
    if Q == 1:
        out[...] = C.local
    elif maxk and mloc:
        send = xp.zeros((maxk, mloc), dtype=C.dtype)
        send[:kloc] = C.local.T
        recv = xp.empty((Q, maxk, mloc), dtype=C.dtype)
        grid.comms(C.device).row.allgather(send, recv)
        for q in range(Q):
            cidx = C.col_indices(q)
            if cidx.size:
                out[:, xp.asarray(cidx)] = recv[q, :cidx.size].T
    return out


def _fanin_trsv(LU: DistMatrix, W, lower: bool):
    """Collective: solve ``T X = W`` with T the unit-lower (``lower``) or upper triangle of
    ``LU``; ``W`` (mloc x k, every rank: its local rows, all columns) is read on the owners of
    the diagonal blocks. Returns Xr (mloc x k): the solution rows on the diagonal-block owners,
    zero elsewhere. Per block: the partial sums of its rows are added up along the owning
    process row (allreduce of nb x k), the owner of the diagonal block solves, and the block
    goes down its process column, whose ranks update their partial sums with their own local
    panel (a local GEMM): O(n k) data moves, the factor never does."""
    grid, be, xp = LU.grid, LU.backend, LU.xp
    comms = grid.comms(LU.device)
    n, nb = LU.n, LU.nb
    mloc, k = W.shape
    S = be.zeros((mloc, k), LU.dtype)   # partial sums sum_j T_ij x_j of my rows
    Xr = be.zeros((mloc, k), LU.dtype)
    nblk = -(-n // nb)
    for kb in (range(nblk) if lower else range(nblk - 1, -1, -1)):
        g0 = kb * nb
        w = min(nb, n - g0)
        pr, pc = LU.row_owner(g0), LU.col_owner(g0)
        xk = be.empty((w, k), LU.dtype)
        if grid.myrow == pr:
            r0 = LU.local_row_start(g0)
            t = xp.ascontiguousarray(S[r0:r0 + w])
            comms.row.allreduce(t, "sum")
            if grid.mycol == pc:
                c0 = LU.local_col_start(g0)
                xk[...] = W[r0:r0 + w] - t
                be.trsm("L", "L" if lower else "U", "N", "U" if lower else "N", 1.0,
                        LU.local[r0:r0 + w, c0:c0 + w], xk)
                Xr[r0:r0 + w] = xk
        if grid.mycol == pc:
            comms.col.bcast(xk, pr)
            c0 = LU.local_col_start(g0)
            if lower:
                u0, u1 = LU.local_row_start(g0 + w), mloc
            else:
                u0, u1 = 0, LU.local_row_start(g0)
            if u1 > u0:
                be.gemm("N", "N", 1.0, LU.local[u0:u1, c0:c0 + w], xk, 1.0, S[u0:u1])
    return Xr


def _genp_solve_few(F, C: DistMatrix) -> DistMatrix:
    """Collective: ``A^-1 C`` from a no-pivoting factorization ``F`` (L U = A) for a few
    right-hand sides, in C's layout (C's rows blocked like A's): two fan-in triangular solves
    (:func:`_fanin_trsv`) instead of lu_solve's panel broadcasts. The result rows are summed
    along process rows once at the end (each row is known on one rank of its process row)."""
    LU = F.lu
    W = _all_columns(C)
    Y = _fanin_trsv(LU, W, lower=True)
    Xr = _fanin_trsv(LU, Y, lower=False)
    LU.grid.comms(LU.device).row.allreduce(Xr, "sum")
    X = C._like(local=C.backend.empty(C.local_shape, C.dtype))
    if X.local.size:
        X.local[...] = Xr[:, LU.xp.asarray(C.col_indices())]
    return X


# ---------------------------------------------------------------------------------------
# GMRES on the correction equation, preconditioned by the low-precision factorization
# ---------------------------------------------------------------------------------------
# GMRES-IR (Carson & Higham 2017): when the float32 GENP factors are too inaccurate for plain
# refinement to contract (GENP growth of randomized matrices times float32's eps times
# cond(A) near or above 1: n >= ~8192 on random matrices), each correction A d = r is solved
# by GMRES on M^-1 A d = M^-1 r in float64, M^-1 = V (L U)^-1 U^T applied in float32. The
# Krylov space then absorbs the factorization error, which plain refinement cannot. GENP growth
# of RBT-randomized Gaussian matrices grows with n (measured: 2e4 at n = 1024, 1.4e5 at 4096,
# 4.7e5 at 8192; GEPP: 21, 35, 46), so float32 factors stop being a useful preconditioner
# around n ~ 16384: a GMRES correction that does not halve the residual ends the float32 path
# at once (no patience), and the float64 GENP runs.
_GMRES_RESTART = 30      # Krylov vectors per correction (the outer refinement restarts it)
_GMRES_TOL = 1e-8        # relative reduction of the preconditioned residual per correction


def _coldots(Xs: list, Y: DistMatrix) -> np.ndarray:
    """Collective: ``X_i[:, c]^H Y[:, c]`` for every X_i (same layout as Y) and column c, as a
    host array (len(Xs), ncols), summed over the grid in one allreduce."""
    from mpi4py import MPI
    xp = Y.xp
    out = np.zeros((len(Xs), Y.n), dtype=np.result_type(Y.dtype, np.float64))
    cols = Y.col_indices()
    if Y.local.size and len(Xs):
        loc = xp.stack([xp.sum(xp.conj(X.local) * Y.local, axis=0) for X in Xs])
        out[:, cols] = Y.backend.to_host(loc)
    Y.grid.comm.Allreduce(MPI.IN_PLACE, out, op=MPI.SUM)
    return out


def _axpy_cols(Y: DistMatrix, Xs: list, h: np.ndarray, sign: float = -1.0) -> None:
    """Local: ``Y[:, c] += sign sum_i h[i, c] X_i[:, c]`` (h host, (len(Xs), ncols))."""
    if not Y.local.size:
        return
    xp = Y.xp
    hc = xp.asarray(h[:, Y.col_indices()])
    for i, X in enumerate(Xs):
        Y.local += sign * X.local * hc[i][None, :]


def _gmres_correction(A: DistMatrix, R: DistMatrix, precond, restart: int, tol: float):
    """Collective: ``d ~ A^-1 R`` by left-preconditioned GMRES (``precond(W) ~ A^-1 W``),
    column by column but in lock step (one preconditioner application and one matvec of all
    columns per iteration), classical Gram-Schmidt with reorthogonalization, Givens
    rotations on the host. Stops when every column's preconditioned residual dropped by
    ``tol`` or after ``restart`` iterations. Returns (d in R's layout, iterations)."""
    def norms(W):
        return np.sqrt(np.maximum(_coldots([W], W)[0].real, 0.0))

    z = precond(R)
    beta = norms(z)
    k = R.n
    hdt = np.result_type(R.dtype, np.float64)   # Hessenberg, rotations: complex if R is
    safe = np.where(beta > 0, beta, 1.0)
    z.local *= z.xp.asarray((1.0 / safe)[z.col_indices()])[None, :] if z.local.size else 1.0
    Vs = [z]
    H = np.zeros((restart + 1, restart, k), dtype=hdt)
    cs, sn = np.zeros((restart, k)), np.zeros((restart, k), dtype=hdt)
    g = np.zeros((restart + 1, k), dtype=hdt)
    g[0] = beta
    zero = R._like(local=R.backend.zeros(R.local_shape, R.dtype))
    j = 0
    for j in range(restart):
        w = _residual(A, Vs[j], zero)          # -A v_j
        w.local *= -1.0
        w = precond(w)
        h = _coldots(Vs, w)
        _axpy_cols(w, Vs, h)
        h2 = _coldots(Vs, w)                   # CGS2: a second pass keeps V orthonormal
        _axpy_cols(w, Vs, h2)
        h += h2
        hn = norms(w)
        col = np.vstack([h, hn[None, :]]).astype(hdt)    # (j + 2, k)
        for i in range(j):                     # previous rotations
            a, b = col[i].copy(), col[i + 1].copy()
            col[i], col[i + 1] = cs[i] * a + sn[i] * b, -np.conj(sn[i]) * a + cs[i] * b
        # complex Givens rotation zeroing col[j + 1] (real, >= 0): [c s; -conj(s) c]
        a, b = col[j].copy(), col[j + 1].real.copy()
        aa = np.abs(a)
        rr = np.hypot(aa, b)
        ph = np.where(aa > 0, a / np.where(aa > 0, aa, 1.0), 1.0)   # a / |a| (1 if a == 0)
        rs = np.where(rr > 0, rr, 1.0)
        cs[j] = np.where(rr > 0, aa / rs, 1.0)
        sn[j] = np.where(rr > 0, ph * b / rs, 0.0)
        col[j], col[j + 1] = ph * rr, 0.0
        H[:j + 2, j] = col
        g[j + 1] = -np.conj(sn[j]) * g[j]
        g[j] = cs[j] * g[j]
        if np.all(np.abs(g[j + 1]) <= tol * beta) or np.all(hn == 0):
            break
        hs = np.where(hn > 0, hn, 1.0)
        if w.local.size:
            w.local *= w.xp.asarray((1.0 / hs)[w.col_indices()])[None, :]
        Vs.append(w)
    m = j + 1
    y = np.zeros((m, k), dtype=hdt)
    for c in range(k):                         # back substitution, per column
        Hc = H[:m, :m, c]
        d = np.diag(Hc)
        if np.all(d != 0):
            y[:, c] = scipy.linalg.solve_triangular(Hc, g[:m, c])
    d = R._like(local=R.backend.zeros(R.local_shape, R.dtype))
    _axpy_cols(d, Vs[:m], y, sign=1.0)
    return d, m


# ---------------------------------------------------------------------------------------
# GENP + refinement on the randomized system
# ---------------------------------------------------------------------------------------
# Refinement gives up when this many consecutive corrections did not halve the best scaled
# residual so far (float32 factorizations of matrices with large GENP growth need a few steps
# before they contract).
_PATIENCE = 3


def _stalled(hist: list, patience: int) -> bool:
    """True when none of the last ``patience`` checks improved the best earlier one by 2x."""
    if len(hist) <= patience:
        return False
    return min(hist[-patience:]) > 0.5 * min(hist[:-patience])


@dataclass
class _Path:
    x: DistMatrix | None  # the solution of the original system
    iterations: int
    converged: bool
    reason: str | None
    history: list
    t_factor: float
    t_refine: float
    zero_pivot: int | None = None
    gmres_iterations: list | None = None


def _genp_refine(A: DistMatrix, B: DistMatrix, Ar: DistMatrix, U: Butterfly, V: Butterfly,
                 max_iter: int, anorm: float, label: str, times: dict) -> _Path:
    """Collective: GENP of ``Ar`` (= U^T A V, in the factorization precision; factored in
    place), first solution ``x = V A_r^-1 U^T b``, then refinement on the ORIGINAL system in
    A's precision: ``r = b - A x``, stop when ``max|r| <= max|x| ||A||_inf eps sqrt(n)``, else
    ``x += V A_r^-1 U^T r`` (at least one and at most max_iter corrections). Once converged,
    it goes on while each correction still halves the scaled residual, down to
    ``max|r| <= max|x| ||A||_inf eps`` (so float32 factorizations reach the accuracy of
    float64 ones); before that, ``_PATIENCE`` corrections in a row that do not halve it end
    the refinement as not converged (LAPACK dgerfs' stagnation test). The U^T r / V d time
    is added to ``times['transform']``."""
    from .lu import lu_factor, lu_solve
    wdt, fdt = A.dtype, Ar.dtype
    t0 = _sync(A)
    try:
        # GPU float32 GENP: updates on TF32 tensor cores at ~float32 accuracy (3xTF32);
        # on H100/H200, plain FP32 GEMMs are no faster than FP64 tensor-core ones
        gemm = "tf32x3" if (fdt == np.float32 and Ar.backend.is_gpu) else "native"
        F = lu_factor(Ar, pivoting="none", overwrite_a=True, gemm=gemm, check_finite=False)
    except SingularMatrixError as e:
        t1 = _sync(A)
        return _Path(None, 0, False, f"{label}: GENP met a tiny or zero pivot at column "
                     f"{e.index} of U^T A V", [], t1 - t0, 0.0, e.index)
    gmres = fdt != wdt             # low-precision factors: GMRES-IR corrections
    if gmres:
        # GMRES needs M^-1 to be one fixed linear operator to working accuracy: the
        # triangular solves run in A's precision with the rounded factors (Carson-Higham)
        from .lu import LUFactor
        anorm_r = F.anorm
        F = LUFactor(F.lu.astype(wdt), F.piv, F.pivoting, F.max_abs_a, F.tree)
        F.anorm = anorm_r
    sdt = F.lu.dtype
    t1 = _sync(A)
    t_rhs = [0.0]

    def correction(R):
        """V A_r^-1 U^T R, n rows in R's layout."""
        s0 = _sync(A)
        C = U.apply_transpose(R)
        if sdt != wdt:
            C = C.astype(sdt)
        s1 = _sync(A)
        S = _genp_solve_few(F, C) if C.n <= _FEW_RHS else \
            lu_solve(F, C, overwrite_b=True, check_finite=False)
        if sdt != wdt:
            S = S.astype(wdt)
        if not S.same_layout(R):
            S = S.redistribute(block=R.block, src=R.src)
        s2 = _sync(A)
        X = V.apply(S)
        t_rhs[0] += (s1 - s0) + (_sync(A) - s2)
        return X

    def done(x, it, ok, reason, hist):
        times["transform"] = times.get("transform", 0.0) + t_rhs[0]
        return _Path(x, it, ok, reason, hist, t1 - t0, _sync(A) - t1 - t_rhs[0],
                     gmres_iterations=list(inner))

    eps_sqrtn = np.finfo(wdt).eps * math.sqrt(A.n)
    polish = 1.0 / math.sqrt(A.n)  # rho <= polish: max|r| <= max|x| ||A||_inf eps
    inner: list = []
    x = correction(B)
    hist: list = []
    it = 0
    while True:
        R = _residual(A, x, B)
        rho = _scaled_residual(R, x, anorm, eps_sqrtn)
        hist.append(rho)
        if rho <= 1.0 and it >= min(1, max_iter):
            # converged; polish while cheap progress remains (normwise berr down to ~eps)
            if rho <= polish or _stalled(hist, 1) or it >= max_iter:
                # a small normwise residual does not make x accurate when A is singular:
                # the componentwise backward error must be at working precision and the
                # condition estimate of U^T A V (from its GENP factors) at least eps
                from ..checks import backward_error
                from ..pblas import norm
                eps = np.finfo(wdt).eps
                # (LAPACK's guard against tiny denominators distorts the componentwise
                # error of matrices near the underflow threshold: checked above it only)
                scaled_ok = anorm * norm(x, "max") >= np.finfo(wdt).tiny / eps
                berr = backward_error(A, x, B) if scaled_ok else 0.0
                if not berr <= max(10.0, math.sqrt(A.n)) * eps:
                    return done(x, it, False, f"{label}: componentwise backward error "
                                f"{berr:.3g} is not at working precision (A is numerically "
                                f"singular or the GENP factors too inaccurate)", hist)
                rc = F.rcond()
                if not rc >= eps:
                    return done(x, it, False, f"{label}: U^T A V is numerically singular "
                                f"(rcond={rc:.3g} < eps)", hist)
                times["rcond"] = rc
                return done(x, it, True, None, hist)
        elif (it >= max_iter or _stalled(hist, 1 if gmres else _PATIENCE)
              or not math.isfinite(rho)):
            why = ("produced non-finite values" if not math.isfinite(rho) else
                   "did not converge" if it >= max_iter else "stagnated") + \
                f" after {it} iteration(s) (scaled residual {rho:.3g} > 1)"
            return done(x, it, False, f"{label}: refinement {why}", hist)
        if gmres:
            d, m = _gmres_correction(A, R, correction, _GMRES_RESTART, _GMRES_TOL)
            inner.append(m)
            x.local += d.local
        else:
            x.local += correction(R).local
        it += 1


# ---------------------------------------------------------------------------------------
# driver
# ---------------------------------------------------------------------------------------
def _validate(A, B, depth, precision, max_iter, refine, fallback, return_info):
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
    if precision not in ("double", "mixed"):
        raise ValueError(f"precision must be 'double' or 'mixed', not {precision!r}")
    if precision == "mixed" and A.dtype not in (np.float64, np.complex128):
        raise TypeError(f"precision='mixed' needs a float64/complex128 matrix, not {A.dtype}")
    if not isinstance(max_iter, numbers.Integral) or isinstance(max_iter, bool) or max_iter < 0:
        raise ValueError(f"max_iter must be a non-negative int, not {max_iter!r}")
    for name, v in (("refine", refine), ("fallback", fallback), ("return_info", return_info)):
        if not isinstance(v, (bool, np.bool_)):
            raise TypeError(f"{name} must be a bool, not {v!r}")


DEFAULT_SEED = 1234567   # rbt_solve's butterflies: the same answer on every run and grid


def rbt_solve(A: DistMatrix, B: DistMatrix, depth: int = 2, refine: bool = True,
              seed: int | None = DEFAULT_SEED, max_iter: int = 30, fallback: bool = True,
              precision: str = "double", return_info: bool = False,
              check_finite: bool = True):
    """Collective: solve ``A X = B`` by RBT + GENP + iterative refinement.

    A: n x n DistMatrix (float32/float64; square blocks as the LU needs); B: n x nrhs on the
    same grid, device and dtype. Returns X (n x nrhs, in B's layout), or ``(X, RBTInfo)`` with
    ``return_info=True`` (the backward errors on the original system are then computed too:
    three extra distributed products with X). ``refine=False`` applies no correction but
    still checks the first solution against the refinement criterion (so it never silently
    returns an inaccurate answer). ``precision``: 'double' (GENP in A's precision) or
    'mixed' (float32 GENP, float64 refinement; float64 GENP when that does not converge).

    Failure (GENP zero pivot, refinement not converged): ``fallback=True`` solves with partial
    pivoting and warns (:class:`RBTFallbackWarning`); ``fallback=False`` raises
    SingularMatrixError (zero pivot) or ConvergenceError, on every rank. A converged
    refinement is accepted only when the componentwise backward error is at working precision
    (``max(10, sqrt(n)) eps``) and the condition estimate of ``U^T A V`` (from its GENP
    factors) is at least eps: a numerically singular matrix takes the failure path (the
    partial-pivoting fallback then warns with :class:`distla.LinAlgWarning` like
    :func:`solve_lu`). ``info.rcond`` holds the estimate used. ``check_finite``: NaN/Inf in A
    or B raise ValueError before any work. ``seed``: the butterflies' seed, fixed by default
    (``DEFAULT_SEED``) so that a solve gives the same answer on every run and grid shape;
    ``None`` draws a fresh one (rank 0 draws it).
    """
    from ..pblas import norm
    from .lu import lu_factor, lu_solve
    grid = A.grid if isinstance(A, DistMatrix) else None
    with collective(grid.comm if grid is not None else None):
        _validate(A, B, depth, precision, max_iter, refine, fallback, return_info)
        if seed is not None:
            _resolve_seed(seed, None)
    if check_finite:
        check_finite_(("A", A), ("B", B), what="rbt_solve")
    depth, max_iter = int(depth), int(max_iter) if refine else 0
    t_start = _sync(A)
    # work in A's row blocking (the LU and the residual products need it)
    B0 = B
    if (B.mb, B.rsrc) != (A.mb, A.rsrc):
        B = B.redistribute(block=(A.mb, B.nb), src=(A.rsrc, B.csrc))
    seed = _resolve_seed(seed, grid.comm)
    info = RBTInfo(depth=depth, seed=seed, n_pad=padded_size(A.n, depth), precision=precision)
    times = info.times

    if A.n == 0 or B.n == 0:  # nothing to solve
        X = B0.copy()
        info.converged = True
        times["total"] = _sync(A) - t_start
        if return_info:
            info.backward_error = info.normwise_backward_error = info.residual = 0.0
        return (X, info) if return_info else X
    anorm = norm(A, "inf")
    single = {np.dtype(np.float64): np.dtype(np.float32),
              np.dtype(np.complex128): np.dtype(np.complex64)}.get(A.dtype)
    paths = [single, A.dtype] if precision == "mixed" else [A.dtype]
    path = zero_pivot = None
    reasons = []
    times["transform"] = times["factor"] = times["refine"] = 0.0
    for fdt in paths:
        label = f"{fdt} GENP"
        t0 = _sync(A)
        Ar, U, V = rbt_transform(A, depth, seed)  # recomputed for a retry: cheaper than a copy
        if fdt != A.dtype:
            if norm(Ar, "max") >= np.finfo(fdt).max / 4:
                reasons.append(f"{label}: max|U^T A V| overflows {fdt}")
                del Ar
                continue
            Ar = Ar.astype(fdt)
        times["transform"] += _sync(A) - t0
        path = _genp_refine(A, B, Ar, U, V, max_iter, anorm, label, times)
        del Ar
        times["factor"] += path.t_factor
        times["refine"] += path.t_refine
        info.history = path.history
        info.gmres_iterations = list(path.gmres_iterations or [])
        if path.converged:
            info.factor_dtype = str(fdt)
            break
        reasons.append(path.reason)
        zero_pivot = path.zero_pivot
    info.reason = "; ".join(reasons) if reasons else None

    if path.converged:
        info.iterations, info.converged = path.iterations, True
        info.rcond = times.pop("rcond", None)
        X = path.x
    else:
        del path
        msg = (f"rbt_solve (n={A.n}, depth={depth}, seed={seed}, precision={precision}): "
               f"{info.reason}")
        if not fallback:
            if zero_pivot is not None:
                raise SingularMatrixError(zero_pivot, msg + " (pass fallback=True to solve "
                                          "with partial pivoting instead)")
            raise ConvergenceError(msg + " (pass fallback=True to solve with partial "
                                   "pivoting instead)")
        warnings.warn(msg + "; falling back to the partial-pivoting solve",
                      RBTFallbackWarning, stacklevel=2)
        t0 = _sync(A)
        F = lu_factor(A, pivoting="partial", check_finite=False)
        X = lu_solve(F, B, check_finite=False)
        if not X.same_layout(B):
            X = X.redistribute(block=B.block, src=B.src)
        info.rcond = F.rcond()
        warn_if_ill_conditioned(info.rcond, A.dtype, "rbt_solve (partial-pivoting fallback)")
        del F
        times["fallback"] = _sync(A) - t0
        info.fallback, info.iterations, info.converged = True, -1, False
        info.factor_dtype = str(A.dtype)
    times["total"] = _sync(A) - t_start

    if return_info:
        t0 = _sync(A)
        from ..checks import backward_error, eps, solve_residual
        info.backward_error = backward_error(A, X, B)
        info.residual = solve_residual(A, X, B)
        info.normwise_backward_error = info.residual * eps(A.dtype) * A.n
        times["backward_error"] = _sync(A) - t0
    if not X.same_layout(B0):
        X = X.redistribute(block=B0.block, src=B0.src)
    return (X, info) if return_info else X
