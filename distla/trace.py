"""One tracer for every driver: ``with trace("panel"):`` marks a phase.

Drivers write one line per phase::

    from distla.trace import trace
    with trace("panel"):
        ...

and nothing is recorded (the cost is one global lookup) unless a :class:`Tracer` is active::

    with Tracer(device="gpu") as tr:
        lu_factor(A)
    print(tr.table())        # phase, calls, device seconds, host seconds, host overhead

Two clocks per phase:

* ``host``: wall time the *host* spent between entering and leaving the block (Python, launch
  overhead, blocking MPI calls). On a GPU rank without ``sync`` this is the per-step host
  overhead that kernel launches cost, not the kernels' run time.
* ``device``: on GPU ranks, CUDA events recorded on the current stream at both ends, read when
  the tracer is asked (:meth:`Tracer.seconds`); on CPU ranks the same as ``host``.

Library calls. Functions decorated with :func:`library` (the backends' BLAS/LAPACK/cuSOLVER
kernels, device reads, and the data communicators' operations and waits) add their host time
to every open phase as ``lib`` seconds, counted once when they nest. ``host - lib`` of a phase
is its **host overhead**: time the host spent in the driver's own Python (index math,
allocation, slicing, bookkeeping), outside kernels and communication. The drivers mark each
step of their loop ``"step"``, so ``overhead_us("step")`` is the per-step host overhead. On
GPU ranks the ``lib`` time of an asynchronous kernel is its launch (queueing) time.

The clock of the overhead: ``Tracer(overhead_clock="wall")`` (the default) subtracts wall
times; ``"cpu"`` uses this thread's CPU time (``time.thread_time``) for the phases' overhead
and the library calls, so time the OS gave to other processes (several ranks per core, a
loaded machine) does not count as overhead. The tracer's own cost (its clock reads around
nested phases and library calls) is measured once per clock (:func:`instrument_cost`) and
taken out of the overhead (``overhead_us(..., raw=True)`` keeps it in).

``Tracer(sync=True)`` synchronizes the device at each phase boundary, so host times become
run times (diagnosis only: it removes overlap between streams). Phases may nest; a nested
phase counts in its own line and inside its parent's. Phases on different streams overlap, so
their sum can exceed the wall time.

Nothing here communicates; a tracer is per process (not collective) and counts the library
calls of the thread that entered it (a background thread's, e.g.
:meth:`distla.device.base.Backend.preload_async`, are not the traced driver's).
:func:`current` returns the active tracer (or ``None``) for code that reports progress.
"""
from __future__ import annotations

import functools
import threading
import time
from collections import defaultdict

__all__ = ["Tracer", "trace", "current", "library", "instrument_cost"]

_active: "Tracer | None" = None
_clock = time.perf_counter


def current() -> "Tracer | None":
    """The active tracer of this process, or ``None``."""
    return _active


