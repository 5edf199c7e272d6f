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
