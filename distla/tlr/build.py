"""Building TLR matrices: from a dense DistMatrix (:func:`compress`), from an entry function
(:func:`from_function`) or from points and a covariance kernel (:func:`from_kernel`), tile by
tile on each tile's owner; the last two never form the dense matrix.

Build methods (``method=``), for the off-diagonal tiles (the diagonal tiles are dense):

* ``'dense'`` (= ``'rsvd'``): every entry is evaluated, a stack of tiles at a time, straight
  into the stack (:func:`distla.covariance.entry_function`'s ``tiles``: in place, one scratch
  array), then compressed by the adaptive randomized range finder (one ``(t nb) x nb x r``
  GEMM per pass for the whole stack, batched QR, an exact residual check, a truncated SVD of
  the small projection). ``'svd'``: the same with a full SVD per tile (optimal ranks, slow).
* ``'aca'``: adaptive cross approximation (:func:`distla.tlr.batched.aca`), evaluating only
  ``O(nb k)`` entries per tile (rows, columns and a few random entries for its stopping test).
  A heuristic, used only when asked for: its stopping test probes a few random rows and
  columns, so a tile whose mass sits in a few rows it never probes (short length scales) can
  stop early with an error far above ``delta``, silently (``||A - A_tlr||_F`` was 4e-2
  ``||A||_F`` at tol 1e-8 for a squared exponential of beta 0.01; docs/tlr_build.md). The
  tolerance bound below holds for the orthogonal methods, not for 'aca'. (Likewise, a NaN or
  Inf among the entries 'aca' never reads goes unseen; the other methods read every entry.)
* ``'auto'`` (the default): ``'dense'`` on every device, whose exact residual check meets
  ``tol``.

Fixed accuracy needs ``F = ||A||_F`` before truncating, and ``F`` is known only after every
tile was seen. The build runs once: it compresses with the threshold ``delta1`` of a lower
bound of ``F`` (the diagonal tiles' norm, evaluated first), sums the squares of each stack as
it is evaluated (from the approximation, for 'aca'), and finally truncates the canonical
factors further with what is left of the final ``delta = tol F / nt`` (``sqrt(delta^2 -
delta1^2)`` for the orthogonal methods, ``delta - delta1`` for 'aca'), so that every tile
still meets ``delta``.

NaN or Inf in what is evaluated (or in ``compress``'s A, or in ``from_kernel``'s points)
raises ValueError on every rank naming the entry (or point).

Memory: the stacks of one batch (a workspace from the free memory, agreed over the grid, see
:mod:`distla.tlr._memory`), the dense diagonal tiles and the low-rank stacks; a problem whose
storage does not fit raises :class:`distla.DistlaError` on every rank naming an ``n`` that
would. ``T.info['mem_build']`` reports the largest footprint (bytes, max over ranks).
"""
from __future__ import annotations

import math
import time
import warnings

import numpy as np

from ..device import get_backend
from ..errors import LinAlgWarning, agree, collective, signature
from ..grid import ProcessGrid
from ..trace import trace
from . import _args, _memory, batched
from .batched import host
from .matrix import _EPS_FLOOR, TLRMatrix

__all__ = ["BUILD_METHODS", "compress", "from_function", "from_kernel"]

BUILD_METHODS = ("auto", "dense", "aca", "rsvd", "svd")

_PER_TILE_DENSE = 4.0   # nb x nb arrays per tile in a 'dense' batch (stack, scratch, residual)


def _check_common(grid, tol, max_rank, method, methods):
    if not isinstance(grid, ProcessGrid):
        raise TypeError(f"grid must be a ProcessGrid, not {type(grid).__name__}")
    if tol is None and max_rank is None:
        raise ValueError("give tol (fixed accuracy) and/or max_rank (fixed rank)")
    _args.check_tol(tol)
    _args.check_max_rank(max_rank)
    if not isinstance(method, str) or method not in methods:
        raise ValueError(f"method must be one of {methods}, not {method!r}")