class Tracer:
    """Collects per-phase host and device seconds while entered (context manager).

    ``device``: ``"cpu"`` or ``"gpu"`` (GPU: CUDA events on the current CuPy stream).
    ``sync``: synchronize the device at each phase boundary (GPU only).
    ``overhead_clock``: ``"wall"`` or ``"cpu"`` (this thread's CPU time), the clock of the
    host overhead and of the library time (see the module docstring). Tracers nest: the
    innermost active one records, and leaving it restores the previous one.
    """

    def __init__(self, device: str = "cpu", sync: bool = False, overhead_clock: str = "wall"):
        if device not in ("cpu", "gpu"):
            raise ValueError(f"device must be 'cpu' or 'gpu', not {device!r}")
        if overhead_clock not in ("wall", "cpu"):
            raise ValueError(f"overhead_clock must be 'wall' or 'cpu', not {overhead_clock!r}")
        self._oclock = time.thread_time if overhead_clock == "cpu" else None
        self.device = device
        self.sync = bool(sync) and device == "gpu"
        self.calls: dict[str, int] = defaultdict(int)
        self.host: dict[str, float] = defaultdict(float)
        self.work: dict[str, float] = defaultdict(float)       # overhead-clock seconds
        self.lib: dict[str, float] = defaultdict(float)        # ... of it in library calls
        self.lib_calls: dict[str, int] = defaultdict(int)      # library calls per phase
        # per occurrence: (work, lib, phases nested in it, library calls in it)
        self.samples: dict[str, list] = defaultdict(list)
        self._device: dict[str, float] = defaultdict(float)
        self._pending: list = []   # (name, start event, end event), GPU only
        self._prev = None
        self.wall = 0.0
        self._t0 = None
        self._lib_total = 0.0      # library seconds so far (outermost calls only)
        self._lib_n = 0
        self._nphase = 0           # phases closed so far
        self.nested: dict[str, int] = defaultdict(int)   # phases closed inside each phase
        self._in_lib = False
        self._owner = None         # the thread that entered the tracer
        self.overhead_clock = overhead_clock

    # ---- activation ----------------------------------------------------------------------
    def __enter__(self) -> "Tracer":
        global _active
        self._owner = threading.get_ident()   # library calls of other threads do not count
        self._prev, _active = _active, self
        self._t0 = _clock()
        return self

    def __exit__(self, *exc) -> None:
        global _active
        self.wall += _clock() - self._t0
        _active = self._prev
        self._prev = None

    # ---- recording -----------------------------------------------------------------------
    def _synchronize(self) -> None:
        import cupy
        cupy.cuda.runtime.deviceSynchronize()

    def phase(self, name: str) -> "_Phase":
        """A context manager recording one occurrence of phase ``name`` around its block."""
        return _Phase(self, name)

    def add(self, name: str, seconds: float, calls: int = 1) -> None:
        """Record a phase timed elsewhere (e.g. a callback's own clock)."""
        self.host[name] += seconds
        self.work[name] += seconds
        self._device[name] += seconds
        self.calls[name] += calls

    def _library_call(self, fn, args, kwargs):
        self._in_lib = True
        clock = self._oclock or _clock
        t = clock()
        try:
            return fn(*args, **kwargs)
        finally:
            self._lib_total += clock() - t
            self._lib_n += 1
            self._in_lib = False

    # ---- reading -------------------------------------------------------------------------
    def seconds(self) -> dict[str, float]:
        """Device seconds per phase (GPU: waits for the recorded events)."""
        if self._pending:
            import cupy
            for name, e0, e1 in self._pending:
                e1.synchronize()
                self._device[name] += cupy.cuda.get_elapsed_time(e0, e1) / 1e3
            self._pending = []
        return dict(self._device)

    def host_seconds(self) -> dict[str, float]:
        """Host seconds per phase."""
        return dict(self.host)

    def counts(self) -> dict[str, int]:
        return dict(self.calls)

    def overhead_seconds(self) -> dict[str, float]:
        """Host seconds per phase outside library calls (kernels, device reads, messages)."""
        return {k: max(0.0, self.work[k] - self.lib[k]) for k in self.calls}

    def overhead_us(self, name: str = "step", raw: bool = False) -> float | None:
        """Mean host overhead of one occurrence of phase ``name`` in microseconds, less the
        tracer's own cost unless ``raw`` (None if the phase never ran)."""
        n = self.calls.get(name, 0)
        if not n:
            return None
        own = 0.0 if raw else self._own_cost(self.nested[name], self.lib_calls[name])
        return 1e6 * max(0.0, self.work[name] - self.lib[name] - own) / n

    def overhead_us_median(self, name: str = "step", raw: bool = False) -> float | None:
        """Median over the occurrences of phase ``name`` of its host overhead in
        microseconds (robust to the occasional occurrence the OS preempted), less the
        tracer's own cost unless ``raw``; None if the phase never ran."""
        xs = sorted(w - lib - (0.0 if raw else self._own_cost(nest, nlib))
                    for w, lib, nest, nlib in self.samples.get(name, ()))
        if not xs:
            return None
        mid = len(xs) // 2
        return 1e6 * max(0.0, xs[mid] if len(xs) % 2 else 0.5 * (xs[mid - 1] + xs[mid]))

    def _own_cost(self, nested: int, nlib: int) -> float:
        per_phase, per_lib = instrument_cost(self.overhead_clock, self.device)
        return nested * per_phase + nlib * per_lib

    def summary(self) -> dict:
        """``{phase: {"calls", "seconds", "host_seconds", "lib_seconds", "lib_calls",
        "overhead_seconds"}}`` (JSON-ready)."""
        dev = self.seconds()
        return {k: {"calls": self.calls[k], "seconds": dev.get(k, 0.0),
                    "host_seconds": self.host[k], "lib_seconds": self.lib[k],
                    "lib_calls": self.lib_calls[k],
                    "overhead_seconds": max(0.0, self.work[k] - self.lib[k])}
                for k in self.calls}

    def table(self) -> str:
        """A plain-text table, one phase per line, in first-seen order: calls, device
        seconds, host seconds, host us per call, library calls per call and host overhead
        (outside library calls, less the tracer's own cost) in us per call."""
        dev = self.seconds()
        lines = [f"{'phase':<16}{'calls':>8}{'seconds':>12}{'host s':>12}{'host us/call':>14}"
                 f"{'lib calls':>10}{'overhead us':>13}"]
        for k, n in self.calls.items():
            h, m = self.host[k], max(n, 1)
            lines.append(f"{k:<16}{n:>8d}{dev.get(k, 0.0):>12.4f}{h:>12.4f}"
                         f"{1e6 * h / m:>14.1f}{self.lib_calls[k] / m:>10.1f}"
                         f"{self.overhead_us(k) or 0.0:>13.1f}")
        return "\n".join(lines)


