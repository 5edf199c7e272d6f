"""What every matrix-file module shares (layer 0, so that the format modules ``io`` and
``h5io`` can both use it): :class:`MatrixFileError`, :class:`MatrixInfo` (a file's header),
:func:`check_writable`, and :func:`atomic_output` (nothing half-written: a temporary beside the
target, renamed once every rank succeeded). ``distla.io`` re-exports all of them.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass

import numpy as np

from .errors import agree, on_root

__all__ = ["MatrixFileError", "MatrixInfo", "atomic_output", "check_jsonl",
           "check_regular_input", "check_writable"]


class MatrixFileError(ValueError):
    """A matrix file that cannot be used (malformed, wrong type or shape)."""


@dataclass(frozen=True)
class MatrixInfo:
    """What a matrix file's header says: ``path``, ``format`` ('npy' | 'mtx' | 'h5'), ``shape``
    (m, n) (a 1-D .npy of length n is read as n x 1; ``ndim`` keeps 1), ``dtype`` (the
    stored type), ``fortran_order`` (npy), ``symmetry`` (mtx: general, symmetric, ...),
    ``dataset`` (h5)."""
    path: str
    format: str
    shape: tuple[int, int]
    dtype: np.dtype
    ndim: int = 2
    fortran_order: bool = False
    symmetry: str = "general"
    offset: int = 0          # npy: bytes before the data
    dataset: str = ""        # h5: the dataset's path inside the file


def check_regular_input(path: str) -> None:
    """MatrixFileError unless the existing ``path`` is a regular file (after symbolic links):
    a pipe, FIFO (``<(cat A.npy)``), device or socket cannot be read at offsets by every rank
    -- its first read consumed the stream, and a FIFO without a writer blocked every rank.
    Checked with ``stat``, never by opening it. Not collective."""
    import stat
    mode = os.stat(path).st_mode
    if stat.S_ISREG(mode):
        return
    kind = ("a pipe/FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "a character device" if stat.S_ISCHR(mode)
            else "a block device" if stat.S_ISBLK(mode) else "not a file")
    raise MatrixFileError(f"{path}: is {kind}, not a regular file (every rank reads the "
                          f"matrix at its own offsets); save it to a file first")


def _check_writable(path: str, probe: bool = True) -> None:
    if os.path.islink(path):
        if not os.path.exists(path):
            raise MatrixFileError(f"{path}: is a dangling symbolic link (to "
                                  f"{os.readlink(path)}); remove it or write elsewhere")
        path = os.path.realpath(path)        # written through, as np.save does
    d = os.path.dirname(os.path.abspath(path)) or "."
    if not os.path.isdir(d):
        raise FileNotFoundError(f"{path}: directory {d} does not exist")
    if not os.access(d, os.W_OK):
        raise PermissionError(f"{path}: directory {d} is not writable")
    if os.path.isdir(path):
        raise MatrixFileError(f"{path}: is a directory")
    if os.path.lexists(path) and not os.path.isfile(path):
        # (the write renames a new file into place: a device, FIFO or socket would be gone)
        raise MatrixFileError(f"{path}: exists and is not a regular file (a device, FIFO or "
                              f"socket); write to a file")
    if probe:
        _probe_dir(path, d)


def _probe_dir(path: str, d: str) -> None:
    """A file can be created in the directory ``d`` (where ``path``'s temporary goes):
    tried for real, as ``os.access`` says yes to root and to read-only or virtual file
    systems (/proc) alike. Local."""
    probe = os.path.join(d, f".{os.path.basename(path)}.{os.urandom(4).hex()}.probe")
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as e:
        raise type(e)(f"{path}: cannot create a file in {d} "
                      f"({e.strerror or e})") from None
    os.close(fd)
    try:
        os.unlink(probe)
    except OSError:  # pragma: no cover
        pass


def _check_jsonl(path: str) -> None:
    """``path`` can take appended JSON lines: missing, empty, or a file whose first character
    (after white space) is '{'. Appending to anything else (a .npy matrix named by mistake)
    would corrupt it. Local."""
    # (appended in place: an existing file needs no new file beside it)
    _check_writable(path, probe=not os.path.isfile(path))
    if not os.path.isfile(path):
        return
    try:               # (opened for appending, nothing written: read-only, immutable, ...)
        with open(path, "ab"):
            pass
    except OSError as e:
        raise type(e)(f"{path}: exists and cannot be appended to "
                      f"({e.strerror or e})") from None
    if os.path.getsize(path) == 0:
        return
    with open(path, "rb") as f:
        first = f.readline(1 << 20)
    head = first.lstrip()
    try:
        ok = isinstance(json.loads(first), dict)
    except ValueError:
        ok = False
    if head and not ok:
        what = (f"it begins with {head[:8]!r}" if not head.startswith(b"{") else
                "its first line is not one JSON object (a pretty-printed JSON file?)")
        raise MatrixFileError(f"{path}: exists and is not a JSON-lines file ({what}); records "
                              f"are appended to a JSON-lines file, which would corrupt this "
                              f"one: name another")


def append_json_lines(path, lines) -> None:
    """Append the JSON texts ``lines`` to ``path``, one per line, starting on a new line when
    the file's last line lacks its newline (a record glued to it would corrupt both). Not
    collective: the caller's rank writes."""
    with open(path, "ab+") as f:
        if f.tell() > 0:
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                f.write(b"\n")
        f.write("".join(t + "\n" for t in lines).encode("utf-8"))


def check_jsonl(path, comm=None) -> None:
    """Raise (on every rank of ``comm`` if given: collective, checked on rank 0) unless
    JSON-lines records can be appended to ``path`` (:func:`check_writable`, and an existing
    file must already hold JSON lines)."""
    if comm is None:
        _check_jsonl(os.fspath(path))
    else:
        on_root(comm, lambda: _check_jsonl(os.fspath(path)))


def check_writable(path, comm=None) -> None:
    """Raise (on every rank of ``comm`` if given: collective) if ``path`` cannot be created
    (missing or read-only directory). Checked on rank 0."""
    if comm is None:
        _check_writable(os.fspath(path))
    else:
        on_root(comm, lambda: _check_writable(os.fspath(path)))


# ---------------------------------------------------------------------------------------
# nothing half-written: a temporary name in the target directory, renamed when all agree
# ---------------------------------------------------------------------------------------
_PENDING: set = set()


def _cleanup_pending(signum=None, frame=None):
    for p in list(_PENDING):
        try:
            os.unlink(p)
        except OSError:
            pass
        _PENDING.discard(p)
    if signum is not None:
        import signal
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


#: seconds a signal's Python handler has to run before the watch thread acts for it
SIGNAL_GRACE_S = 2.0


class _SignalWatch:
    """Python runs signal handlers only in the main thread, between bytecodes: a rank blocked
    in an MPI call (a collective another rank never reaches) runs none, and SIGTERM or SIGINT
    then neither removes the temporary nor ends the process (it ran on until SIGKILL). The
    C-level handler still writes the signal's number to the wakeup fd; this daemon thread
    reads it, gives the Python handler :data:`SIGNAL_GRACE_S` to run, then removes the
    pending temporaries itself and ends the process (exit status 128 + the signal). Main
    thread only; ``close()`` restores the previous wakeup fd."""

    def __init__(self, signals):
        import signal
        import socket
        import threading
        self.signals = {int(s) for s in signals}
        self.r, self.w = socket.socketpair()
        self.w.setblocking(False)
        self.old = signal.set_wakeup_fd(self.w.fileno(), warn_on_full_buffer=False)
        threading.Thread(target=self._run, name="distla-signal-watch", daemon=True).start()

    def _run(self):
        import time
        try:
            while True:
                data = self.r.recv(64)
                hit = [b for b in data if b in self.signals]
                if hit:
                    time.sleep(SIGNAL_GRACE_S)
                    _cleanup_pending()
                    os._exit(128 + hit[0])
                if not data or 0 in data:     # close(): the write is over
                    return
        finally:
            self.r.close()

    def close(self):
        import signal
        signal.set_wakeup_fd(self.old)
        try:
            self.w.send(b"\0")                # wakes the thread, which ends
        except OSError:  # pragma: no cover - its buffer full of signal numbers
            pass
        self.w.close()


def _naming(e: Exception, tmp: str, path: str) -> Exception:
    """``e`` with the temporary's name replaced by the target's, which is what the user named
    (an error about ``.x.npy.1a2b.partial`` means nothing to them); ``e`` itself if the
    message does not name it or its class cannot be rebuilt from a message."""
    if isinstance(e, OSError) and e.filename == tmp:
        return type(e)(e.errno, e.strerror, path)
    text = str(e)
    if tmp not in text:
        return e
    try:
        new = type(e)(text.replace(tmp, path))
    except Exception:  # noqa: BLE001 - a class with another constructor
        return e
    new.__cause__ = e
    return new


def atomic_output(path: str, comm, write) -> None:
    """Collective: ``write(tmp)`` (collective) writes to a temporary file beside ``path`` (beside
    its target when ``path`` is a symbolic link: the link is written through, not replaced);
    the temporary becomes ``path`` (one rename on rank 0) only after every rank agreed that
    its part succeeded. On an error, SIGTERM or SIGINT the temporary is removed and nothing
    exists under ``path`` (an older file there is left as it was)."""
    import signal
    import threading
    path = os.fspath(path)
    if os.path.islink(path) and os.path.exists(path):
        path = os.path.realpath(path)        # a symbolic link is written through
    d, name = os.path.split(os.path.abspath(path))
    tag = comm.bcast(os.urandom(6).hex() if comm.Get_rank() == 0 else None, root=0)
    tmp = os.path.join(d, f".{name}.{tag}.partial")
    _PENDING.add(tmp)
    old, watch = {}, None
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            old[sig] = signal.signal(sig, _cleanup_pending)
        watch = _SignalWatch(old)
    try:
        err = None
        try:
            write(tmp)
        except Exception as e:  # noqa: BLE001 - agreed on below
            err = _naming(e, tmp, path)
        agree(comm, err)
        err = None
        if comm.Get_rank() == 0:
            try:
                os.replace(tmp, path)
            except OSError as e:
                err = e
        agree(comm, err)
        _PENDING.discard(tmp)
    finally:
        if watch is not None:
            watch.close()
        for sig, h in old.items():
            signal.signal(sig, h)
        if tmp in _PENDING:
            if comm.Get_rank() == 0:
                _cleanup_pending()
            _PENDING.discard(tmp)
