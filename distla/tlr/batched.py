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

__all__ = ["Profile", "host", "get_xp", "truncation_ranks", "recompress", "gemm_lll", "compress_tiles",
           "lr_gram_update", "householder_qr", "stacked_qr", "jacobi_svd", "stacked_svd"]


class Profile:
    """Seconds per named phase, with the device synchronized at each phase boundary (use only
    for diagnosis: the synchronizations cost time on GPU). ``None`` everywhere means off."""

    def __init__(self, backend):
        self.backend = backend
        self.times: dict = {}
        self.counts: dict = {}

    def section(self, name):
        import contextlib
        import time

        @contextlib.contextmanager
        def cm():
            self.backend.synchronize()
            t0 = time.perf_counter()
            try:
                yield
            finally:
                self.backend.synchronize()
                self.times[name] = self.times.get(name, 0.0) + time.perf_counter() - t0
                self.counts[name] = self.counts.get(name, 0) + 1
        return cm()


def _sec(prof, name):
    if prof is None:
        import contextlib
        return contextlib.nullcontext()
    return prof.section(name)


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


# ---- batched QR -------------------------------------------------------------------------

#: QR used by :func:`recompress` for stacks: 'auto' (LAPACK per tile on NumPy, where it loops in
#: C at full speed; :func:`householder_qr` on CuPy, whose stacked ``linalg.qr`` issues one
#: cuSOLVER call per tile), 'lapack' (``xp.linalg.qr``) or 'householder'.
QR_METHOD = "auto"


def householder_qr(A, block: int = 16):
    """Reduced QR of a stack ``A (t, m, w)`` by Householder reflections applied to all tiles at
    once: ``Q (t, m, p)`` with orthonormal columns and upper triangular ``R (t, p, w)``,
    ``p = min(m, w)``, ``A = Q R``. Backward stable also for rank-deficient tiles (zero-padded
    or dependent columns). Blocked (LAPACK's geqrf/larft/larfb): panels of ``block`` columns
    reduced column by column, the rest of the stack updated by the compact WY form
    ``I - V T V^T`` with three stacked ``matmul`` calls. Launches: about ``12 p`` stacked
    calls in all, independent of ``t`` (xp's stacked ``qr`` on CuPy is ``t`` cuSOLVER calls)."""
    xp = get_xp(A)
    t, m, w = A.shape
    p = min(m, w)
    Rt = _T(A).copy()                           # (t, w, m), C order: columns of A contiguous
    Vt = xp.zeros((t, p, m), A.dtype)           # reflectors as rows (zero before the diagonal)
    taus = xp.zeros((t, p), A.dtype)
    blocks = []
    for j0 in range(0, p, block):
        j1 = min(p, j0 + block)
        for j in range(j0, j1):                 # panel: unblocked
            x = Rt[:, j, j:]
            alpha = x[:, 0]
            sig = xp.sum(x[:, 1:] * x[:, 1:], axis=1)
            nrm = xp.sqrt(alpha * alpha + sig)
            zero = sig == 0
            beta = xp.where(zero, alpha, xp.where(alpha >= 0, -nrm, nrm))
            tau = xp.where(zero, 0.0, (beta - alpha) / xp.where(zero, 1.0, beta))
            v = x * xp.where(zero, 0.0, 1.0 / xp.where(zero, 1.0, alpha - beta))[:, None]
            v[:, 0] = 1.0
            if j + 1 < j1:
                sub = Rt[:, j + 1:j1, j:]                         # (t, j1 - j - 1, m - j)
                wv = xp.matmul(sub, v[:, :, None])
                sub -= wv * (tau[:, None] * v)[:, None, :]
            Rt[:, j, j] = beta
            Rt[:, j, j + 1:] = 0.0
            Vt[:, j, j:] = v
            taus[:, j] = tau
        V = Vt[:, j0:j1, j0:]                   # (t, b, m - j0)
        b = j1 - j0
        T = xp.zeros((t, b, b), A.dtype)        # H_j0 ... H_j1-1 = I - V^T T V (rows of V)
        for jj in range(b):
            T[:, jj, jj] = taus[:, j0 + jj]
            if jj:
                z = xp.matmul(V[:, :jj, :], V[:, jj, :, None])   # (t, jj, 1)
                T[:, :jj, jj] = -taus[:, j0 + jj, None] * xp.matmul(T[:, :jj, :jj], z)[:, :, 0]
        blocks.append((j0, V, T))
        if j1 < w:                              # trailing columns: C^T <- (I - V^T T^T V) C^T
            C = Rt[:, j1:, j0:]
            C -= xp.matmul(xp.matmul(xp.matmul(C, _T(V)), T), V)
    Qt = xp.zeros((t, p, m), A.dtype)           # Q^T, Q = (blocks) [I_p; 0]
    ar = xp.arange(p)
    Qt[:, ar, ar] = 1.0
    for j0, V, T in reversed(blocks):
        S = Qt[:, j0:, j0:]
        S -= xp.matmul(xp.matmul(xp.matmul(S, _T(V)), _T(T)), V)
    return xp.ascontiguousarray(_T(Qt)), xp.triu(_T(Rt[:, :, :p]))