def _delta(T, tol, F):
    eps = float(np.finfo(T.dtype).eps)
    t = 0.0 if tol is None else float(tol)
    return max(t, _EPS_FLOOR * eps) * F / max(1, T.nt)


def _check_scale(T, tol, F, what: str, nonzero: bool = False) -> None:
    """ValueError (``F``, ``||A||_F`` or a lower bound, is the same on every rank: every rank
    raises alike) when the matrix's magnitude puts the compression's squared norms outside
    the float range: ``||A||_F`` overflowing (entries near the square root of the largest
    float: every off-diagonal tile then truncated to rank 0) or the truncation threshold's
    square underflowing (entries near the square root of the smallest: tails of singular
    values lost). A zero matrix is fine; ``nonzero`` (agreed over the grid): the entries that
    gave ``F`` are not all zero, so ``F == 0`` means their squares underflowed (entries
    below ~1e-162 in float64: every off-diagonal tile was cut to rank 0, silently)."""
    fi = np.finfo(T.dtype)
    floor = math.sqrt(float(fi.tiny) / float(fi.eps))
    if (F == 0 and not nonzero) or (math.isfinite(F) and F > 0 and
                                    _delta(T, tol, F) >= floor):
        return
    how = "overflow" if not math.isfinite(F) else "underflow"
    # the window (F was computed from squares in T's precision: it can read 0 or inf for a
    # matrix inside the range, so the message gives the limits rather than that F)
    lo, hi = floor / _delta(T, tol, 1.0), math.sqrt(float(fi.max))
    raise ValueError(
        f"{what}: the matrix's magnitude is outside what TLR compression handles in "
        f"{T.dtype} at tol={tol}: ||A||_F must lie within about [{lo:.1e}, {hi:.1e}] (the "
        f"squares of its singular values {how} beyond it): scale the matrix by a power of 2 "
        f"(e.g. the kernel's variance) and undo the scale in the results (a log-determinant "
        f"changes by n log(scale)); tlr.solve and solve(method='tlr') scale a DistMatrix "
        f"themselves")


def _allreduce_sum(comm, x: float) -> float:
    from mpi4py import MPI
    return float(comm.allreduce(float(x), op=MPI.SUM))


