"""Row interchanges (pdlaswp) and pivot bookkeeping for distributed LU.

Pivot vectors follow LAPACK's ``ipiv`` semantics, 0-based and global: ``piv[i] = p`` means row
``i`` was interchanged with row ``p`` (``p >= i``), the interchanges applied in order
``i = 0, 1, ...``. Everything here except :func:`permute_rows` and :func:`genp` is host-side index
math on small NumPy arrays (no communication).
"""
from __future__ import annotations

import functools

import numpy as np

from .. import layout

__all__ = ["swaps_to_moves", "ipiv_to_perm", "winners_to_ipiv", "apply_swaps", "suffix_moves",
           "permute_rows", "swap_rows", "take_rows", "put_rows", "laswp", "genp"]


def apply_swaps(piv, n: int) -> np.ndarray:
    """``order`` of length ``n`` after applying the swaps ``piv`` (0-based, relative to row 0)
    to ``arange(n)``: position ``i`` then holds original row ``order[i]``."""
    order = np.arange(n, dtype=np.int64)
    for i, p in enumerate(np.asarray(piv).tolist()):
        if p != i:
            order[i], order[p] = order[p], order[i]
    return order


def ipiv_to_perm(piv, m: int) -> np.ndarray:
    """The permutation of ``m`` rows equivalent to the swaps ``piv``: ``(P A)[i] = A[perm[i]]``."""
    return apply_swaps(piv, m)


def swaps_to_moves(piv, start: int) -> tuple[np.ndarray, np.ndarray]:
    """Net effect of the swaps of one panel: row ``start + i`` swapped with ``piv[i]`` (global,
    ``>= start + i``) for i = 0, 1, ....

    Returns ``(dest, src)`` (int64, sorted by ``dest``): afterwards global row ``dest[t]`` holds
    the old row ``src[t]``; rows not listed do not move (at most ``2 len(piv)`` rows move).
    """
    at: dict[int, int] = {}  # position -> original row now there (only moved positions)
    for i, p in enumerate(np.asarray(piv).tolist()):
        a = start + i
        if p != a:
            ra, rp = at.get(a, a), at.get(p, p)
            at[a], at[p] = rp, ra
    dest = sorted(g for g, r in at.items() if g != r)
    return (np.array(dest, dtype=np.int64),
            np.array([at[g] for g in dest], dtype=np.int64))


