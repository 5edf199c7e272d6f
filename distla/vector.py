"""Level-1/2 PBLAS on skinny DistMatrix operands (a few columns: right-hand sides, residuals,
Krylov vectors), each moving O(n k) data while the n x n matrix stays where it is.

* :func:`replicate` / :func:`all_columns` -- a skinny matrix gathered on every rank, or every
  rank's local rows with all columns.
* :func:`column_max`, :func:`column_dots`, :func:`axpy_columns` -- per-column max |x|, inner
  products ``x_i^H y`` and updates ``y += sum_i h_i x_i``.
* :func:`residual` / :func:`abs_product` -- ``B - A X`` and ``|A| |X|`` as distributed GEMVs
  (ScaLAPACK pdgemv's data movement: X replicated, partial products summed along process
  rows); :func:`componentwise_error` -- LAPACK's BERR from them.
* :func:`fanin_trsv` -- ``T X = W`` with T a triangle of an LU factor, by fan-in (the factor
  never moves).

Collective-ness is stated per function.
"""
from __future__ import annotations

import numpy as np

from . import layout
from .matrix import DistMatrix

__all__ = ["replicate", "all_columns", "column_max", "column_scales", "global_max", "column_dots",
           "axpy_columns", "residual", "abs_product", "componentwise_error", "fanin_trsv"]


def _gather_pieces(comm, pieces, maxlen, nlead, index_of, parts, out, xp, dtype):
    """``out[:, index_of(p)] = piece of rank p`` after one padded allgather over ``comm``
    (``pieces``: (count, nlead) host/device array of my part, C-ordered)."""
    send = xp.zeros((maxlen, nlead), dtype=dtype)
    send[:pieces.shape[0]] = pieces
    recv = xp.empty((parts, maxlen, nlead), dtype=dtype)
    comm.allgather(send, recv)
    for p in range(parts):
        idx = index_of(p)
        if idx.size:
            out[:, xp.asarray(idx)] = recv[p, :idx.size].T


def replicate(X: DistMatrix):
    """Collective: the whole ``X`` (m x k, device array) on every rank, by an allgather of the
    local pieces along process columns, then one along process rows (padded to equal
    sizes). Meant for skinny X: moves O(m k) data."""
    grid, xp = X.grid, X.xp
    if grid.size == 1:         # one process holds X whole, in order
        return X.local.copy()
    comms = grid.comms(X.device)
    (m, k), (mb, nb), (rs, cs) = X.shape, X.block, X.src
    P, Q = grid.nprow, grid.npcol
    kloc = X.local_shape[1]
    maxm = max(layout.numroc(m, mb, p, rs, P) for p in range(P))
    maxk = max(layout.numroc(k, nb, q, cs, Q) for q in range(Q))
    cols = xp.empty((kloc, m), dtype=X.dtype)  # my columns of X, all rows (transposed)
    if kloc and maxm:
        _gather_pieces(comms.col, X.local, maxm, kloc, X.row_indices, P, cols, xp, X.dtype)
    full = xp.empty((m, k), dtype=X.dtype)
    if maxk and m:
        _gather_pieces(comms.row, cols, maxk, m, X.col_indices, Q, full, xp, X.dtype)
    return full


def all_columns(C: DistMatrix):
    """Collective over process rows: my local rows of C with ALL its columns (mloc x k,
    column-major device array), by one allgather of the column pieces along the process row."""
    grid, xp = C.grid, C.xp
    Q = grid.npcol
    mloc, kloc = C.local_shape
    maxk = max(layout.numroc(C.n, C.nb, q, C.csrc, Q) for q in range(Q))
    out = C.backend.zeros((mloc, C.n), C.dtype)
    if Q == 1:
        out[...] = C.local
    elif maxk and mloc:
        _gather_pieces(grid.comms(C.device).row, C.local.T, maxk, mloc, C.col_indices, Q,
                       out, xp, C.dtype)
    return out


def column_max(X: DistMatrix):
    """Collective over the process column: device vector (X's local columns) of
    ``max_i |X[i, j]|`` over all rows, NaN as +inf (so that MPI's max cannot drop it)."""
    xp = X.xp
    if X.local.shape[0]:
        m = xp.abs(X.local).max(axis=0)
        m = xp.ascontiguousarray(xp.where(xp.isnan(m), np.inf, m))
    else:
        m = xp.zeros(X.local.shape[1], dtype=np.finfo(X.dtype).dtype)
    X.grid.comms(X.device).col.allreduce(m, "max")
    return m


