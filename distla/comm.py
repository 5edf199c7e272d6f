"""Data communicators: the one seam through which distributed algorithms move arrays.

Two implementations of one small interface:

* :class:`MpiComm` moves NumPy (host) arrays with mpi4py's uppercase buffer API (no pickling).
* :class:`NcclComm` moves CuPy (device) arrays with NCCL (``cupy.cuda.nccl``) on a dedicated
  stream, so panels never bounce through host memory. Its unique id is broadcast with MPI.

Interface (every method is collective over the communicator, except ``send``-style pairs in
``exchange``, which involve only the named peers): ``rank``, ``size``, ``bcast(buf, root)``,
``ibcast(buf, root) -> Request`` (``.wait()``), ``allreduce(buf, op)`` (in place),
``allgather(sendbuf, recvbuf)``, ``exchange(sends, recvs)`` (grouped point-to-point),
``alltoallv(sendbufs, recvbufs)``. Buffers must be C- or F-contiguous.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .device import get_backend
from .errors import collective
from .trace import library

__all__ = ["MpiComm", "NcclComm", "GridComms", "make_grid_comms", "Request"]


def _flat_view(bufs):
    """The one contiguous 1-D array that the host arrays ``bufs`` are consecutive slices of
    (in order), or None: then they must be packed into one first."""
    if not bufs or not all(isinstance(b, np.ndarray) and b.ndim == 1 and
                           b.flags.c_contiguous for b in bufs):
        return None
    base = bufs[0].base if bufs[0].base is not None else bufs[0]
    if not (isinstance(base, np.ndarray) and base.ndim == 1 and base.flags.c_contiguous and
            base.dtype == bufs[0].dtype):
        return None
    at = base.ctypes.data
    if bufs[0].ctypes.data != at:
        return None
    for b in bufs:
        if b.size and b.ctypes.data != at:
            return None
        at += b.nbytes
    return base[:(at - base.ctypes.data) // base.itemsize]


class Request:
    """A pending operation; ``wait()`` completes it (host-blocking on MPI, stream-ordered on
    NCCL). ``test()`` lets a nonblocking MPI operation progress while the caller computes
    (MPI moves large messages only inside MPI calls); it returns True once complete."""

    def __init__(self, wait=None, test=None):
        self._wait = wait
        self._test = test

    @library
    def wait(self) -> None:
        if self._wait is not None:
            w, self._wait = self._wait, None
            w()

    @library
    def test(self) -> bool:
        if self._wait is None:
            return True
        if self._test is None:  # NCCL: progresses on its own stream
            return False
        if self._test():
            self._wait = None
            return True
        return False


def _contig(buf):
    if not (buf.flags.c_contiguous or buf.flags.f_contiguous):
        raise ValueError("communication buffers must be contiguous (got a strided view)")
    return buf


class MpiComm:
    """Host-array communicator over an mpi4py communicator (CPU ranks)."""

    device = "cpu"
    # MPI moves a large nonblocking message only inside MPI calls: long local work should
    # call Request.test() now and then while one is in flight
    needs_progress = True

    def __init__(self, mpi_comm):
        self.mpi = mpi_comm
        self.rank = mpi_comm.Get_rank()
        self.size = mpi_comm.Get_size()

    @staticmethod
    def _op(op):
        from mpi4py import MPI
        return {"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN}[op]

    @library
    def bcast(self, buf, root: int) -> None:
        _contig(buf)  # checked on one rank too, so a strided buffer fails at any size
        if self.size > 1:
            self.mpi.Bcast(buf, root=root)

    @library
    def ibcast(self, buf, root: int) -> Request:
        _contig(buf)
        if self.size == 1:
            return Request()
        req = self.mpi.Ibcast(buf, root=root)
        return Request(req.Wait, req.Test)

    @library
    def allreduce(self, buf, op: str = "sum") -> None:
        _contig(buf)
        op = self._op(op)
        if self.size > 1:
            from mpi4py import MPI
            self.mpi.Allreduce(MPI.IN_PLACE, buf, op=op)

    @library
    def allgather(self, sendbuf, recvbuf) -> None:
        self.mpi.Allgather(_contig(sendbuf), _contig(recvbuf))

    @library
    def exchange(self, sends=(), recvs=(), tag: int = 7) -> None:
        """Grouped point-to-point: ``sends``/``recvs`` are lists of (peer, buffer)."""
        from mpi4py import MPI
        reqs = [self.mpi.Irecv(_contig(b), source=p, tag=tag) for p, b in recvs]
        reqs += [self.mpi.Isend(_contig(b), dest=p, tag=tag) for p, b in sends]
        MPI.Request.Waitall(reqs)

    @library
    def alltoallv(self, sendbufs, recvbufs) -> None:
        """``sendbufs[p]`` goes to rank p, ``recvbufs[p]`` comes from rank p (1-D, same dtype)."""
        from mpi4py import MPI
        dt = sendbufs[0].dtype
        scount = np.array([b.size for b in sendbufs], dtype=np.int64)
        rcount = np.array([b.size for b in recvbufs], dtype=np.int64)
        sflat = _flat_view(sendbufs)         # consecutive slices of one array: no copy
        if sflat is None:
            sflat = np.concatenate([b.ravel(order="K") for b in sendbufs]) if scount.sum() \
                else np.empty(0, dt)
        rflat = _flat_view(recvbufs)
        direct = rflat is not None
        if not direct:
            rflat = np.empty(int(rcount.sum()), dtype=dt)
        sdis = np.concatenate([[0], np.cumsum(scount)[:-1]])
        rdis = np.concatenate([[0], np.cumsum(rcount)[:-1]])
        mpitype = MPI._typedict[dt.char]
        self.mpi.Alltoallv([sflat, (scount, sdis), mpitype], [rflat, (rcount, rdis), mpitype])
        for b, o, c in zip(recvbufs, rdis, rcount) if not direct else ():
            b[...] = rflat[o:o + c].reshape(b.shape)

    @library
    def barrier(self) -> None:
        self.mpi.Barrier()


_NCCL_TYPES = {"f": "NCCL_FLOAT32", "d": "NCCL_FLOAT64", "e": "NCCL_FLOAT16",
               "i": "NCCL_INT32", "l": "NCCL_INT64", "q": "NCCL_INT64", "b": "NCCL_INT8",
               "B": "NCCL_UINT8", "?": "NCCL_UINT8", "I": "NCCL_UINT32", "L": "NCCL_UINT64",
               "Q": "NCCL_UINT64"}


_LIVE_NCCL: list = []  # every NCCL communicator made here (see NcclComm.__init__)


class NcclComm:
    """Device-array communicator over NCCL (GPU ranks). Built collectively from an mpi4py
    communicator (the NCCL unique id is broadcast through MPI). Operations are enqueued on
    ``self.stream`` after the current stream's pending work; the current stream then waits for
    them, so results are ordered without host synchronization."""

    device = "gpu"
    needs_progress = False   # NCCL progresses on its own stream

    def __init__(self, mpi_comm):
        import cupy
        from cupy.cuda import nccl
        self._nccl, self._cp = nccl, cupy
        self.mpi = mpi_comm
        self.rank, self.size = mpi_comm.Get_rank(), mpi_comm.Get_size()
        self.comm = None
        if self.size > 1:   # one rank talks to no one: no NCCL communicator (~0.13 s each)
            uid = nccl.get_unique_id() if self.rank == 0 else None
            uid = mpi_comm.bcast(uid, root=0)
            self.comm = nccl.NcclCommunicator(self.size, uid, self.rank)
            # Destroying an NCCL communicator may wait for its peers. Left to the garbage
            # collector, ranks destroy it at different moments: one rank blocks there (holding
            # the GIL) while another waits in an MPI call -- a hang seen on 2 GPUs after a few
            # dozen grids. So they live until ProcessGrid.free() (collective) or process exit.
            _LIVE_NCCL.append(self.comm)
        # high priority: messages are on the critical path; their kernels should not wait
        # for a large GEMM's blocks to drain
        self.stream = get_backend("gpu").stream("high").s

    def _dt(self, buf):
        k = buf.dtype.char
        if buf.dtype.kind == "c":  # complex: as pairs of reals
            k = "f" if buf.dtype.itemsize == 8 else "d"
            return getattr(self._nccl, _NCCL_TYPES[k]), buf.size * 2
        return getattr(self._nccl, _NCCL_TYPES[k]), buf.size

    def _op(self, op):
        return {"sum": self._nccl.NCCL_SUM, "max": self._nccl.NCCL_MAX,
                "min": self._nccl.NCCL_MIN}[op]

    def _copy(self, dst, src):
        """Copy the bytes of contiguous ``src`` into ``dst`` on the current stream."""
        if src.nbytes:
            dst.data.copy_from_device_async(src.data, src.nbytes,
                                            self._cp.cuda.get_current_stream())

    def _enter(self):
        """Order the comm stream after the work already queued on the current stream."""
        ev = self._cp.cuda.get_current_stream().record()
        self.stream.wait_event(ev)

    def _leave(self):
        """Make the current stream wait for the comm stream's work so far."""
        self._cp.cuda.get_current_stream().wait_event(self.stream.record())

    @library
    def ibcast(self, buf, root: int) -> Request:
        _contig(buf)
        if self.size == 1:
            return Request()
        self._enter()
        dt, count = self._dt(buf)
        self.comm.bcast(buf.data.ptr, count, dt, root, self.stream.ptr)
        ev = self.stream.record()
        return Request(lambda: self._cp.cuda.get_current_stream().wait_event(ev))

    @library
    def bcast(self, buf, root: int) -> None:
        self.ibcast(buf, root).wait()

    @library
    def allreduce(self, buf, op: str = "sum") -> None:
        _contig(buf)
        op = self._op(op)
        if self.size == 1:
            return
        self._enter()
        dt, count = self._dt(buf)
        self.comm.allReduce(buf.data.ptr, buf.data.ptr, count, dt, op, self.stream.ptr)
        self._leave()

    @library
    def allgather(self, sendbuf, recvbuf) -> None:
        _contig(sendbuf), _contig(recvbuf)
        if self.size == 1:
            self._copy(recvbuf, sendbuf)
            return
        self._enter()
        dt, count = self._dt(sendbuf)
        self.comm.allGather(sendbuf.data.ptr, recvbuf.data.ptr, count, dt, self.stream.ptr)
        self._leave()

    @library
    def exchange(self, sends=(), recvs=(), tag: int = 7) -> None:
        if self.size == 1:   # messages to myself, matched in order (as MPI and NCCL do)
            out = [_contig(b) for _, b in sends if b.size]
            into = [_contig(b) for _, b in recvs if b.size]
            if len(out) != len(into) or any(a.nbytes != b.nbytes for a, b in zip(out, into)):
                raise ValueError("exchange: the sends and receives of a one-rank "
                                 "communicator do not match")
            for a, b in zip(out, into):
                self._copy(b, a)
            return
        self._enter()
        self._nccl.groupStart()
        try:
            for p, b in sends:
                dt, count = self._dt(_contig(b))
                if count:
                    self.comm.send(b.data.ptr, count, dt, p, self.stream.ptr)
            for p, b in recvs:
                dt, count = self._dt(_contig(b))
                if count:
                    self.comm.recv(b.data.ptr, count, dt, p, self.stream.ptr)
        finally:
            self._nccl.groupEnd()
        self._leave()

    @library
    def alltoallv(self, sendbufs, recvbufs) -> None:
        me = self.rank
        recvbufs[me][...] = sendbufs[me].reshape(recvbufs[me].shape)
        self.exchange([(p, b) for p, b in enumerate(sendbufs) if p != me and b.size],
                      [(p, b) for p, b in enumerate(recvbufs) if p != me and b.size])

    @library
    def barrier(self) -> None:
        self._cp.cuda.get_current_stream().synchronize()
        self.mpi.Barrier()

    def free(self) -> None:
        """Collective over this communicator: finish its work and destroy it."""
        self._cp.cuda.Device().synchronize()
        self.mpi.Barrier()
        if self.comm in _LIVE_NCCL:
            _LIVE_NCCL.remove(self.comm)
            self.comm.destroy()


@dataclass
class GridComms:
    """The data communicators of a grid for one device: all ranks, my row, my column."""

    all: object
    row: object
    col: object


def make_grid_comms(grid, device: str) -> GridComms:
    """Collective over ``grid.comm``: build the data communicators for ``device``."""
    if device == "cpu":
        return GridComms(MpiComm(grid.comm), MpiComm(grid.row_comm), MpiComm(grid.col_comm))
    if device == "gpu":
        with collective(grid.comm):
            get_backend("gpu", grid.comm)  # selects this rank's GPU before NCCL init
        return GridComms(NcclComm(grid.comm), NcclComm(grid.row_comm), NcclComm(grid.col_comm))
    raise ValueError(f"device must be 'cpu' or 'gpu', not {device!r}")
