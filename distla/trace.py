"""One tracer for every driver: ``with trace("panel"):`` marks a phase.

Drivers write one line per phase::

    from distla.trace import trace
    with trace("panel"):
        ...

and nothing is recorded (the cost is one global lookup) unless a :class:`Tracer` is active::

    with Tracer(device="gpu") as tr:
        lu_factor(A)
    print(tr.table())        # phase, calls, device seconds, host seconds

Two clocks per phase:

* ``host``: wall time the *host* spent between entering and leaving the block (Python, launch
  overhead, blocking MPI calls). On a GPU rank without ``sync`` this is the per-step host
  overhead that kernel launches cost, not the kernels' run time.
* ``device``: on GPU ranks, CUDA events recorded on the current stream at both ends, read when
  the tracer is asked (:meth:`Tracer.seconds`); on CPU ranks the same as ``host``.

``Tracer(sync=True)`` synchronizes the device at each phase boundary, so host times become
run times (diagnosis only: it removes overlap between streams). Phases may nest; a nested
phase counts in its own line and inside its parent's. Phases on different streams overlap, so
their sum can exceed the wall time.

Nothing here communicates; a tracer is per process (not collective). :func:`current` returns
the active tracer (or ``None``) for code that reports progress from it.
"""
from __future__ import annotations

import contextlib
import time
from collections import defaultdict

__all__ = ["Tracer", "trace", "current"]

_active: "Tracer | None" = None


def current() -> "Tracer | None":
    """The active tracer of this process, or ``None``."""
    return _active


class Tracer:
    """Collects per-phase host and device seconds while entered (context manager).

    ``device``: ``"cpu"`` or ``"gpu"`` (GPU: CUDA events on the current CuPy stream).
    ``sync``: synchronize the device at each phase boundary (GPU only). Tracers nest: the
    innermost active one records, and leaving it restores the previous one.
    """

    def __init__(self, device: str = "cpu", sync: bool = False):
        if device not in ("cpu", "gpu"):
            raise ValueError(f"device must be 'cpu' or 'gpu', not {device!r}")
        self.device = device
        self.sync = bool(sync) and device == "gpu"
        self.calls: dict[str, int] = defaultdict(int)
        self.host: dict[str, float] = defaultdict(float)
        self._device: dict[str, float] = defaultdict(float)
        self._pending: list = []   # (name, start event, end event), GPU only
        self._prev = None
        self.wall = 0.0
        self._t0 = None

    # ---- activation ----------------------------------------------------------------------
    def __enter__(self) -> "Tracer":
        global _active
        self._prev, _active = _active, self
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        global _active
        self.wall += time.perf_counter() - self._t0
        _active = self._prev
        self._prev = None

    # ---- recording -----------------------------------------------------------------------
    def _synchronize(self) -> None:
        import cupy
        cupy.cuda.runtime.deviceSynchronize()

    @contextlib.contextmanager
    def phase(self, name: str):
        """Record one occurrence of phase ``name`` around the block."""
        gpu = self.device == "gpu"
        if self.sync:
            self._synchronize()
        if gpu:
            import cupy
            stream = cupy.cuda.get_current_stream()
            e0 = stream.record()
        t = time.perf_counter()
        try:
            yield
        finally:
            if self.sync:
                self._synchronize()
            dt = time.perf_counter() - t
            self.host[name] += dt
            self.calls[name] += 1
            if gpu:
                self._pending.append((name, e0, stream.record()))
            else:
                self._device[name] += dt

    def add(self, name: str, seconds: float, calls: int = 1) -> None:
        """Record a phase timed elsewhere (e.g. a callback's own clock)."""
        self.host[name] += seconds
        self._device[name] += seconds
        self.calls[name] += calls

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

    def summary(self) -> dict:
        """``{phase: {"calls", "seconds", "host_seconds"}}`` (JSON-ready)."""
        dev = self.seconds()
        return {k: {"calls": self.calls[k], "seconds": dev.get(k, 0.0),
                    "host_seconds": self.host[k]} for k in self.calls}

    def table(self) -> str:
        """A plain-text table, one phase per line, in first-seen order."""
        dev = self.seconds()
        lines = [f"{'phase':<16}{'calls':>8}{'seconds':>12}{'host s':>12}{'host us/call':>14}"]
        for k, n in self.calls.items():
            h = self.host[k]
            lines.append(f"{k:<16}{n:>8d}{dev.get(k, 0.0):>12.4f}{h:>12.4f}"
                         f"{1e6 * h / max(n, 1):>14.1f}")
        return "\n".join(lines)


_NULL = contextlib.nullcontext()


def trace(name: str):
    """Context manager marking phase ``name`` in the active tracer; a no-op without one."""
    t = _active
    if t is None:
        return _NULL
    return t.phase(name)
