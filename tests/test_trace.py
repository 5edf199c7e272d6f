"""The tracer: phases recorded only while a Tracer is active, nested tracers, counts."""
import time

import pytest

from distla.trace import Tracer, current, trace


def test_no_tracer_is_a_noop():
    assert current() is None
    with trace("panel"):
        pass
    assert current() is None


def test_phases_counted_and_timed():
    with Tracer() as tr:
        for _ in range(3):
            with trace("panel"):
                time.sleep(0.002)
        with trace("update"):
            pass
    s = tr.summary()
    assert s["panel"]["calls"] == 3 and s["update"]["calls"] == 1
    assert s["panel"]["seconds"] >= 0.006
    assert s["panel"]["host_seconds"] == pytest.approx(s["panel"]["seconds"])
    assert "panel" in tr.table().splitlines()[1]
    assert current() is None


def test_nested_tracers_restore_outer():
    with Tracer() as outer:
        with trace("a"):
            pass
        with Tracer() as inner:
            with trace("b"):
                pass
            assert current() is inner
        assert current() is outer
        with trace("c"):
            pass
    assert set(outer.counts()) == {"a", "c"}
    assert set(inner.counts()) == {"b"}


def test_exception_inside_phase_still_recorded():
    with Tracer() as tr:
        with pytest.raises(RuntimeError):
            with trace("boom"):
                raise RuntimeError("x")
    assert tr.counts() == {"boom": 1}


def test_bad_device():
    with pytest.raises(ValueError):
        Tracer(device="tpu")


def test_library_time_and_host_overhead():
    """Calls marked with @library count as library time of every open phase; the rest of a
    phase is its host overhead. Nested library calls count once."""
    from distla.trace import library

    @library
    def kernel(s):
        time.sleep(s)

    @library
    def outer_kernel():
        kernel(0.002)

    with Tracer() as tr:
        for _ in range(3):
            with trace("step"):
                kernel(0.004)
                with trace("inner"):
                    outer_kernel()
                busy = time.perf_counter() + 0.001
                while time.perf_counter() < busy:   # 1 ms of the step's own host work
                    pass
    s = tr.summary()["step"]
    assert s["calls"] == 3 and s["lib_calls"] == 6          # outer_kernel's kernel: nested
    assert s["lib_seconds"] >= 0.018
    assert tr.lib["inner"] >= 0.006 and tr.lib_calls["inner"] == 3
    assert 1000 * 0.9 <= tr.overhead_us("step", raw=True) < s["host_seconds"] / 3 * 1e6
    assert tr.overhead_us("step") <= tr.overhead_us("step", raw=True)
    assert tr.overhead_us_median("step") >= 900
    assert tr.overhead_us("missing") is None and tr.overhead_us_median("missing") is None
    assert "overhead us" in tr.table().splitlines()[0]


def test_library_calls_outside_a_tracer_run_plainly():
    from distla.trace import library

    @library
    def f(x, y=1):
        return x + y
    assert f(1, y=2) == 3
    with Tracer() as tr:
        assert f(1) == 2
    assert tr.lib_calls == {}          # no phase was open


def test_cpu_clock_excludes_sleep_and_costs_are_measured():
    """overhead_clock='cpu': a sleeping phase has ~no overhead (not on the CPU)."""
    from distla.trace import instrument_cost
    with Tracer(overhead_clock="cpu") as tr:
        with trace("step"):
            time.sleep(0.01)
    assert tr.host["step"] >= 0.01
    assert tr.overhead_us("step") < 5000
    per_phase, per_lib = instrument_cost("cpu")
    assert 0 <= per_phase < 1e-3 and 0 <= per_lib < 1e-3
    with pytest.raises(ValueError):
        Tracer(overhead_clock="gpu")


def test_backend_kernels_and_drivers_are_traced():
    """Backend kernels are library calls, and both drivers mark one 'step' per block column."""
    import numpy as np
    from mpi4py import MPI

    from distla import DistMatrix, ProcessGrid
    from distla.device import get_backend
    from distla.linalg import _local, cholesky, lu_factor
    be = get_backend("cpu")
    with Tracer() as tr:
        with trace("k"):
            a = np.asfortranarray(np.eye(4) * 2.0)
            be.potrf("L", a)
            be.copy(a, a)
    assert tr.lib_calls["k"] == 2
    g = ProcessGrid(1, 1, MPI.COMM_SELF)
    saved = dict(_local.LOCAL_UP_TO)
    _local.LOCAL_UP_TO.update({k: 0 for k in saved})
    try:
        rng = np.random.default_rng(0)
        m = rng.standard_normal((50, 50))
        for f, a in ((cholesky, m @ m.T + 50 * np.eye(50)), (lu_factor, m)):
            with Tracer() as tr:
                f(DistMatrix.from_global(g, a, block=8))
            assert tr.counts()["step"] == 7 and tr.lib_calls["step"] >= 7
            assert tr.overhead_us("step") is not None
    finally:
        _local.LOCAL_UP_TO.update(saved)


def test_library_calls_of_other_threads_do_not_count():
    """A tracer counts the library calls of the thread that entered it: a background
    thread's (Backend.preload_async) neither add lib time nor break the phase."""
    import threading

    from distla.trace import Tracer, library, trace
    calls = library(lambda: None)
    with Tracer() as tr:
        with trace("phase"):
            t = threading.Thread(target=lambda: [calls() for _ in range(50)])
            t.start()
            t.join()
            calls()
    assert tr.lib_calls["phase"] == 1 and tr.calls["phase"] == 1


def test_preload_async_on_cpu_ranks_is_none():
    from distla.device import get_backend
    assert get_backend("cpu").preload_async() is None
    get_backend("cpu").preload()       # nothing to load
    with get_backend("cpu").preloading():
        pass
