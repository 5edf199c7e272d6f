"""Block-cyclic index math (ScaLAPACK semantics, 0-based). Pure functions, no MPI.

A dimension of global length ``n`` is cut into blocks of ``nb``; block ``k`` lives on process
``(src + k) % P``. Every function works on Python ints and on NumPy integer arrays.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["num_blocks", "numroc", "owner", "global_to_local", "local_to_global", "local_indices",
           "block_cyclic_views", "Descriptor"]


def num_blocks(n: int, nb: int) -> int:
    """Number of blocks of ``nb`` covering ``n`` (the last one may be short): ceil(n / nb)."""
    return -(-n // nb)


def numroc(n: int, nb: int, p: int, src: int, nprocs: int) -> int:
    """Number of rows (or columns) of a length-``n`` dimension stored on process ``p``."""
    d = (nprocs + p - src) % nprocs
    nblocks = n // nb
    r = (nblocks // nprocs) * nb
    extra = nblocks % nprocs
    if d < extra:
        r += nb
    elif d == extra:
        r += n % nb
    return r


def owner(g, nb: int, src: int, nprocs: int):
    """Process coordinate that owns global index ``g``."""
    return (src + g // nb) % nprocs


def global_to_local(g, nb: int, nprocs: int):
    """Local index of global index ``g`` on its owner."""
    return nb * (g // (nb * nprocs)) + g % nb


def local_to_global(l, nb: int, p: int, src: int, nprocs: int):
    """Global index of local index ``l`` on process ``p``."""
    return nprocs * nb * (l // nb) + l % nb + ((nprocs + p - src) % nprocs) * nb


def local_indices(n: int, nb: int, p: int, src: int, nprocs: int) -> np.ndarray:
    """All global indices stored on process ``p``, in local order (int64 array)."""
    return local_to_global(np.arange(numroc(n, nb, p, src, nprocs), dtype=np.int64),
                           nb, p, src, nprocs)


def local_start(g: int, nb: int, p: int, src: int, nprocs: int) -> int:
    """Number of local indices on process ``p`` whose global index is < ``g``.

    The local offset where the global range ``[g, n)`` starts on ``p`` (ScaLAPACK's
    ``numroc(g, ...)``; valid for any ``g`` including block-interior ones).
    """
    return numroc(g, nb, p, src, nprocs)


def _axis_parts(n: int, nb: int, p: int, src: int, nprocs: int):
    """The local indices of process ``p`` along one dimension as at most two parts, each
    ``(global slice, global shape, pick, local slice, local shape)``: the whole cycles (global
    ``[0, K P nb)`` seen as ``(K, P, nb)``, of which ``pick`` is this process's slot; local
    ``[0, K nb)`` seen as ``(K, nb)``) and the last, partial cycle (one run of at most ``nb``
    consecutive global indices; ``pick`` None)."""
    d = (nprocs + p - src) % nprocs
    k = n // (nprocs * nb)
    local = numroc(n, nb, p, src, nprocs)
    parts = []
    if k:
        parts.append((slice(0, k * nprocs * nb), (k, nprocs, nb), d, slice(0, k * nb), (k, nb)))
    r = local - k * nb
    if r > 0:
        g0 = k * nprocs * nb + d * nb
        parts.append((slice(g0, g0 + r), (r,), None, slice(k * nb, local), (r,)))
    return parts


def _view(a, shape):
    """``a.reshape(shape)``, which must be a view of ``a`` (an assignment into a copy would
    be lost)."""
    v = a.reshape(shape)
    if v.size and not _may_share_memory(v, a):
        raise AssertionError("block_cyclic_views: reshape copied")
    return v


def _may_share_memory(a, b) -> bool:
    """``may_share_memory`` of NumPy, or of CuPy for device arrays."""
    if isinstance(a, np.ndarray):
        return np.may_share_memory(a, b)
    import cupy
    return cupy.may_share_memory(a, b)


def block_cyclic_views(g, loc, block, coords, src, grid_shape):
    """Pairs ``(gv, lv)`` of views of the same shape: ``gv`` of the global 2-D array ``g``
    (any memory order), ``lv`` of the local 2-D array ``loc`` that process ``coords`` stores
    of it in the block-cyclic layout (``block`` (mb, nb), ``src``, ``grid_shape`` (P, Q)).
    ``gv[...] = lv`` over all pairs writes the local part into its global places (a gather),
    ``lv[...] = gv`` the reverse: at most four strided copies, no index arrays. Local."""
    (m, n), (mb, nb) = g.shape, block
    rows = _axis_parts(m, mb, coords[0], src[0], grid_shape[0])
    cols = _axis_parts(n, nb, coords[1], src[1], grid_shape[1])
    out = []
    for gr, shr, pr, lr, lshr in rows:
        for gc, shc, pc, lc, lshc in cols:
            gv = _view(g[gr, gc], shr + shc)
            pick = (slice(None),) * len(shr)
            if pr is not None:
                pick = (slice(None), pr, slice(None))
            pick += (slice(None), pc, slice(None)) if pc is not None else (slice(None),)
            out.append((gv[pick], _view(loc[lr, lc], lshr + lshc)))
    return out


@dataclass(frozen=True)
class Descriptor:
    """ScaLAPACK array descriptor (DESC_ = [dtype=1, ctxt, m, n, mb, nb, rsrc, csrc, lld])."""

    m: int
    n: int
    mb: int
    nb: int
    rsrc: int = 0
    csrc: int = 0
    lld: int = 1
    ctxt: int = 0

    def to_scalapack(self) -> np.ndarray:
        """The 9-integer DESC array (int32), as ScaLAPACK's DESCINIT fills it."""
        return np.array([1, self.ctxt, self.m, self.n, self.mb, self.nb, self.rsrc, self.csrc,
                         self.lld], dtype=np.int32)

    @classmethod
    def from_scalapack(cls, desc) -> "Descriptor":
        """Read a 9-integer ScaLAPACK DESC (dense, DTYPE_ = 1)."""
        import numbers
        vals = list(desc)
        bad = [x for x in vals if isinstance(x, (bool, np.bool_))
               or not isinstance(x, numbers.Integral)]
        if bad:     # (int(5.7) made a 5-row matrix)
            raise TypeError(f"a ScaLAPACK descriptor holds integers, not {bad[0]!r}: {vals}")
        d = [int(x) for x in vals]
        if len(d) != 9 or d[0] != 1:
            raise ValueError(f"not a dense ScaLAPACK descriptor (need 9 ints, DTYPE_=1): {d}")
        if d[4] < 1 or d[5] < 1:
            raise ValueError(f"descriptor block sizes MB_ = {d[4]}, NB_ = {d[5]} must be "
                             f"positive")
        return cls(m=d[2], n=d[3], mb=d[4], nb=d[5], rsrc=d[6], csrc=d[7], lld=d[8], ctxt=d[1])
