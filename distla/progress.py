"""Progress reports and phase timings for long runs (shown on rank 0 only).

Two small pieces, both optional for library code:

* :class:`Progress` -- percent of flops done, rate and ETA. On a terminal it redraws one
  status line (``\\r``); otherwise it prints a plain line every ``interval`` seconds. A
  background thread on the reporting rank does the printing, so solvers only store a number:
  ``distla.progress.update(flops_done)`` (global flops completed so far, any rank may call it,
  only the reporting rank's value is shown) is a no-op when no Progress is active.
* :class:`Timings` -- the wall time of a job's phases for its report (``with
  timings.phase("solve", backend, comm):``), synchronizing the device and barriering so the
  numbers mean the same thing on every rank. It is not a profiler: each phase is also a
  :func:`distla.trace.trace` phase, so an active :class:`distla.trace.Tracer` (the one
  profiler) sees the job's phases around the drivers' own.

Neither class communicates except ``Timings.phase`` when given a communicator (then it is
collective over that communicator).
"""
from __future__ import annotations

import contextlib
import numbers
import sys
import threading
import time

from .trace import trace

__all__ = ["MAX_INTERVAL", "Progress", "Timings", "check_interval", "update",
           "update_columns", "current", "format_seconds", "format_rate"]

_active_progress: "Progress | None" = None

#: the longest interval between progress lines, in seconds (one day)
MAX_INTERVAL = 86400.0


def check_interval(interval, name: str = "interval") -> float | None:
    """``interval`` as a float (None stays None: the default): seconds between progress
    lines, finite, in ``[0, MAX_INTERVAL]``, 0 meaning no lines. TypeError or ValueError
    naming ``name`` and the value otherwise. Not collective."""
    if interval is None:
        return None
    if not isinstance(interval, numbers.Real) or isinstance(interval, bool):
        raise TypeError(f"{name} must be a number of seconds, not {interval!r}")
    v = float(interval)
    if not 0 <= v <= MAX_INTERVAL:     # (NaN fails too)
        raise ValueError(f"{name} must be a finite number of seconds in [0, {MAX_INTERVAL:g}]"
                         f" (0: no progress lines), not {interval!r}")
    return v


def format_seconds(s: float) -> str:
    """``75.3`` -> ``'1:15'``; sub-minute values keep one decimal (``'9.4s'``)."""
    if s != s or s in (float("inf"), float("-inf")):
        return "?"
    if s < 60:
        return f"{s:.1f}s"
    s = int(round(s))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


def format_rate(flops_per_s: float) -> str:
    """A flop rate with a readable unit: ``'12.3 GFLOP/s'``."""
    for unit, scale in (("PFLOP/s", 1e15), ("TFLOP/s", 1e12), ("GFLOP/s", 1e9),
                        ("MFLOP/s", 1e6)):
        if flops_per_s >= scale:
            return f"{flops_per_s / scale:.3g} {unit}"
    return f"{flops_per_s:.3g} FLOP/s"


