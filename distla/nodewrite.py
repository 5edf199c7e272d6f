"""One writer per file through a node's shared memory: ``.npy`` writes from ranks of one node.

Ranks writing one file on one node do not write faster than one process (a local file
system serializes writes to a file on its lock), and when they contend for it they write
slower: on the 2-core development machine 2 ranks wrote at 65% and 4 ranks at 26-55% of
``np.save`` (docs/job.md). Here every rank copies its entries of a slab of whole columns
into an MPI shared-memory window (``MPI_Win_allocate_shared``) at their places in the file,
and rank 0 alone writes the slab with one large ``pwrite`` on a writer thread while the
ranks fill the window's other half with the next slab. Nothing is regrouped through
messages and no rank waits on the file's lock.

Used by :mod:`distla.io` only when every rank of the communicator shares one node and the
node's shared memory (``/dev/shm``) has room for the window with a wide margin (small
container defaults fail with SIGBUS, not an error, when exceeded); ``DISTLA_IO_WRITE``
chooses otherwise (docs/job.md).
"""
from __future__ import annotations

import os
import threading

import numpy as np

__all__ = ["usable", "write_slabs", "fill", "SLAB_BYTES"]

SLAB_BYTES = 1 << 24      # one half of the window: a slab of whole columns, about this size
SHM_DIR = "/dev/shm"
SHM_MARGIN = 4            # the node's free shared memory must hold this many windows


def usable(comm, column_bytes: int) -> bool:
    """Collective: whether ``comm``'s ranks all share one node (MPI's shared-memory split
    keeps them together) and its shared memory has room for a window of two slabs."""
    from mpi4py import MPI
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        together = node.Get_size() == comm.Get_size()
    finally:
        node.Free()
    room = False
    if comm.Get_rank() == 0:
        try:
            st = os.statvfs(SHM_DIR)
            room = st.f_bavail * st.f_frsize >= SHM_MARGIN * 2 * _slab_columns(
                column_bytes) * column_bytes
        except OSError:
            room = False
    if comm.Get_size() == 1:
        return together and room
    return bool(comm.allreduce(together, op=MPI.LAND)) and bool(comm.bcast(room, root=0))


