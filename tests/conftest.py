"""pytest harness for distla: serial runs and multi-rank runs under mpiexec.

Serial:      python -m pytest                (mpi-marked tests are skipped)
Multi-rank:  mpiexec -n 4 python -m pytest --with-mpi -m mpi -p no:cacheprovider

Under --with-mpi this file
  * silences the terminal report of every rank but 0 (it goes to
    <run dir>/rank<r>.log instead);
  * gives each rank its own --basetemp (<run dir>/rank<r>), so tmp_path never
    collides (pytest-mpi's mpi_tmp_path still gives one directory shared by all);
  * on a failed test (setup, call or teardown) or a collection error with more
    than one rank, prints the failure to stderr with a "[rank r/size]" prefix
    and calls MPI.COMM_WORLD.Abort(1), so the job ends at once instead of the
    other ranks hanging in their next collective (DISTLA_TEST_NO_ABORT=1 turns
    this off);
  * makes hypothesis deterministic and identical on every rank.

Tests marked ``gpu`` skip, on every rank alike, unless CuPy imports and sees a CUDA device
on every rank; ``--require-gpu`` turns that skip into a failure (on the GPU machine, so that
a broken CuPy install cannot pass as "all skipped"): ``python -m pytest -m gpu --require-gpu``
and ``mpirun -n 2 python -m pytest --with-mpi -m gpu --require-gpu``.

The run dir is $DISTLA_TEST_TMPDIR if set (tests/run.sh sets it), else
<--basetemp> if given, else a fresh directory under the system temp dir.

If $DISTLA_TEST_RESULTS names a file, every rank appends one line per test,
"rank<TAB>outcome<TAB>nodeid", which tests/run.sh sums up (this survives an
Abort, unlike --junitxml).

distla itself is deliberately not imported here, so an import error in the
package shows up as an error in the tests that import it.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

# --------------------------------------------------------------------------
# helpers

_MPI_STATE: dict = {}  # rank, size, comm, rundir, logfile; empty when not under --with-mpi


def _with_mpi(config) -> bool:
    return bool(
        config.getoption("--with-mpi", default=False)
        or config.getoption("--only-mpi", default=False)
    )


def _launcher_size() -> int:
    """Number of ranks according to the launcher's environment (1 if none)."""
    for var in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE"):  # MPICH/Hydra, Open MPI
        val = os.environ.get(var, "")
        if val.isdigit():
            return int(val)
    return 1


def _prefix(text: str, prefix: str) -> str:
    return "".join(prefix + line for line in text.splitlines(keepends=True))


class _ResultLog:
    """Appends the final outcome of every test (and collection errors) to a file."""

    def __init__(self, path: str, rank: int):
        self.path = path
        self.rank = rank
        self.outcomes: dict[str, str] = {}

    def write(self, outcome: str, nodeid: str) -> None:
        nodeid = nodeid.replace("\t", " ").replace("\n", " ")
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(f"{self.rank}\t{outcome}\t{nodeid}\n")
            f.flush()

    def pytest_collectreport(self, report):
        if report.failed:
            self.write("error", report.nodeid or "<collection>")

    def pytest_runtest_logreport(self, report):
        prev = self.outcomes.get(report.nodeid)
        if report.failed:
            outcome = "failed"
        elif report.when == "call":
            outcome = report.outcome  # passed, or skipped (xfail / pytest.skip)
        elif report.when == "setup" and report.skipped:
            outcome = "skipped"
        else:
            return
        if prev != "failed":
            self.outcomes[report.nodeid] = outcome

    def pytest_runtest_logfinish(self, nodeid, location):
        outcome = self.outcomes.pop(nodeid, None)
        if outcome is not None:
            self.write(outcome, nodeid)


_RESULTS: _ResultLog | None = None


# --------------------------------------------------------------------------
# GPU tests


_GPU_MISSING: list = []  # why gpu-marked tests cannot run here (set at collection)


