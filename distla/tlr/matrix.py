"""TLRMatrix: a symmetric tile low-rank matrix in 2D block-cyclic tile layout.

The tiles are the blocks of a square :class:`~distla.DistMatrix` with ``mb == nb`` (the tile
size ``nb``): tile ``(i, j)`` lives on process ``((rsrc + i) % P, (csrc + j) % Q)``. Only the
lower triangle is stored (symmetric storage):

* diagonal tiles dense, stacked per rank in ``D`` (``(nd, nb, nb)``, full symmetric tiles);
* off-diagonal tiles ``i > j`` as ``A_ij ~ U_ij V_ij^T``, stacked per rank in ``U`` and ``V``
  (``(T, nb, K)``: tile-major, ``K`` = the rank's current storage width), with per-tile ranks
  ``rank`` (host int64 ``(T,)``; columns ``rank[s]..K-1`` are zero). Slots are ordered by tile
  column, then tile row, so the tiles of one tile column are a contiguous slice.

All tiles are padded to ``nb x nb``: the last (partial) tile row/column has zero rows in ``U``,
``V`` and an identity block in its diagonal tile, which changes no result (the padded part of
the Cholesky factor is the identity, of log-determinant 0).

Fixed accuracy (``tol``): with ``F = ||A||_F`` (the Frobenius norm of the whole symmetric
matrix, computed at compression) and ``nt`` tile rows, every off-diagonal tile is stored with
the smallest rank whose discarded singular values satisfy ``sqrt(sum_{l>k} s_l^2) <= delta``,
``delta = tol * F / nt``; hence ``||A - A_tlr||_F <= tol * F``. The TLR Cholesky truncates
every updated tile with the same ``delta``. ``max_rank`` caps every rank (fixed-rank mode when
``tol`` is None).

Constructors :func:`compress`, :func:`from_function`, :func:`from_kernel` are collective.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from ..device import get_backend
from ..errors import DistlaError, agree, collective
from ..grid import ProcessGrid
from . import _memory, batched
from .batched import host

__all__ = ["TLRMatrix", "RankSummary", "compress", "from_function", "from_kernel"]

_EPS_FLOOR = 10.0  # delta >= _EPS_FLOOR * eps * F / nt: never store numerical noise


@dataclass
class RankSummary:
    """Ranks of the off-diagonal (lower) tiles: global ``min``, ``mean``, ``max`` over all
    ``count`` tiles, and this rank's own: ``own`` (int array) for tiles ``own_keys``."""

    min: int
    mean: float
    max: int
    count: int
    own: np.ndarray = field(repr=False)
    own_keys: list = field(repr=False)

    def __str__(self):
        return f"min {self.min}, mean {self.mean:.1f}, max {self.max} over {self.count} tiles"