def stacked_qr(A):
    """Reduced QR of a stack (see :data:`QR_METHOD`)."""
    xp = get_xp(A)
    method = QR_METHOD
    if method == "auto":
        method = "lapack" if xp is np else "householder"
    if method == "householder":
        return householder_qr(A)
    return xp.linalg.qr(A)


#: SVD of the small cores: 'auto' (= 'lapack'), 'lapack' (``xp.linalg.svd``: CuPy batches it
#: (gesvdjBatched) only for cores <= 32 x 32 and loops one cuSOLVER call per tile above) or
#: 'jacobi' (:func:`jacobi_svd`, batched at every size but ~10-30 sweeps of ``w`` stacked rounds
#: each for the graded ``w x w`` cores of the factorization, w ~ 40-80: on CPU ~200x slower
#: than LAPACK; whether it beats CuPy's per-tile loop on GPU is to be measured).
SVD_METHOD = "auto"


def _pairings(b: int):
    """Round-robin tournament over ``b`` (even) columns: ``b - 1`` rounds of ``b / 2``
    disjoint pairs ``(p, q)``, every pair once per sweep."""
    idx = list(range(b))
    rounds = []
    for _ in range(b - 1):
        h = b // 2
        rounds.append((idx[:h], idx[h:][::-1]))
        idx = [idx[0]] + [idx[-1]] + idx[1:-1]
    return rounds


def jacobi_svd(M, max_sweeps: int = 30):
    """SVD of a stack ``M (t, a, b)`` by one-sided (Hestenes) Jacobi, all tiles at once:
    returns ``X (t, a, r)``, ``s (t, r)`` (descending), ``Yt (t, r, b)``, ``r = min(a, b)``,
    like ``xp.linalg.svd(M, full_matrices=False)`` (singular vectors of zero singular values
    may be zero: the columns of ``X``, or the rows of ``Yt`` when ``b > a``). Column pairs in round-robin order, ``b/2`` rotations per stacked call;
    stops when every pair is orthogonal to ``~eps`` (one host read per sweep)."""
    xp = get_xp(M)
    t, a, b = M.shape
    if b > a:
        X, s, Yt = jacobi_svd(xp.ascontiguousarray(_T(M)), max_sweeps)
        return _T(Yt), s, _T(X)
    r = b
    be = b + (b % 2)
    G = xp.zeros((t, be, a), M.dtype)              # columns of M as rows (contiguous)
    G[:, :b] = _T(M)
    Y = xp.zeros((t, be, be), M.dtype)             # Y^T: rows are the right vectors
    ar = xp.arange(be)
    Y[:, ar, ar] = 1.0
    rounds = [(xp.asarray(np.array(p)), xp.asarray(np.array(q))) for p, q in _pairings(be)]
    tol = float(np.finfo(M.dtype).eps) * a
    for _ in range(max_sweeps):
        off = xp.zeros((), M.dtype)
        for p, q in rounds:
            P, Q = G[:, p], G[:, q]                               # (t, h, a)
            al = xp.sum(P * P, axis=2)
            bt = xp.sum(Q * Q, axis=2)
            ga = xp.sum(P * Q, axis=2)
            nrm = xp.sqrt(al * bt)
            rel = xp.abs(ga) / xp.where(nrm > 0, nrm, 1.0)
            off = xp.maximum(off, xp.max(rel))
            rot = rel > tol
            gs = xp.where(rot, ga, 1.0)
            zeta = (bt - al) / (2.0 * gs)
            tn = xp.where(zeta >= 0, 1.0, -1.0) / (xp.abs(zeta) + xp.hypot(1.0, zeta))
            c = xp.where(rot, 1.0 / xp.sqrt(1.0 + tn * tn), 1.0)[:, :, None]
            sn = xp.where(rot, c[:, :, 0] * tn, 0.0)[:, :, None]
            G[:, p], G[:, q] = c * P - sn * Q, sn * P + c * Q
            YP, YQ = Y[:, p], Y[:, q]
            Y[:, p], Y[:, q] = c * YP - sn * YQ, sn * YP + c * YQ
        if float(off) <= tol:
            break
    sv = xp.sqrt(xp.sum(G * G, axis=2))                           # (t, be)
    order = xp.argsort(-sv, axis=1)[:, :r]
    sv = xp.take_along_axis(sv, order, axis=1)
    G = xp.take_along_axis(G, order[:, :, None], axis=1)
    Yt = xp.take_along_axis(Y, order[:, :, None], axis=1)[:, :, :b]
    X = _T(G) / xp.where(sv > 0, sv, 1.0)[:, None, :] * (sv > 0)[:, None, :]
    return X, sv, Yt


