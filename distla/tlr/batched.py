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

Algorithm notes: docs/tlr.md (compression).
"""
from __future__ import annotations

import numpy as np

from ..trace import trace

__all__ = [
    "compress_tiles",
    "get_xp",
    "host",
    "recompress",
    "stacked_qr",
    "stacked_r",
    "stacked_svd",
    "truncation_ranks",
]


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
    _, m, w = A.shape
    if _use_kernel(QR_METHOD, xp, A.dtype, lambda c: w <= m <= c.MAX_QR_ROWS):
        from . import _cuda
        return _cuda.qr(A)
    return xp.linalg.qr(A)


def stacked_r(A):
    """The ``R (t, p, w)`` of :func:`stacked_qr` alone (no ``Q`` is formed)."""
    xp = get_xp(A)
    _, m, w = A.shape
    if _use_kernel(QR_METHOD, xp, A.dtype, lambda c: w <= m <= c.MAX_QR_ROWS):
        from . import _cuda
        return _cuda.qr(A, want_q=False)[1]
    return xp.linalg.qr(A, mode="r")


def stacked_svd(M):
    """Reduced SVD ``X, s, Yt`` of a stack of small cores (see :data:`SVD_METHOD`)."""
    xp = get_xp(M)
    _, a, b = M.shape
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
        with trace("range"):   # one test matrix for the stack: one (t m) x n x r GEMM
            Om = rng.standard_normal((n, r)).astype(A.dtype)
            Q, _ = stacked_qr(xp.matmul(At.reshape(-1, n), Om).reshape(-1, m, r))
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
    if xp is np:   # X is a temporary: subtract in place, no second tile-sized array
        D = np.subtract(X, Y, out=X).reshape(X.shape[0], -1)
        return np.sqrt(np.einsum("ij,ij->i", D, D))
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


#: ACA aims at ``ACA_TARGET * delta`` (its estimated Frobenius error); the recompression of the
#: crosses spends the rest, ``(1 - ACA_TARGET) delta`` (the two errors add: no orthogonality).
ACA_TARGET = 0.25


def aca(get_rows, get_cols, t, m, n, delta, max_rank, xp, dtype=np.float64, rng=None,
        probes=8):
    """Adaptive cross approximation with partial pivoting, in lock step over ``t`` tiles;
    only ``O((m + n) k)`` entries of each tile are evaluated.

    Callbacks take ``ids`` (device int64 ``(a,)``: the tiles still running) and one local
    index per tile: ``get_rows(ids, i)`` -> ``(a, n)``, the rows ``i[a]``;
    ``get_cols(ids, j)`` -> ``(a, m)``, the columns ``j[a]``.

    Each iteration adds the cross through the pivot ``(i, argmax_j |residual row i|)``; the next
    row is the largest unused entry of the new residual column. A tile stops when two
    consecutive crosses are small, ``||u|| ||v|| <= ACA_TARGET delta``, *and* ``probes``
    random residual rows and columns (distinct for small tiles) agree:
    ``sqrt(max(m mean_i ||r_i||^2, n mean_j ||c_j||^2)) <= ACA_TARGET
    delta`` (unbiased estimates of the residual's squared Frobenius norm); otherwise the worst
    sampled row is the next pivot. A heuristic, not a bound (as every ACA), matched to the
    Frobenius tolerance of the truncation. Finished tiles leave the stack; their crosses are
    recompressed (:func:`recompress`) with the remaining ``(1 - ACA_TARGET) delta``.
    Returns ``(U, V, ranks, capped)`` in canonical form.
    """
    rng = rng if rng is not None else np.random.default_rng(12345)   # host: probe indices
    K = min(m, n) if max_rank is None else min(m, n, int(max_rank) + 8)
    target = ACA_TARGET * delta
    ids = np.arange(t)                  # tile of each stack row (host)
    alive = np.ones(t, dtype=bool)      # stack rows still running
    streak = np.zeros(t, dtype=np.int64)   # consecutive small crosses
    st = _AcaStack(xp, dtype, t, m, n, min(K, 32))
    i = xp.zeros(t, dtype=np.int64)
    parts, capped = [], 0
    while alive.any() and K:
        d = xp.asarray(ids)
        small, nxt = st.add_cross(get_rows(d, i), get_cols, d, i, target)
        streak = np.where(host(small), streak + 1, 0)
        check = alive & ((streak >= 2) | (st.it == K))
        if check.any():                 # probe the tiles whose last cross was small
            sub = np.flatnonzero(check)
            sd = xp.asarray(sub)
            est, worst = st.probe(get_rows, get_cols, d[sd], sd, rng, probes)
            ok = host(est <= target)
            if st.it == K:
                capped += int(np.sum(~ok)) if max_rank is not None else 0
                ok[:] = True
            nxt[sd] = xp.where(xp.asarray(ok), nxt[sd], worst)
            streak[sub[~ok]] = 0
            fin = sub[ok]
            if fin.size:
                fd = xp.asarray(fin)
                U, V, k, c = recompress(st.U[fd, :, :st.it], st.V[fd, :, :st.it],
                                        delta - target, max_rank)
                parts.append((ids[fin], U, V, k))
                capped += c
                alive[fin] = False
            if 4 * np.sum(~alive) > alive.size:     # drop the finished rows
                live = np.flatnonzero(alive)
                st.keep(xp.asarray(live))
                ids, alive, streak = ids[live], alive[live], streak[live]
                nxt = nxt[xp.asarray(live)]
        i = nxt
    return _gather_parts(parts, t, m, n, dtype, xp) + (capped,)


def _distinct(rng, a, m, p):
    """``(a, p)`` random indices in ``[0, m)``, distinct within a row when ``m`` is small (for
    ``m >= 64 p`` repeats are rare and harmless, and drawing is O(a p) instead of O(a m))."""
    if m >= 64 * p:
        return rng.integers(0, m, (a, p))
    return np.argsort(rng.random((a, m)), axis=1)[:, :p]


class _AcaStack:
    """The crosses of the running ACA tiles: ``U (a, m, cap)``, ``V (a, n, cap)`` (grown by
    doubling), ``it`` crosses each, and the rows already used as pivots."""

    def __init__(self, xp, dtype, t, m, n, cap):
        self.xp, self.it = xp, 0
        self.U = xp.zeros((t, m, cap), dtype)
        self.V = xp.zeros((t, n, cap), dtype)
        self.used = xp.zeros((t, m), dtype=bool)

    def probe(self, get_rows, get_cols, ids, rows, rng, p):
        """For the stack rows ``rows`` (tiles ``ids``): residual Frobenius estimates from
        ``p`` random rows and columns per tile, and the sampled row of largest residual (the
        next pivot where the estimate is too large)."""
        xp, it = self.xp, self.it
        _, m, _ = self.U.shape
        n = self.V.shape[1]
        a = int(rows.shape[0])
        ar = rows
        p = min(p, m, n)
        qi, qj = xp.asarray(_distinct(rng, a, m, p)), xp.asarray(_distinct(rng, a, n, p))
        rn, cn = xp.empty((a, p), self.U.dtype), xp.empty((a, p), self.U.dtype)
        step = max(1, 2 ** 27 // max(1, (m + n) * it * self.U.itemsize))   # <= 128 MiB copies
        for b0 in range(0, a, step):       # the probed tiles' factors, a chunk at a time
            b = slice(b0, min(a, b0 + step))
            Vt, Ut = _T(self.V[ar[b], :, :it]), _T(self.U[ar[b], :, :it])
            for c in range(p):
                u = self.U[ar[b], qi[b, c], :it][:, None]
                r = get_rows(ids[b], qi[b, c]) - xp.matmul(u, Vt)[:, 0]
                rn[b, c] = xp.sum(r * r, axis=1)
                v = self.V[ar[b], qj[b, c], :it][:, None]
                q = get_cols(ids[b], qj[b, c]) - xp.matmul(v, Ut)[:, 0]
                cn[b, c] = xp.sum(q * q, axis=1)
        est = xp.sqrt(xp.maximum(m * xp.mean(rn, axis=1), n * xp.mean(cn, axis=1)))
        return est, qi[xp.arange(a), xp.argmax(rn, axis=1)]

    def add_cross(self, row, get_cols, ids, i, target):
        """Add the cross through row ``i`` (``row``: the tiles' rows ``i``); returns (tiles
        whose new cross is small, next pivot rows)."""
        xp, it = self.xp, self.it
        a = xp.arange(self.U.shape[0])
        if it:
            row = row - xp.matmul(self.U[a, i, :it][:, None, :], _T(self.V[:, :, :it]))[:, 0]
        self.used[a, i] = True
        j = xp.argmax(xp.abs(row), axis=1)
        piv = row[a, j]
        ok = xp.abs(piv) > 0
        v = row / xp.where(ok, piv, 1.0)[:, None]
        col = get_cols(ids, j)
        if it:
            col = col - xp.matmul(self.U[:, :, :it], self.V[a, j, :it][:, :, None])[:, :, 0]
        okf = ok.astype(row.dtype)[:, None]
        if it == self.U.shape[2]:
            self._grow()
        self.U[:, :, it] = col * okf
        self.V[:, :, it] = v * okf
        self.it += 1
        size = xp.sqrt(xp.sum(col * col, axis=1) * xp.sum(v * v, axis=1)) * okf[:, 0]
        nxt = xp.argmax(xp.where(self.used, -1.0, xp.abs(col)), axis=1)
        return size <= target, nxt

    def _grow(self):
        xp = self.xp
        for name in ("U", "V"):
            old = getattr(self, name)
            new = xp.zeros(old.shape[:2] + (2 * old.shape[2],), old.dtype)
            new[:, :, :old.shape[2]] = old
            setattr(self, name, new)

    def keep(self, live):
        """Drop the finished tiles (keep the device indices ``live``)."""
        self.U, self.V, self.used = self.U[live], self.V[live], self.used[live]


METHODS = ("svd", "rsvd", "aca")


def compress_tiles(A, delta, max_rank=None, method="svd", rng=None, r0=16):
    """Compress a stack of dense tiles ``A (t, m, n)`` to canonical low-rank form.

    ``method``: 'svd' (truncated SVD, optimal), 'rsvd' (adaptive randomized range finder
    with an exact residual check, then truncated SVD of the small projection; ``rng`` is an
    ``xp.random.RandomState``) or 'aca' (adaptive cross approximation, heuristic). Returns
    ``(U (t, m, kmax), V (t, n, kmax), ranks (host), capped)``.
    """
    if method == "svd":
        return _svd_compress(A, delta, max_rank)
    if method == "rsvd":
        return _rsvd_compress(A, delta, max_rank,
                              rng if rng is not None else get_xp(A).random.RandomState(0), r0)
    if method == "aca":
        xp = get_xp(A)
        t, m, n = A.shape
        return aca(lambda d, i: A[d, i, :], lambda d, j: A[d, :, j], t, m, n, delta,
                   max_rank, xp, A.dtype)
    raise ValueError(f"method must be one of {METHODS}, not {method!r}")
