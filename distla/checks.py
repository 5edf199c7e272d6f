"""Residual checks in the style of ScaLAPACK's testers (pdlaschk, pdlafchk) and LAPACK's BERR.

Every function here is collective over the operands' grid and returns a Python float that is
the same on every rank. A NaN anywhere in the data stays NaN in the result (so callers can
guard with :func:`passes`, which treats NaN as a failure).

``eps`` is LAPACK's ``xLAMCH('Epsilon')`` for the matrix's (real) precision: the unit roundoff
``finfo.eps / 2`` (2**-53 for float64, 2**-24 for float32), the value PDLAMCH gives
ScaLAPACK's testers. Thresholds are therefore directly comparable with LU.dat (1.0) and
LLT.dat (3.0).

* :func:`solve_residual` — SRESID = max_j ||A x_j - b_j||_inf / (||A||_inf ||x_j||_inf eps n).
* :func:`factor_residual_cholesky` — ||A - L L^H||_inf / (||A||_inf eps n).
* :func:`factor_residual_lu` — ||P A - L U||_inf / (||A||_inf eps max(m, n)).
* :func:`backward_error` — LAPACK's componentwise BERR, max over rows and columns.
* :func:`solve_checks` — SRESID, BERR and ||A||_inf together in one pass over A (few columns);
  :func:`product_and_norm` — ``A X`` and ||A||_inf in one pass (``distla solve``'s rhs).
* :func:`permute_rows` — a distributed row permutation by one all-to-all per process column.
"""
from __future__ import annotations

import zlib

import numpy as np

from . import layout
from .errors import collective
from .matrix import DistMatrix

__all__ = ["eps", "solve_residual", "factor_residual_cholesky", "factor_residual_lu",
           "backward_error", "solve_checks", "product_and_norm", "passes", "permute_rows"]


def eps(dtype) -> float:
    """LAPACK's relative machine epsilon xLAMCH('E') (unit roundoff) of ``dtype``'s real
    precision. Not collective."""
    return float(np.finfo(np.dtype(dtype)).eps) / 2.0


def passes(resid, thresh) -> bool:
    """True when ``resid <= thresh`` and ``resid`` is not NaN. Not collective."""
    r = float(resid)
    return (not np.isnan(r)) and r <= float(thresh)


# ---------------------------------------------------------------------------------------
# small reductions (host scalars / short host vectors through grid.comm)
# ---------------------------------------------------------------------------------------
def _allmax(comm, v: np.ndarray) -> np.ndarray:
    """Elementwise max of a float64 host array over ``comm``, NaN-preserving (MPI's MAX is
    free to drop NaNs)."""
    from mpi4py import MPI
    v = np.ascontiguousarray(v, dtype=np.float64)
    nan = np.isnan(v)
    buf = np.concatenate([np.where(nan, -np.inf, v), nan.astype(np.float64)])
    comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.MAX)
    k = v.size
    out = buf[:k].copy()
    out[buf[k:] > 0] = np.nan
    return out


def _host(M: DistMatrix, a) -> np.ndarray:
    return np.asarray(M.backend.to_host(a), dtype=np.float64)


def _col_maxabs(M: DistMatrix) -> np.ndarray:
    """max_i |M[i, j]| for every global column j (host vector, every rank). Collective."""
    xp = M.xp
    vec = np.zeros(M.n)
    if M.local.size:
        vec[M.col_indices()] = _host(M, xp.abs(M.local).max(axis=0))
    return _allmax(M.grid.comm, vec)


def _norm_inf(M: DistMatrix) -> float:
    """||M||_inf (max row sum of |M|), NaN-preserving. Collective."""
    from mpi4py import MPI
    xp = M.xp
    rows = np.zeros(M.m)
    if M.local.size:
        rows[M.row_indices()] = _host(M, xp.abs(M.local).sum(axis=1))
    M.grid.comm.Allreduce(MPI.IN_PLACE, rows, op=MPI.SUM)  # sums keep NaN
    return float(rows.max()) if rows.size else 0.0


