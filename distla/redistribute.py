"""Layout changes by direct all-to-all exchange (pdgemr2d and pdtran equivalents).

Every rank sends, to every rank of the target layout, the sub-block of its local array that the
target owns, in one all-to-all (on CPU MPI Alltoallw with a datatype per piece over the local
arrays, or Alltoallv of packed buffers for transposes; grouped NCCL send/recv of packed buffers
on GPU). Nothing is gathered. Index sets are sorted in both layouts, so sender and receiver
agree on the order.
"""
from __future__ import annotations

import os

import numpy as np

from . import layout


def _idx(n, nb, p, src, P):
    return layout.local_indices(n, nb, p, src, P)


# Most exchanges move whole blocks, so the local row and column indices of a piece form a few
# runs of consecutive indices: the piece is then copied as (row run x column run) slices
# (memory-speed copies) instead of a 2-D fancy index (2 CPU ranks, 8192 x 4096 local, runs of
# 128: 104 -> ~10 ms for a 32 MB piece, benchmarks/io_rate.py). Beyond this many slice pairs
# (mismatched block sizes make runs short) the fancy index is cheaper; GPU ranks launch one
# kernel per slice, so they take slices only for a few.
MAX_SLICES = {"cpu": 4096, "gpu": 64}


def _runs(idx):
    """``[(start, stop, offset)]``: the runs of consecutive values in the sorted ``idx`` and
    where each begins in ``idx``."""
    idx = np.asarray(idx)
    if not idx.size:
        return []
    cut = np.flatnonzero(np.diff(idx) != 1) + 1
    starts = np.r_[0, cut]
    stops = np.r_[cut, idx.size]
    return [(int(idx[a]), int(idx[b - 1]) + 1, int(a)) for a, b in zip(starts, stops)]


def _sliced(ri, ci, device):
    """``[(local, piece)]``: pairs of 2-D slices, of the local array and of the piece's
    ``(len(ri), len(ci))`` block, that together cover the piece; None when there would be
    more than ``MAX_SLICES[device]`` (then fancy indexing)."""
    rr, cr = _runs(ri), _runs(ci)
    if len(rr) * len(cr) > MAX_SLICES[device]:
        return None
    return [((slice(r0, r1), slice(c0, c1)), (slice(o, o + r1 - r0), slice(q, q + c1 - c0)))
            for r0, r1, o in rr for c0, c1, q in cr]


def _gather(xp, a, ri, ci, flat, device):
    """``flat[...] = a[ri][:, ci]`` in column-major order (``flat``: a 1-D view)."""
    out = flat.reshape((len(ri), len(ci)), order="F")
    pairs = _sliced(ri, ci, device)
    if pairs is None:
        out[...] = a[xp.asarray(ri)[:, None], xp.asarray(ci)[None, :]]
        return
    for local, piece in pairs:
        out[piece] = a[local]


def _paired_runs(x, y):
    """``[(x0, x1, y0)]``: runs where both sorted index arrays ``x`` and ``y`` (same length)
    are consecutive."""
    x, y = np.asarray(x), np.asarray(y)
    if not x.size:
        return []
    cut = np.flatnonzero((np.diff(x) != 1) | (np.diff(y) != 1)) + 1
    starts = np.r_[0, cut]
    stops = np.r_[cut, x.size]
    return [(int(x[a]), int(x[b - 1]) + 1, int(y[a])) for a, b in zip(starts, stops)]


def _copy_piece(xp, a, src, b, dst, device):
    """``b[dst rows][:, dst cols] = a[src rows][:, src cols]``: a piece that stays on this
    rank, copied once (slices where both sides have runs, else a fancy index)."""
    (ra, ca), (rb, cb) = src, dst
    if not len(ra) or not len(ca):
        return
    rr, cr = _paired_runs(ra, rb), _paired_runs(ca, cb)
    if len(rr) * len(cr) > MAX_SLICES[device]:
        b[xp.asarray(rb)[:, None], xp.asarray(cb)[None, :]] = \
            a[xp.asarray(ra)[:, None], xp.asarray(ca)[None, :]]
        return
    for r0, r1, s0 in rr:
        for c0, c1, t0 in cr:
            b[s0:s0 + r1 - r0, t0:t0 + c1 - c0] = a[r0:r1, c0:c1]


