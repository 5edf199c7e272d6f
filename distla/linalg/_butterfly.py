"""Recursive random butterflies (Parker; Baboulin-Dongarra-Herrmann-Tomov) on DistMatrix.

A butterfly of size N is ``B<N> = [R S; R -S]`` with R, S random diagonal (the 1/sqrt2 is
dropped). The recursive butterfly of depth d on n (a multiple of 2^d) is
``W = W_{d-1} ... W_1 W_0`` where level k, ``W_k = diag(B_1, ..., B_{2^k})``, holds 2^k
butterflies of size ``N_k = n / 2^k``. Packed storage (docs/rbt.md): a (d, n) array ``w``
whose row k holds, for each of the 2^k blocks, R then S (so ``w[k, g]`` is the diagonal entry
of row g in its block). Small (O(dn)) and replicated on every rank.

Every level is a *row mixing*: with ``h = N_k / 2`` and partner(g) = g + h in the top half of
g's block, g - h in the bottom half, and s_g = +1 (top) / -1 (bottom),

* ``(W_k^T X)[g] = w[k,g] (s_g X[g] + X[partner])``
* ``(W_k X)[g]   = s_g w[k,g] X[g] + w[k,partner] X[partner]``

and ``X W_k`` is the first formula applied to columns. :func:`mix` applies
``X[g] := a_g X[g] + b_g X[partner(g)]`` along rows or columns of a block-cyclic DistMatrix.

Exchange design: partners of my rows live on process rows ``owner(partner)``; the relation is
an involution, so the rows I must send to process row q are exactly those whose partners live
on q, and q sends me the same number back. Each level therefore does ONE grouped
point-to-point exchange (``grid.comms(dev).col.exchange``) of whole local row sets between
partner process rows (columns: along the process row), then a local elementwise update on the
device. When ``h`` is a multiple of ``mb * nprow`` (e.g. large n with a power-of-two grid) all
partners are local and no communication happens at all. Rows move as contiguous runs (pieces of
blocks: a few slice copies per block, no fancy indexing) and the update ``X = a X + b P`` is one
fused kernel on GPU, so a level costs about five passes over the local matrix. Local matrices
larger than ``_PANEL_ELEMS`` are processed in panels of columns (rows) to bound the temporary
memory to one panel (one exchange per panel).
"""
from __future__ import annotations

import functools

import numpy as np

from .. import layout
from ..device import get_backend
from ..matrix import DistMatrix

__all__ = ["Butterfly", "random_butterflies", "mix", "two_sided", "padded_size"]

# Temporary-memory bound of one mixing step, in elements of the local matrix (1 GiB in float64).
_PANEL_ELEMS = 1 << 27


def padded_size(n: int, depth: int) -> int:
    """The smallest multiple of 2^depth that is >= n (not collective)."""
    q = 1 << depth
    return layout.num_blocks(n, q) * q


def _partners(g: np.ndarray, N: int):
    """(partner global index, sign) of global indices ``g`` at a level of block size N."""
    h = N // 2
    top = (g % N) < h
    return np.where(top, g + h, g - h), np.where(top, 1.0, -1.0)


def _runs(dst: np.ndarray, src: np.ndarray) -> list[tuple[int, int, int]]:
    """Maximal runs ``(d0, s0, length)`` with dst[d0 + t] == d0 + t <-> src[s0 + t] == s0 + t:
    the contiguous pieces of the copy ``out[dst] = in[src]`` (block-cyclic rows come in runs
    of up to a block)."""
    if dst.size == 0:
        return []
    brk = np.nonzero((np.diff(dst) != 1) | (np.diff(src) != 1))[0] + 1
    starts = np.concatenate([[0], brk])
    ends = np.concatenate([brk, [dst.size]])
    return [(int(dst[i]), int(src[i]), int(j - i)) for i, j in zip(starts, ends)]


# Above this many contiguous pieces per level, copies use one fancy-indexing gather instead.
_MAX_RUNS = 512


def _sl(x, axis, i0, i1):
    return x[i0:i1] if axis == 0 else x[:, i0:i1]