def suffix_moves(piv, nb: int, m: int):
    """For k = nsteps-1, ..., 0 (steps of width ``nb`` over the global pivots ``piv``), yield
    ``(k, dest, src)``: the net moves of all interchanges of steps after k (``piv[(k+1) nb:]``)
    on ``m`` rows, as :func:`swaps_to_moves` would give them. Each step costs O(nb) to fold in
    plus O(m) NumPy work, instead of replaying O(m) swaps in Python per step."""
    piv = np.asarray(piv, dtype=np.int64)
    nsteps = -(-len(piv) // nb)
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
                 xp) -> None:
    """Move whole local row pieces: afterwards global row ``dest[t]`` holds the old row
    ``src[t]`` in the local columns ``segs`` (a list of slices of ``local``'s columns).

    Collective over the process column: ``comm`` is the data communicator of this rank's process
    column (``grid.comms(device).col``, rank == process row); every rank of the column passes
    the same ``dest``/``src`` (host int64, sorted by ``dest``) and the same column widths.
    Rows are exchanged pairwise between process rows, one grouped ``exchange`` in all: each
    rank sends at most one message to, and receives at most one from, each other process row.
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

    def gather(idx):
        buf = xp.empty((len(idx), ncols), dtype=dtype, order="F")
        ix = xp.asarray(idx)
        for s, packed in pieces:
            take_rows(local[:, s], ix, buf[:, packed], xp)
        return buf

    def scatter(idx, buf):
        ix = xp.asarray(idx)
        for s, packed in pieces:
            put_rows(local[:, s], ix, buf[:, packed], xp)

    sends, recvs = [], []
    for q in range(nprow):
        if q == myrow:
            continue
        ms = (osrc == myrow) & (od == q)
        if ms.any():
            sends.append((q, gather(lsrc[ms])))
        mr = (od == myrow) & (osrc == q)
        if mr.any():
            recvs.append((q, xp.empty((int(mr.sum()), ncols), dtype=dtype, order="F"),
                          ldest[mr]))
    mine = (od == myrow) & (osrc == myrow)
    if mine.any():  # all reads (gathers) happen before any write
        scatter(ldest[mine], gather(lsrc[mine]))
    if sends or recvs:
        comm.exchange(sends, [(q, b) for q, b, _ in recvs])
    for _, b, idx in recvs:
        scatter(idx, b)


def take_rows(a, idx, out, xp=np) -> None:
    """``out[...] = a[idx]`` for column-major 2-D ``a`` and ``out`` (NumPy or CuPy; ``idx``
    an int64 index array of the same library, ``xp`` that library). Not collective.

    Rows of a column-major array are strided: indexing them directly walks each row across
    the columns (on a GPU consecutive threads then touch addresses ``ld`` apart, and the
    result needs a transposing copy). Here consecutive elements (threads) walk down the
    selected rows of one column: ``np.take`` along the transposed views on CPU, one CuPy
    kernel on GPU."""
    if xp is np:
        np.take(a.T, idx, axis=1, out=out.T)
    elif out.size:
        flat, ld = _flat(a)
        _gpu_row_kernels()[0](flat, idx.astype(np.int64, copy=False), ld, len(idx), out.T)


def put_rows(a, idx, vals, xp=np) -> None:
    """``a[idx] = vals`` (distinct ``idx``) for column-major 2-D arrays, walking columns as
    :func:`take_rows` does. Not collective."""
    if xp is np:
        a.T[:, idx] = vals.T
    elif vals.size:
        flat, ld = _flat(a)
        _gpu_row_kernels()[1](vals.T, idx.astype(np.int64, copy=False), ld, len(idx), flat)


def _flat(a):  # pragma: no cover - needs a GPU
    """A column-major CuPy view as a 1-D array over its memory (from a[0, 0] to its last
    element) and its leading dimension: element (i, j) is ``flat[i + j ld]``."""
    import cupy
    isz = a.itemsize
    if a.shape[0] > 1 and a.strides[0] != isz:
        raise ValueError("take_rows/put_rows need a column-major view")
    ld = a.strides[1] // isz if a.shape[1] > 1 else a.shape[0]
    size = (a.shape[1] - 1) * ld + a.shape[0]
    return cupy.ndarray((size,), dtype=a.dtype, memptr=a.data), ld


@functools.lru_cache(maxsize=None)
def _gpu_row_kernels():  # pragma: no cover - needs a GPU
    """(gather, scatter) CuPy kernels over ``(columns, selected rows)`` in C order, so that
    consecutive threads move consecutive selected rows of one column."""
    import cupy
    pre = "const ptrdiff_t r = i % nr, c = i / nr; const ptrdiff_t k = idx[r] + c * ld;"
    gather = cupy.ElementwiseKernel("raw T a, raw int64 idx, int64 ld, int64 nr", "T out",
                                    pre + " out = a[k];", "distla_gather_rows")
    scatter = cupy.ElementwiseKernel("T v, raw int64 idx, int64 ld, int64 nr", "raw T a",
                                     pre + " a[k] = v;", "distla_scatter_rows")
    return gather, scatter


def swap_rows(local, piv, start: int, *, mb: int, rsrc: int, nprow: int, myrow: int, comm,
              segs, xp) -> None:
    """Apply one panel's interchanges (row ``start + i`` with ``piv[i]``, global, in order) to
    the local columns ``segs``. Collective over the process column, like
    :func:`permute_rows`; with one process row on CPU it is LAPACK's laswp in place (global
    row == local row there)."""
    segs = [s for s in segs if s.stop > s.start]
    if not segs or len(piv) == 0:
        return
    if nprow == 1 and xp is np and local.dtype.char in "fdFD" and \
            (local.shape[0] <= 1 or local.strides[0] == local.itemsize):
        for s in segs:
            laswp(local[:, s], piv, start)
        return
    dest, src = swaps_to_moves(piv, start)
    permute_rows(local, dest, src, mb=mb, rsrc=rsrc, nprow=nprow, myrow=myrow, comm=comm,
                 segs=segs, xp=xp)


def laswp(a, piv, start: int) -> None:
    """LAPACK ``?laswp`` in place on the column-major NumPy view ``a``: row ``start + i`` is
    interchanged with row ``piv[i]`` (0-based rows of ``a``) for i = 0, 1, .... Not
    collective."""
    import ctypes

    from .. import _scipy_blas as sb
    n = a.shape[1]
    k = len(piv)
    if n == 0 or k == 0:
        return
    ip = np.empty(start + k, dtype=np.int32)
    ip[start:] = np.asarray(piv, dtype=np.int64) + 1
    sb._fn(sb._prefix(a.dtype) + "laswp")(
        sb._i(n), sb._ptr(a), sb._i(sb.ld(a)), sb._i(start + 1), sb._i(start + k),
        ip.ctypes.data_as(ctypes.c_void_p), sb._i(1))


def genp(a, backend, leaf: int = 16) -> None:
    """LU without pivoting of the ``m x n`` (m >= n) column-major view ``a``, in place (unit L
    below the diagonal, U on and above). Not collective. A zero pivot is not reported here (it
    shows as an exact zero on U's diagonal; later entries may become inf/NaN).

    GPU: cuSOLVER getrf with a null pivot array (its documented no-pivoting mode). CPU: a
    recursive split (trsm + gemm) down to small unblocked leaves.
    """
    m, n = a.shape
    if m == 0 or n == 0:
        return
    if backend.is_gpu:
        _gpu_getrf_nopiv(a, backend)
        return
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        _genp_rec(a, backend, leaf)


def _genp_rec(a, backend, leaf):
    m, n = a.shape
    if n <= leaf:
        for j in range(n):
            if j + 1 < m:
                a[j + 1:, j] /= a[j, j]
                if j + 1 < n:
                    a[j + 1:, j + 1:] -= np.outer(a[j + 1:, j], a[j, j + 1:])
        return
    n1 = n // 2
    _genp_rec(a[:, :n1], backend, leaf)
    backend.trsm("L", "L", "N", "U", 1.0, a[:n1, :n1], a[:n1, n1:])
    backend.gemm("N", "N", -1.0, a[n1:, :n1], a[:n1, n1:], 1.0, a[n1:, n1:])
    _genp_rec(a[n1:, n1:], backend, leaf)


def _gpu_getrf_nopiv(a, backend):  # pragma: no cover - needs a GPU
    """cuSOLVER ``?getrf`` with ``devIpiv = NULL``: LU without pivoting on the current stream."""
    from .. import _scipy_blas
    xp, cs = backend.xp, backend._cusolver
    if not _scipy_blas.is_colmajor(a):
        tmp = xp.asfortranarray(a)
        _gpu_getrf_nopiv(tmp, backend)
        a[...] = tmp
        return
    m, n = a.shape
    info = xp.zeros((), dtype=np.int32)
    bs = {"d": cs.dgetrf_bufferSize, "f": cs.sgetrf_bufferSize}[a.dtype.char]
    f = {"d": cs.dgetrf, "f": cs.sgetrf}[a.dtype.char]
    h = backend._solver()
    lda = _scipy_blas.ld(a)
    lwork = bs(h, m, n, a.data.ptr, lda)
    work = xp.empty(max(1, lwork), dtype=a.dtype)
    f(h, m, n, a.data.ptr, lda, work.data.ptr, 0, info.data.ptr)
