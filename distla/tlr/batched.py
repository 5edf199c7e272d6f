"""Batched per-tile kernels of TLR algorithms, written once against ``xp`` (NumPy or CuPy).

Every function takes *stacks* of same-shape tiles, 3-D arrays ``(t, rows, cols)`` (C order,
one tile per leading index), and does one step of a TLR algorithm for all ``t`` tiles with a
handful of stacked ``xp.matmul`` / ``xp.linalg.qr`` / ``xp.linalg.svd`` calls. Ranks that
differ inside a stack are handled by zero padding: a low-rank tile of rank ``k`` stored in a
stack of width ``K >= k`` has zero columns ``k..K-1`` in both factors.

Canonical form of a low-rank tile ``A ~ U V^T``: ``U`` has orthonormal columns and
``V = Y S`` (the right singular vectors scaled by the singular values), so the column norms of
``V`` are the singular values of the tile.

Truncation rule (fixed accuracy, absolute, Frobenius): a tile is kept with the smallest rank
``k`` whose discarded tail satisfies ``sqrt(sum_{l >= k} s_l^2) <= delta``; ``max_rank`` caps k
(accuracy is then not guaranteed, and the tiles that hit the cap are counted).

Nothing here communicates. The only host synchronization is reading the new ranks of a stack
(a ``t``-vector of ints) after a truncation.
"""
from __future__ import annotations

import numpy as np

from ..trace import trace

__all__ = ["host", "get_xp", "truncation_ranks", "recompress", "compress_tiles",
           "stacked_qr", "stacked_r", "stacked_svd"]


def get_xp(a):
    """numpy or cupy, whichever ``a`` belongs to."""
    if isinstance(a, np.ndarray):
        return np
    import cupy
    return cupy


def host(a) -> np.ndarray:
    """``a`` as a NumPy array (a device-to-host copy for CuPy arrays)."""
    return a.get() if hasattr(a, "get") and not isinstance(a, np.ndarray) else np.asarray(a)


def _T(a):
    """Batched transpose (a view)."""
    return a.swapaxes(-1, -2)


def truncation_ranks(s, delta: float, max_rank: int | None = None):
    """Ranks (device int64 ``(t,)``) for singular values ``s`` (``(t, w)``, descending rows):
    the smallest ``k`` with ``||s[k:]||_2 <= delta``, capped at ``max_rank``. Also returns the
    uncapped ranks."""
    xp = get_xp(s)
    if s.shape[-1] == 0:
        z = xp.zeros(s.shape[:-1], dtype=np.int64)
        return z, z
    s2 = s * s
    tail = xp.flip(xp.cumsum(xp.flip(s2, axis=-1), axis=-1), axis=-1)
    k = xp.sum(tail > delta * delta, axis=-1).astype(np.int64)
    kc = k if max_rank is None else xp.minimum(k, int(max_rank))
    return kc, k


def _ranks_to_host(s, delta, max_rank):
    """Truncation ranks on the device and on the host (one transfer), the number of capped
    tiles and the largest rank."""
    xp = get_xp(s)
    k, kfree = truncation_ranks(s, delta, max_rank)
    both = host(xp.stack([k, kfree]))
    kh = both[0]
    capped = int(np.sum(both[1] > kh))
    return k, kh, capped, int(kh.max()) if kh.size else 0


def _assemble(Qu, X, s, Yt, Qv, k, kmax):
    """``U = Qu X_k``, ``V = Qv Y_k S_k`` with per-tile rank ``k`` in a width-``kmax`` stack."""
    xp = get_xp(Qu)
    mask = (xp.arange(kmax)[None, :] < k[:, None]).astype(Qu.dtype)
    U = xp.matmul(Qu, X[:, :, :kmax] * mask[:, None, :])
    V = xp.matmul(Qv, _T(Yt[:, :kmax, :]) * (s[:, :kmax] * mask)[:, None, :])
    return U, V


# ---- the QR / SVD seam --------------------------------------------------------------------

#: QR of stacks: 'auto' (LAPACK per tile on NumPy, where ``xp.linalg.qr`` loops in C at full
#: speed; the batched CUDA kernel :func:`distla.tlr._cuda.qr` on CuPy, whose stacked
#: ``linalg.qr`` is two cuSOLVER calls per tile), 'lapack' (``xp.linalg.qr``) or 'kernel'.
QR_METHOD = "auto"

