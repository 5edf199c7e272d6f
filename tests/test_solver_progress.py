"""The solvers report their flops to an active Progress (what `distla solve` shows)."""
import io

import numpy as np
import pytest
from mpi4py import MPI

from distla import DistMatrix, ProcessGrid
from distla.linalg import cholesky, lu_factor
from distla.progress import Progress
from distla.testing import grid_shapes


class Recorder(Progress):
    """A Progress that keeps every value reported to it."""

    def __init__(self, total):
        super().__init__(total, "t", enabled=False, stream=io.StringIO())
        self.seen = []

    @property
    def done(self):
        return self.seen[-1] if self.seen else 0.0

    @done.setter
    def done(self, v):
        if hasattr(self, "seen"):
            self.seen.append(v)


@pytest.mark.mpi
@pytest.mark.parametrize("which", ["cholesky", "lu"])
def test_factorizations_report_all_their_flops(which):
    comm = MPI.COMM_WORLD
    n, nb = 45, 8
    for P, Q in grid_shapes(comm.size):
        g = ProcessGrid(P, Q)
        A = DistMatrix.from_function(g, (n, n), (nb, nb),
                                     lambda I, J: 1.0 / (1.0 + abs(I - J)) + n * (I == J))
        coeff = 1.0 / 3.0 if which == "cholesky" else 2.0 / 3.0
        with Recorder(coeff * n ** 3) as p:
            cholesky(A) if which == "cholesky" else lu_factor(A)
        seen = np.array(p.seen)
        # one report per block column; a 1 x 1 grid makes one local library call, one report
        assert len(seen) == (1 if P * Q == 1 else -(-n // nb))
        assert np.all(np.diff(seen) > 0)                # monotone
        assert seen[-1] == pytest.approx(coeff * n ** 3)  # ends at the total


@pytest.mark.parametrize("bad, exc", [(float("inf"), ValueError), (1e10, ValueError),
                                      (float("nan"), ValueError), (-1.0, ValueError),
                                      ("5", TypeError), (True, TypeError)])
def test_progress_refuses_an_interval_it_cannot_wait(bad, exc):
    """An interval beyond threading's TIMEOUT_MAX (inf, 1e10) crashed the reporting thread
    with an OverflowError (and the solve still exited 0); NaN or < 0 is meaningless."""
    with pytest.raises(exc, match=r"interval must be a .*not " + repr(bad).replace("(", r"\(")
                       .replace(")", r"\)")):
        Progress(1.0, enabled=True, stream=io.StringIO(), interval=bad)


def test_progress_interval_zero_is_off_and_the_bound_works():
    import threading
    import time

    from distla.progress import MAX_INTERVAL, check_interval
    assert MAX_INTERVAL < threading.TIMEOUT_MAX
    assert check_interval(None) is None and check_interval(2) == 2.0
    with Progress(1.0, enabled=True, stream=io.StringIO(), interval=0) as p:
        assert p._thread is None                  # 0: no reporting thread
    t = time.perf_counter()
    with Progress(1.0, enabled=True, stream=io.StringIO(), interval=MAX_INTERVAL) as p:
        assert p._thread is not None and p._thread.is_alive()
    assert p._thread is None and time.perf_counter() - t < 5   # close() does not wait it out


@pytest.mark.parametrize("value", ["inf", "1e10"])
def test_solve_progress_option_out_of_range_is_a_usage_error(tmp_path, capfd, value):
    """`distla solve --progress inf` printed a thread's traceback and exited 0."""
    from distla.cli import _main
    from distla.runtime import EXIT_USAGE, run_main
    a = tmp_path / "a.npy"
    np.save(a, np.eye(8) * 4 + 1)
    code = run_main(_main, ["solve", "--matrix", str(a), "--progress", value], prog="distla")
    err = capfd.readouterr().err
    assert code == EXIT_USAGE
    assert "Exception in thread" not in err and "Traceback" not in err
    assert "distla: error: --progress must be a finite number" in err