def _local_max(M: DistMatrix, a) -> float:
    """max of the local device array ``a`` over all ranks (NaN-preserving). Collective."""
    loc = float(M.backend.to_host(a.max())) if a.size else -np.inf
    return float(_allmax(M.grid.comm, np.array([loc]))[0])


def _match(M: DistMatrix, ref: DistMatrix) -> DistMatrix:
    """``M`` in ``ref``'s layout (redistributed only if needed). Collective."""
    if M.same_layout(ref):
        return M
    return M.redistribute(grid=ref.grid, block=ref.block, src=ref.src)


def _masked(M: DistMatrix, shape, keep) -> DistMatrix:
    """The leading ``shape`` part of ``M`` with entries where ``keep(I, J)`` is False set to
    zero (local: a leading sub-matrix of a block-cyclic matrix is a leading local slice)."""
    m, n = shape
    mloc = M.local_row_start(m)
    nloc = M.local_col_start(n)
    xp = M.xp
    loc = M.local[:mloc, :nloc]
    I = xp.asarray(M.row_indices()[:mloc]).reshape(-1, 1)
    J = xp.asarray(M.col_indices()[:nloc]).reshape(1, -1)
    out = xp.asfortranarray(xp.where(keep(I, J), loc, xp.zeros((), dtype=M.dtype)))
    return M._like(local=M.backend.asarray(out, dtype=M.dtype), shape=(m, n))


def _check_operands(*mats):
    for M in mats:
        if not isinstance(M, DistMatrix):
            raise TypeError(f"expected a DistMatrix, got {type(M).__name__}")
    g = mats[0].grid
    for M in mats[1:]:
        if M.grid != g:
            raise ValueError("operands live on different grids")
        if M.device != mats[0].device:
            raise TypeError(f"operands are on {mats[0].device} and {M.device}")


# ---------------------------------------------------------------------------------------
# residuals
# ---------------------------------------------------------------------------------------
def _check_system(A, X, B, what):
    with collective(A.grid.comm if isinstance(A, DistMatrix) else None):
        _check_operands(A, X, B)
        if A.n != X.m or X.shape != B.shape or A.m != B.m:
            raise ValueError(f"{what}: shapes A {A.shape}, X {X.shape}, "
                             f"B {B.shape} do not match A X = B")


def solve_residual(A: DistMatrix, X: DistMatrix, B: DistMatrix) -> float:
    """Collective: ScaLAPACK's SRESID (pdlaschk) for ``A X = B``:
    ``max_j ||A x_j - b_j||_inf / (||A||_inf ||x_j||_inf eps n)`` over the columns j of X
    (A n x n, X and B n x nrhs, any layouts on one grid). A float on every rank; 0.0 for an
    empty system; NaN if any input has NaN. Up to 16 columns: one pass over A
    (:func:`solve_checks`)."""
    _check_system(A, X, B, "solve_residual")
    if A.n == 0 or X.n == 0:
        return 0.0
    if X.n <= _FEW_RHS:
        return solve_checks(A, X, B, berr=False)["sresid"]
    return _solve_residual_summa(A, X, B)


def _finite_norm(A: DistMatrix, anorm: float) -> float:
    """``anorm`` (``||A||_inf``), or when its sum overflowed (finite entries near the largest
    float) ``max |a_ij|``, a lower bound of it: SRESID's denominator must stay finite, else
    every residual scaled by it is 0 and the check passes whatever X is (the ratio is then
    at most n times the true one, never smaller). Collective when it reads A again."""
    if np.isfinite(anorm) or np.isnan(anorm):
        return anorm
    return float(A.norm("max"))


