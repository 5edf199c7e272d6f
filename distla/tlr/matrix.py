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
``delta = tol * F / nt``; hence ``||A - A_tlr||_F <= tol * F`` (for the build methods 'svd',
'rsvd'/'dense' and the default 'auto'; 'aca' is a heuristic that can miss it, see
:mod:`distla.tlr.build`). The TLR Cholesky truncates
every updated tile with the same ``delta``. ``max_rank`` caps every rank (fixed-rank mode when
``tol`` is None).

The constructors :func:`~distla.tlr.compress`, :func:`~distla.tlr.from_function`,
:func:`~distla.tlr.from_kernel` (collective) live in :mod:`distla.tlr.build`.

Algorithm notes: docs/tlr.md.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .. import layout
from ..device import get_backend
from ..errors import DistlaError, agree
from . import _memory

__all__ = ["RankSummary", "TLRMatrix"]

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

    def __init__(self, grid, n: int, nb: int, *, device="cpu", src=(0, 0), dtype=np.float64,
                 allocate: bool = True):
        """Empty storage for an ``n x n`` matrix in ``nb x nb`` tiles (local, not collective;
        use the constructor functions). ``allocate=False`` leaves the diagonal tiles ``D``
        empty (``(0, nb, nb)``) until :meth:`allocate_diagonal`: the constructors first agree
        that they fit (a local allocation failure hung the other ranks)."""
        self.grid = grid
        self.n, self.nb = int(n), int(nb)
        self.nt = layout.num_blocks(self.n, self.nb)
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
        for s, (_i, j) in enumerate(self.keys):
            a, _ = self.col_slots.get(j, (s, s))
            self.col_slots[j] = (a, s + 1)
        self.key_rows = np.array([k[0] for k in self.keys], dtype=np.int64)
        self.key_cols = np.array([k[1] for k in self.keys], dtype=np.int64)
        self.row_slots = {i: np.flatnonzero(self.key_rows == i) for i in self.rows}
        xp = self.xp
        self.D = xp.zeros((len(self.diag_keys) if allocate else 0, self.nb, self.nb),
                          self.dtype)
        self.U = xp.zeros((len(self.keys), self.nb, 0), self.dtype)
        self.V = xp.zeros((len(self.keys), self.nb, 0), self.dtype)
        self.rank = np.zeros(len(self.keys), dtype=np.int64)
        del P, Q

    @property
    def diag_nbytes(self) -> int:
        """Bytes of this rank's dense diagonal tiles ``D`` (allocated or not)."""
        return len(self.diag_keys) * self.nb * self.nb * self.dtype.itemsize

    def allocate_diagonal(self) -> None:
        """Allocate the dense diagonal tiles ``D`` (zeros; local: the constructors agree on
        its outcome)."""
        self.D = self.xp.zeros((len(self.diag_keys), self.nb, self.nb), self.dtype)

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
        newK = max(int(k), math.ceil(1.25 * K))
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

    def copy(self) -> TLRMatrix:
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
        if not np.can_cast(xa.dtype, self.dtype, "same_kind"):
            raise TypeError(f"a {xa.dtype} right-hand side with a {np.dtype(self.dtype)} "
                            f"matrix (it would be truncated); use a matrix of that kind")
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
