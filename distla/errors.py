"""distla's exceptions and the one way ranks agree on a failure.

A failure on one rank must become the same exception on every rank; :func:`agree` is the
single status exchange used at the points where work can fail.
"""
from __future__ import annotations

import contextlib
import os
import sys

import numpy as np
import scipy.linalg as _scipy_linalg

__all__ = ["DistlaError", "NonFiniteResultError", "NotPositiveDefiniteError", "SingularMatrixError",
           "ConvergenceError", "LinAlgWarning", "agree", "collective", "on_root",
           "install_excepthook"]


class DistlaError(RuntimeError):
    """A failure that has no more specific type (raised on every rank of the communicator)."""


class NonFiniteResultError(DistlaError, np.linalg.LinAlgError):
    """A computation on finite input produced NaN or Inf (overflow or underflow: a badly
    scaled matrix, or large element growth). A :class:`DistlaError` and a ``LinAlgError``
    (the command line's numerical-failure exit code, 1)."""


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


class LinAlgWarning(_scipy_linalg.LinAlgWarning):
    """The matrix is ill-conditioned (reciprocal condition estimate below the working
    precision's unit roundoff): the solution may be inaccurate. Issued on every rank (Python
    prints it on rank 0 only under distla's CLI and the default filters of its excepthook
    setup; see :func:`install_excepthook`)."""


def _rebuild(exc: BaseException, rank: int, size: int) -> BaseException:
    """The exception to raise on every rank for ``exc`` raised on ``rank``. A
    ``SystemExit`` or ``KeyboardInterrupt`` (not an ``Exception``) travels as it is, so that
    every rank exits with the same code or is interrupted alike."""
    if not isinstance(exc, Exception):
        return exc
    if size > 1 and not str(exc).startswith("[rank"):
        try:
            if isinstance(exc, (NotPositiveDefiniteError, SingularMatrixError)):
                return type(exc)(exc.index, f"[rank {rank}] {exc}")
            new = type(exc)(f"[rank {rank}] {exc}")
            return new
        except Exception:  # exotic constructor: keep the original object
            return exc
    return exc


def agree(comm, exc: BaseException | None = None, signature: str | None = None) -> None:
    """Collective: every rank passes its local exception (or None); if any rank failed, the
    same exception (the one of the lowest failing rank, prefixed with that rank; unprefixed
    when every rank raised the same type and message) is raised on every rank. Costs one
    small allgather on ``comm`` (an mpi4py communicator).

    ``signature`` (a short text describing how this rank called the function, see
    :func:`distla.validate.signature`) travels in the same allgather: when no rank failed but
    the signatures differ, ``ValueError`` naming the first differing rank is raised on every
    rank (ranks that call a collective function differently would otherwise hang or mix
    messages)."""
    if comm is None or comm.Get_size() == 1:
        if exc is not None:
            _mark_agreed(exc)
            raise exc
        return
    try:
        payload = exc if exc is None else _picklable(exc)
    except Exception:  # pragma: no cover
        payload = DistlaError(repr(exc))
    gathered = comm.allgather((payload, None if signature is None else str(signature)))
    failed = [e for e, _ in gathered if e is not None]
    if len(failed) == len(gathered) and exc is not None and \
            all(type(e) is type(failed[0]) and str(e) == str(failed[0]) for e in failed):
        raise _mark_agreed(exc)   # every rank failed alike: no rank to name (ranks saw
        #                          "[rank 0] ..." on rank 1 for the same bad argument)
    for r, (e, _) in enumerate(gathered):
        if e is not None:
            new = _mark_agreed(_rebuild(e, r, comm.Get_size()))
            if exc is not None and r == comm.Get_rank():
                raise new from exc
            raise new
    sigs = [s for _, s in gathered]
    for r, s in enumerate(sigs):
        if s != sigs[0]:
            raise ValueError(f"ranks called a collective function with different arguments: "
                             f"rank 0: {sigs[0]}; rank {r}: {s}")


def _mark_agreed(exc: BaseException) -> BaseException:
    """Mark ``exc`` as raised by :func:`agree` (so on every rank of its communicator)."""
    try:
        exc.distla_agreed = True
    except Exception:  # pragma: no cover - an exception type without a __dict__
        pass
    return exc


def raised_everywhere(exc: BaseException, comm) -> bool:
    """Whether ``exc`` is known to have been raised on every rank of ``comm`` alike (so the
    ranks may all carry on from it, for example into a fallback): one rank, an exception
    :func:`agree` raised, or a factorization's breakdown, which the drivers raise only after
    agreeing on its column. Another exception may be this rank's alone, while the others
    wait in a collective: it must propagate. Not collective."""
    return comm is None or comm.Get_size() == 1 or getattr(exc, "distla_agreed", False) \
        or isinstance(exc, (NotPositiveDefiniteError, SingularMatrixError))


def _picklable(exc: BaseException) -> BaseException:
    import pickle
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:
        return DistlaError(f"{type(exc).__name__}: {exc}")


