"""Block-cyclic index math (ScaLAPACK semantics, 0-based). Pure functions, no MPI.

A dimension of global length ``n`` is cut into blocks of ``nb``; block ``k`` lives on process
``(src + k) % P``. Every function works on Python ints and on NumPy integer arrays.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["num_blocks", "numroc", "owner", "global_to_local", "local_to_global", "local_indices",
           "Descriptor"]


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
        d = [int(x) for x in desc]
        if len(d) != 9 or d[0] != 1:
            raise ValueError(f"not a dense ScaLAPACK descriptor (need 9 ints, DTYPE_=1): {d}")
        return cls(m=d[2], n=d[3], mb=d[4], nb=d[5], rsrc=d[6], csrc=d[7], lld=d[8], ctxt=d[1])