def column_scales(X: DistMatrix):
    """Collective over the process column: device vector (X's local columns) of the powers
    of two ``2^e`` with ``max_i |X[i, j]| <= 2^e < 2 max_i |X[i, j]|`` (1 for a column that
    is zero or not finite), so that ``X / scales`` has columns of largest magnitude in
    [1/2, 1]: exact, and inside every precision's range (a solve with low-precision factors
    of a column of 1e300, or 1e-45, is one of O(1) times a power of two). A column of
    subnormal entries gets the smallest normal power of two, not a subnormal one (dividing a
    complex column by that overflowed to inf + inf j), and one beyond the largest power of
    two gets that power (2^1024 is not a float64: its columns' largest entries are then in
    (1, 2))."""
    xp = X.xp
    m = column_max(X)
    ok = (m > 0) & (m < np.inf)
    fi = np.finfo(X.dtype)
    e = xp.minimum(xp.ceil(xp.log2(xp.where(ok, xp.maximum(m, float(fi.tiny)), 1.0))),
                   fi.maxexp - 1)
    return xp.where(ok, xp.exp2(e), 1.0)


def global_max(grid, value: float) -> float:
    """Collective over the grid: max of a host float, NaN counted as +inf."""
    return float(grid.allreduce(float("inf") if value != value else float(value), "max"))


def _rows_like(A: DistMatrix, B: DistMatrix, what: str, X: DistMatrix | None = None) -> None:
    """ValueError unless B's rows are blocked like A's on A's grid, and (with ``X``) X is
    ``A.n x B.n`` on A's grid (descriptors only: the same answer on every rank, no
    communication)."""
    if X is not None and not (X.grid == A.grid and X.shape == (A.n, B.n)):
        raise ValueError(f"{what}: X is {X.shape} but A is {A.shape} and B {B.shape}: X must "
                         f"be {(A.n, B.n)} on A's grid")
    if not (B.grid == A.grid and B.m == A.m and (B.mb, B.rsrc) == (A.mb, A.rsrc)):
        raise ValueError(f"{what}: B ({B.m} rows, mb={B.mb}, rsrc={B.rsrc}) must have A's "
                         f"rows ({A.m}, mb={A.mb}, rsrc={A.rsrc}) on A's grid; redistribute "
                         f"it (B.redistribute(block=(A.mb, B.nb), src=(A.rsrc, B.csrc)))")


def column_dots(Xs: list, Y: DistMatrix) -> np.ndarray:
    """Collective: ``X_i[:, c]^H Y[:, c]`` for every X_i (same layout as Y) and column c, as a
    host array (len(Xs), ncols), summed over the grid in one allreduce."""
    from mpi4py import MPI
    for X in Xs:          # descriptors only: every rank raises alike
        if not X.same_layout(Y):
            raise ValueError(f"column_dots: every X must have Y's layout ({Y.shape}, block "
                             f"{Y.block}, src {Y.src}); got {X.shape}, {X.block}, {X.src}")
    xp = Y.xp
    out = np.zeros((len(Xs), Y.n), dtype=np.result_type(Y.dtype, np.float64))
    if Y.local.size and len(Xs):
        loc = xp.stack([xp.sum(xp.conj(X.local) * Y.local, axis=0) for X in Xs])
        out[:, Y.col_indices()] = Y.backend.to_host(loc)
    Y.grid.comm.Allreduce(MPI.IN_PLACE, out, op=MPI.SUM)
    return out


def axpy_columns(Y: DistMatrix, Xs: list, h: np.ndarray, sign: float = -1.0) -> None:
    """Local: ``Y[:, c] += sign sum_i h[i, c] X_i[:, c]`` (h host, (len(Xs), ncols))."""
    if not Y.local.size:
        return
    hc = Y.xp.asarray(h[:, Y.col_indices()])
    for i, X in enumerate(Xs):
        Y.local += sign * X.local * hc[i][None, :]