def _scatter(xp, b, ri, ci, buf, device):
    """``b[ri][:, ci] = buf`` (a flat column-major buffer of that shape)."""
    blk = buf.reshape((len(ri), len(ci)), order="F")
    pairs = _sliced(ri, ci, device)
    if pairs is None:
        b[xp.asarray(ri)[:, None], xp.asarray(ci)[None, :]] = blk
        return
    for local, piece in pairs:
        b[local] = blk[piece]


def remap(A, B, transpose: bool = False, conjugate: bool = False, work=None) -> None:
    """Collective over A's grid (B's grid must be over the same communicator, same size):
    B[i, j] = A[i, j], or A[j, i] (conjugated if asked) when ``transpose``. On CPU ranks
    (not transposing) MPI moves the pieces between the local arrays through datatypes;
    otherwise they are packed into one send buffer and received into one (slices of each:
    no further copies around the all-to-all). ``work``: a dict kept by a caller that remaps
    repeatedly (slab by slab), holding those two buffers between calls (fresh ones
    page-fault every time)."""
    ga, gb = A.grid, B.grid
    xp = A.xp
    arows, acols = A.row_indices(), A.col_indices()
    pieces = []
    for d in range(gb.size):
        pr, pc = gb.coords(d)
        brows = _idx(B.m, B.mb, pr, B.rsrc, gb.nprow)
        bcols = _idx(B.n, B.nb, pc, B.csrc, gb.npcol)
        if transpose:  # B[i, j] = A[j, i]: A's rows are B's columns
            _, ri, _ = np.intersect1d(arows, bcols, assume_unique=True, return_indices=True)
            _, ci, _ = np.intersect1d(acols, brows, assume_unique=True, return_indices=True)
        else:
            _, ri, _ = np.intersect1d(arows, brows, assume_unique=True, return_indices=True)
            _, ci, _ = np.intersect1d(acols, bcols, assume_unique=True, return_indices=True)
        pieces.append((ri, ci))
    me = ga.comm.Get_rank()              # also my rank on B's grid (same communicator)
    own = pieces[me]
    if not transpose:                    # what stays here is copied once, not sent to myself
        pieces[me] = (own[0][:0], own[1][:0])
    typed = _typed_exchange(A, B, transpose)
    sends = [] if typed else \
        _slices(xp, A.dtype, [len(ri) * len(ci) for ri, ci in pieces], work, "send")
    for buf, (ri, ci) in zip(sends, pieces):
        if not buf.size:
            continue
        if not transpose:
            _gather(xp, A.local, ri, ci, buf, A.device)
        else:
            blk = A.local[xp.asarray(ri)[:, None], xp.asarray(ci)[None, :]]
            blk = blk.T.conj() if conjugate else blk.T
            buf.reshape(blk.shape, order="F")[...] = blk
    brows, bcols = B.row_indices(), B.col_indices()
    places = []
    for s in range(ga.size):
        pr, pc = ga.coords(s)
        srows = _idx(A.m, A.mb, pr, A.rsrc, ga.nprow)
        scols = _idx(A.n, A.nb, pc, A.csrc, ga.npcol)
        if transpose:
            _, ri, _ = np.intersect1d(brows, scols, assume_unique=True, return_indices=True)
            _, ci, _ = np.intersect1d(bcols, srows, assume_unique=True, return_indices=True)
        else:
            _, ri, _ = np.intersect1d(brows, srows, assume_unique=True, return_indices=True)
            _, ci, _ = np.intersect1d(bcols, scols, assume_unique=True, return_indices=True)
        places.append((ri, ci))
    if not transpose:
        _copy_piece(xp, A.local, own, B.local, places[me], B.device)
        places[me] = (places[me][0][:0], places[me][1][:0])
    if typed:
        _alltoallw(ga.comms("cpu").all.mpi, A.local, pieces, B.local, places)
        return
    recvs = _slices(xp, A.dtype, [len(ri) * len(ci) for ri, ci in places], work, "recv")
    comm = ga.comms(A.device).all
    comm.alltoallv(sends, recvs)
    for buf, (ri, ci) in zip(recvs, places):
        if buf.size:
            _scatter(xp, B.local, ri, ci, buf, B.device)