class _Copy:
    """``out[dst] = in[src]`` along an axis, by slices (few runs) or by one gather."""

    def __init__(self, dst, src, xp, by_runs):
        self.runs = _runs(dst, src) if by_runs else None
        if not by_runs:
            self.dst, self.src = xp.asarray(dst), xp.asarray(src)

    def __call__(self, out, inp, axis):
        if self.runs is not None:
            for d0, s0, n in self.runs:
                _sl(out, axis, d0, d0 + n)[...] = _sl(inp, axis, s0, s0 + n)
        elif axis == 0:
            out[self.dst] = inp[self.src]
        else:
            out[:, self.dst] = inp[:, self.src]


@functools.lru_cache(maxsize=64)
def _plan(n, nb, src, P, me, N, device, max_runs):
    """The moves of one mixing level on process ``me`` of P (cached: refinement applies the
    same butterflies to every residual): ``(my global indices, local copy, [(peer, count,
    pack, unpack)])``."""
    xp = get_backend(device).xp
    g = layout.local_indices(n, nb, me, src, P)
    if g.size == 0:
        return g, None, []
    partner, _ = _partners(g, N)
    powner = layout.owner(partner, nb, src, P)
    plocal = layout.global_to_local(partner, nb, P)
    here = np.nonzero(powner == me)[0]
    peers = []  # (q, positions to send in q's order, positions to receive in my order)
    for q in range(P):
        sel = np.nonzero(powner == q)[0]  # ascending local == ascending global
        if q != me and sel.size:
            send = sel[np.argsort(partner[sel], kind="stable")]  # ordered as q stores them
            peers.append((q, send, sel))
    nruns = len(_runs(here, plocal[here])) + sum(
        len(_runs(np.arange(s.size), s)) + len(_runs(r, np.arange(r.size))) for _, s, r in peers)
    by_runs = nruns <= max_runs
    local_copy = _Copy(here, plocal[here], xp, by_runs)
    plan = [(q, s.size, _Copy(np.arange(s.size), s, xp, by_runs),
             _Copy(r, np.arange(r.size), xp, by_runs)) for q, s, r in peers]
    return g, local_copy, plan


