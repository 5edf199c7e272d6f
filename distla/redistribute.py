"""Layout changes by direct all-to-all exchange (pdgemr2d and pdtran equivalents).

Every rank sends, to every rank of the target layout, the sub-block of its local array that the
target owns, in one all-to-all (MPI Alltoallv on CPU, grouped NCCL send/recv on GPU). Nothing
is gathered. Index sets are sorted in both layouts, so sender and receiver agree on the order.
"""
from __future__ import annotations

import numpy as np

from . import layout


def _idx(n, nb, p, src, P):
    return layout.local_indices(n, nb, p, src, P)


def remap(A, B, transpose: bool = False, conjugate: bool = False) -> None:
    """Collective over A's grid (B's grid must be over the same communicator, same size):
    B[i, j] = A[i, j], or A[j, i] (conjugated if asked) when ``transpose``."""
    ga, gb = A.grid, B.grid
    xp = A.xp
    arows, acols = A.row_indices(), A.col_indices()
    sends = []
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
        if len(ri) and len(ci):
            blk = A.local[xp.asarray(ri)[:, None], xp.asarray(ci)[None, :]]
            if transpose:
                blk = blk.T.conj() if conjugate else blk.T
            sends.append(xp.ascontiguousarray(blk.ravel(order="F")))
        else:
            sends.append(xp.empty(0, dtype=A.dtype))
    brows, bcols = B.row_indices(), B.col_indices()
    recvs, places = [], []
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
        recvs.append(xp.empty(len(ri) * len(ci), dtype=A.dtype))
        places.append((ri, ci))
    comm = ga.comms(A.device).all
    comm.alltoallv(sends, recvs)
    for buf, (ri, ci) in zip(recvs, places):
        if len(ri) and len(ci):
            B.local[xp.asarray(ri)[:, None], xp.asarray(ci)[None, :]] = \
                buf.reshape((len(ri), len(ci)), order="F")