def _typed_exchange(A, B, transpose: bool) -> bool:
    """Whether :func:`remap` moves the pieces with MPI datatypes straight from A's local array
    into B's (CPU ranks, not transposing): MPI packs and unpacks them, saving the copies into
    and out of one send and one receive buffer. The same answer on every rank."""
    return (TYPED_EXCHANGE and not transpose and A.device == "cpu" and B.device == "cpu"
            and A.grid.size > 1 and _local_bound(A) < 2**31 and _local_bound(B) < 2**31)


def _local_bound(A) -> int:
    """Bytes of the largest local array any rank can hold for A's layout (the same on every
    rank): a datatype describes at most that much, within MPI's int-sized counts."""
    g = A.grid
    def most(n, nb, p):          # blocks of the process with the most, times the block size
        blocks = -(-n // nb)
        return -(-blocks // p) * nb
    return most(A.m, A.mb, g.nprow) * most(A.n, A.nb, g.npcol) * A.dtype.itemsize


# DISTLA_REMAP=buffers keeps the packed-buffer all-to-all on CPU ranks too (for comparison).
TYPED_EXCHANGE = os.environ.get("DISTLA_REMAP", "typed") != "buffers"


def _piece_type(a, ri, ci):
    """An MPI datatype of bytes at absolute addresses (use with ``MPI.BOTTOM``) selecting
    ``a[ri][:, ci]`` of the 2-D host array ``a`` (any strides), rows fastest: the order in
    which the other side's type lays the same global entries out. None for an empty piece."""
    from mpi4py import MPI
    if not len(ri) or not len(ci):
        return None
    item, (rs, cs) = a.itemsize, a.strides
    if rs == item:                       # runs of consecutive rows are contiguous bytes
        rr = _runs(ri)
        rows = MPI.BYTE.Create_hindexed([(r1 - r0) * item for r0, r1, _ in rr],
                                        [r0 * item for r0, _, _ in rr])
    else:
        rows = MPI.BYTE.Create_hindexed_block(item, [int(r) * rs for r in ri])
    base = a.ctypes.data
    t = rows.Create_hindexed_block(1, [base + int(c) * cs for c in ci]).Commit()
    rows.Free()
    return t


def _alltoallw(comm, a, pieces, b, places) -> None:
    """Collective over the mpi4py communicator ``comm``: send ``a[ri][:, ci]`` of each
    ``pieces[p]`` to rank p and receive each ``places[p]`` of ``b`` from rank p, as MPI
    datatypes over the local arrays themselves (no staging buffers)."""
    from mpi4py import MPI
    stypes = [_piece_type(a, ri, ci) for ri, ci in pieces]
    rtypes = [_piece_type(b, ri, ci) for ri, ci in places]
    try:
        def spec(types):
            return [MPI.BOTTOM, ([int(t is not None) for t in types], [0] * len(types)),
                    [t or MPI.BYTE for t in types]]
        comm.Alltoallw(spec(stypes), spec(rtypes))
    finally:
        for t in stypes + rtypes:
            if t is not None:
                t.Free()


def _slices(xp, dtype, sizes, work=None, key=None):
    """Consecutive 1-D slices of one array, of the given sizes: a new array, or the start of
    ``work[key]`` (replaced when too small or of another dtype)."""
    total = int(sum(sizes))
    if work is None:
        flat = xp.empty(total, dtype=dtype)
    else:
        buf = work.get(key)
        if buf is None or buf.size < total or buf.dtype != dtype:
            work[key] = None
            buf = work[key] = xp.empty(total, dtype=dtype)
        flat = buf[:total]
    out, at = [], 0
    for k in sizes:
        out.append(flat[at:at + k])
        at += k
    return out