class Progress:
    """A progress report for one long operation of ``total`` flops (context manager).

    ``enabled`` (default: rank 0 of ``comm``, or True without a communicator) says whether this
    rank prints. ``tty`` (default: ``stream.isatty()``) picks the redrawn bar or plain lines;
    ``interval`` is the seconds between reports (default 0.5 on a terminal, 30 otherwise; 0:
    none; at most :data:`MAX_INTERVAL`, anything else is a ValueError, see
    :func:`check_interval`). Not collective. While entered, it is the target of :func:`update`.
    """

    def __init__(self, total: float, label: str = "", *, comm=None, enabled: bool | None = None,
                 stream=None, tty: bool | None = None, interval: float | None = None,
                 width: int = 30):
        interval = check_interval(interval)
        self.total = float(total)
        self.label = label
        self.stream = sys.stderr if stream is None else stream
        if enabled is None:
            enabled = comm is None or comm.Get_rank() == 0
        self.enabled = bool(enabled)
        if tty is None:
            try:
                tty = bool(self.stream.isatty())
            except Exception:  # noqa: BLE001 - closed or odd streams
                tty = False
        self.tty = tty
        self.interval = (0.5 if tty else 30.0) if interval is None else interval
        self.width = width
        self.done = 0.0
        self.t0 = None
        self._stop = threading.Event()
        self._thread = None
        self._printed = False
        self._prev = None

    # ---- what solvers call ----------------------------------------------------------------
    def update(self, done: float) -> None:
        """Record that ``done`` flops (cumulative, global) are complete. Cheap; never prints."""
        self.done = float(done)

    def advance(self, flops: float) -> None:
        """Record ``flops`` more flops as complete."""
        self.done += float(flops)

    # ---- reporting ------------------------------------------------------------------------
    def elapsed(self) -> float:
        return 0.0 if self.t0 is None else time.perf_counter() - self.t0

    def line(self) -> str:
        """The current status text (no newline)."""
        el = self.elapsed()
        head = f"{self.label}: " if self.label else ""
        if self.done <= 0 or self.total <= 0:
            return f"{head}running, {format_seconds(el)} elapsed"
        frac = min(1.0, self.done / self.total)
        rate = self.done / el if el > 0 else 0.0
        eta = (self.total - self.done) / rate if rate > 0 else float("inf")
        text = (f"{100 * frac:5.1f}%  {format_rate(rate)}  "
                f"elapsed {format_seconds(el)}  ETA {format_seconds(eta)}")
        if self.tty:
            fill = int(round(frac * self.width))
            text = "[" + "#" * fill + "." * (self.width - fill) + "] " + text
        return head + text

    def _emit(self, final: bool = False) -> None:
        text = self.line()
        try:
            if self.tty:
                pad = max(0, len(self._prev or "") - len(text))
                self.stream.write("\r" + text + " " * pad + ("\n" if final else ""))
            elif not final:
                self.stream.write(text + "\n")
            self.stream.flush()
        except Exception:  # noqa: BLE001 - a closed stream must not break the solve
            return
        self._prev = text
        self._printed = True

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self._emit()

    def start(self) -> "Progress":
        global _active_progress
        self.t0 = time.perf_counter()
        _active_progress = self
        if self.enabled and self.interval > 0:
            self._thread = threading.Thread(target=self._loop, name="distla-progress",
                                            daemon=True)
            self._thread.start()
        return self

    def close(self) -> None:
        """Stop reporting; on a terminal, finish the status line if one was drawn."""
        global _active_progress
        if _active_progress is self:
            _active_progress = None
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
            if self.tty and self._printed:
                self._emit(final=True)

    def __enter__(self) -> "Progress":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()


class _NullProgress:
    total = 0.0
    done = 0.0

    def update(self, done):
        pass

    def advance(self, flops):
        pass


_NULL = _NullProgress()


def current():
    """The active :class:`Progress`, or a do-nothing stand-in."""
    return _active_progress if _active_progress is not None else _NULL


def update(done: float) -> None:
    """Report ``done`` cumulative global flops to the active Progress (no-op if none)."""
    p = _active_progress
    if p is not None:
        p.done = float(done)


def update_columns(n: int, done_cols: int, coeff: float) -> None:
    """Report progress of a blocked n x n factorization costing ``coeff * n^3`` flops whose
    first ``done_cols`` columns are done (right-looking: the work left is ``coeff * rest^3``).
    No-op when no Progress is active; local (not collective)."""
    if _active_progress is not None:
        rest = max(0, n - done_cols)
        update(coeff * (n ** 3 - rest ** 3))


class Timings:
    """Wall-clock seconds by phase, in the order phases first ran (repeats add up).

    ``with t.phase(name, backend=None, comm=None):`` times its block; with a ``backend`` the
    device is synchronized before and after, with an mpi4py ``comm`` every rank barriers
    before and after (then the phase is collective over ``comm``). Phases nest (named
    ``outer/inner``). Each is also a :func:`distla.trace.trace` phase.
    """

    def __init__(self):
        self.seconds: dict[str, float] = {}
        self._stack: list[str] = []

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + float(seconds)

    @contextlib.contextmanager
    def phase(self, name: str, backend=None, comm=None):
        full = "/".join(self._stack + [name])
        _sync(backend, comm)
        t0 = time.perf_counter()
        self._stack.append(name)
        try:
            with trace(name):
                yield
        finally:
            self._stack.pop()
        _sync(backend, comm)
        self.add(full, time.perf_counter() - t0)

    def table(self) -> str:
        """The phases as an aligned two-column text table."""
        if not self.seconds:
            return ""
        w = max(len(k) for k in self.seconds)
        top = sum(v for k, v in self.seconds.items() if "/" not in k)
        lines = [f"{'phase':<{w}}  {'seconds':>10}"]
        for k, v in self.seconds.items():
            depth = k.count("/")
            name = "  " * depth + k.rsplit("/", 1)[-1]
            lines.append(f"{name:<{w}}  {v:>10.4f}")
        lines.append(f"{'total':<{w}}  {top:>10.4f}")
        return "\n".join(lines)


def _sync(backend, comm) -> None:
    if backend is not None:
        backend.synchronize()
    if comm is not None:
        comm.Barrier()