def mix(X: DistMatrix, axis: int, N: int, a: np.ndarray, b: np.ndarray) -> None:
    """In place: ``X[g] := a[g] X[g] + b[g] X[partner(g)]`` for every global row (axis 0) or
    column (axis 1) g of X, partner(g) = g +- N/2 within g's block of size N.

    ``a``, ``b``: host arrays indexed by global index (length X.m or X.n, a multiple of N).
    Collective over the process column (axis 0) or the process row (axis 1) of every rank:
    one grouped exchange with the partner process rows (columns) per panel (one panel unless
    the local matrix exceeds ``_PANEL_ELEMS``).
    """
    grid, xp = X.grid, X.xp
    comms = grid.comms(X.device)
    if axis == 0:
        n, nb, src, P, me, comm = X.m, X.mb, X.rsrc, grid.nprow, grid.myrow, comms.col
    else:
        n, nb, src, P, me, comm = X.n, X.nb, X.csrc, grid.npcol, grid.mycol, comms.row
    g, local_copy, plan = _plan(n, nb, src, P, me, N, X.device, _MAX_RUNS)
    if g.size == 0:
        return
    dt = X.dtype
    av = xp.asarray(a[g].astype(dt))
    bv = xp.asarray(b[g].astype(dt))
    av, bv = (av[:, None], bv[:, None]) if axis == 0 else (av[None, :], bv[None, :])
    L = X.local
    other = L.shape[1 - axis]
    # the panel width must be the same on every rank of the group: bound by the largest extent
    most = layout.num_blocks(n, nb * P) * nb
    width = max(1, min(other, _PANEL_ELEMS // max(1, most)))
    for c0 in range(0, other, width):
        c1 = min(other, c0 + width)
        Xc = _sl(L, 1 - axis, c0, c1)

        def shape(k):
            return (k, c1 - c0) if axis == 0 else (c1 - c0, k)
        sends, recvs = [], []
        for q, k, pack, _ in plan:
            buf = xp.empty(shape(k), dtype=dt, order="F")
            pack(buf, Xc, axis)
            sends.append((q, buf))
            recvs.append((q, xp.empty(shape(k), dtype=dt, order="F")))
        if plan:
            comm.exchange(sends, recvs)
        Pm = xp.empty(Xc.shape, dtype=dt, order="F")
        local_copy(Pm, Xc, axis)
        for (_q, _k, _, unpack), (_, buf) in zip(plan, recvs):
            unpack(Pm, buf, axis)
        del sends, recvs
        X.backend.axpby(Xc, Pm, av, bv)
        del Pm


class Butterfly:
    """A recursive butterfly ``W`` of depth ``depth`` on ``n_pad`` = n rounded up to a multiple
    of 2^depth, in packed storage ``coef`` (depth x n_pad, float64, the same on every rank).

    ``n`` is the original size: :meth:`apply_transpose` pads right-hand sides with zero rows,
    :meth:`apply` trims solutions back to n rows. Methods taking a DistMatrix are collective.
    """

    def __init__(self, coef: np.ndarray, n: int):
        coef = np.asarray(coef, dtype=np.float64)
        if coef.ndim != 2:
            raise ValueError("packed butterfly coefficients must be a (depth, n_pad) array")
        self.coef = coef
        self.depth, self.n_pad = coef.shape
        self.n = int(n)
        if self.n_pad != padded_size(self.n, self.depth):
            raise ValueError(f"coefficients of length {self.n_pad} do not match n = {n} at "
                             f"depth {self.depth} (expected {padded_size(self.n, self.depth)})")

    def __repr__(self):
        return f"Butterfly(n={self.n}, n_pad={self.n_pad}, depth={self.depth})"

    def _level(self, k: int, transpose: bool):
        """(N, a, b) of level k: W_k^T (transpose) or W_k as a mixing X[g] := a X[g] + b X[p]."""
        N = self.n_pad >> k
        g = np.arange(self.n_pad)
        p, s = _partners(g, N)
        w = self.coef[k]
        return N, s * w, (w if transpose else w[p])

    # ---- distributed application (collective) --------------------------------------------
    def rows_transpose(self, X: DistMatrix) -> None:
        """In place ``X := W^T X`` (X has n_pad rows; deepest level first). Collective."""
        for k in reversed(range(self.depth)):
            mix(X, 0, *self._level(k, True))

    def rows(self, X: DistMatrix) -> None:
        """In place ``X := W X`` (X has n_pad rows; level 0 first). Collective."""
        for k in range(self.depth):
            mix(X, 0, *self._level(k, False))

    def cols(self, X: DistMatrix) -> None:
        """In place ``X := X W`` (X has n_pad columns; deepest level first). Collective."""
        for k in reversed(range(self.depth)):
            mix(X, 1, *self._level(k, True))

    def apply_transpose(self, B: DistMatrix) -> DistMatrix:
        """Collective: ``W^T [B; 0]``, a new n_pad-row matrix in B's layout (B has n or n_pad
        rows; padded rows are zero)."""
        X = pad_rows(B, self.n_pad)
        self.rows_transpose(X)
        return X

    def apply(self, Y: DistMatrix, trim: bool = True) -> DistMatrix:
        """Collective: ``W Y`` for Y with n_pad rows, a new matrix in Y's layout; its first n
        rows only when ``trim`` (the solution of the original, unpadded system)."""
        if Y.m != self.n_pad:
            raise ValueError(f"apply: Y has {Y.m} rows, the butterfly needs {self.n_pad}")
        X = Y.copy()
        self.rows(X)
        return trim_rows(X, self.n) if trim else X

    # ---- dense form (tests, small n; not collective) --------------------------------------
    def matrix(self) -> np.ndarray:
        """The dense n_pad x n_pad matrix W (NumPy)."""
        n = self.n_pad
        W = np.eye(n)
        for k in range(self.depth):  # W = W_{d-1} ... W_0
            N, a, b = self._level(k, False)
            p, _ = _partners(np.arange(n), N)
            Wk = np.zeros((n, n))
            Wk[np.arange(n), np.arange(n)] = a
            Wk[np.arange(n), p] = b
            W = Wk @ W
        return W


def _aligned(X: DistMatrix, depth: int) -> bool:
    """True when every level's partners are local on both axes: the smallest half-block
    ``n_pad / 2^depth`` is a multiple of ``mb * nprow`` and of ``nb * npcol``. Then every
    level block of rows (columns) is a contiguous local range on every process."""
    if depth == 0:
        return True
    h = X.m >> depth
    g = X.grid
    return X.m == X.n and h % (X.mb * g.nprow) == 0 and h % (X.nb * g.npcol) == 0


def two_sided(X: DistMatrix, U: "Butterfly", V: "Butterfly") -> None:
    """In place ``X := U^T X V`` (X square n_pad x n_pad). Collective over the grid.

    Aligned layouts (:func:`_aligned`: e.g. large n on a power-of-two grid) need no
    communication: per level, every quadruple of quarter blocks is updated in place by the
    elementary product (one fused kernel on GPU: one read and one write of the matrix per
    level). Otherwise rows, then columns, are mixed level by level through :func:`mix`.
    """
    if not _aligned(X, U.depth):
        U.rows_transpose(X)
        V.cols(X)
        return
    xp, g, L, be = X.xp, X.grid, X.local, X.backend
    rows, cols = X.row_indices(), X.col_indices()
    dt = X.dtype
    for k in reversed(range(U.depth)):
        N = X.m >> k
        hr, hc = (N // 2) // g.nprow, (N // 2) // g.npcol  # local rows / columns per half
        uk = xp.asarray(U.coef[k][rows].astype(dt)).reshape(-1, 1)
        vk = xp.asarray(V.coef[k][cols].astype(dt)).reshape(1, -1)
        for bi in range(1 << k):
            r0 = 2 * hr * bi
            ut, ub = uk[r0:r0 + hr], uk[r0 + hr:r0 + 2 * hr]
            for bj in range(1 << k):
                c0 = 2 * hc * bj
                vl, vr = vk[:, c0:c0 + hc], vk[:, c0 + hc:c0 + 2 * hc]
                be.butterfly_quad(
                    L[r0:r0 + hr, c0:c0 + hc], L[r0:r0 + hr, c0 + hc:c0 + 2 * hc],
                    L[r0 + hr:r0 + 2 * hr, c0:c0 + hc],
                    L[r0 + hr:r0 + 2 * hr, c0 + hc:c0 + 2 * hc], ut, ub, vl, vr)


def random_butterflies(n: int, depth: int, seed: int, count: int = 2):
    """``count`` Butterfly objects for size n from ``seed`` (not collective: every rank that
    passes the same seed gets the same butterflies, whatever the grid). Entries exp(r/10),
    r ~ U(-1/2, 1/2), drawn with NumPy's default generator in the order (butterfly, level,
    index)."""
    n_pad = padded_size(n, depth)
    rng = np.random.default_rng(seed)
    r = rng.uniform(-0.5, 0.5, size=(count, depth, n_pad))
    return [Butterfly(np.exp(r[i] / 10.0), n) for i in range(count)]


def pad_rows(B: DistMatrix, m_pad: int) -> DistMatrix:
    """A new ``m_pad x B.n`` matrix in B's layout holding B on top, zeros below (local, no
    communication: B's local rows are a prefix of the padded matrix's)."""
    if B.m > m_pad:
        raise ValueError(f"cannot pad {B.m} rows to {m_pad}")
    X = DistMatrix(B.grid, (m_pad, B.n), B.block, dtype=B.dtype, device=B.device, src=B.src)
    X.local[:B.local_shape[0], :] = B.local
    return X


def trim_rows(X: DistMatrix, m: int) -> DistMatrix:
    """The first ``m`` rows of X, in X's layout (local, no communication)."""
    if m == X.m:
        return X
    Y = DistMatrix(X.grid, (m, X.n), X.block, dtype=X.dtype, device=X.device, src=X.src)
    Y.local[...] = X.local[:Y.local_shape[0], :]
    return Y


def pad_matrix(A: DistMatrix, n_pad: int, scale: float) -> DistMatrix:
    """A new ``n_pad x n_pad`` matrix ``[[A, 0], [0, scale I]]`` in A's layout (local, no
    communication). ``scale`` should be of A's magnitude (e.g. max|A|), so that the butterflies
    mixing the padded rows into real ones do not swamp a matrix scaled near underflow."""
    n = A.m
    X = DistMatrix(A.grid, (n_pad, n_pad), A.block, dtype=A.dtype, device=A.device, src=A.src)
    ml, nl = A.local_shape
    X.local[:ml, :nl] = A.local
    if n_pad > n:
        xp = X.xp
        I = X.row_indices()[ml:]
        J = X.col_indices()[nl:]
        if I.size and J.size:
            sub = X.local[ml:, nl:]
            mask = xp.asarray(I[:, None] == J[None, :])
            sub[mask] = scale
    return X