def pytest_addoption(parser):
    parser.addoption("--require-gpu", action="store_true", default=False,
                     help="fail (instead of skip) gpu-marked tests when CuPy or a CUDA "
                          "device is missing")


def _gpu_missing() -> str:
    """Why this rank cannot run GPU tests ('' when it can): CuPy and a CUDA device."""
    try:
        import cupy
    except Exception as exc:  # ImportError, or a CUDA library that fails to load
        return f"CuPy is not importable ({type(exc).__name__}: {exc})"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:
        return f"no CUDA device ({type(exc).__name__}: {exc})"
    return "" if count > 0 else "no CUDA device"


def pytest_collection_modifyitems(config, items):
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items:
        return
    why = _gpu_missing()
    if _MPI_STATE:  # every rank skips, or none: a GPU test is collective like any other
        reasons = _MPI_STATE["comm"].allgather(why)
        why = next((f"rank {r}: {w}" for r, w in enumerate(reasons) if w), "")
    if not why:
        return
    _GPU_MISSING.append(why)
    if config.getoption("--require-gpu"):
        return  # pytest_runtest_setup fails them
    for item in gpu_items:
        item.add_marker(pytest.mark.skip(reason=f"gpu test: {why}"))


def pytest_runtest_setup(item):
    if (_GPU_MISSING and item.get_closest_marker("gpu") is not None
            and item.config.getoption("--require-gpu")):
        pytest.fail(f"--require-gpu: {_GPU_MISSING[0]}", pytrace=False)


# --------------------------------------------------------------------------
# hypothesis


def _configure_hypothesis(config, mpi: bool) -> None:
    try:
        from hypothesis import HealthCheck, Phase, settings
    except ImportError:
        return
    # Timing-based deadlines are flaky on small, oversubscribed machines.
    settings.register_profile("distla", deadline=None)
    if not config.getoption("--hypothesis-profile", default=None):
        settings.load_profile("distla")
    if mpi:
        # Every rank must draw the same examples in the same order, or the
        # ranks disagree about the collectives they call: derandomize, no
        # example database, and no shrinking/explaining (those re-run the test
        # on the failing rank only).
        current = settings()
        settings.register_profile(
            "distla-mpi",
            parent=current,
            derandomize=True,
            database=None,
            deadline=None,
            phases=[Phase.explicit, Phase.generate],
            suppress_health_check=list(
                set(current.suppress_health_check) | {HealthCheck.too_slow}
            ),
        )
        settings.load_profile("distla-mpi")


# --------------------------------------------------------------------------
# configuration


def _default_rundir(comm) -> Path:
    root = Path(tempfile.gettempdir()) / f"distla-pytest-{os.getuid()}"
    path = None
    if comm.rank == 0:
        root.mkdir(parents=True, exist_ok=True)
        # keep the 5 most recent runs
        old = sorted(root.glob("run-*"), key=lambda p: p.stat().st_mtime)
        for stale in old[:-4]:
            shutil.rmtree(stale, ignore_errors=True)
        path = tempfile.mkdtemp(prefix="run-", dir=root)
    return Path(comm.bcast(path, root=0))


