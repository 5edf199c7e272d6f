"""Whole copies of a DistMatrix on every rank, and back.

Solves with few right-hand sides are latency-bound on a process grid: a triangular sweep takes
one message round per block step. Where the factors are reused many times (iterative
refinement) and fit on every rank, a whole copy on each rank lets every rank run the sweep
alone, without messages (docs/mixed.md):

    Fs = replicate(F)                 # collective over F's grid: all of F on self_grid()
    Xs = solve_on(Fs, replicate(B))   # local work on each rank's own 1 x 1 grid
    X = distribute_like(Xs, B)        # local: each rank keeps its own blocks, in B's layout
"""
from __future__ import annotations

import numpy as np

from . import layout
from .errors import collective
from .matrix import DistMatrix

__all__ = ["self_grid", "one_node", "replicate", "replicate_bytes", "distribute_like"]

_SELF: dict = {}


def self_grid():
    """This process's 1 x 1 grid over ``MPI.COMM_SELF`` (built on first use, then reused: its
    device communicators too). Not collective."""
    g = _SELF.get("grid")
    if g is None:
        from mpi4py import MPI

        from .grid import ProcessGrid
        g = _SELF["grid"] = ProcessGrid(1, 1, comm=MPI.COMM_SELF)
    return g


def one_node(grid) -> bool:
    """Collective over ``grid.comm`` on the first call for a grid (then cached on it): whether
    every rank of the grid runs on one node (MPI shared-memory domain)."""
    v = getattr(grid, "_one_node", None)
    if v is None:
        from mpi4py import MPI
        sub = grid.comm.Split_type(MPI.COMM_TYPE_SHARED)
        v = sub.Get_size() == grid.comm.Get_size()
        sub.Free()
        grid._one_node = v
    return v


def _copy(dst, src) -> None:
    """``dst[...] = src`` for strided views of the same shape, walked with the destination's
    unit-stride axis last (an elementwise GPU copy then touches neighbouring addresses)."""
    order = np.argsort([-abs(s) for s in dst.strides], kind="stable")
    dst.transpose(order)[...] = src.transpose(order)


def replicate(M: DistMatrix) -> DistMatrix:
    """Collective over M's grid: all of M on every rank, as a DistMatrix on :func:`self_grid`
    with M's shape, block, dtype and device. One all-gather of the local matrices through the
    grid's data communicator (NCCL between GPU ranks), then at most four strided copies per
    rank's part. Needs :func:`replicate_bytes` on each rank while it runs (about the whole
    matrix twice: receive buffer and copy). Every failure on one rank (allocation, copies) is
    raised on every rank: call it outside any other ``collective`` block."""
    g, be = M.grid, M.backend
    shapes = M._local_shapes()
    counts = [a * b for a, b in shapes]
    cmax = max(counts)
    # every buffer first, agreed: out of memory on one rank is raised on every rank before
    # any message (not a hang in the all-gather)
    with collective(g.comm):
        out = DistMatrix(self_grid(), M.shape, M.block, dtype=M.dtype, device=M.device,
                         local=be.empty(M.shape, M.dtype))
        if g.size > 1:
            send = be.empty(cmax, M.dtype)
            recv = be.empty(g.size * cmax, M.dtype)
    if g.size == 1:
        be.copy(out.local, M.local)
        return out
    with collective(g.comm):
        if M.local.size:
            send[:M.local.size] = M.local.ravel(order="F")
    g.comms(M.device).all.allgather(send, recv)
    del send
    with collective(g.comm):             # (a failing copy: raised on every rank)
        for r in range(g.size):
            if not counts[r]:
                continue
            piece = recv[r * cmax:r * cmax + counts[r]].reshape(shapes[r], order="F")
            for gv, lv in layout.block_cyclic_views(out.local, piece, M.block, g.coords(r),
                                                    M.src, g.shape):
                _copy(gv, lv)
    return out


def replicate_bytes(M) -> int:
    """Bytes :func:`replicate` allocates on each rank for M (the copy and the receive buffer
    of the largest local part times the ranks): about twice M's, more for blockings that
    leave the ranks' parts unequal. Local."""
    cmax = max(a * b for a, b in M._local_shapes())
    return (M.m * M.n + (M.grid.size * cmax if M.grid.size > 1 else 0)) * M.dtype.itemsize


def distribute_like(Xs: DistMatrix, like: DistMatrix) -> DistMatrix:
    """Local (no messages): the matrix ``Xs`` (whole on every rank, the same everywhere, e.g.
    from :func:`replicate`) as a DistMatrix in ``like``'s grid, block, source and device, each
    rank copying its own blocks. Every rank of ``like``'s grid calls it."""
    g = like.grid
    out = DistMatrix(g, Xs.shape, like.block, dtype=Xs.dtype, device=like.device,
                     src=like.src, local=like.backend.empty(
                         (layout.numroc(Xs.shape[0], like.mb, g.myrow, like.rsrc, g.nprow),
                          layout.numroc(Xs.shape[1], like.nb, g.mycol, like.csrc, g.npcol)),
                         Xs.dtype))
    if out.local.size:
        for gv, lv in layout.block_cyclic_views(Xs.local, out.local, like.block,
                                                (g.myrow, g.mycol), like.src, g.shape):
            _copy(lv, gv)
    return out