def _solve_residual_summa(A, X, B) -> float:
    from .pblas import matmul
    n = A.n
    R = _match(matmul(A, X.astype(A.dtype) if X.dtype != A.dtype else X), B) - \
        (B.astype(A.dtype) if B.dtype != A.dtype else B)
    rnorm = _col_maxabs(R)
    xnorm = _col_maxabs(X)
    anorm = _finite_norm(A, _norm_inf(A))
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = rnorm / (xnorm * (anorm * eps(A.dtype) * n))
    ratios[rnorm == 0] = 0.0              # an exact residual (x = 0 for b = 0): not 0/0
    return float(np.nan if np.isnan(ratios).any() else ratios.max())


def factor_residual_cholesky(A: DistMatrix, L: DistMatrix, lower: bool = True) -> float:
    """Collective: ``||A - L L^H||_inf / (||A||_inf eps n)`` (``lower``) or
    ``||A - U^H U||_inf / (...)`` (upper), reading only that triangle of ``L`` (the other one
    may hold anything, as after potrf). A is the full Hermitian n x n matrix; A and L may
    have different layouts on one grid."""
    from .pblas import matmul
    with collective(A.grid.comm if isinstance(A, DistMatrix) else None):
        _check_operands(A, L)
        if A.m != A.n or L.shape != A.shape:
            raise ValueError(f"factor_residual_cholesky: A {A.shape} and L {L.shape} must "
                             f"be square and of one shape")
    n = A.n
    if n == 0:
        return 0.0
    L = L.astype(A.dtype) if L.dtype != A.dtype else L
    T = _masked(L, L.shape, (lambda I, J: I >= J) if lower else (lambda I, J: I <= J))
    if A.dtype.kind == "c":
        LLH = matmul(T, T.H) if lower else matmul(T.H, T)
    else:
        LLH = matmul(T, T, transb=True) if lower else matmul(T, T, transa=True)
    R = A - _match(LLH, A)
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(_norm_inf(R) / (_norm_inf(A) * eps(A.dtype) * n))


def factor_residual_lu(A: DistMatrix, F) -> float:
    """Collective: ``||P A - L U||_inf / (||A||_inf eps max(m, n))`` for an LU object ``F``
    with ``F.lu`` (a DistMatrix holding unit-lower L below the diagonal and U on and above)
    and ``F.perm`` (length m, ``(P A)[i] = A[perm[i]]``, the same on every rank)."""
    from .pblas import matmul
    LU = getattr(F, "lu", None)
    with collective(A.grid.comm if isinstance(A, DistMatrix) else None):
        _check_operands(A, LU)
        if LU.shape != A.shape:
            raise ValueError(f"factor_residual_lu: F.lu {LU.shape} and A {A.shape} differ")
    m, n = A.shape
    k = min(m, n)
    if k == 0:
        return 0.0
    LU = LU.astype(A.dtype) if LU.dtype != A.dtype else LU
    xp = LU.xp
    Lm = _masked(LU, (m, k), lambda I, J: I > J)
    I = xp.asarray(Lm.row_indices()).reshape(-1, 1)
    J = xp.asarray(Lm.col_indices()).reshape(1, -1)
    Lm.local[...] += (I == J)                       # unit diagonal
    Um = _masked(LU, (k, n), lambda I, J: I <= J)
    PA = permute_rows(A, F.perm)
    R = PA - _match(matmul(Lm, Um), PA)
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(_norm_inf(R) / (_norm_inf(A) * eps(A.dtype) * max(m, n)))


def backward_error(A: DistMatrix, X: DistMatrix, B: DistMatrix) -> float:
    """Collective: LAPACK's componentwise backward error (BERR of xGERFS),
    ``max_{i,j} |B - A X|_ij / (|A| |X| + |B|)_ij``, with xGERFS's guard for tiny
    denominators (safe1 = (n+1) safmin). A float on every rank. Up to 16 columns: one pass
    over A (:func:`solve_checks`)."""
    _check_system(A, X, B, "backward_error")
    if A.m == 0 or X.n == 0:
        return 0.0
    if X.n <= _FEW_RHS:
        return solve_checks(A, X, B, berr=True, anorm=1.0)["berr"]
    return _backward_error_summa(A, X, B)