def _gemv_rows(A: DistMatrix, X: DistMatrix, absolute: bool, pair: bool = False):
    """Collective: ``(y, ya)``: my local rows of ``A X`` (or ``|A| |X|`` when ``absolute``),
    all columns, summed along process rows, and with ``pair`` also ``|A| |X|`` where the
    backend computes both in one pass over A (else ``ya`` None). Without that kernel, |A| is
    taken in column slabs (temporaries a fraction of A's storage)."""
    xp, be = A.xp, A.backend
    xf = replicate(X)[xp.asarray(A.col_indices())]
    mloc, nloc = A.local_shape
    dt = np.result_type(A.dtype, xf.dtype)
    fused = be.gemv_abs(A.local, xf, absolute=True) if (absolute or pair) else None
    if fused is not None:
        y, ya = (fused[1], None) if absolute else fused[:2]
    else:
        ya = None
        if absolute:
            xf = xp.abs(xf)
        y = xp.zeros((mloc, X.n), dtype=np.finfo(dt).dtype if absolute else dt)
        step = max(1, nloc) if not absolute else max(1, (1 << 22) // max(1, mloc))
        for c in range(0, nloc, step):
            blk = A.local[:, c:c + step]
            y += (xp.abs(blk) if absolute else blk) @ xf[c:c + step]
    comm = A.grid.comms(A.device).row
    if ya is None:
        y = xp.ascontiguousarray(y)
        comm.allreduce(y, "sum")
        return y, None
    both = xp.concatenate([y, ya], axis=1)     # one all-reduce for the pair (F: columns)
    both = xp.asfortranarray(both)
    comm.allreduce(both, "sum")
    k = y.shape[1]
    return both[:, :k], both[:, k:]


def residual(A: DistMatrix, X: DistMatrix, B: DistMatrix, with_abs: bool = False):
    """Collective: ``B - A X`` in B's layout (B's rows blocked like A's; X any layout). X is
    replicated (O(n nrhs) data), every rank multiplies its local block of A, and the partial
    products are summed along process rows: the matrix itself never moves (SUMMA would
    broadcast all of A for one matrix-vector product). ``with_abs``: return ``(R, D)`` with
    ``D = |A| |X|`` (B's local array, as :func:`abs_product`) when the backend computes it
    in the same pass over A (:meth:`distla.device.base.Backend.gemv_abs`: real A, CPU or GPU), else
    ``(R, None)``. R's dtype is that of ``B - A X`` (complex if any operand is)."""
    xp = A.xp
    _rows_like(A, B, "residual", X)
    y, ya = _gemv_rows(A, X, absolute=False, pair=with_abs)
    dt = np.result_type(A.dtype, X.dtype, B.dtype)      # (from descriptors: every rank alike;
    R = B.copy() if B.dtype == dt else B.astype(dt)     # in-place B - y raised on some ranks)
    cols = xp.asarray(B.col_indices())
    if R.local.size:
        R.local -= y[:, cols]
    if not with_abs:
        return R
    return R, (None if ya is None else ya[:, cols])


def abs_product(A: DistMatrix, X: DistMatrix, B: DistMatrix):
    """Collective: ``|A| |X|`` as B's local array (B's rows blocked like A's), real, by the
    same data movement as :func:`residual`."""
    _rows_like(A, B, "abs_product", X)
    y, _ = _gemv_rows(A, X, absolute=True)
    return y[:, A.xp.asarray(B.col_indices())]


def componentwise_error(A: DistMatrix, X: DistMatrix, B: DistMatrix, R: DistMatrix,
                        absax=None, sparse_scale=None) -> float:
    """Collective: LAPACK's componentwise backward error ``max |R| / (|A| |X| + |B|)`` with
    ``R = B - A X`` given (B's layout), xGERFS's guard for tiny denominators included (as
    :func:`distla.checks.backward_error`, without moving A). ``absax``: ``|A| |X|`` when
    already computed (``residual(..., with_abs=True)``), else one more pass over A.

    ``sparse_scale`` (``||A||_inf ||X||_max``, or one such value per column of B, when
    given; 0 for a column: no relaxation, inf: the column is not judged): rows whose
    denominator is below
    ``1000 n eps`` of it -- where the exact solution's entries are zero and a solver that
    mixes rows (RBT's butterflies) leaves rounding errors -- are measured against
    ``|A| |X| + |B| + sparse_scale`` instead, as Arioli, Demmel and Duff's backward error for
    sparse solutions does (docs/condition.md); without it such rows count as errors of 1."""
    xp = A.xp
    _rows_like(A, B, "componentwise_error", X)
    if not R.same_layout(B):
        raise ValueError("componentwise_error: R must have B's layout")
    ax, ab = (abs_product(A, X, B) if absax is None else absax), xp.abs(B.local)
    with np.errstate(over="ignore"):
        den = ax + ab
    # |A||X| + |B| beyond the largest float from finite terms: halved, the same ratio
    # (an infinite denominator would have made every such row's error 0)
    over = xp.isinf(den) & xp.isfinite(ax) & xp.isfinite(ab)
    num = xp.abs(R.local)
    real = np.finfo(A.dtype).dtype
    if sparse_scale is not None and np.any(np.asarray(sparse_scale)) and den.size:
        sc = np.asarray(sparse_scale, dtype=np.float64)     # a float, or one per column of B
        sc = xp.asarray(sc[B.col_indices()] if sc.ndim else sc)
        tau = 1000 * A.n * float(np.finfo(real).eps) * sc
        den = xp.where(den < tau, den + sc, den)
    safe1 = (A.n + 1) * float(np.finfo(real).tiny)
    safe2 = safe1 / float(np.finfo(real).eps)
    loc = 0.0
    if num.size:
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = xp.where(den > safe2, num / den, (num + safe1) / (den + safe1))
            # a row with |A| |x| + |b| = 0 has an exact zero residual: no error (LAPACK's
            # la_lin_berr; xGERFS's guard alone would count it as 1)
            ratio = xp.where((den == 0) & (num == 0), 0.0, ratio)
            ratio = xp.where(over, (0.5 * num) / (0.5 * ax + 0.5 * ab), ratio)
            ratio = xp.where(xp.isnan(den) | xp.isnan(num), np.inf, ratio)
        loc = float(A.backend.to_host(ratio.max()))
    return global_max(A.grid, loc)


def fanin_trsv(LU: DistMatrix, W, lower: bool):
    """Collective: solve ``T X = W`` with T the unit-lower (``lower``) or upper triangle of
    ``LU`` (square blocks); ``W`` (mloc x k, every rank: its local rows, all columns, as
    :func:`all_columns` gives) is read on the owners of the diagonal blocks. Returns Xr
    (mloc x k): the solution rows on the diagonal-block owners, zero elsewhere. Per block: the
    partial sums of its rows are added up along the owning process row (allreduce of nb x k),
    the owner of the diagonal block solves, and the block goes down its process column, whose
    ranks update their partial sums with their own local panel (a local GEMM): O(n k) data
    moves, the factor never does."""
    grid, be, xp = LU.grid, LU.backend, LU.xp
    comms = grid.comms(LU.device)
    mloc, k = W.shape
    S = be.zeros((mloc, k), LU.dtype)   # partial sums sum_j T_ij x_j of my rows
    Xr = be.zeros((mloc, k), LU.dtype)
    nblk = LU.mt
    for kb in (range(nblk) if lower else range(nblk - 1, -1, -1)):
        g0 = kb * LU.nb
        w = min(LU.nb, LU.n - g0)
        pr, pc = LU.row_owner(g0), LU.col_owner(g0)
        r0, c0 = LU.local_row_start(g0), LU.local_col_start(g0)
        xk = be.empty((w, k), LU.dtype)
        if grid.myrow == pr:
            t = xp.ascontiguousarray(S[r0:r0 + w])
            comms.row.allreduce(t, "sum")
            if grid.mycol == pc:
                xk[...] = W[r0:r0 + w] - t
                be.trsm("L", "L" if lower else "U", "N", "U" if lower else "N", 1.0,
                        LU.local[r0:r0 + w, c0:c0 + w], xk)
                Xr[r0:r0 + w] = xk
        if grid.mycol == pc:
            comms.col.bcast(xk, pr)
            u0, u1 = (LU.local_row_start(g0 + w), mloc) if lower else (0, r0)
            if u1 > u0:
                be.gemm("N", "N", 1.0, LU.local[u0:u1, c0:c0 + w], xk, 1.0, S[u0:u1])
    return Xr
