"""Row interchanges (pdlaswp) and pivot bookkeeping for distributed LU.

Pivot vectors follow LAPACK's ``ipiv`` semantics, 0-based and global: ``piv[i] = p`` means row
``i`` was interchanged with row ``p`` (``p >= i``), the interchanges applied in order
``i = 0, 1, ...``. Everything here except :func:`permute_rows`, :func:`swap_rows` and
:func:`largest_multiplier` (GENP's tiny-pivot check) is host-side index math on small NumPy
arrays (no communication).

Algorithm notes: docs/lu.md (row interchanges).
"""
from __future__ import annotations

import numpy as np

from .. import layout
from ..device._lapack import swap_moves, swapped_order

__all__ = ["swaps_to_moves", "ipiv_to_perm", "winners_to_ipiv", "apply_swaps", "suffix_moves",
           "permute_rows", "swap_rows", "largest_multiplier"]


def apply_swaps(piv, n: int) -> np.ndarray:
    """``order`` of length ``n`` after applying the swaps ``piv`` (0-based, relative to row 0,
    LAPACK's ``piv[i] >= i``) to ``arange(n)``: position ``i`` then holds original row
    ``order[i]``: one dlaswp over the indices (a Python loop over the swaps took 21 ms for
    n = 65536)."""
    return swapped_order(piv, n)


def ipiv_to_perm(piv, m: int) -> np.ndarray:
    """The permutation of ``m`` rows equivalent to the swaps ``piv``: ``(P A)[i] = A[perm[i]]``."""
    return apply_swaps(piv, m)


def swaps_to_moves(piv, start: int) -> tuple[np.ndarray, np.ndarray]:
    """Net effect of the swaps of one panel: row ``start + i`` swapped with ``piv[i]`` (global,
    ``>= start + i``) for i = 0, 1, ....

    Returns ``(dest, src)`` (int64, sorted by ``dest``): afterwards global row ``dest[t]`` holds
    the old row ``src[t]``; rows not listed do not move (at most ``2 len(piv)`` rows move).
    Vectorized (:func:`distla.device._lapack.swap_moves`): no Python loop over the pivots.
    """
    return swap_moves(piv, start)


def suffix_moves(piv, nb: int, m: int):
    """For k = nsteps-1, ..., 0 (steps of width ``nb`` over the global pivots ``piv``), yield
    ``(k, dest, src)``: the net moves of all interchanges of steps after k (``piv[(k+1) nb:]``)
    on ``m`` rows, as :func:`swaps_to_moves` would give them. Each step costs O(nb) to fold in
    plus O(m) NumPy work, instead of replaying O(m) swaps in Python per step."""
    piv = np.asarray(piv, dtype=np.int64)
    nsteps = layout.num_blocks(len(piv), nb)
    R = np.arange(m, dtype=np.int64)     # R[i]: original row now at position i
    Rinv = np.arange(m, dtype=np.int64)  # Rinv[r]: position of original row r
    ident = np.arange(m, dtype=np.int64)
    for k in range(nsteps - 1, -1, -1):
        dest = np.flatnonzero(R != ident)
        yield k, dest, R[dest]
        j0 = k * nb
        d, src = swaps_to_moves(piv[j0:j0 + nb], j0)  # step k: new[d] = old[src]
        pos = Rinv[d]  # fold it in front: R <- X_k[R]
        R[pos] = src
        Rinv[src] = pos


def winners_to_ipiv(winners, start: int) -> np.ndarray:
    """LAPACK-style swaps that bring the distinct global rows ``winners`` (all ``>= start``) to
    positions ``start, start + 1, ...`` in that order (as tournament pivoting needs)."""
    pos: dict[int, int] = {}  # original row -> current position (moved rows only)
    at: dict[int, int] = {}   # position -> original row now there (moved positions only)
    piv = []
    for i, w in enumerate(np.asarray(winners).tolist()):
        g = start + i
        p = pos.get(w, w)
        piv.append(p)
        if p != g:
            rg = at.get(g, g)
            at[g], at[p] = w, rg
            pos[w], pos[rg] = g, p
    return np.array(piv, dtype=np.int64)


