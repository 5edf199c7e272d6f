"""Streams: in-order queues of device work, one small API for both devices.

``with s:`` makes ``s`` the stream that kernels are queued on. ``ev = s.record()`` marks the
work queued on ``s`` so far; ``t.wait(ev)`` makes stream ``t`` wait for it (no host
synchronization); ``t.wait_for(s)`` is both at once. ``s.defer(fn, *args)`` submits work to run
asynchronously after what the *current* stream has queued, and ``s.join()`` makes the current
stream wait for it: on a GPU the work is queued at once on ``s`` (its arguments are kept alive
until the join, so the memory pool cannot hand them to another stream early); on a CPU rank
the host runs it at ``join()``, so the host does first what the program says comes next (for
example factoring the next panel and posting its broadcast before a long update).

On CPU ranks (:class:`HostStream`) everything runs on the host thread in program order and
events are ``None``. Not collective.
"""
from __future__ import annotations


class HostStream:
    """The CPU stream: work runs on the host when queued (``with``) or at ``join`` (``defer``)."""

    CURRENT: "HostStream"

    def __init__(self):
        self._deferred = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def record(self):
        return None

    def wait(self, event) -> None:
        pass

    def wait_for(self, other) -> None:
        pass

    def defer(self, fn, *args) -> None:
        self._deferred.append((fn, args))

    def join(self) -> None:
        work, self._deferred = self._deferred, []
        for fn, args in work:
            fn(*args)

    def synchronize(self) -> None:
        self.join()


HostStream.CURRENT = HostStream()


class GpuStream:  # pragma: no cover - needs a GPU
    """A CuPy stream with the same interface (``cupy_stream``: the wrapped stream)."""

    def __init__(self, cupy_stream):
        self.s = cupy_stream
        self._done, self._keep = None, ()

    def __enter__(self):
        self.s.__enter__()
        return self

    def __exit__(self, *exc):
        return self.s.__exit__(*exc)

    def record(self):
        return self.s.record()

    def wait(self, event) -> None:
        if event is not None:
            self.s.wait_event(event)

    def wait_for(self, other) -> None:
        self.s.wait_event(other.record())

    def defer(self, fn, *args) -> None:
        import cupy
        self.s.wait_event(cupy.cuda.get_current_stream().record())
        with self.s:
            fn(*args)
        self._done, self._keep = self.s.record(), self._keep + (args,)

    def join(self) -> None:
        if self._done is not None:
            import cupy
            cupy.cuda.get_current_stream().wait_event(self._done)
        self._done, self._keep = None, ()

    def synchronize(self) -> None:
        self.s.synchronize()