class TLRMatrix:
    """A symmetric tile low-rank matrix (lower storage), see the module docstring.

    Attributes (all ranks): ``grid``, ``n``, ``nb`` (tile size), ``nt`` (tile rows),
    ``src``, ``device``, ``dtype``, ``tol``, ``max_rank``, ``delta`` (the per-tile absolute
    truncation threshold), ``norm_fro`` (``||A||_F``), ``ranks`` (:class:`RankSummary`),
    ``nbytes`` (global compressed footprint: ``sum (m_i + n_j) k_ij`` words for the
    off-diagonal tiles plus the dense diagonal tiles), ``nbytes_dense`` (the dense ``n x n``
    matrix), ``nbytes_allocated`` (global bytes of the padded stacks), ``info`` (timings and
    counters). The summaries are computed collectively when the matrix is built; reading them
    is local.
    """

    factored = False

    def __init__(self, grid, n: int, nb: int, *, device="cpu", src=(0, 0), dtype=np.float64):
        """Empty storage for an ``n x n`` matrix in ``nb x nb`` tiles (local, not collective;
        use the constructor functions)."""
        self.grid = grid
        self.n, self.nb = int(n), int(nb)
        self.nt = -(-self.n // self.nb) if self.n else 0
        self.src = (int(src[0]), int(src[1]))
        self.device = device
        self.backend = get_backend(device)
        self.xp = self.backend.xp
        self.dtype = np.dtype(dtype)
        self.tol = None
        self.max_rank = None
        self.delta = 0.0
        self.norm_fro = 0.0
        self.info: dict = {}
        P, Q = grid.nprow, grid.npcol
        nt = self.nt
        self.rows = [i for i in range(nt) if self.prow(i) == grid.myrow]
        self.cols = [j for j in range(nt) if self.pcol(j) == grid.mycol]
        self.row_pos = {i: a for a, i in enumerate(self.rows)}
        self.col_pos = {j: a for a, j in enumerate(self.cols)}
        self.diag_keys = [k for k in self.rows if self.pcol(k) == grid.mycol]
        self.dslot = {k: s for s, k in enumerate(self.diag_keys)}
        self.keys = [(i, j) for j in self.cols for i in self.rows if i > j]
        self.slot = {key: s for s, key in enumerate(self.keys)}
        self.col_slots = {}
        for s, (i, j) in enumerate(self.keys):
            a, _ = self.col_slots.get(j, (s, s))
            self.col_slots[j] = (a, s + 1)
        self.key_rows = np.array([k[0] for k in self.keys], dtype=np.int64)
        self.key_cols = np.array([k[1] for k in self.keys], dtype=np.int64)
        self.row_slots = {i: np.flatnonzero(self.key_rows == i) for i in self.rows}
        xp = self.xp
        self.D = xp.zeros((len(self.diag_keys), self.nb, self.nb), self.dtype)
        self.U = xp.zeros((len(self.keys), self.nb, 0), self.dtype)
        self.V = xp.zeros((len(self.keys), self.nb, 0), self.dtype)
        self.rank = np.zeros(len(self.keys), dtype=np.int64)
        del P, Q

    # ---- layout ---------------------------------------------------------------------------
    def prow(self, i: int) -> int:
        """Process row of tile row ``i``."""
        return (self.src[0] + i) % self.grid.nprow

    def pcol(self, j: int) -> int:
        """Process column of tile column ``j``."""
        return (self.src[1] + j) % self.grid.npcol

    def tile_size(self, i: int) -> int:
        """Rows of tile row ``i`` (``nb`` except for the last one)."""
        return min(self.nb, self.n - i * self.nb)

    @property
    def shape(self):
        return (self.n, self.n)

    @property
    def K(self) -> int:
        """Storage width of this rank's low-rank stacks."""
        return self.U.shape[2]

    def __repr__(self):
        r = getattr(self, "_ranks", None)
        return (f"{type(self).__name__}(n={self.n}, tile={self.nb}, grid={self.grid.nprow}x"
                f"{self.grid.npcol}, device={self.device!r}, tol={self.tol}, "
                f"ranks=[{r if r is not None else '?'}])")

    # ---- storage helpers (local) --------------------------------------------------------
    def ensure_capacity(self, k: int) -> None:
        """Grow the low-rank stacks to width >= ``k`` (local; copies)."""
        K = self.K
        if k <= K:
            return
        newK = max(int(k), int(math.ceil(1.25 * K)))
        newK = -(-newK // 4) * 4
        xp = self.xp
        grow = 2 * _memory.stack_bytes(self.U.shape[0], self.nb, newK, self.dtype.itemsize)
        free = _memory.available(self.device)
        if grow > free:   # local: callers agree on it (the factorization's next header)
            raise DistlaError(_memory.fit_message(
                f"storage growing to rank {newK}", grow, free, self.n,
                int(self.n * (free / grow) ** 0.5)))
        for name in ("U", "V"):
            old = getattr(self, name)
            new = xp.zeros((old.shape[0], self.nb, newK), self.dtype)
            new[:, :, :K] = old
            setattr(self, name, new)

    def set_tiles(self, slots, U, V, ranks) -> None:
        """Store canonical factors ``U, V`` (``(t, nb, k)``, zero-padded beyond ``ranks``)
        in ``slots`` (host int array), zeroing the columns they no longer use (local)."""
        slots = np.asarray(slots, dtype=np.int64)
        if slots.size == 0:
            return
        k = U.shape[2]
        self.ensure_capacity(k)
        old = int(self.rank[slots].max())
        d = self.xp.asarray(slots)
        if k:
            self.U[d, :, :k] = U
            self.V[d, :, :k] = V
        if old > k:
            self.U[d, :, k:old] = 0
            self.V[d, :, k:old] = 0
        self.rank[slots] = ranks

    def copy(self) -> "TLRMatrix":
        """A deep copy (local, no communication)."""
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        new.D = self.D.copy()
        new.U = self.U.copy()
        new.V = self.V.copy()
        new.rank = self.rank.copy()
        new.info = dict(self.info)
        return new

    def _padded_rows(self, i: int):
        """Validity mask (host bool, nb) of the rows of tile row ``i``."""
        return np.arange(self.nb) < self.tile_size(i)

    # ---- summaries (collective) ---------------------------------------------------------
    def _summarize(self) -> None:
        """Collective: gather the rank summary and byte counts (host scalars only)."""
        from mpi4py import MPI
        comm = self.grid.comm
        it = self.dtype.itemsize
        r = self.rank
        sizes = np.array([self.tile_size(i) + self.tile_size(j) for i, j in self.keys],
                         dtype=np.int64)
        comp = float((sizes * r).sum() * it
                     + sum(self.tile_size(k) ** 2 for k in self.diag_keys) * it)
        alloc = float(self.D.nbytes + self.U.nbytes + self.V.nbytes)
        sums = np.array([float(r.sum()), float(r.size), comp, alloc])
        comm.Allreduce(MPI.IN_PLACE, sums, op=MPI.SUM)
        mm = np.array([-(r.min() if r.size else np.iinfo(np.int64).max),
                       r.max() if r.size else -1], dtype=np.int64)
        comm.Allreduce(MPI.IN_PLACE, mm, op=MPI.MAX)
        count = int(sums[1])
        self._ranks = RankSummary(min=int(-mm[0]) if count else 0,
                                  mean=float(sums[0] / count) if count else 0.0,
                                  max=int(mm[1]) if count else 0, count=count,
                                  own=r.copy(), own_keys=list(self.keys))
        self.nbytes = int(sums[2])
        self.nbytes_allocated = int(sums[3])
        self.nbytes_dense = self.n * self.n * it

    @property
    def ranks(self) -> RankSummary:
        """Global rank summary (min/mean/max) plus this rank's own tile ranks (local read)."""
        return self._ranks

    @property
    def compression_ratio(self) -> float:
        """``nbytes / nbytes_dense``."""
        return self.nbytes / max(1, self.nbytes_dense)

    # ---- conversions (collective) -------------------------------------------------------
    def to_dense(self):
        """Collective: the dense matrix as a :class:`~distla.DistMatrix` (same grid, tile
        blocks, source and device): the full symmetric matrix for a TLRMatrix, the lower
        triangular factor ``L`` for a Cholesky factor. For testing; needs O(n^2) memory."""
        from ..matrix import DistMatrix
        xp = self.xp
        A = DistMatrix.zeros(self.grid, (self.n, self.n), (self.nb, self.nb), dtype=self.dtype,
                             device=self.device, src=self.src)
        nb = self.nb
        if self.diag_keys:
            D = xp.tril(self.D)
            if not self.factored:  # A = Lo + Lo^T with the diagonal halved in Lo
                D = D - 0.5 * (xp.eye(nb, dtype=self.dtype)[None] * self.D)
            for s, k in enumerate(self.diag_keys):
                m = self.tile_size(k)
                r0, c0 = self.row_pos[k] * nb, self.col_pos[k] * nb
                A.local[r0:r0 + m, c0:c0 + m] = D[s, :m, :m]
        for j in self.cols:
            if j not in self.col_slots:
                continue
            s0, s1 = self.col_slots[j]
            T = xp.matmul(self.U[s0:s1], self.V[s0:s1].swapaxes(1, 2))
            c0, nj = self.col_pos[j] * nb, self.tile_size(j)
            for s in range(s0, s1):
                i = self.keys[s][0]
                r0, mi = self.row_pos[i] * nb, self.tile_size(i)
                A.local[r0:r0 + mi, c0:c0 + nj] = T[s - s0, :mi, :nj]
        if not self.factored:
            A = A + A.transpose()
        return A

    def _rhs_stack(self, x):
        """Replicated ``(n,)`` or ``(n, r)`` array -> device stack ``(nt, nb, r)``, shape."""
        xp = self.xp
        xa = xp.asarray(x.get() if (xp is np and hasattr(x, "get")
                                    and not isinstance(x, np.ndarray)) else x)
        if xa.ndim not in (1, 2) or xa.shape[0] != self.n:
            raise ValueError(f"expected an array of {self.n} rows (1-D or 2-D), got shape "
                             f"{tuple(xa.shape)}")
        shape = xa.shape
        X2 = xa.reshape(self.n, 1 if xa.ndim == 1 else xa.shape[1]).astype(self.dtype)
        X = xp.zeros((self.nt * self.nb, X2.shape[1]), self.dtype)
        X[:self.n] = X2
        return X.reshape(self.nt, self.nb, X2.shape[1]), shape

    def _unstack(self, Y, shape):
        return Y.reshape(self.nt * self.nb, Y.shape[2])[:self.n].reshape(shape)

    def matvec(self, x, trans: bool = False):
        """Collective: ``A x`` (``L x``, or ``L^T x`` with ``trans``, for a Cholesky factor)
        for ``x`` replicated on every rank (``(n,)`` or ``(n, r)``, NumPy or CuPy); the result
        is replicated, on this matrix's device."""
        xp = self.xp
        err, X, shape = None, None, None
        try:
            X, shape = self._rhs_stack(x)
        except Exception as e:  # noqa: BLE001
            err = e
        agree(self.grid.comm, err)
        Y = xp.zeros_like(X)
        if self.diag_keys:
            dk = xp.asarray(np.array(self.diag_keys))
            D = xp.tril(self.D) if self.factored else self.D
            if trans:
                D = D.swapaxes(1, 2)
            Y[dk] += xp.matmul(D, X[dk])
        lower = not trans
        upper = (not self.factored) or trans
        for j in self.cols:
            if j not in self.col_slots:
                continue
            s0, s1 = self.col_slots[j]
            U, V = self.U[s0:s1], self.V[s0:s1]
            ri = xp.asarray(self.key_rows[s0:s1])
            if lower:  # Y[i] += U (V^T X[j])
                Y[ri] += xp.matmul(U, xp.matmul(V.swapaxes(1, 2), X[j][None]))
            if upper:  # Y[j] += V (U^T X[i])
                Y[j] += xp.matmul(V, xp.matmul(U.swapaxes(1, 2), X[ri])).sum(axis=0)
        self.grid.comms(self.device).all.allreduce(Y, "sum")
        return self._unstack(Y, shape)


# ---- construction ---------------------------------------------------------------------------

def _check_common(grid, tol, max_rank, method):
    if not isinstance(grid, ProcessGrid):
        raise TypeError(f"grid must be a ProcessGrid, not {type(grid).__name__}")
    if tol is None and max_rank is None:
        raise ValueError("give tol (fixed accuracy) and/or max_rank (fixed rank)")
    if tol is not None and not (0 < float(tol) < 1):
        raise ValueError(f"tol must be in (0, 1), got {tol}")
    if max_rank is not None and (int(max_rank) != max_rank or max_rank < 0):
        raise ValueError(f"max_rank must be a non-negative integer or None, got {max_rank}")
    if method not in batched.METHODS:
        raise ValueError(f"method must be one of {batched.METHODS}, not {method!r}")


def _chunk(nb, itemsize, workspace, factor=8):
    return max(1, int(workspace // max(1, factor * nb * nb * itemsize)))


def _delta(T, tol, F):
    eps = float(np.finfo(T.dtype).eps)
    t = 0.0 if tol is None else float(tol)
    return max(t, _EPS_FLOOR * eps) * F / max(1, T.nt)


def _finish(T, parts, tol, max_rank, F, t0, method, capped):
    """Store the compressed parts (re-truncated to the final delta), summarize (collective)."""
    xp = T.xp
    T.tol, T.max_rank, T.norm_fro = tol, max_rank, F
    T.delta = _delta(T, tol, F)
    kmax = 0
    done = []
    for slots, U, V, _ in parts:
        s = xp.sqrt(xp.sum(V * V, axis=1))  # canonical form: singular values
        k, _ = batched.truncation_ranks(s, T.delta, max_rank)
        kh = host(k)
        kk = int(kh.max()) if kh.size else 0
        mask = (xp.arange(kk)[None, :] < k[:, None]).astype(T.dtype)[:, None, :]
        done.append((slots, U[:, :, :kk] * mask, V[:, :, :kk] * mask, kh))
        kmax = max(kmax, kk)
    T.U = xp.zeros((len(T.keys), T.nb, kmax), T.dtype)
    T.V = xp.zeros((len(T.keys), T.nb, kmax), T.dtype)
    for slots, U, V, kh in done:
        T.set_tiles(slots, U, V, kh)
    T.backend.synchronize()
    from mpi4py import MPI
    tmax = np.array([time.perf_counter() - t0, float(capped)])
    T.grid.comm.Allreduce(MPI.IN_PLACE, tmax[:1], op=MPI.MAX)
    T.grid.comm.Allreduce(MPI.IN_PLACE, tmax[1:], op=MPI.SUM)
    T.info.update(compress_time=float(tmax[0]), method=method, capped=int(tmax[1]),
                  delta=T.delta, norm_fro=F)
    T._summarize()
    return T


def _allreduce_sum(comm, x: float) -> float:
    from mpi4py import MPI
    b = np.array([x], dtype=np.float64)
    comm.Allreduce(MPI.IN_PLACE, b, op=MPI.SUM)
    return float(b[0])


def compress(A, tol=1e-8, max_rank=None, method="svd", *, seed=0, workspace=2 ** 28):
    """Collective: the TLR form of the dense symmetric :class:`~distla.DistMatrix` ``A``.

    ``A`` must be square with square blocks (``mb == nb``: the tiles); only its lower block
    triangle is read. ``tol``: fixed accuracy (see :mod:`distla.tlr.matrix`: every tile is
    truncated to ``delta = tol * ||A||_F / nt``, so ``||A - A_tlr||_F <= tol ||A||_F``);
    ``max_rank``: cap on every rank (alone: fixed rank). ``method``: 'svd' (truncated SVD,
    optimal ranks), 'rsvd' (adaptive randomized, seeded by ``seed``) or 'aca'. ``workspace``:
    bytes of scratch per batched call (tiles are compressed in stacks of that size).
    """
    from ..matrix import DistMatrix
    t0 = time.perf_counter()
    with collective(getattr(getattr(A, "grid", None), "comm", None)):
        if not isinstance(A, DistMatrix):
            raise TypeError(f"compress needs a DistMatrix, not {type(A).__name__}")
        _check_common(A.grid, tol, max_rank, method)
        if A.m != A.n:
            raise ValueError(f"TLR needs a square matrix, got {A.shape}")
        if A.mb != A.nb:
            raise ValueError(f"TLR tiles are the matrix blocks and must be square, got "
                             f"block {A.block}")
        if A.dtype.kind != "f":
            raise TypeError(f"TLR supports real float32/float64 matrices, not {A.dtype}")
    T = TLRMatrix(A.grid, A.n, A.nb, device=A.device, src=A.src, dtype=A.dtype)
    xp, nb = T.xp, T.nb

    def tile(i, j):
        r0, c0 = T.row_pos[i] * nb, T.col_pos[j] * nb
        return A.local[r0:r0 + T.tile_size(i), c0:c0 + T.tile_size(j)]

    # ||A||_F of the symmetric matrix defined by the lower block triangle
    ss = xp.zeros((), dtype=np.float64)
    for k in T.diag_keys:
        ss += xp.sum(tile(k, k) ** 2)
    for i, j in T.keys:
        ss += 2.0 * xp.sum(tile(i, j) ** 2)
    F = math.sqrt(max(_allreduce_sum(A.grid.comm, float(ss)), 0.0))
    delta = _delta(T, tol, F)
    for s, k in enumerate(T.diag_keys):
        m = T.tile_size(k)
        T.D[s, :m, :m] = tile(k, k)
        if m < nb:
            T.D[s, m:, m:] = xp.eye(nb - m, dtype=T.dtype)
    err, parts, capped = None, [], 0
    try:
        rng = xp.random.RandomState(seed + 7919 * A.grid.rank)
        step = _chunk(nb, T.dtype.itemsize, workspace)
        for c0 in range(0, len(T.keys), step):
            slots = np.arange(c0, min(c0 + step, len(T.keys)))
            stack = xp.zeros((len(slots), nb, nb), T.dtype)
            for a, s in enumerate(slots):
                i, j = T.keys[s]
                stack[a, :T.tile_size(i), :T.tile_size(j)] = tile(i, j)
            U, V, k, c = batched.compress_tiles(stack, delta, max_rank, method, rng)
            parts.append((slots, U, V, k))
            capped += c
    except Exception as e:  # noqa: BLE001
        err = e
    agree(A.grid.comm, err)
    return _finish(T, parts, tol, max_rank, F, t0, method, capped)


def _index_stack(T, tiles, rows: bool):
    """Global row (``rows``) or column indices of tiles, ``(t, nb)`` host, clipped, and the
    validity mask."""
    g = np.array([t[0] if rows else t[1] for t in tiles], dtype=np.int64)[:, None] * T.nb \
        + np.arange(T.nb)[None, :]
    valid = g < T.n
    return np.minimum(g, max(T.n - 1, 0)), valid


def _eval_tiles(T, fn, tiles):
    """Dense padded tiles ``(t, nb, nb)`` from ``fn(I, J)`` (diagonal pads: identity)."""
    xp = T.xp
    gi, vi = _index_stack(T, tiles, True)
    gj, vj = _index_stack(T, tiles, False)
    I, J = xp.asarray(gi)[:, :, None], xp.asarray(gj)[:, None, :]
    vals = xp.asarray(fn(I, J), dtype=T.dtype)
    vals = xp.broadcast_to(vals, (len(tiles), T.nb, T.nb))
    mask = xp.asarray(vi[:, :, None] & vj[:, None, :])
    out = xp.where(mask, vals, 0).astype(T.dtype)
    diag = np.array([t[0] == t[1] for t in tiles])
    if diag.any():
        pad = xp.asarray((~vi[:, :, None]) & (~vj[:, None, :]) & diag[:, None, None]
                         & np.eye(T.nb, dtype=bool)[None])
        out = out + pad.astype(T.dtype)
    return out


def _aca_fn(T, fn, tiles, delta, max_rank):
    """ACA on tiles given by ``fn`` without forming them: rows and columns on demand."""
    xp = T.xp
    gi, vi = _index_stack(T, tiles, True)
    gj, vj = _index_stack(T, tiles, False)
    GI, GJ = xp.asarray(gi), xp.asarray(gj)
    VI, VJ = xp.asarray(vi.astype(T.dtype)), xp.asarray(vj.astype(T.dtype))
    ar = xp.arange(len(tiles))[:, None]

    def rows(i):  # (t, p) -> (t, p, nb): rows i[t, :] of every tile
        I = GI[ar, i][:, :, None]
        return (xp.asarray(fn(I, GJ[:, None, :]), dtype=T.dtype) * VJ[:, None, :]
                * VI[ar, i][:, :, None])

    def cols(j):  # (t, p) -> (t, p, nb): columns j[t, :], as rows
        J = GJ[ar, j][:, :, None]
        return (xp.asarray(fn(GI[:, None, :], J), dtype=T.dtype) * VI[:, None, :]
                * VJ[ar, j][:, :, None])

    return batched.aca(rows, cols, len(tiles), T.nb, T.nb, delta, max_rank, xp, T.dtype)


def from_function(grid, n, tile, fn, tol=1e-8, max_rank=None, method="rsvd", *,
                  device="cpu", src=(0, 0), dtype=np.float64, seed=0, workspace=2 ** 28):
    """Collective: a TLR matrix whose entries are ``fn(I, J)`` (global integer index arrays of
    broadcastable shapes, NumPy or CuPy as the device; symmetric in I, J), built tile by tile
    on each tile's owner: tiles are evaluated in stacks of ``workspace`` bytes and compressed
    at once, so the dense local matrix is never formed ('aca' evaluates only the rows and
    columns it pivots on).

    The truncation needs ``||A||_F``: the tiles are first compressed with the threshold of a
    lower bound (the Frobenius norm of the diagonal tiles), the exact norm is then summed
    from the tiles (for 'aca', from their approximations) and every tile is re-truncated to
    the final ``delta = tol * ||A||_F / nt``.
    """
    t0 = time.perf_counter()
    with collective(grid.comm if isinstance(grid, ProcessGrid) else None):
        _check_common(grid, tol, max_rank, method)
        n, tile = int(n), int(tile)
        if n < 0 or tile <= 0:
            raise ValueError(f"need n >= 0 and tile > 0, got n={n}, tile={tile}")
        if np.dtype(dtype).kind != "f":
            raise TypeError(f"TLR supports real float32/float64 matrices, not {dtype}")
        get_backend(device, grid.comm)
    T = TLRMatrix(grid, n, tile, device=device, src=src, dtype=dtype)
    xp = T.xp
    err, parts, capped, ss = None, [], 0, 0.0
    try:
        if T.diag_keys:
            T.D[...] = _eval_tiles(T, fn, [(k, k) for k in T.diag_keys])
            pad = xp.asarray(np.array([k for k in T.diag_keys]) == T.nt - 1)
            # the identity pad of the last tile adds (nb - m) to the sum of squares
            ss = float(xp.sum(T.D * T.D) - xp.sum(pad) * (T.nb - T.tile_size(T.nt - 1)))
    except Exception as e:  # noqa: BLE001
        err = e
    agree(grid.comm, err)
    lower = math.sqrt(max(_allreduce_sum(grid.comm, ss), 0.0))
    delta1 = _delta(T, tol, lower)
    try:
        rng = xp.random.RandomState(seed + 7919 * grid.rank)
        step = _chunk(T.nb, T.dtype.itemsize, workspace)
        ssd = xp.zeros((), dtype=np.float64)
        for c0 in range(0, len(T.keys), step):
            slots = np.arange(c0, min(c0 + step, len(T.keys)))
            tiles = [T.keys[s] for s in slots]
            if method == "aca":
                U, V, k, c = _aca_fn(T, fn, tiles, delta1, max_rank)
                ssd += 2.0 * xp.sum(V * V)
            else:
                stack = _eval_tiles(T, fn, tiles)
                ssd += 2.0 * xp.sum(stack * stack)
                U, V, k, c = batched.compress_tiles(stack, delta1, max_rank, method, rng)
                del stack
            parts.append((slots, U, V, k))
            capped += c
        ss += float(ssd)
    except Exception as e:  # noqa: BLE001
        err = e
    agree(grid.comm, err)
    F = math.sqrt(max(_allreduce_sum(grid.comm, ss), 0.0))
    return _finish(T, parts, tol, max_rank, F, t0, method, capped)


def from_kernel(grid, pts, kernel, tile, tol=1e-8, max_rank=None, method="rsvd", *,
                device="cpu", src=(0, 0), dtype=np.float64, seed=0, workspace=2 ** 28):
    """Collective: the TLR covariance matrix of points ``pts`` (``n x d``, identical on every
    rank) and a :class:`distla.covariance.Kernel` (nugget on the diagonal), compressed tile by
    tile on each owner without forming the dense matrix; see :func:`from_function`."""
    from ..covariance import entry_function
    with collective(grid.comm if isinstance(grid, ProcessGrid) else None):
        fn = entry_function(pts, kernel, get_backend(device, grid.comm).xp)
    return from_function(grid, fn.n, tile, fn, tol, max_rank, method, device=device, src=src,
                         dtype=dtype, seed=seed, workspace=workspace)