def stacked_svd(M):
    """Reduced SVD of a stack of small cores (see :data:`SVD_METHOD`)."""
    xp = get_xp(M)
    method = SVD_METHOD
    if method == "auto":
        method = "lapack"
    if method == "jacobi":
        return jacobi_svd(M)
    return xp.linalg.svd(M, full_matrices=False)


def recompress(Cu, Cv, delta: float, max_rank: int | None = None, *, u_orthonormal=False,
               prof=None):
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
    with _sec(prof, "qr"):
        if u_orthonormal:
            Qu, Ru = Cu, None
        else:
            Qu, Ru = stacked_qr(Cu)
        Qv, Rv = stacked_qr(Cv)
    with _sec(prof, "svd"):
        M = _T(Rv) if Ru is None else xp.matmul(Ru, _T(Rv))
        X, s, Yt = stacked_svd(M)
        k, kh, capped, kmax = _ranks_to_host(s, delta, max_rank)
    with _sec(prof, "assemble"):
        U, V = _assemble(Qu, X, s, Yt, Qv, k, kmax)
    return U, V, kh, capped


def gemm_lll(Cu, Cv, Au, Av, Bu, Bv, delta, max_rank=None, alpha=-1.0, beta=1.0, prof=None):
    """Low-rank GEMM into low-rank tiles, stacked: ``C = alpha A B + beta C`` with
    ``A = Au Av^T``, ``B = Bu Bv^T``, ``C = Cu Cv^T``, recompressed to ``delta``.

    ``W = alpha Av^T Bu``; ``Cu' = [Cu | Au]``, ``Cv' = [beta Cv | Bv W^T]`` (so that
    ``Cu' Cv'^T = beta C + alpha A B``), then :func:`recompress`. For the Cholesky update
    ``C -= A_mk A_nk^T`` with ``A_mk = U_m V_m^T`` pass ``Au=U_m, Av=V_m, Bu=V_n, Bv=U_n``.
    Shapes: ``Cu (t, m, kc)``, ``Cv (t, n, kc)``, ``Au (t, m, ka)``, ``Av (t, p, ka)``,
    ``Bu (t, p, kb)``, ``Bv (t, n, kb)``. Returns what :func:`recompress` returns.
    """
    xp = get_xp(Cu)
    with _sec(prof, "stack"):
        W = xp.matmul(_T(Av), Bu)
        if alpha != 1.0:
            W *= alpha
        Cv2 = xp.matmul(Bv, _T(W))
        Cvb = Cv if beta == 1.0 else Cv * beta
        Cu2 = xp.concatenate([Cu, Au], axis=2)
        Cv2 = xp.concatenate([Cvb, Cv2], axis=2)
    return recompress(Cu2, Cv2, delta, max_rank, prof=prof)


def lr_gram_update(D, U, V, alpha=-1.0):
    """Dense tiles updated by symmetric low-rank products, stacked (SYRK-like):
    ``D_t += alpha U_t (V_t^T V_t) U_t^T``. ``D (t, m, m)`` in place; ``U, V (t, m, k)``."""
    xp = get_xp(D)
    if D.shape[0] == 0 or U.shape[2] == 0:
        return D
    G = xp.matmul(_T(V), V)
    D += alpha * xp.matmul(xp.matmul(U, G), _T(U))
    return D


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
    """Adaptive randomized range finder: sample ``r`` columns, check the true residual
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
        idx = xp.asarray(todo)
        At = A[idx]
        Om = rng.standard_normal((todo.size, n, r)).astype(A.dtype)
        Q, _ = xp.linalg.qr(xp.matmul(At, Om))
        B = xp.matmul(_T(Q), At)
        res = xp.sqrt(xp.sum((At - xp.matmul(Q, B)) ** 2, axis=(1, 2)))
        resh = host(res)
        done = (resh <= 0.5 * delta) | (r >= cap)
        if done.any():
            d = xp.asarray(np.flatnonzero(done))
            budget = float(np.sqrt(max(delta * delta - float(resh[done].max()) ** 2, 0.0)))
            U, V, k, c = recompress(Q[d], xp.ascontiguousarray(_T(B[d])), budget, max_rank,
                                    u_orthonormal=True)
            parts.append((todo[done], U, V, k))
            capped += c
        todo = todo[~done]
        r = min(2 * r, cap)
    return _gather_parts(parts, t, m, n, A.dtype, xp) + (capped,)


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


def compress_tiles(A, delta, max_rank=None, method="svd", rng=None):
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
                              rng if rng is not None else get_xp(A).random.RandomState(0))
    if method == "aca":
        return _aca_dense(A, delta, max_rank)
    raise ValueError(f"method must be one of {METHODS}, not {method!r}")
