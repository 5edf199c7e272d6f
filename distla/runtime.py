"""Running a command on every rank: user-facing errors with exit codes, an argument parser
that raises instead of exiting, the watchdog that turns one rank's failure into the same exit
on every rank (:func:`guarded`), and :func:`run_main`. Shared by the ``distla`` CLI and
``distla.bench``.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
import threading
import time
import traceback

from .errors import on_root

__all__ = ["CommandError", "UsageError", "ArgumentParser", "guarded", "run_main",
           "apply_runtime_defaults", "env_rank", "on_root", "launcher_free_env",
           "EXIT_USAGE", "EXIT_NUMERIC", "EXIT_THRESH"]

EXIT_USAGE, EXIT_NUMERIC, EXIT_THRESH = 2, 1, 3


class CommandError(Exception):
    """A user-facing error: printed as one line on rank 0, exit code ``code`` on all ranks.
    Raise it identically on every rank (it is not agreed on)."""

    def __init__(self, message: str, code: int = EXIT_USAGE):
        super().__init__(message)
        self.code = code

    def __reduce__(self):
        return (type(self), (str(self), self.code))


class UsageError(CommandError):
    """Bad command-line syntax (raised by :class:`ArgumentParser` instead of exiting)."""

    def __init__(self, message: str, usage: str = ""):
        super().__init__(message, EXIT_USAGE)
        self.usage = usage

    def __reduce__(self):
        return (type(self), (str(self), self.usage))


def env_rank() -> int:
    """This process's rank according to the launcher's environment (0 without a launcher);
    needs no MPI initialization. Not collective."""
    for var in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "MV2_COMM_WORLD_RANK",
                "SLURM_PROCID"):
        v = os.environ.get(var, "")
        if v.isdigit():
            return int(v)
    return 0


# What a launcher sets for one job (Open MPI's mpirun/ORTE and PMIx, MPICH's Hydra, PMI): a
# child launched with these believes it is a rank of the parent's job. User configuration
# (OMPI_MCA_plm=isolated, OMPI_MCA_btl, OMPI_ALLOW_RUN_AS_ROOT, ...) is kept: a container
# may need it for mpirun to start at all (without its OMPI_MCA_plm=isolated, a GPU machine's
# Open MPI looked for ssh and failed).
_JOB_STATE = ("PMI_", "PMIX_", "HYDRA_", "MPI_LOCAL", "OMPI_COMM_WORLD_", "OMPI_UNIVERSE_",
              "OMPI_FILE_LOCATION", "OMPI_APP_CTX_", "OMPI_FIRST_RANKS", "OMPI_NUM_APP_CTX",
              "OMPI_ARGV", "OMPI_COMMAND", "OMPI_MCA_orte_", "OMPI_MCA_ess", "OMPI_MCA_pmix",
              "OMPI_MCA_initial_wdir", "OMPI_MCA_shmem_RUNTIME_QUERY", "OMPI_MCA_rmaps_",
              "OMPI_MCA_mpi_yield_when_idle", "OMPI_MCA_hwloc_base_binding", "OMPI_MCA_ompi_")


def launcher_free_env(env=None) -> dict:
    """A copy of ``env`` (default ``os.environ``) without the launcher's per-job state, for
    starting a fresh MPI job (``mpiexec ...``) from inside a rank. Not collective."""
    env = os.environ if env is None else env
    return {k: v for k, v in env.items() if not k.startswith(_JOB_STATE)}


class ArgumentParser(argparse.ArgumentParser):
    """argparse that raises :class:`UsageError` instead of exiting, and prints help only on
    rank 0 (parsing is deterministic, so every rank reaches the same outcome)."""

    def error(self, message):
        raise UsageError(message, self.format_usage())

    def _print_message(self, message, file=None):
        if env_rank() == 0:
            super()._print_message(message, file)


def _local_ranks_env() -> int:
    for var in ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE", "PMI_SIZE"):
        v = os.environ.get(var, "")
        if v.isdigit() and int(v) > 0:
            return int(v)
    return 1


def apply_runtime_defaults() -> None:
    """Process defaults for command-line runs, before MPI starts (not collective; library code
    never calls this). With several ranks on a node and none of OPENBLAS_NUM_THREADS /
    OMP_NUM_THREADS / MKL_NUM_THREADS set, each rank's BLAS gets cores / ranks-on-node threads
    (not all the cores each); with more ranks than cores, MPICH's waiting ranks yield the CPU
    (MPIR_CVAR_POLLS_BEFORE_YIELD=1, unless set)."""
    ranks = _local_ranks_env()
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    if ranks > cores:
        os.environ.setdefault("MPIR_CVAR_POLLS_BEFORE_YIELD", "1")
    if ranks > 1 and not any(v in os.environ for v in
                             ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")):
        k = max(1, cores // ranks)
        os.environ["OMP_NUM_THREADS"] = str(k)  # for libraries loaded from now on
        try:
            import scipy.linalg  # noqa: F401 - load SciPy's OpenBLAS too
            for setf, _ in _openblas_libs():
                setf(k)
        except Exception:  # noqa: BLE001 - best effort: a tuning, not a requirement
            pass


def _world():
    from mpi4py import MPI
    return MPI.COMM_WORLD


def _abort_timeout() -> float:
    try:
        return float(os.environ.get("DISTLA_ABORT_TIMEOUT", "300"))
    except ValueError:
        return 300.0


@contextlib.contextmanager
def guarded(comm=None, timeout: float | None = None):
    """Collective: run a block on every rank and agree on its outcome
    (:func:`distla.errors.agree`): an exception on any rank is raised on every rank.

    Last resort against hangs: a rank that failed while the others are stuck elsewhere (a bug:
    library code must agree on failures itself) prints its error and calls
    ``MPI.COMM_WORLD.Abort(2)`` after ``timeout`` seconds (default $DISTLA_ABORT_TIMEOUT or
    300)."""
    from .errors import agree
    comm = _world() if comm is None else comm
    try:
        yield
    except Exception as e:  # noqa: BLE001 - agreed below
        if isinstance(e, CommandError):  # raised identically everywhere by contract
            raise
        with _watchdog(comm, e, _abort_timeout() if timeout is None else timeout):
            agree(comm, e)
        raise  # pragma: no cover - agree always raises here
    agree(comm, None)


@contextlib.contextmanager
def _watchdog(comm, exc, timeout):
    done = threading.Event()

    def fire():
        if done.wait(timeout):
            return
        rank = comm.Get_rank()
        sys.stderr.write(f"distla: error: [rank {rank}] {_describe(exc)} (the other ranks did "
                         f"not respond within {timeout:g}s; aborting the job)\n")
        sys.stderr.flush()
        time.sleep(1.0)   # let the launcher forward the message before Abort tears it down
        _world().Abort(EXIT_USAGE)

    t = threading.Thread(target=fire, daemon=True)
    t.start()
    try:
        yield
    finally:
        done.set()


def _describe(exc: BaseException) -> str:
    import numpy as np
    msg = str(exc) or type(exc).__name__
    if msg.startswith("[rank 0] "):  # agreed errors name the lowest failing rank; 0 is implied
        msg = msg[len("[rank 0] "):]
    if isinstance(exc, (CommandError, ValueError, TypeError, OSError, np.linalg.LinAlgError,
                        RuntimeError, MemoryError, ImportError)):
        if isinstance(exc, MemoryError):
            return f"out of memory ({msg})"
        if isinstance(exc, ImportError) and not isinstance(exc, ModuleNotFoundError):
            return msg
        if isinstance(exc, ModuleNotFoundError):
            return f"{msg} (is the optional dependency installed?)"
        return msg
    return f"{type(exc).__name__}: {msg}"


def _exit_code(exc: BaseException) -> int:
    import numpy as np
    if isinstance(exc, CommandError):
        return exc.code
    if isinstance(exc, np.linalg.LinAlgError):
        return EXIT_NUMERIC
    return EXIT_USAGE


def run_main(fn, argv, prog: str = "distla", verbose_flag: str = "--verbose",
             terms=None) -> int:
    """Run ``fn(argv)`` (a command body, collective) and turn any exception into one line
    ``PROG: error: ...`` on rank 0 and an exit code; returns that code (0 on success). With
    ``--verbose`` (or its short form ``-v``) in ``argv``, rank 0 also prints the
    traceback. ``terms(text)``: the message in the command's terms (the library's keyword
    advice as the command's options)."""
    try:
        rc = fn(argv)
        return int(rc or 0)
    except KeyboardInterrupt:
        raise
    except BrokenPipeError:      # the reader of stdout went away (distla info | head): as
        try:                     # a shell tool, stop quietly; no error line about the pipe
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except OSError:
            pass
        return 0
    except BaseException as e:  # noqa: BLE001
        if isinstance(e, SystemExit):
            raise
        rank = _safe_rank()
        if rank == 0:
            sys.stdout.flush()
            if isinstance(e, UsageError) and e.usage:
                sys.stderr.write(e.usage)
            flags = {verbose_flag} | ({"-v"} if verbose_flag == "--verbose" else set())
            if flags & set(argv or []) and not isinstance(e, UsageError):
                traceback.print_exception(type(e), e, e.__traceback__, file=sys.stderr)
            msg = _describe(e)
            sys.stderr.write(f"{prog}: error: {terms(msg) if terms else msg}\n")
            sys.stderr.flush()
        return _exit_code(e)


def _safe_rank() -> int:
    if "mpi4py.MPI" in sys.modules:
        from mpi4py import MPI
        if MPI.Is_initialized() and not MPI.Is_finalized():
            return MPI.COMM_WORLD.Get_rank()
    return env_rank()


def _openblas_libs():
    """(set, get) function pairs of the OpenBLAS libraries loaded in this process (NumPy's
    and SciPy's wheels each bundle one). Not collective."""
    import ctypes
    try:
        with open("/proc/self/maps") as f:
            paths = sorted({p for p in (ln.split()[-1] for ln in f if " /" in ln)
                            if "openblas" in p.lower() and (p.endswith(".so") or ".so." in p)})
    except OSError:
        return []
    out = []
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for suffix in ("", "64_"):
            for prefix in ("scipy_openblas_", "openblas_"):
                try:
                    setf = getattr(lib, f"{prefix}set_num_threads{suffix}")
                    getf = getattr(lib, f"{prefix}get_num_threads{suffix}")
                except AttributeError:
                    continue
                setf.argtypes, getf.restype = [ctypes.c_int], ctypes.c_int
                out.append((setf, getf))
                break
            else:
                continue
            break
    return out
