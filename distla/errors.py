"""distla's exceptions and the one way ranks agree on a failure.

A failure on one rank must become the same exception on every rank; :func:`agree` is the
single status exchange used at the points where work can fail.
"""
from __future__ import annotations

import contextlib

import numpy as np

__all__ = ["DistlaError", "NotPositiveDefiniteError", "SingularMatrixError",
           "ConvergenceError", "agree", "collective", "on_root"]


class DistlaError(RuntimeError):
    """A failure that has no more specific type (raised on every rank of the communicator)."""


class NotPositiveDefiniteError(np.linalg.LinAlgError):
    """The matrix is not (numerically) positive definite.

    ``index`` is the 0-based global column whose leading minor is not positive (LAPACK's
    ``info - 1``).
    """

    def __init__(self, index: int, message: str | None = None):
        self.index = int(index)
        super().__init__(message or (
            f"matrix is not positive definite: the leading minor of order {index + 1} "
            f"(global column {index}, 0-based) is not positive"))

    def __reduce__(self):
        return (type(self), (self.index, str(self)))


class SingularMatrixError(np.linalg.LinAlgError):
    """An exactly zero pivot was met; ``index`` is its 0-based global column."""

    def __init__(self, index: int, message: str | None = None):
        self.index = int(index)
        super().__init__(message or (
            f"matrix is singular: U[{index}, {index}] is exactly zero (0-based column {index})"))

    def __reduce__(self):
        return (type(self), (self.index, str(self)))


class ConvergenceError(np.linalg.LinAlgError):
    """Iterative refinement did not reach the requested accuracy."""


def _rebuild(exc: BaseException, rank: int, size: int) -> BaseException:
    """The exception to raise on every rank for ``exc`` raised on ``rank``."""
    if size > 1 and not str(exc).startswith("[rank"):
        try:
            if isinstance(exc, (NotPositiveDefiniteError, SingularMatrixError)):
                return type(exc)(exc.index, f"[rank {rank}] {exc}")
            new = type(exc)(f"[rank {rank}] {exc}")
            return new
        except Exception:  # exotic constructor: keep the original object
            return exc
    return exc


def agree(comm, exc: BaseException | None = None) -> None:
    """Collective: every rank passes its local exception (or None); if any rank failed, the
    same exception (the one of the lowest failing rank, prefixed with that rank) is raised on
    every rank. Costs one small allgather on ``comm`` (an mpi4py communicator)."""
    if comm is None or comm.Get_size() == 1:
        if exc is not None:
            raise exc
        return
    try:
        payload = exc if exc is None else _picklable(exc)
    except Exception:  # pragma: no cover
        payload = DistlaError(repr(exc))
    allexc = comm.allgather(payload)
    for r, e in enumerate(allexc):
        if e is not None:
            new = _rebuild(e, r, comm.Get_size())
            if exc is not None and r == comm.Get_rank():
                raise new from exc
            raise new


def _picklable(exc: BaseException) -> BaseException:
    import pickle
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:
        return DistlaError(f"{type(exc).__name__}: {exc}")


@contextlib.contextmanager
def collective(comm):
    """Collective context: run a block on every rank, then :func:`agree` on its outcome.

    ``with collective(grid.comm): check_inputs()`` raises the same exception everywhere if
    ``check_inputs`` raised on any rank. Every rank must enter the block.
    """
    try:
        yield
    except Exception as e:  # noqa: BLE001 - re-raised collectively below
        agree(comm, e)
        raise  # pragma: no cover (agree always raises here)
    agree(comm, None)


def on_root(comm, fn):
    """Collective: ``fn()`` runs on rank 0 of ``comm`` only (e.g. file I/O); its result is
    returned on every rank, or its exception (same type and message, no rank prefix) is raised
    on every rank. Result and exception travel pickled: keep them small."""
    out = None
    if comm.Get_rank() == 0:
        try:
            out = (True, fn())
        except Exception as e:  # noqa: BLE001 - re-raised on every rank below
            out = (False, e)
    ok, val = comm.bcast(out, root=0)
    if not ok:
        raise val
    return val