#: SVD of the small square cores: 'auto' (LAPACK on NumPy; on CuPy the batched Jacobi kernel
#: :func:`distla.tlr._cuda.svd` up to its width limit, CuPy's ``linalg.svd`` above), 'lapack'
#: (``xp.linalg.svd``: CuPy batches it only up to 32 x 32, one cuSOLVER call per tile above) or
#: 'kernel'.
SVD_METHOD = "auto"


def _use_kernel(method, xp, dtype, fits):
    if method == "lapack" or xp is np:
        return False
    from . import _cuda
    return _cuda.supported(dtype) and fits(_cuda) and method in ("auto", "kernel")


def stacked_qr(A):
    """Reduced QR of a stack ``A (t, m, w)``: ``Q (t, m, p)``, ``R (t, p, w)``,
    ``p = min(m, w)`` (see :data:`QR_METHOD`)."""
    xp = get_xp(A)
    t, m, w = A.shape
    if _use_kernel(QR_METHOD, xp, A.dtype, lambda c: w <= m <= c.MAX_QR_ROWS):
        from . import _cuda
        return _cuda.qr(A)
    return xp.linalg.qr(A)


def stacked_r(A):
    """The ``R (t, p, w)`` of :func:`stacked_qr` alone (no ``Q`` is formed)."""
    xp = get_xp(A)
    t, m, w = A.shape
    if _use_kernel(QR_METHOD, xp, A.dtype, lambda c: w <= m <= c.MAX_QR_ROWS):
        from . import _cuda
        return _cuda.qr(A, want_q=False)[1]
    return xp.linalg.qr(A, mode="r")


def stacked_svd(M):
    """Reduced SVD ``X, s, Yt`` of a stack of small cores (see :data:`SVD_METHOD`)."""
    xp = get_xp(M)
    t, a, b = M.shape
    if a == b and _use_kernel(SVD_METHOD, xp, M.dtype, lambda c: a <= c.MAX_SVD_WIDTH):
        from . import _cuda
        return _cuda.svd(M)
    return xp.linalg.svd(M, full_matrices=False)


def recompress(Cu, Cv, delta: float, max_rank: int | None = None, *, u_orthonormal=False):
    """Truncate the stacked low-rank products ``C_t = Cu_t Cv_t^T`` to accuracy ``delta``.

    ``Cu``: ``(t, m, w)``, ``Cv``: ``(t, n, w)`` (any ranks, zero-padded columns allowed).
    QR of both factors (``Cu = Qu Ru``, ``Cv = Qv Rv``), SVD of the small core
    ``Ru Rv^T = X S Y^T``, keep the columns meeting ``delta`` (or ``max_rank``):
    ``U = Qu X_k``, ``V = Qv Y_k S_k`` (canonical form). ``u_orthonormal`` skips the QR of
    ``Cu`` when its columns are already orthonormal.

    Returns ``(U, V, ranks, capped)``: stacks of width ``kmax = max(ranks)``, the ranks as a
    host int64 array, and the number of tiles whose rank was cut by ``max_rank``.
    """
    xp = get_xp(Cu)
    t, m, w = Cu.shape
    n = Cv.shape[1]
    if t == 0 or w == 0:
        z = np.zeros(t, dtype=np.int64)
        return (xp.zeros((t, m, 0), Cu.dtype), xp.zeros((t, n, 0), Cu.dtype), z, 0)
    with trace("qr"):
        if u_orthonormal:     # only R of Cv is needed, see below
            Qu, Ru, Qv, Rv = Cu, None, None, stacked_r(Cv)
        else:
            Qu, Ru = stacked_qr(Cu)
            Qv, Rv = stacked_qr(Cv)
    with trace("svd"):
        M = _T(Rv) if Ru is None else xp.matmul(Ru, _T(Rv))
        X, s, Yt = stacked_svd(M)
        k, kh, capped, kmax = _ranks_to_host(s, delta, max_rank)
    with trace("assemble"):
        if u_orthonormal:
            # M = Rv^T = X S Y^T, so Qv Y S = Qv Rv X = Cv X: V without forming Qv
            mask = (xp.arange(kmax)[None, :] < k[:, None]).astype(Cu.dtype)[:, None, :]
            Xk = X[:, :, :kmax] * mask
            U, V = xp.matmul(Qu, Xk), xp.matmul(Cv, Xk)
        else:
            U, V = _assemble(Qu, X, s, Yt, Qv, k, kmax)
    return U, V, kh, capped