def _finish(T, parts, tol, max_rank, F, t0, method, capped, delta1, peak):
    """Collective: truncate the compressed parts with what is left of the final delta, check
    that the stacks fit, store them, summarize."""
    xp = T.xp
    # the accuracy achieved: a tol below the precision's floor is truncated at the floor
    eps = float(np.finfo(T.dtype).eps)
    T.tol = None if tol is None else max(float(tol), _EPS_FLOOR * eps)
    T.max_rank, T.norm_fro = max_rank, F
    T.delta = _delta(T, tol, F)
    left = (max(T.delta - delta1, 0.0) if method == "aca"
            else math.sqrt(max(T.delta ** 2 - delta1 ** 2, 0.0)))
    ks = [host(batched.truncation_ranks(xp.sqrt(xp.sum(V * V, axis=1)), left, max_rank)[0])
          for _, _, V, _ in parts]
    if max_rank is not None:     # tiles kept at max_rank keep it: cutting them further would
        ks = [np.where(np.asarray(k0) >= max_rank, np.asarray(k0), k)   # add to the error
              for (_, _, _, k0), k in zip(parts, ks)]                   # their cap left
    kmax = max((int(k.max()) for k in ks if k.size), default=0)
    with trace("trim"):        # each part down to its final ranks first (compressed at delta1,
        for a, kh in enumerate(ks):          # they are wider): one factor at a time
            kk = int(kh.max()) if kh.size else 0
            for which in (1, 2):
                part = list(parts[a])
                if kk < part[which].shape[2]:
                    part[which] = part[which][:, :, :kk].copy()
                parts[a] = tuple(part)
                del part
    one = _memory.stack_bytes(len(T.keys), T.nb, kmax, T.dtype.itemsize)
    need = 2 * one
    with trace("store"):       # U, then V: each part's factor freed once stored
        for which in (1, 2):
            _memory.release(T.device)
            _memory.require(T.grid.comm, one, _memory.available(T.device),
                            f"build (low-rank stacks of rank {kmax})", T.n)
            S = xp.zeros((len(T.keys), T.nb, kmax), T.dtype)
            for a, kh in enumerate(ks):
                part = list(parts[a])
                kk = int(kh.max()) if kh.size else 0
                if kk:
                    mask = xp.arange(kk)[None, :] < xp.asarray(kh)[:, None]
                    S[xp.asarray(part[0]), :, :kk] = part[which][:, :, :kk] * mask[:, None, :]
                part[which] = None
                parts[a] = tuple(part)
            if which == 1:
                T.U = S
            else:
                T.V = S
            del S
    T.rank[np.concatenate([np.asarray(p[0], dtype=np.int64) for p in parts])
           if parts else np.zeros(0, np.int64)] = (np.concatenate(ks) if ks else 0)
    parts.clear()
    T.backend.synchronize()
    from mpi4py import MPI
    v = np.array([time.perf_counter() - t0, float(T.D.nbytes + 2 * need + peak)])
    T.grid.comm.Allreduce(MPI.IN_PLACE, v, op=MPI.MAX)
    T.info.update(compress_time=float(v[0]), method=method, mem_build=int(v[1]),
                  capped=int(T.grid.comm.allreduce(int(capped), op=MPI.SUM)),
                  delta=T.delta, norm_fro=F)
    T._summarize()
    if T.info["capped"] and tol is not None:     # the same on every rank (summed above)
        warnings.warn(f"compress: max_rank={max_rank} capped the ranks of {T.info['capped']} "
                      f"tile(s) below what their share of tol={tol:g} needs: the compression "
                      f"error may exceed tol, and what is computed from this matrix (solves, "
                      f"log-determinants) may be far less accurate than tol; raise max_rank "
                      f"(or leave it None) or loosen tol", LinAlgWarning, stacklevel=3)
    if tol is not None and float(tol) < T.tol:
        single = np.finfo(T.dtype).eps > np.finfo(np.float64).eps
        warnings.warn(f"compress: tol={float(tol):g} is below what {T.dtype} reaches: the "
                      f"matrix is compressed to tol={T.tol:.3g} ({_EPS_FLOOR} x its machine "
                      f"epsilon; T.tol), and the accuracy bounds hold for that tol"
                      f"{'; use float64 for a tighter one' if single else ''}",
                      LinAlgWarning, stacklevel=3)
    return T