def _backward_error_summa(A, X, B) -> float:
    from .pblas import matmul
    xp = A.xp
    X = X.astype(A.dtype) if X.dtype != A.dtype else X
    B = B.astype(A.dtype) if B.dtype != A.dtype else B
    R = B - _match(matmul(A, X), B)
    real = np.finfo(A.dtype).dtype
    absA = A._like(local=xp.abs(A.local).astype(real, order="F"))
    absX = X._like(local=xp.abs(X.local).astype(real, order="F"))
    den = _match(matmul(absA, absX), B).local + xp.abs(B.local)
    num = xp.abs(R.local)
    safmin = float(np.finfo(real).tiny)
    safe1 = (A.n + 1) * safmin
    safe2 = safe1 / eps(real)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = xp.where(den > safe2, num / den, (num + safe1) / (den + safe1))
        ratio = xp.where(den == 0, 0.0, ratio)     # |A||x| + |b| = 0: the residual is 0
        ratio = xp.where(xp.isnan(den) | xp.isnan(num), xp.nan, ratio)
    return _local_max(B, ratio)


# ---------------------------------------------------------------------------------------
# one pass over A: products with few columns and every norm the checks need
# ---------------------------------------------------------------------------------------
_FEW_RHS = 16                               # the A-stationary limit of pblas.matmul too
_PASS_ELEMS = {"cpu": 1 << 20, "gpu": 1 << 26}   # |A| slab: 8 MB on CPU, 512 MB on GPU