def permute_rows(local, dest, src, *, mb: int, rsrc: int, nprow: int, myrow: int, comm, segs,
                 backend, work=None) -> None:
    """Move whole local row pieces: afterwards global row ``dest[t]`` holds the old row
    ``src[t]`` in the local columns ``segs`` (a list of slices of ``local``'s columns).

    Collective over the process column: ``comm`` is the data communicator of this rank's process
    column (``grid.comms(device).col``, rank == process row); every rank of the column passes
    the same ``dest``/``src`` (host int64, sorted by ``dest``) and the same column widths.
    Rows are exchanged pairwise between process rows, one grouped ``exchange`` in all: each
    rank sends at most one message to, and receives at most one from, each other process row.
    ``work(name, shape)``, if given, returns reusable column-major buffers of ``local``'s dtype
    (a step loop's workspace, so that nothing is allocated and freed per call).
    """
    segs = [s for s in segs if s.stop > s.start]
    ncols = sum(s.stop - s.start for s in segs)
    if len(dest) == 0 or ncols == 0:
        return
    od = layout.owner(dest, mb, rsrc, nprow)
    osrc = layout.owner(src, mb, rsrc, nprow)
    ldest = layout.global_to_local(dest, mb, nprow)
    lsrc = layout.global_to_local(src, mb, nprow)
    dtype = local.dtype

    pieces = []  # (columns of local, the same columns packed in a buffer)
    off = 0
    for s in segs:
        pieces.append((s, slice(off, off + s.stop - s.start)))
        off += s.stop - s.start

    def alloc(name, shape):
        return backend.empty(shape, dtype) if work is None else work(name, shape)

    def gather(idx, name):
        buf = alloc(name, (len(idx), ncols))
        ix = backend.xp.asarray(idx)
        for s, packed in pieces:
            backend.take_rows(local[:, s], ix, buf[:, packed])
        return buf

    def scatter(idx, buf):
        ix = backend.xp.asarray(idx)
        for s, packed in pieces:
            backend.put_rows(local[:, s], ix, buf[:, packed])

    sends, recvs = [], []
    for q in range(nprow):
        if q == myrow:
            continue
        ms = (osrc == myrow) & (od == q)
        if ms.any():
            sends.append((q, gather(lsrc[ms], ("send", q))))
        mr = (od == myrow) & (osrc == q)
        if mr.any():
            recvs.append((q, alloc(("recv", q), (int(mr.sum()), ncols)), ldest[mr]))
    mine = (od == myrow) & (osrc == myrow)
    if mine.any():  # all reads (gathers) happen before any write
        scatter(ldest[mine], gather(lsrc[mine], "mine"))
    if sends or recvs:
        comm.exchange(sends, [(q, b) for q, b, _ in recvs])
    for _, b, idx in recvs:
        scatter(idx, b)


def swap_rows(local, piv, start: int, *, mb: int, rsrc: int, nprow: int, myrow: int, comm,
              segs, backend, work=None) -> None:
    """Apply one panel's interchanges (row ``start + i`` with ``piv[i]``, global, in order) to
    the local columns ``segs``. Collective over the process column, like
    :func:`permute_rows`; with one process row on CPU it is LAPACK's laswp in place (global
    row == local row there)."""
    segs = [s for s in segs if s.stop > s.start]
    if not segs or len(piv) == 0:
        return
    if nprow == 1:
        for s in segs:
            backend.laswp(local[:, s], piv, start)
        return
    dest, src = swaps_to_moves(piv, start)
    permute_rows(local, dest, src, mb=mb, rsrc=rsrc, nprow=nprow, myrow=myrow, comm=comm,
                 segs=segs, backend=backend, work=work)


def largest_multiplier(lu, kmax: int) -> np.ndarray:
    """Collective over ``lu``'s grid: ``max_i |l_ij|`` for every column ``j < kmax`` of the
    unit lower factor held strictly below the diagonal of ``lu`` (a host float array, the same
    on every rank; inf where a maximum is not finite).

    ``max_i |l_ij| = max_i |a_ij^(j)| / |u_jj|``: how much smaller the pivot ``u_jj`` is than
    the largest entry of its column at step j, the entry partial pivoting would have chosen
    (the maximum is 1 for GEPP). One pass over the local storage in column slabs, one
    all-reduce of ``nloc`` numbers along process columns and one allgather along process
    rows."""
    from mpi4py import MPI
    g, be = lu.grid, lu.backend
    rows, cols = lu.row_indices(), lu.col_indices()
    loc = np.zeros(len(cols))
    a = lu.local
    if a.size:      # (whole-slab masks of |a| made three temporaries of each slab: 15x this)
        loc = np.asarray(be.to_host(be.lower_column_max_abs(a, rows, cols, lu.nb)),
                         dtype=float)
    loc[~np.isfinite(loc)] = np.inf                          # NaN (0/0) counts as infinite
    g.col_comm.Allreduce(MPI.IN_PLACE, loc, op=MPI.MAX)
    out = np.zeros(lu.n)
    for c, v in zip(g.row_comm.allgather(cols), g.row_comm.allgather(loc)):
        out[np.asarray(c, dtype=np.int64)] = v
    return out[:kmax]