def compress(A, tol=1e-8, max_rank=None, method="svd", *, seed=0, workspace=None):
    """Collective: the TLR form of the dense symmetric :class:`~distla.DistMatrix` ``A``.

    ``A`` must be square with square blocks (``mb == nb``: the tiles); only its lower block
    triangle is read. ``tol``: fixed accuracy (see :mod:`distla.tlr.matrix`: every tile is
    truncated to ``delta = tol * ||A||_F / nt``, so ``||A - A_tlr||_F <= tol ||A||_F``);
    ``max_rank``: cap on every rank (alone: fixed rank). ``method``: 'svd' (truncated SVD,
    optimal ranks), 'rsvd' (adaptive randomized, seeded by ``seed``) or 'aca' (a heuristic
    without the bound: see :mod:`distla.tlr.build`). ``workspace``:
    bytes of scratch per batched call (default: from the free memory).
    """
    from ..matrix import DistMatrix
    t0 = time.perf_counter()
    with collective(getattr(getattr(A, "grid", None), "comm", None), signature(
            "tlr.compress", A, tol=tol, max_rank=max_rank, method=method, seed=seed,
            workspace=workspace)):
        if not isinstance(A, DistMatrix):
            raise TypeError(f"compress needs a DistMatrix, not {type(A).__name__}")
        _check_common(A.grid, tol, max_rank, method, batched.METHODS)
        seed = _args.check_seed(seed)
        workspace = _args.check_workspace(workspace)
        if A.m != A.n:
            raise ValueError(f"TLR needs a square matrix, got {A.shape}")
        if A.mb != A.nb:
            raise ValueError(f"TLR tiles are the matrix blocks and must be square, got "
                             f"block {A.block}")
        if A.dtype not in (np.float32, np.float64):
            raise TypeError(f"TLR supports real float32/float64 matrices, not {A.dtype}")
    _fits_at_all(A.grid, A.n, A.nb, A.dtype, A.device)
    T = TLRMatrix(A.grid, A.n, A.nb, device=A.device, src=A.src, dtype=A.dtype, allocate=False)
    _allocate_diagonal(T, 0, "compress (dense diagonal tiles)")
    xp, nb = T.xp, T.nb
    work = _memory.workspace(T.device, A.grid.comm, workspace)

    def tile(i, j):
        r0, c0 = T.row_pos[i] * nb, T.col_pos[j] * nb
        return A.local[r0:r0 + T.tile_size(i), c0:c0 + T.tile_size(j)]

    with np.errstate(over="ignore"):     # (squares beyond float range: F = inf, below)
        ss = sum(float(xp.sum(tile(k, k) ** 2)) for k in T.diag_keys) \
            + sum(2.0 * float(xp.sum(tile(i, j) ** 2)) for i, j in T.keys)
    err = None
    if not math.isfinite(ss):     # NaN/Inf in A (or squares beyond float range: no error)
        keys = [(k, k) for k in T.diag_keys] + list(T.keys)
        for a in range(0, len(keys), 64):
            err = _nonfinite(T, keys[a:a + 64], xp.stack([
                _padded(xp, tile(i, j), nb) for i, j in keys[a:a + 64]]), "compress: A holds")
            if err is not None:
                break
    F = math.sqrt(max(_allreduce_sum(A.grid.comm, ss), 0.0))
    agree(A.grid.comm, err)     # a non-finite A: the same ValueError on every rank, else
    nonzero = F == 0 and A.grid.allreduce(int(any(bool(xp.any(tile(i, j) != 0)) for i, j in
                                                  [(k, k) for k in T.diag_keys] + T.keys)),
                                          "max") > 0     # (only then: squares underflowed?)
    _check_scale(T, tol, F, "compress", nonzero)   # finite entries whose squares leave the range
    delta = _delta(T, tol, F)
    for s, k in enumerate(T.diag_keys):
        m = T.tile_size(k)
        T.D[s, :m, :m] = tile(k, k)
        if m < nb:
            T.D[s, m:, m:] = xp.eye(nb - m, dtype=T.dtype)
    parts, capped = [], 0
    step = _memory.tiles_fit(work, nb, T.dtype.itemsize, _PER_TILE_DENSE)
    try:
        rng = _args.rank_rng(xp, seed, A.grid.rank)
        for c0 in range(0, len(T.keys), step):
            slots = np.arange(c0, min(c0 + step, len(T.keys)))
            stack = xp.zeros((len(slots), nb, nb), T.dtype)
            for a, s in enumerate(slots):
                i, j = T.keys[s]
                stack[a, :T.tile_size(i), :T.tile_size(j)] = tile(i, j)
            U, V, k, c = batched.compress_tiles(stack, delta, max_rank, method, rng)
            parts.append((slots, U, V, k))
            capped += c
    except BaseException as e:  # noqa: BLE001 - a user fn may sys.exit()
        err = _memory.explained(e, "compress", T.n)
    agree(A.grid.comm, err)
    peak = min(step, len(T.keys)) * _PER_TILE_DENSE * nb * nb * T.dtype.itemsize
    return _finish(T, parts, tol, max_rank, F, t0, method, capped, delta, peak)