def _stationary_pass(A: DistMatrix, xfull: np.ndarray, *, absolute: bool, rowsums: bool):
    """Collective: one sweep over A's local columns, a slab at a time, computing at this
    rank's rows ``Y = A x``, ``D = |A| |x|`` (``absolute``) and ``s = |A| 1`` (``rowsums``),
    summed along process rows (an all-reduce each for Y and for [D, s]). ``xfull`` is the
    whole ``n x k`` x on the host (A's dtype). A never moves and is read once; the |A| slab
    is the only temporary of A's kind. Returns device arrays Y (mloc x k), D (mloc x k, real
    or None), s (mloc x 1, real or None)."""
    be, xp = A.backend, A.xp
    mloc, nloc = A.local_shape
    k = xfull.shape[1]
    real = np.finfo(A.dtype).dtype
    xc = be.asarray(np.asfortranarray(xfull[A.col_indices()]))
    axc = be.asarray(np.asfortranarray(np.abs(xfull[A.col_indices()]), dtype=real))
    Y = be.zeros((mloc, k), A.dtype)
    E = be.zeros((mloc, (k if absolute else 0) + (1 if rowsums else 0)), real)
    D = E[:, :k] if absolute else None
    s = E[:, E.shape[1] - 1:] if rowsums else None
    fused = be.gemv_abs(A.local, xc, absolute=absolute, rowsums=rowsums) \
        if mloc and nloc else None
    if fused is not None:       # one pass over A for all three (real A; CPU: cache tiles)
        Y[...] = fused[0]
        if absolute:
            D[...] = fused[1]
        if rowsums:
            s[...] = fused[2]
    elif mloc and nloc:
        w = max(1, _PASS_ELEMS.get(A.device, 1 << 20) // mloc)
        for c in range(0, nloc, w):
            a = A.local[:, c:c + w]
            be.gemm("N", "N", 1.0, a, xc[c:c + w], 1.0, Y)
            if absolute or rowsums:
                t = xp.asfortranarray(xp.abs(a))
                if absolute:
                    be.gemm("N", "N", 1.0, t, axc[c:c + w], 1.0, D)
                if rowsums:
                    s += t.sum(axis=1, keepdims=True)
                del t
    comms = A.grid.comms(A.device)
    comms.row.allreduce(Y, "sum")
    if E.shape[1]:
        comms.row.allreduce(E, "sum")
    return Y, D, s


def _host_vec(M, a, k) -> np.ndarray:
    return _host(M, a).reshape(k) if a is not None else np.full(k, -np.inf)


def product_and_norm(A: DistMatrix, X: DistMatrix):
    """Collective: ``(A @ X, ||A||_inf)`` for an X of at most 16 columns, in one pass over A
    (:func:`_stationary_pass`): the product has A's row layout and X's column layout, the
    norm is the same float on every rank (NaN if A has NaN). ``distla solve`` makes its
    right-hand side ``A @ ones`` this way and reuses the norm in its checks."""
    with collective(A.grid.comm if isinstance(A, DistMatrix) else None):
        _check_operands(A, X)
        if A.n != X.m:
            raise ValueError(f"product_and_norm: A {A.shape} and X {X.shape} do not match")
        if X.n > _FEW_RHS:
            raise ValueError(f"product_and_norm: X has {X.n} columns; at most {_FEW_RHS}")
    xfull = X.to_global(None).astype(A.dtype, copy=False)
    Y, _, s = _stationary_pass(A, xfull, absolute=False, rowsums=True)
    C = DistMatrix(A.grid, (A.m, X.n), (A.mb, X.nb), dtype=A.dtype, device=A.device,
                   src=(A.rsrc, X.csrc))
    if C.local.size:
        C.local[...] = Y[:, A.xp.asarray(C.col_indices())]
    an = float(_host(A, s.max())) if s is not None and s.size else -np.inf
    return C, float(_allmax(A.grid.comm, np.array([an]))[0]) if A.m else 0.0


def solve_checks(A: DistMatrix, X: DistMatrix, B: DistMatrix, *, berr: bool = True,
                 anorm: float | None = None) -> dict:
    """Collective: ``{"sresid", "berr", "anorm"}`` for ``A X = B`` -- ScaLAPACK's SRESID
    (:func:`solve_residual`), LAPACK's BERR (:func:`backward_error`; None unless ``berr``)
    and ``||A||_inf`` -- from one pass over A: ``A X`` and ``|A| |X|`` by local GEMMs on
    A's slabs where A lives (any device), summed along process rows; the norms from the same
    slabs. ``anorm`` (||A||_inf, e.g. from :func:`product_and_norm`) skips the row sums.
    X and B (any layouts) travel whole: at most 16 columns (more: the SUMMA-based checks)."""
    _check_system(A, X, B, "solve_checks")
    if A.n == 0 or X.n == 0:
        return {"sresid": 0.0, "berr": 0.0 if berr else None, "anorm": 0.0}
    if X.n > _FEW_RHS:
        return {"sresid": _solve_residual_summa(A, X, B),
                "berr": _backward_error_summa(A, X, B) if berr else None,
                "anorm": _norm_inf(A) if anorm is None else float(anorm)}
    xp, k, n = A.xp, X.n, A.n
    xfull = X.to_global(None).astype(A.dtype, copy=False)
    bfull = B.to_global(None).astype(A.dtype, copy=False)
    Y, D, s = _stationary_pass(A, xfull, absolute=berr, rowsums=anorm is None)
    mloc = A.local_shape[0]
    rn, an, be_max = np.full(k, -np.inf), -np.inf, -np.inf
    if mloc:
        bl = A.backend.asarray(np.asfortranarray(bfull[A.row_indices()]))
        absR = xp.abs(bl - Y)
        rn = _host_vec(A, absR.max(axis=0), k)
        if s is not None:
            an = float(_host(A, s.max()))
        if berr:
            real = np.finfo(A.dtype).dtype
            den = D + xp.abs(bl)
            safe1 = (n + 1) * float(np.finfo(real).tiny)
            safe2 = safe1 / eps(real)
            with np.errstate(divide="ignore", invalid="ignore"):
                ratio = xp.where(den > safe2, absR / den, (absR + safe1) / (den + safe1))
                ratio = xp.where(den == 0, 0.0, ratio)   # (LAPACK's la_lin_berr skips
                ratio = xp.where(xp.isnan(den) | xp.isnan(absR), xp.nan, ratio)  # those rows)
            be_max = float(_host(A, ratio.max()))
    out = _allmax(A.grid.comm, np.concatenate([rn, [an, be_max]]))
    anorm = float(out[k]) if anorm is None else float(anorm)
    xnorm = np.abs(xfull).max(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = out[:k] / (xnorm * (_finite_norm(A, anorm) * eps(A.dtype) * n))
    ratios[out[:k] == 0] = 0.0            # an exact residual (x = 0 for b = 0): not 0/0
    sresid = float(np.nan if np.isnan(ratios).any() else ratios.max())
    return {"sresid": sresid, "berr": float(out[k + 1]) if berr else None, "anorm": anorm}


# ---------------------------------------------------------------------------------------
# row permutation
# ---------------------------------------------------------------------------------------
def _host_perm(perm, m: int) -> np.ndarray:
    if hasattr(perm, "get") and not isinstance(perm, np.ndarray):
        perm = perm.get()
    p = np.asarray(perm)
    if p.ndim != 1 or p.shape[0] != m:
        raise ValueError(f"perm must be a 1-D array of length {m}, got shape {p.shape}")
    if p.size and p.dtype.kind not in "iu":
        raise TypeError(f"perm must hold integers, got {p.dtype}")
    p = p.astype(np.int64)
    seen = np.zeros(m, dtype=bool)
    if p.size and (p.min() < 0 or p.max() >= m):
        raise ValueError(f"perm has entries outside [0, {m})")
    seen[p] = True
    if not seen.all():
        raise ValueError("perm is not a permutation (repeated entries)")
    return p


def permute_rows(A: DistMatrix, perm) -> DistMatrix:
    """Collective: ``P A`` with ``(P A)[i] = A[perm[i]]``, in A's layout, without gathering.

    ``perm`` (length m, NumPy or CuPy integers) must be the same on every rank. Rows move only
    within process columns: one all-to-all over each process column's data communicator."""
    with collective(A.grid.comm if isinstance(A, DistMatrix) else None):
        if not isinstance(A, DistMatrix):
            raise TypeError(f"expected a DistMatrix, got {type(A).__name__}")
        perm = _host_perm(perm, A.m)
    grid, xp = A.grid, A.xp
    digests = grid.comm.allgather(zlib.crc32(perm.tobytes()))
    if len(set(digests)) > 1:
        raise ValueError("permute_rows: perm differs between ranks "
                         f"(crc32 per rank: {digests})")
    P, me = grid.nprow, grid.myrow
    src_owner = layout.owner(perm, A.mb, A.rsrc, P)
    src_local = layout.global_to_local(perm, A.mb, P)
    nloc = A.local_shape[1]
    sends = []
    for pr in range(P):  # output rows on process row pr whose source row lives here
        rows = A.row_indices(pr)
        li = src_local[rows[src_owner[rows] == me]]
        if li.size and nloc:
            sends.append(xp.ascontiguousarray(A.local[xp.asarray(li), :].ravel(order="F")))
        else:
            sends.append(xp.empty(0, dtype=A.dtype))
    mine = A.row_indices()
    recvs, places = [], []
    for sr in range(P):
        pos = np.nonzero(src_owner[mine] == sr)[0]
        recvs.append(xp.empty(pos.size * nloc, dtype=A.dtype))
        places.append(pos)
    grid.comms(A.device).col.alltoallv(sends, recvs)
    out = A._like(local=A.backend.empty(A.local_shape, A.dtype))
    for buf, pos in zip(recvs, places):
        if pos.size and nloc:
            out.local[xp.asarray(pos), :] = buf.reshape((pos.size, nloc), order="F")
    return out