# ---- compression of dense tiles --------------------------------------------------------

def _svd_compress(A, delta, max_rank):
    xp = get_xp(A)
    t, m, n = A.shape
    if t == 0 or min(m, n) == 0:
        return xp.zeros((t, m, 0), A.dtype), xp.zeros((t, n, 0), A.dtype), \
            np.zeros(t, np.int64), 0
    X, s, Yt = xp.linalg.svd(A, full_matrices=False)
    k, kh, capped, kmax = _ranks_to_host(s, delta, max_rank)
    mask = (xp.arange(kmax)[None, :] < k[:, None]).astype(A.dtype)
    U = X[:, :, :kmax] * mask[:, None, :]
    V = _T(Yt[:, :kmax, :]) * (s[:, :kmax] * mask)[:, None, :]
    return xp.ascontiguousarray(U), xp.ascontiguousarray(V), kh, capped


def _rsvd_compress(A, delta, max_rank, rng, r0=16):
    """Adaptive randomized range finder: sample ``r`` columns (``r0`` first: pass the
    expected rank plus a margin to save rounds), check the true residual
    ``||A - Q Q^T A||_F <= delta / 2`` per tile, double ``r`` for the tiles that fail; then
    truncate ``Q (Q^T A)`` with the remaining budget ``sqrt(delta^2 - res^2)``."""
    xp = get_xp(A)
    t, m, n = A.shape
    full = min(m, n)
    cap = full if max_rank is None else min(full, int(max_rank) + 8)
    r = max(1, min(r0, cap))
    todo = np.arange(t)
    parts = []  # (indices, U, V, ranks)
    capped = 0
    while todo.size:
        At = A if todo.size == t else A[xp.asarray(todo)]
        with trace("range"):
            Om = rng.standard_normal((n, r)).astype(A.dtype)   # one test matrix for the stack
            Q, _ = stacked_qr(xp.matmul(At, Om))
            B = xp.matmul(_T(Q), At)
        with trace("residual"):
            resh = host(_diff_norms(xp.matmul(Q, B), At))
        done = (resh <= 0.5 * delta) | (r >= cap)
        if done.any():
            budget = float(np.sqrt(max(delta * delta - float(resh[done].max()) ** 2, 0.0)))
            if done.all():
                Qd, Bd = Q, B
            else:
                d = xp.asarray(np.flatnonzero(done))
                Qd, Bd = Q[d], B[d]
            U, V, k, c = recompress(Qd, xp.ascontiguousarray(_T(Bd)), budget, max_rank,
                                    u_orthonormal=True)
            parts.append((todo[done], U, V, k))
            capped += c
        todo = todo[~done]
        r = min(2 * r, cap)
    return _gather_parts(parts, t, m, n, A.dtype, xp) + (capped,)


def _diff_norms(X, Y):
    """``||X_t - Y_t||_F`` per tile (host-free; one fused pass on CuPy)."""
    xp = get_xp(X)
    if xp is np:
        return np.linalg.norm((X - Y).reshape(X.shape[0], -1), axis=1)
    from . import _cuda
    return _cuda.diff_norms(X, Y)


def _gather_parts(parts, t, m, n, dtype, xp):
    kmax = max([p[1].shape[2] for p in parts], default=0)
    U = xp.zeros((t, m, kmax), dtype)
    V = xp.zeros((t, n, kmax), dtype)
    ranks = np.zeros(t, np.int64)
    for ids, u, v, k in parts:
        if len(ids):
            d = xp.asarray(ids)
            U[d, :, :u.shape[2]] = u
            V[d, :, :v.shape[2]] = v
            ranks[ids] = k
    return U, V, ranks