class _Phase:
    """One occurrence of a phase (a cheap context manager: no generator)."""

    __slots__ = ("tr", "name", "t", "c", "lib", "nlib", "nph", "e0", "stream")

    def __init__(self, tr, name):
        self.tr, self.name = tr, name

    def __enter__(self):
        tr = self.tr
        if tr.sync:
            tr._synchronize()
        self.e0 = None
        if tr.device == "gpu":
            import cupy
            self.stream = cupy.cuda.get_current_stream()
            self.e0 = self.stream.record()
        self.lib, self.nlib, self.nph = tr._lib_total, tr._lib_n, tr._nphase
        self.c = tr._oclock() if tr._oclock else None
        self.t = _clock()
        return self

    def __exit__(self, *exc):
        tr, name = self.tr, self.name
        if tr.sync:
            tr._synchronize()
        dt = _clock() - self.t
        work = tr._oclock() - self.c if self.c is not None else dt
        tr.host[name] += dt
        tr.work[name] += work
        tr.calls[name] += 1
        lib, nlib, nest = tr._lib_total - self.lib, tr._lib_n - self.nlib, tr._nphase - self.nph
        tr.lib[name] += lib
        tr.nested[name] += nest
        tr.samples[name].append((work, lib, nest, nlib))
        tr._nphase += 1
        tr.lib_calls[name] += nlib
        if self.e0 is not None:
            tr._pending.append((name, self.e0, self.stream.record()))
        else:
            tr._device[name] += dt
        return False


class _Null:
    __slots__ = ()

    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


_NULL = _Null()


def trace(name: str):
    """Context manager marking phase ``name`` in the active tracer; a no-op without one."""
    t = _active
    if t is None:
        return _NULL
    return _Phase(t, name)


def library(fn):
    """Decorator for library calls (kernels, device reads, communication): while a tracer is
    active their host time counts as ``lib`` time of the open phases (see the module
    docstring); otherwise one global lookup."""
    @functools.wraps(fn)
    def call(*args, **kwargs):
        t = _active
        if t is None or t._in_lib or t._owner != threading.get_ident():
            return fn(*args, **kwargs)
        return t._library_call(fn, args, kwargs)
    return call


_COST: dict = {}


def instrument_cost(overhead_clock: str = "wall", device: str = "cpu") -> tuple[float, float]:
    """``(per nested phase, per library call)``: the overhead-clock seconds the tracer itself
    adds to an enclosing phase's overhead, measured once per clock and device (the least of a
    few trials of 200 no-op phases / calls). Not collective."""
    key = (overhead_clock, device)
    if key not in _COST:
        noop = library(lambda: None)

        def trial(body):
            tr = Tracer(device=device, overhead_clock=overhead_clock)
            with tr:
                with tr.phase("outer"):
                    body(tr)
            return tr.work["outer"] - tr.lib["outer"]

        def empty(tr):
            for _ in range(200):
                pass

        def phases(tr):
            for _ in range(200):
                with tr.phase("inner"):
                    pass

        def calls(tr):
            for _ in range(200):
                noop()
        base = min(trial(empty) for _ in range(5))
        _COST[key] = (max(0.0, min(trial(phases) for _ in range(5)) - base) / 200,
                      max(0.0, min(trial(calls) for _ in range(5)) - base) / 200)
    return _COST[key]