def from_function(grid, n, tile, fn, tol=1e-8, max_rank=None, method="auto", *,
                  device="cpu", src=(0, 0), dtype=np.float64, seed=0, workspace=None):
    """Collective: a TLR matrix whose entries are ``fn(I, J)`` (global integer index arrays of
    broadcastable shapes, NumPy or CuPy as the device; symmetric in I, J), built tile by tile
    on each tile's owner, never dense: stacks of tiles of at most ``workspace`` bytes (default:
    from the free memory, the same on every rank) are evaluated and compressed at once.
    ``fn.tiles(I, J, out, tmp, diagonal)``, when present (as on
    :func:`distla.covariance.entry_function`), evaluates stacks in place.

    ``method``: 'auto' (= 'dense'), 'dense' (= 'rsvd'), 'aca' or 'svd' (see
    :mod:`distla.tlr.build`). ``||A - A_tlr||_F <= tol ||A||_F`` holds for all but 'aca', a
    heuristic that can miss tol by orders of magnitude without a warning (short length
    scales: tiles whose mass sits in a few rows).
    Raises :class:`distla.DistlaError` on every rank when the result will not fit in memory.
    """
    t0 = time.perf_counter()
    comm = grid.comm if isinstance(grid, ProcessGrid) else None
    # from_kernel's points (covariance.entry_function's digest): ranks whose point sets differ
    # built a patchwork matrix silently; they now disagree in the signature
    pts = fn.digest() if (comm is not None and comm.Get_size() > 1
                          and callable(getattr(fn, "digest", None))) else None
    with collective(comm, signature(
            "tlr.from_function", n=n, tile=tile, tol=tol, max_rank=max_rank, method=method,
            device=device, src=src, dtype=str(dtype), seed=seed, workspace=workspace,
            points=pts)):
        _check_common(grid, tol, max_rank, method, BUILD_METHODS)
        seed = _args.check_seed(seed)
        workspace = _args.check_workspace(workspace)
        n, tile = _args.check_count("n", n, 0), _args.check_count("tile", tile, 1)
        if np.dtype(dtype) not in (np.float32, np.float64):
            raise TypeError(f"TLR supports real float32/float64 matrices, not {np.dtype(dtype)}")
        get_backend(device, grid.comm)
    _fits_at_all(grid, n, tile, dtype, device)
    T = TLRMatrix(grid, n, tile, device=device, src=src, dtype=dtype, allocate=False)
    b = _Builder(T, fn, _method(method, T), max_rank, seed, workspace)
    lower = b.diagonal()                 # dense diagonal tiles, ||diagonal tiles||_F <= ||A||_F
    _check_scale(T, tol, lower, "tlr.from_function", b.nonzero)
    delta1 = _delta(T, tol, lower)
    b.off_diagonal(delta1)               # every off-diagonal tile compressed to delta1
    F = math.sqrt(max(_allreduce_sum(grid.comm, b.ss), 0.0))
    _check_scale(T, tol, F, "tlr.from_function", b.nonzero)
    capped = b.capped + sum(e > _delta(T, tol, F) for e in b.cap_errors)
    return _finish(T, b.parts, tol, max_rank, F, t0, b.method, capped, delta1, b.peak)


def from_kernel(grid, pts, kernel, tile, tol=1e-8, max_rank=None, method="auto", *,
                device="cpu", src=(0, 0), dtype=np.float64, seed=0, workspace=None):
    """Collective: the TLR covariance matrix of points ``pts`` (``n x d``, identical on every
    rank: checked by a CRC-32 in the call signature, ValueError on every rank otherwise) and
    a :class:`distla.covariance.Kernel` (nugget on the diagonal), compressed tile by tile on
    each owner without forming the dense matrix; see :func:`from_function`."""
    from ..covariance import entry_function
    with collective(grid.comm if isinstance(grid, ProcessGrid) else None):
        fn = entry_function(pts, kernel, get_backend(device, grid.comm).xp)
    return from_function(grid, fn.n, tile, fn, tol, max_rank, method, device=device, src=src,
                         dtype=dtype, seed=seed, workspace=workspace)