@contextlib.contextmanager
def collective(comm, signature: str | None = None):
    """Collective context: run a block on every rank, then :func:`agree` on its outcome.

    ``with collective(grid.comm): check_inputs()`` raises the same exception everywhere if
    ``check_inputs`` raised on any rank. Every rank must enter the block. ``signature``: see
    :func:`agree` (checked in the same message). A ``SystemExit`` or ``KeyboardInterrupt``
    inside the block (a user callback's ``sys.exit()``) is agreed on too: the others would
    wait for this rank forever.
    """
    try:
        yield
    except GeneratorExit:  # pragma: no cover - the context manager itself closed
        raise
    except BaseException as e:  # noqa: BLE001 - re-raised collectively below
        agree(comm, e, signature)
        raise  # pragma: no cover (agree always raises here)
    agree(comm, None, signature)


def on_root(comm, fn):
    """Collective: ``fn()`` runs on rank 0 of ``comm`` only (e.g. file I/O); its result is
    returned on every rank, or its exception (same type and message, no rank prefix) is raised
    on every rank. Result and exception travel pickled: keep them small."""
    out = None
    if comm.Get_rank() == 0:
        try:
            out = (True, fn())
        except BaseException as e:  # noqa: BLE001 - re-raised on every rank below
            out = (False, e)
    ok, val = comm.bcast(out, root=0)
    if not ok:
        raise val
    return val


def install_excepthook(comm=None) -> bool:
    """Make an uncaught exception on one rank end the whole MPI job instead of hanging it.

    Installs a ``sys.excepthook`` that prints ``[rank R]`` and the traceback, then calls
    ``comm.Abort(1)`` (default ``MPI.COMM_WORLD``), as ``python -m mpi4py`` does. Done by
    the first :class:`~distla.ProcessGrid` of a job with more than one rank (and by the CLI),
    unless ``DISTLA_EXCEPTHOOK=0`` or another hook is already installed; returns whether the
    hook is now distla's. Not collective."""
    from mpi4py import MPI
    comm = MPI.COMM_WORLD if comm is None else comm
    if os.environ.get("DISTLA_EXCEPTHOOK", "1") == "0":
        return False
    if sys.excepthook is not sys.__excepthook__ and \
            getattr(sys.excepthook, "__name__", "") != "_distla_abort_hook":
        return False

    def _distla_abort_hook(etype, value, tb):
        import traceback
        text = "".join(traceback.format_exception(etype, value, tb))
        rank = comm.Get_rank()
        sys.stderr.write("".join(f"[rank {rank}] {line}\n" for line in text.splitlines()))
        sys.stderr.write(f"[rank {rank}] distla: uncaught exception; aborting the MPI job "
                         f"(all {comm.Get_size()} ranks)\n")
        sys.stderr.flush()
        if comm.Get_size() > 1:
            import time
            time.sleep(0.5)   # let the launcher forward the traceback before Abort
            comm.Abort(1)

    sys.excepthook = _distla_abort_hook
    return True


def describe(x) -> str:
    """A short, rank-independent description of one argument (for :func:`signature`):
    a DistMatrix by its layout, arrays by shape and dtype, scalars by value."""
    if hasattr(x, "grid") and hasattr(x, "block") and hasattr(x, "src"):
        g = x.grid
        return (f"DistMatrix(shape={x.shape}, block={x.block}, src={x.src}, dtype={x.dtype}, "
                f"device={x.device}, grid={g.nprow}x{g.npcol}{_local_mismatch(x)})")
    if isinstance(x, (tuple, list)):
        return "(" + ", ".join(describe(v) for v in x) + ")"
    if isinstance(x, np.ndarray):
        return f"ndarray(shape={x.shape}, dtype={x.dtype})"
    if isinstance(x, np.generic) and x.dtype.kind in "biufc":
        x = x.item()      # (np.int64(3) and 3 are one value: repr told them apart)
    if x is None or isinstance(x, (bool, int, float, complex, str, np.generic)):
        return repr(x)
    return type(x).__name__


def _local_mismatch(A) -> str:
    """'' when ``A.local`` has the shape and dtype A's layout gives this rank, else a note
    saying what it holds: a local array replaced by a wrongly shaped one (``.local`` is a
    public attribute) then fails every rank's call instead of hanging the others."""
    try:
        want = tuple(A.local_shape)
        shape, dtype = tuple(A.local.shape), A.local.dtype
    except Exception as e:  # noqa: BLE001 - no array at all: say so
        return f", local array unusable ({type(e).__name__})"
    if shape == want and dtype == A.dtype and len(shape) == 2:
        return ""
    return (f", local array {shape} {dtype} where this rank owns {want} "
            f"{A.dtype}")


class _Signature:
    """A call's signature, written out (:meth:`__str__`) only when it travels: a one-rank
    communicator never sends it (a solve on one rank described ~27 calls at ~7 us each)."""

    __slots__ = ("what", "args", "kw")

    def __init__(self, what, args, kw):
        self.what, self.args, self.kw = what, args, kw

    def __str__(self) -> str:
        parts = [describe(a) for a in self.args] + \
            [f"{k}={describe(v)}" for k, v in sorted(self.kw.items())]
        return f"{self.what}({', '.join(parts)})"

    __repr__ = __str__

    def __eq__(self, other) -> bool:
        return str(self) == str(other)

    __hash__ = None


def signature(what: str, *args, **kw):
    """``what(arg, ..., key=value)`` with every argument :func:`describe`-d (as text when
    ``str()`` is taken: :func:`agree` takes it only on communicators of several ranks):
    passed to :func:`collective` so that ranks calling with different arguments fail
    together."""
    return _Signature(what, args, kw)