def _slab_columns(column_bytes: int) -> int:
    return max(1, SLAB_BYTES // max(1, column_bytes))


def _axis_pieces(ext: int, blk: int, nprocs: int, me: int, src: int):
    """This process's entries along one axis of a block-cyclic matrix of extent ``ext``, as
    pieces ``(kind, global start, local start, count)``: ``('cycle', 0, 0, C)`` for its block
    in each of the first C whole cycles of ``nprocs`` blocks (global ``[0, C nprocs blk)``,
    local ``[0, C blk)``), then ``('run', g0, l0, length)`` for its block in the last, partial
    cycle. Local."""
    me = (me - src) % nprocs
    cyc = blk * nprocs
    full = ext // cyc
    out = [("cycle", 0, 0, full)] if full else []
    g0 = full * cyc + me * blk
    if g0 < ext:
        out.append(("run", g0, full * blk, min(blk, ext - g0)))
    return out


def _view(a, axis: int, piece, blk: int, nprocs: int, me: int, target: bool):
    """The part of ``a`` (target: the slab in global coordinates; else the local array) that
    ``piece`` of :func:`_axis_pieces` names along ``axis``: a run is a slice; whole cycles are
    split into (cycle, block) axes, the target's keeping only this process's block of each
    cycle. A view: splitting one axis never copies."""
    kind, g0, l0, count = piece
    sl = [slice(None)] * a.ndim
    if kind == "run":
        sl[axis] = slice(g0, g0 + count) if target else slice(l0, l0 + count)
        return a[tuple(sl)]
    span = count * blk * (nprocs if target else 1)
    sl[axis] = slice(0, span)
    v = a[tuple(sl)]
    if target:
        v = v.reshape(v.shape[:axis] + (count, nprocs, blk) + v.shape[axis + 1:])
        return v[(slice(None),) * (axis + 1) + (me,)]
    return v.reshape(v.shape[:axis] + (count, blk) + v.shape[axis + 1:])


def fill(slab: np.ndarray, S) -> None:
    """Copy this rank's entries of the DistMatrix ``S`` (m x w, any grid, blocks, source and
    device) into ``slab``, an ``(w, m)`` C-ordered host array: the Fortran-ordered image of
    S's columns in the file. A few NumPy copies whatever the blocks (whole cycles of blocks
    move as one strided copy, partial cycles as slices). Local."""
    if not S.local.size:
        return
    g = S.grid
    local = S.backend.to_host(S.local).T       # (nloc, mloc): local column j is row j
    rows = _axis_pieces(S.m, S.mb, g.nprow, g.myrow, S.rsrc)
    cols = _axis_pieces(S.n, S.nb, g.npcol, g.mycol, S.csrc)
    me_r, me_c = (g.myrow - S.rsrc) % g.nprow, (g.mycol - S.csrc) % g.npcol
    for rp in rows:
        t_r = _view(slab, 1, rp, S.mb, g.nprow, me_r, True)
        s_r = _view(local, 1, rp, S.mb, g.nprow, me_r, False)
        for cp in cols:
            t = _view(t_r, 0, cp, S.nb, g.npcol, me_c, True)
            t[...] = _view(s_r, 0, cp, S.nb, g.npcol, me_c, False)


def _slabs(slabs, step: int):
    """``(first global column, S)`` pieces of ``step`` block columns (fewer at the end) from
    ``slabs``' ``(first global column, S)``."""
    for c0, S in slabs:
        for j0 in range(0, S.nt, step):
            yield c0 + j0 * S.nb, S.sub(0, S.mt, j0, min(S.nt, j0 + step))


def write_slabs(path: str, comm, at: int, m: int, nb: int, dtype, slabs,
                total_columns: int):
    """Collective over ``comm`` (one node, :func:`usable`): write the ``(first global
    column, S)`` of ``slabs`` (DistMatrix objects with m rows, any layout) into the existing
    file ``path``, global column c at byte ``at + c * m * itemsize``, through a shared window
    of two slabs: every rank fills one half while rank 0 writes the other. The ranks agree
    after every slab, so a failure on one stops all at the same slab; returns this rank's
    error (``None`` if none)."""
    from mpi4py import MPI
    dtype = np.dtype(dtype)
    column_bytes = m * dtype.itemsize
    blocks = max(1, _slab_columns(column_bytes) // nb)      # block columns per slab
    width = min(blocks * nb, max(1, total_columns))
    half = width * column_bytes
    root = comm.Get_rank() == 0
    win = MPI.Win.Allocate_shared(2 * half if root else 0, dtype.itemsize, comm=comm)
    err, fd, writer = None, None, None
    try:
        buf, _ = win.Shared_query(0)
        halves = np.frombuffer(buf, dtype=dtype, count=2 * width * m).reshape(2, width, m)
        if root:
            try:
                fd = os.open(path, os.O_WRONLY)
            except OSError as e:
                err = e
        if not comm.allreduce(err is None, op=MPI.LAND):
            return err
        writer = _Writer(fd) if root else None
        for k, (c0, S) in enumerate(_slabs(slabs, blocks)):
            try:
                if S.m != m or S.nb != nb:
                    raise ValueError(f"a slab is {S.m} x {S.n} in blocks of {S.nb} columns, "
                                     f"not {m} rows in blocks of {nb}")
                fill(halves[k % 2, :S.n], S)
            except Exception as e:  # noqa: BLE001 - agreed on just below
                err = err or e
            if writer is not None:
                err = writer.wait() or err       # the other half is free again
            if not comm.allreduce(err is None, op=MPI.LAND):
                break
            if writer is not None:
                writer.start(halves[k % 2, :S.n], at + c0 * column_bytes)
        if writer is not None:
            err = writer.wait() or err
    finally:
        if fd is not None:
            os.close(fd)
        win.Free()
    return err


class _Writer:
    """Rank 0's writer thread: ``start(array, offset)`` writes the array's bytes there with
    ``os.pwrite`` (looping over partial writes); ``wait()`` returns its error (``None`` if
    none). Not collective."""

    def __init__(self, fd: int):
        self.fd, self.thread, self.err = fd, None, None

    def _run(self, a, offset):
        try:
            view = memoryview(a).cast("B")
            done = 0
            while done < len(view):
                done += os.pwrite(self.fd, view[done:], offset + done)
        except Exception as e:  # noqa: BLE001 - returned by wait
            self.err = e

    def start(self, a, offset: int) -> None:
        self.thread = threading.Thread(target=self._run, args=(a, offset),
                                       name="distla-write", daemon=True)
        self.thread.start()

    def wait(self):
        if self.thread is not None:
            self.thread.join()
            self.thread = None
        err, self.err = self.err, None
        return err