def _fits_at_all(grid, n, nb, dtype, device):
    """Collective: DistlaError on every rank when the dense diagonal tiles alone cannot fit
    (the rank holding the most holds at least ``ceil(nt / (P Q))`` of them), before the
    layout's Python loops over the tiles (minutes for n = 1e12)."""
    nt = -(-int(n) // int(nb)) if n else 0
    least = -(-nt // (grid.nprow * grid.npcol)) * int(nb) ** 2 * np.dtype(dtype).itemsize
    _memory.require(grid.comm, least, _memory.available(device),
                    "build (dense diagonal tiles)", int(n), scale=1.0)


def _allocate_diagonal(T, extra, what):
    """Collective: check that the dense diagonal tiles and ``extra`` bytes fit on every rank,
    then allocate the tiles; either failure raises the same DistlaError on every rank (an
    allocation failing on one rank hung the others)."""
    _memory.require(T.grid.comm, T.diag_nbytes + extra, _memory.available(T.device), what,
                    T.n, scale=1.0)
    err = None
    try:
        T.allocate_diagonal()
    except Exception as e:  # noqa: BLE001 - agreed on below
        err = _memory.explained(e, what, T.n)
    agree(T.grid.comm, err)


def _method(method, T):
    """The build method a ``method`` argument stands for: 'auto' and 'dense' are 'rsvd' (the
    exact residual check meets tol; 'aca' can miss it by orders of magnitude, so it is never
    picked unasked)."""
    return "rsvd" if method in ("auto", "dense") else method


class _Builder:
    """One rank's part of a build: evaluates its tiles in batches and compresses them; a
    local error is kept and agreed on (the build has no other collective)."""

    def __init__(self, T, fn, method, max_rank, seed, workspace):
        self.T, self.fn, self.method, self.max_rank = T, fn, method, max_rank
        self.xp, self.err = T.xp, None
        self.rng = _args.rank_rng(T.xp, seed, T.grid.rank)
        self.work = _memory.workspace(T.device, T.grid.comm, workspace)
        self.parts, self.capped, self.ss, self.peak = [], 0, 0.0, 0
        self.any_nonzero = self.nonzero = False   # a diagonal entry != 0 (diagonal())
        self.cap_errors = []    # the errors of dense tiles kept at max_rank (_cap_errors)
        self.r0 = 16                         # first sample width of the range finder
        self.tiles = getattr(fn, "tiles", None) or _generic_tiles(fn, T.xp)
        _allocate_diagonal(T, self.work, "build (dense diagonal tiles + workspace)")

    def guard(self, fn, *args):
        if self.err is None:
            try:
                fn(*args)
            except BaseException as e:  # noqa: BLE001 - agreed on below
                self.err = _memory.explained(e, "build", self.T.n)

    def batches(self, count, per_tile):
        """Host slot ranges of at most a workspace each."""
        T = self.T
        step = _memory.tiles_fit(self.work, T.nb, T.dtype.itemsize, per_tile)
        self.peak = max(self.peak, min(step, count) * per_tile * T.nb ** 2 * T.dtype.itemsize)
        return [np.arange(c0, min(c0 + step, count)) for c0 in range(0, count, step)]

    def diagonal(self) -> float:
        """Collective: evaluate the dense diagonal tiles into ``T.D``; the Frobenius norm of
        the diagonal tiles over the grid."""
        T = self.T
        with trace("generate"):
            for sl in self.batches(len(T.diag_keys), 2.0):
                self.guard(self._diagonal_batch, sl)
        agree(T.grid.comm, self.err)
        self.nonzero = T.grid.allreduce(int(self.any_nonzero), "max") > 0
        return math.sqrt(max(_allreduce_sum(T.grid.comm, self.ss), 0.0))

    def _diagonal_batch(self, sl):
        T, xp = self.T, self.xp
        keys = [(T.diag_keys[s], T.diag_keys[s]) for s in sl]
        D = T.D[int(sl[0]):int(sl[-1]) + 1]
        self.tiles(*_index_stacks(T, keys), D, None, True)
        _zero_padding(T, keys, D)
        v = float(xp.vdot(D.ravel(), D.ravel()))
        if not math.isfinite(v):
            _raise_nonfinite(T, keys, D)
        if v == 0 and not self.any_nonzero:      # (squares underflowed to 0?)
            self.any_nonzero = bool(xp.any(D != 0))
        self.ss += v
        last = [a for a, (k, _) in enumerate(keys) if T.tile_size(k) < T.nb]
        for a in last:                       # identity in the padded part (det 1)
            m = T.tile_size(keys[a][0])
            D[a, m:, m:] = xp.eye(T.nb - m, dtype=T.dtype)

    def off_diagonal(self, delta1):
        """Collective (one agreement at the end): compress every off-diagonal tile."""
        T = self.T
        per_tile = _PER_TILE_DENSE if self.method != "aca" else _aca_per_tile(T.nb)
        _memory.release(T.device)   # the diagonal phase's cached blocks: parts go elsewhere
        scratch = _memory.Scratch(T.device)
        for sl in self.batches(len(T.keys), per_tile):
            self.guard(self._offdiagonal_batch, sl, delta1, scratch)
        scratch.release()
        agree(T.grid.comm, self.err)

    def _offdiagonal_batch(self, slots, delta1, scratch):
        """Compress the tiles ``slots``; their temporaries come from ``scratch`` and only the
        factors, cut to the ranks used, are kept (in the default pool)."""
        with scratch.active():
            U, V, k, c = self._compress(slots, delta1)
        kk = int(np.max(host(k))) if len(k) else 0
        U, V = U[:, :, :kk].copy(), V[:, :, :kk].copy()   # (the sample is wider)
        self.parts.append((slots, U, V, k))
        self.capped += c

    def _compress(self, slots, delta1):
        T, xp = self.T, self.xp
        keys = [T.keys[s] for s in slots]
        if self.method == "aca":
            with trace("aca"):
                U, V, k, c = _aca_tiles(T, self.fn, keys, delta1, self.max_rank)
            self.ss += 2.0 * float(xp.vdot(V.ravel(), V.ravel()))
        else:
            with trace("generate"):
                A = xp.empty((len(keys), T.nb, T.nb), T.dtype)
                self.tiles(*_index_stacks(T, keys), A, None, False)
                _zero_padding(T, keys, A)
                v = float(xp.vdot(A.ravel(), A.ravel()))
                if not math.isfinite(v):
                    _raise_nonfinite(T, keys, A)
                self.ss += 2.0 * v
            with trace("compress"):
                U, V, k, c = batched.compress_tiles(A, delta1, self.max_rank, self.method,
                                                    self.rng, r0=self.r0)
            if c:   # capped at delta1 (a lower bound's share): judged at the final delta
                self.cap_errors.extend(_cap_errors(xp, A, U, V, k, self.max_rank))
                c = 0
            del A
            self.r0 = min(T.nb, max(16, -(-(int(np.percentile(k, 90)) + 8) // 8) * 8))
        return U, V, k, c


def _cap_errors(xp, A, U, V, k, max_rank) -> list:
    """``||A_t - U_t V_t^T||_F`` of the tiles kept at ``max_rank`` (host floats): the error
    their cap left, for :func:`_finish` to compare with the final per-tile threshold (the
    first pass compresses at a stricter one, so a cap there need not break tol)."""
    idx = np.flatnonzero(np.asarray(k) >= int(max_rank))
    if not idx.size:
        return []
    d = xp.asarray(idx)
    R = A[d] - xp.matmul(U[d], V[d].swapaxes(-1, -2))
    return [float(v) for v in host(xp.sqrt(xp.sum(R * R, axis=(1, 2))))]


def _nonfinite(T, keys, stack, what="the entry function gave"):
    """A ValueError naming the first NaN/Inf of the tile stack ``stack`` (tiles ``keys``) by
    its global entry, or None when it has none (a sum of squares beyond float range)."""
    bad = T.xp.argwhere(~T.xp.isfinite(stack))
    if not bad.size:
        return None
    a, r, c = (int(v) for v in host(bad[0]))
    i, j = keys[a]
    return ValueError(f"{what} a non-finite value ({float(stack[a, r, c])}) at entry "
                      f"({i * T.nb + r}, {j * T.nb + c}) of the matrix; a TLR matrix needs "
                      f"finite entries (NaN or Inf)")


def _raise_nonfinite(T, keys, stack):
    err = _nonfinite(T, keys, stack)
    if err is not None:
        raise err


def _padded(xp, t, nb):
    """Tile ``t`` zero-padded to ``nb x nb``."""
    out = xp.zeros((nb, nb), t.dtype)
    out[:t.shape[0], :t.shape[1]] = t
    return out


def _aca_per_tile(nb):
    """``nb x nb`` arrays' worth of memory per tile of an ACA batch: the crosses (up to width
    128 before growing further) and a few rows of scratch."""
    return (2 * 128 + 16) / nb


def _index_stacks(T, keys):
    """Device index stacks ``I (t, nb)``, ``J (t, nb)`` of the tiles ``keys``, clipped to
    ``n - 1`` in the padding."""
    xp = T.xp
    ar = np.arange(T.nb)[None, :]
    gi = np.array([i for i, _ in keys], dtype=np.int64)[:, None] * T.nb + ar
    gj = np.array([j for _, j in keys], dtype=np.int64)[:, None] * T.nb + ar
    top = max(T.n - 1, 0)
    return xp.asarray(np.minimum(gi, top)), xp.asarray(np.minimum(gj, top))


def _zero_padding(T, keys, A):
    """Zero the padded rows/columns of the last tile row/column in the stack ``A``."""
    for a, (i, j) in enumerate(keys):
        mi, mj = T.tile_size(i), T.tile_size(j)
        if mi < T.nb:
            A[a, mi:, :] = 0
        if mj < T.nb:
            A[a, :, mj:] = 0


def _generic_tiles(fn, xp):
    """Stacked evaluation for an ``fn(I, J)`` without a ``tiles`` method."""
    def tiles(I, J, out, tmp=None, diagonal=True):
        out[...] = xp.asarray(_args.real_values(fn(I[:, :, None], J[:, None, :]), xp),
                              dtype=out.dtype)
        return out
    return tiles


def _aca_tiles(T, fn, keys, delta, max_rank):
    """ACA on the tiles ``keys`` given by ``fn``, without forming them (rows, columns and
    sampled entries on demand; padded rows and columns read as zero)."""
    xp = T.xp
    GI, GJ = _index_stacks(T, keys)
    m = np.array([T.tile_size(i) for i, _ in keys])
    n = np.array([T.tile_size(j) for _, j in keys])
    VI = xp.asarray((np.arange(T.nb)[None, :] < m[:, None]).astype(T.dtype))
    VJ = xp.asarray((np.arange(T.nb)[None, :] < n[:, None]).astype(T.dtype))

    def finite(vals, I, J):
        """``vals`` (entries ``(I, J)``), else a ValueError naming a NaN/Inf (ACA would drop
        it silently)."""
        if not bool(xp.isfinite(vals).all()):
            bad = tuple(host(xp.argwhere(~xp.isfinite(vals))[0]))
            I, J = xp.broadcast_arrays(I, J)
            raise ValueError(f"the entry function gave a non-finite value "
                             f"({float(vals[bad])}) at entry ({int(I[bad])}, {int(J[bad])}) "
                             f"of the matrix; a TLR matrix needs finite entries (NaN or Inf)")
        return vals

    def rows(d, i):      # (a,) -> (a, nb)
        I, J = GI[d, i][:, None], GJ[d]
        vals = finite(xp.asarray(_args.real_values(fn(I, J), xp), dtype=T.dtype), I, J)
        return vals * VJ[d] * VI[d, i][:, None]

    def cols(d, j):      # (a,) -> (a, nb)
        I, J = GI[d], GJ[d, j][:, None]
        vals = finite(xp.asarray(_args.real_values(fn(I, J), xp), dtype=T.dtype), I, J)
        return vals * VI[d] * VJ[d, j][:, None]

    return batched.aca(rows, cols, len(keys), T.nb, T.nb, delta, max_rank, xp, T.dtype)