@pytest.hookimpl(trylast=True)  # after the terminal plugin made its reporter
def pytest_configure(config):
    global _RESULTS
    mpi = _with_mpi(config)

    if not mpi and _launcher_size() > 1:
        raise pytest.UsageError(
            f"launched with {_launcher_size()} MPI ranks but without --with-mpi: "
            "use  mpiexec -n N python -m pytest --with-mpi -m mpi"
        )

    _configure_hypothesis(config, mpi)

    rank = 0
    if mpi:
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
        rank, size = comm.Get_rank(), comm.Get_size()
        if os.environ.get("DISTLA_TEST_TMPDIR"):
            rundir = Path(os.environ["DISTLA_TEST_TMPDIR"])
        elif config.option.basetemp:
            rundir = Path(config.option.basetemp)
        else:
            rundir = _default_rundir(comm)
        rundir = rundir.resolve()
        rundir.mkdir(parents=True, exist_ok=True)
        config.option.basetemp = str(rundir / f"rank{rank}")
        _MPI_STATE.update(comm=comm, rank=rank, size=size, rundir=rundir, logfile=None)

        if config.option.verbose < 0:
            # -q: drop pytest-mpi's 20-line "MPI Information" section.
            for plugin in config.pluginmanager.get_plugins():
                if type(plugin).__name__ == "MPIPlugin":
                    plugin._is_testing_mpi = False

        if rank != 0:
            logfile = open(rundir / f"rank{rank}.log", "w", encoding="utf-8", buffering=1)
            _MPI_STATE["logfile"] = logfile
            reporter = config.pluginmanager.get_plugin("terminalreporter")
            if reporter is not None:
                config.pluginmanager.unregister(reporter)
                config.pluginmanager.register(
                    pytest.TerminalReporter(config, logfile), "terminalreporter"
                )

    results = os.environ.get("DISTLA_TEST_RESULTS")
    if results:
        _RESULTS = _ResultLog(results, rank)
        config.pluginmanager.register(_RESULTS, "distla-result-log")


def pytest_unconfigure(config):
    logfile = _MPI_STATE.get("logfile")
    if logfile is not None:
        logfile.close()
        _MPI_STATE["logfile"] = None


def pytest_report_header(config):
    if _MPI_STATE:
        return [
            f"distla: {_MPI_STATE['size']} MPI ranks; per-rank logs and basetemp "
            f"under {_MPI_STATE['rundir']}"
        ]
    return None


# --------------------------------------------------------------------------
# abort on failure under MPI


def _abort(what: str, text: str) -> None:
    rank, size = _MPI_STATE["rank"], _MPI_STATE["size"]
    tag = f"[rank {rank}/{size}] "
    msg = (
        f"\n{tag}{'=' * 20} FAILED {what} {'=' * 20}\n"
        + _prefix(text.rstrip("\n") + "\n", tag)
        + f"{tag}aborting MPI_COMM_WORLD (a failure on one rank would leave the "
        f"others hanging in their next collective)\n"
    )
    logfile = _MPI_STATE.get("logfile")
    if logfile is not None:
        logfile.write(msg)
        logfile.flush()
    err = sys.__stderr__ or sys.stderr
    err.write(msg)
    err.flush()
    sys.stdout.flush()
    _MPI_STATE["comm"].Abort(1)


def _should_abort() -> bool:
    return (
        bool(_MPI_STATE)
        and _MPI_STATE["size"] > 1
        and os.environ.get("DISTLA_TEST_NO_ABORT", "") in ("", "0")
    )


@pytest.hookimpl(trylast=True)
def pytest_runtest_logreport(report):
    if report.failed and _should_abort():
        if _RESULTS is not None:
            _RESULTS.write("failed", report.nodeid)
        text = report.longreprtext
        for title, content in report.sections:
            text += f"\n----- {title} -----\n{content}"
        _abort(f"{report.nodeid} ({report.when})", text)


@pytest.hookimpl(trylast=True)
def pytest_collectreport(report):
    if report.failed and _should_abort():
        # _ResultLog already recorded it (its hook runs first).
        _abort(f"collecting {report.nodeid or '<session>'}", report.longreprtext)


# --------------------------------------------------------------------------
# fixtures


@pytest.fixture(scope="session")
def comm():
    """MPI.COMM_WORLD (all ranks of the job; a single rank in serial runs)."""
    from mpi4py import MPI

    return MPI.COMM_WORLD


@pytest.fixture(scope="module")
def grids(comm):
    """Every grid shape of the job's size, in both rank orders (collective to build)."""
    from distla import ProcessGrid
    from distla.testing import grid_shapes
    return [ProcessGrid(p, q, comm, order=o) for p, q in grid_shapes(comm.size)
            for o in ("row", "col")]