def aca(get_rows, get_cols, t, m, n, delta, max_rank, xp, dtype=np.float64, rng=None,
        stride=8):
    """Adaptive cross approximation with partial pivoting, run in lock step over ``t`` tiles.

    ``get_rows(i)`` -> ``(t, p, n)``: rows ``i[t, :]`` of every tile (``i`` is ``(t, p)``);
    ``get_cols(j)`` -> ``(t, p, m)``: columns ``j[t, :]``, as rows. Each iteration adds the
    cross through the pivot ``(i, argmax |residual row i|)``. A tile stops when the new cross
    is small, ``||u|| ||v|| <= delta / 10`` (the usual residual estimate), *and* a stratified
    sample of residual rows (every ``stride``-th row from a random offset) agrees,
    ``sqrt(stride) ||sampled residual||_F <= delta / 10``; otherwise the worst sampled row is
    the next pivot. A heuristic (ACA can still miss interactions narrower than ``stride``
    rows), not a bound; the result is then truncated by :func:`recompress` to ``delta``.
    Returns ``(U, V, ranks, capped)`` in canonical form.
    """
    rng = rng if rng is not None else np.random.default_rng(12345)  # host: probe offsets
    full = min(m, n)
    K = full if max_rank is None else min(full, int(max_rank) + 8)
    U = xp.zeros((t, m, K), dtype)
    V = xp.zeros((t, n, K), dtype)
    ar = xp.arange(t)
    active = xp.ones(t, dtype=bool)
    used = xp.zeros((t, m), dtype=bool)
    i = xp.zeros(t, dtype=np.int64)
    stop = 0.1 * delta
    stride = max(1, min(int(stride), m))
    it = 0

    def residual_rows(q, it):  # q (t, p) -> (t, p, n)
        rows = get_rows(q)
        if it:
            rows = rows - xp.matmul(U[ar[:, None], q, :it], _T(V[:, :, :it]))
        return rows

    while it < K:
        row = residual_rows(i[:, None], it)[:, 0, :]
        used[ar, i] = True
        j = xp.argmax(xp.abs(row), axis=1)
        piv = row[ar, j]
        ok = active & (xp.abs(piv) > 0)
        v = row / xp.where(ok, piv, 1.0)[:, None]
        col = get_cols(j[:, None])[:, 0, :]
        if it:
            col = col - xp.matmul(U[:, :, :it], V[ar, j, :it][:, :, None])[:, :, 0]
        okf = ok.astype(dtype)[:, None]
        U[:, :, it] = col * okf
        V[:, :, it] = v * okf
        size = xp.sqrt(xp.sum(col * col, axis=1) * xp.sum(v * v, axis=1)) * okf[:, 0]
        it += 1
        small = active & (size <= stop)
        nxt = xp.argmax(xp.where(used, -1.0, xp.abs(col)), axis=1)
        if bool(host(xp.any(small))):
            off = xp.asarray(rng.integers(0, stride, size=(t, 1), dtype=np.int64))
            q = xp.minimum(off + xp.arange(0, m, stride)[None, :], m - 1)
            R = residual_rows(q, it)
            rn = xp.sum(R * R, axis=2)
            est = xp.sqrt(xp.sum(rn, axis=1) * stride)
            conv = small & (est <= stop)
            nxt = xp.where(small, q[ar, xp.argmax(rn, axis=1)], nxt)
            active = active & ~conv
        if not bool(host(xp.any(active))):
            break
        i = nxt
    capped_aca = 0
    if max_rank is not None and it == K:
        capped_aca = int(host(xp.sum(active)))
    U, V, k, c = recompress(U[:, :, :it], V[:, :, :it], delta, max_rank)
    return U, V, k, max(c, capped_aca)


def _aca_dense(A, delta, max_rank):
    xp = get_xp(A)
    t, m, n = A.shape
    ar = xp.arange(t)[:, None]
    return aca(lambda i: A[ar, i, :], lambda j: A[ar, :, j], t, m, n, delta, max_rank, xp,
               A.dtype)


METHODS = ("svd", "rsvd", "aca")


def compress_tiles(A, delta, max_rank=None, method="svd", rng=None, r0=16):
    """Compress a stack of dense tiles ``A (t, m, n)`` to canonical low-rank form.

    ``method``: 'svd' (truncated SVD, optimal), 'rsvd' (adaptive randomized range finder
    with an exact residual check, then truncated SVD of the small projection; ``rng`` is an
    ``xp.random.RandomState``) or 'aca' (adaptive cross approximation, heuristic). Returns ``(U (t, m, kmax), V (t, n, kmax),
    ranks (host), capped)``.
    """
    if method == "svd":
        return _svd_compress(A, delta, max_rank)
    if method == "rsvd":
        return _rsvd_compress(A, delta, max_rank,
                              rng if rng is not None else get_xp(A).random.RandomState(0), r0)
    if method == "aca":
        return _aca_dense(A, delta, max_rank)
    raise ValueError(f"method must be one of {METHODS}, not {method!r}")
