"""Benchmark: the whole job (generate, read, rhs, solve, check, write x) beside its floors.

The job a user runs -- generate (or reuse) a matrix file, read it, make the right-hand side,
factor and solve, check the residual, write x -- each phase beside its floor measured in the
same run.

    mpiexec -n 2 python -m distla bench job --n 8192 --dir /tmp/job --device cpu
    python -m distla bench job --n 32768 --nb 1024 --device gpu --dir /scratch --cold

Phases (impl 'distla') and their floors (impl 'floor'):

* ``generate`` (only when the file is absent; ``distla generate``'s writer) -- a sequential
  ``np.save`` (h5py write for ``--format h5``) of an array of the same size on rank 0;
* ``read`` (:func:`distla.io.read_matrix`) -- the file's bytes read in order into one reused
  buffer on rank 0 (h5py's read for HDF5); beside it (impl 'numpy') ``np.load`` of the file;
* ``rhs`` (``B = A @ ones`` and ||A||_inf in one pass, as ``distla solve`` does) -- one local
  GEMV of each rank's part of A on its device (the time of the slowest rank);
* ``solve`` (:func:`distla.linalg.solve`: factor + triangular solves) -- the factorization
  alone, run once more (what ``distla bench cholesky``/``lu`` measure);
* ``residual`` (SRESID, BERR in one pass, as ``distla solve`` does) -- one local GEMV;
* ``write`` (x to ``DIR/distla-bench-job-KIND-nN-DTYPE[-sSEED]-x.npy`` or ``...-x.h5:/x``) -- a
  sequential save of the same size;
* ``total`` -- the sum of the phases (generate excluded) and the sum of the floors.

Files in ``--dir``: the matrix ``distla-bench-job-KIND-nN-DTYPE[-sSEED].npy`` (``.h5:/A``;
``-sSEED`` for a nonzero ``--seed``) and the solution (``...-x.npy``, ``...-x.h5:/x``). The
benchmark never overwrites a file it did not write: ``DIR/.distla-bench-job.json`` lists the
files it made there, and a target that exists without being listed there is refused before any
work (exit 2), except an n x n matrix under the matrix's name, which is only read (e.g. one
written by ``distla generate``). The residual check (SRESID) is judged against ``distla
solve``'s threshold (``check``, ``check_thresh``; a FAIL exits 3).

Repetitions (``--repeat``) run in this process: the first is labelled ``cache='first'`` (a
fresh process: CuPy loads or compiles its kernels, creates handles and pools), the others
``'warm'``. ``--cold`` first runs the job once more in a fresh subprocess (``python -m
distla bench job``, under ``mpiexec -n RANKS`` when there are several ranks or
``DISTLA_MPIEXEC`` names a launcher; a failure there is a warning, not an error) and reports
its phases with ``cache='cold'`` plus its whole wall time (start-up and imports included) as
phase ``process``. Floors run after the job's phases, so
they never warm the first repetition's kernels.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

from ..runtime import launcher_free_env
from . import common

NAME = "job"
_KIND = {"cholesky": "spd", "tlr": "spd"}          # other methods: a general matrix
_FACTOR_FLOPS = {"cholesky": "cholesky", "tlr": "cholesky"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The benchmark's options. Not collective."""
    from ..linalg.methods import METHODS
    parser.add_argument("--n", type=int, default=4096, help="matrix size (default 4096)")
    parser.add_argument("--nb", type=int, default=None,
                        help="block size (default: distla's default for the device and n)")
    parser.add_argument("--grid", default=None, metavar="PxQ", help="process grid")
    parser.add_argument("--device", choices=("cpu", "gpu"), default=None,
                        help="cpu or gpu (default: gpu if CuPy sees one)")
    parser.add_argument("--dtype", choices=("float64", "float32"), default="float64")
    parser.add_argument("--dir", default=None, metavar="DIR",
                        help="where the matrix distla-bench-job-KIND-nN-DTYPE[-sSEED].npy (.h5) "
                             "and the solution ...-x.npy (.h5) are written (the matrix is reused "
                             "by later runs, as is an n x n matrix of that name written "
                             "otherwise; created if absent). Files of these names that this "
                             "benchmark did not write (it lists its own in "
                             "DIR/.distla-bench-job.json) are never overwritten: the run is "
                             "refused. Default: a temporary directory, removed after")
    parser.add_argument("--format", choices=("npy", "h5"), default="npy")
    parser.add_argument("--method", "-m", choices=METHODS, default="cholesky")
    parser.add_argument("--repeat", type=int, default=2,
                        help="repetitions of the job in this process (default 2: first, warm)")
    parser.add_argument("--cold", action="store_true",
                        help="also run the job once in a fresh subprocess (one-shot cost)")
    parser.add_argument("--no-floors", dest="floors", action="store_false",
                        help="skip the floor measurements")
    parser.add_argument("--seed", type=common.seed_int, default=0)


def _command() -> str:
    argv = sys.argv[1:]
    if "job" in argv:
        argv = argv[argv.index("job"):]
    return "distla bench " + " ".join(argv)


PREFIX = "distla-bench-job-"
MANIFEST = ".distla-bench-job.json"     # in --dir: the files this benchmark wrote there


def _paths(d: str, fmt: str, kind: str, n: int, dtype: str, seed: int = 0):
    """The matrix's and the solution's paths in ``d`` (the seed is part of the name unless
    it is the default 0, so that another --seed never reuses another matrix)."""
    stem = os.path.join(d, f"{PREFIX}{kind}-n{n}-{dtype}" + (f"-s{seed}" if seed else ""))
    if fmt == "h5":
        return f"{stem}.h5:/A", f"{stem}-x.h5:/x"
    return f"{stem}.npy", f"{stem}-x.npy"


def _file(path: str) -> str:
    """The file of a matrix path (``f.h5:/x`` -> ``f.h5``)."""
    from .. import h5io
    return h5io.split_path(path)[0] if h5io.is_h5(path) else path


def _ours(d: str) -> set:
    """The names of the files this benchmark wrote in ``d`` (its manifest). Rank 0."""
    import json
    try:
        with open(os.path.join(d, MANIFEST), encoding="utf-8") as f:
            names = json.load(f)
        return set(names) if isinstance(names, list) else set()
    except (OSError, ValueError):
        return set()


def _claim(d: str, *paths) -> None:
    """Record ``paths`` as written by this benchmark in ``d``'s manifest. Rank 0."""
    import json
    names = sorted(_ours(d) | {os.path.basename(_file(p)) for p in paths})
    tmp = os.path.join(d, f".{MANIFEST}.{os.getpid()}.partial")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(names, f)
    os.replace(tmp, os.path.join(d, MANIFEST))


def _prepare_dir(d: str, n: int, apath: str, xpath: str) -> None:
    """Create ``d`` (--dir) if needed, and refuse a target that exists but was not written by
    this benchmark and would be overwritten: the solution ``xpath``, or a matrix ``apath``
    that is not an n x n matrix to reuse (reading a matrix written otherwise, e.g. by
    ``distla generate``, harms nothing). Rank 0; ValueError."""
    if os.path.lexists(d) and not os.path.isdir(d):
        raise ValueError(f"--dir {d}: exists and is not a directory")
    try:
        os.makedirs(d, exist_ok=True)
    except OSError as e:
        raise ValueError(f"--dir {d}: cannot create the directory "
                         f"({e.strerror or e})") from None
    if not os.access(d, os.W_OK | os.X_OK):
        raise ValueError(f"--dir {d}: the directory is not writable")
    ours = _ours(d)
    for path in (apath, xpath):
        p = _file(path)
        if os.path.lexists(p) and os.path.basename(p) not in ours and \
                not (path == apath and _have(apath, n, None)):
            raise ValueError(f"--dir {d}: {os.path.basename(p)} exists and was not written "
                             f"by distla bench job (not in {MANIFEST}); it is never "
                             f"overwritten: move it or choose another --dir")


def _have(path, n, comm) -> bool:
    """Collective: whether ``path`` holds an n x n matrix already (checked on rank 0; not
    collective with ``comm`` None)."""
    from .. import io
    ok = None
    if comm is None or comm.Get_rank() == 0:
        try:
            ok = io.inspect(path).shape == (n, n)
        except (OSError, ValueError):
            ok = False
    return ok if comm is None else comm.bcast(ok, root=0)


def _timed(fn, device, comm):
    """Collective: (seconds, result) of one run of ``fn()``, synchronized, max over ranks."""
    return common.timed_result(fn, device, comm, reps=1)


# ---------------------------------------------------------------------------------------
# floors (rank 0 alone for the sequential I/O; every rank for the local GEMV)
# ---------------------------------------------------------------------------------------
def _seq_read(path: str) -> float:
    """The file system's sequential rate: the file's bytes in order into one reused 64 MiB
    buffer (what ``cat`` does; no allocation of the whole array); h5py's read for HDF5."""
    from .. import h5io
    buf = memoryview(bytearray(1 << 26))     # (allocated and zeroed before the clock)
    t0 = time.perf_counter()
    if h5io.is_h5(path):
        import h5py
        f, d = h5io.split_path(path)
        with h5py.File(f, "r") as h:
            h[d][...]
    else:
        with open(path, "rb", buffering=0) as f:
            while f.readinto(buf):
                pass
    return time.perf_counter() - t0


def _numpy_read(path: str) -> float:
    """``np.load`` of the file into a new array (its pages are faulted in as it fills)."""
    t0 = time.perf_counter()
    np.load(path)
    return time.perf_counter() - t0


def _seq_write(d: str, fmt: str, shape, dtype) -> float:
    a = np.full(shape, 1.0, dtype=dtype)             # filled outside the timed region
    fd, path = tempfile.mkstemp(prefix=f".{PREFIX}floor-", suffix=f".{fmt}", dir=d)
    os.close(fd)                                     # a new name: nobody's file
    try:
        t0 = time.perf_counter()
        if fmt == "h5":
            import h5py
            with h5py.File(path, "w") as h:
                h.create_dataset("a", data=a)
        else:
            with open(path, "wb") as f:
                np.save(f, a)
                f.flush()
        return time.perf_counter() - t0
    finally:
        if os.path.exists(path):
            os.unlink(path)


def _gemv_floor(A, device, comm) -> float:
    """Collective: one local GEMV of each rank's part of A (slowest rank)."""
    be = A.backend
    mloc, nloc = A.local_shape
    x = be.asarray(np.ones((nloc, 1), dtype=A.dtype, order="F"))
    y = be.zeros((mloc, 1), A.dtype)

    def gemv():
        if mloc and nloc:
            be.gemm("N", "N", 1.0, A.local, x, 0.0, y)
    gemv()                                           # untimed: library handles
    return common.timed(gemv, device, comm, reps=3)


def _factor_floor(A, method, device, comm):
    """Collective: seconds of the factorization alone (the factorization benchmarks' timer),
    or None for methods without a separate factorization."""
    from ..linalg import lu_factor
    from ..linalg.cholesky import cholesky
    from ..linalg.methods import LU_PIVOTING
    if method == "cholesky":
        fn = lambda W: cholesky(W, overwrite_a=True)
    elif method in LU_PIVOTING:
        fn = lambda W: lu_factor(W, pivoting=LU_PIVOTING[method], overwrite_a=True)
    else:
        return None
    return common.timed_result(fn, device, comm, reps=1, setup=A.copy)[0]


# ---------------------------------------------------------------------------------------
# the job
# ---------------------------------------------------------------------------------------
def _job(args, grid, device, nb, apath, xpath, comm) -> tuple[dict, object, object]:
    """Collective: one run of the job's phases; returns ({phase: seconds}, A, x-check)."""
    from .. import io
    from ..checks import product_and_norm, solve_checks
    from ..device import get_backend
    from ..errors import on_root
    from ..linalg import solve
    from ..matrix import DistMatrix
    dtype = np.dtype(args.dtype)
    t = {}

    def read():
        with get_backend(device).preloading(dtype):   # GPU ranks: libraries load beside
            return io.read_matrix(apath, grid, (nb, nb), device=device, dtype=dtype)
    t["read"], A = _timed(read, device, comm)
    ones = DistMatrix.from_function(grid, (args.n, 1), (nb, nb), lambda I, J: 1.0,
                                    dtype=dtype, device=device)
    t["rhs"], (B, anorm) = _timed(lambda: product_and_norm(A, ones), device, comm)
    t["solve"], X = _timed(lambda: solve(A, B, method=args.method), device, comm)
    t["residual"], res = _timed(lambda: solve_checks(A, X, B, anorm=anorm), device, comm)
    if args.method == "tlr":    # distla solve's threshold: the bound from A and X (untimed)
        res["thresh"] = common.default_threshold("tlr", {}, dtype, A=A, X=X, anorm=anorm)
    t["write"], _ = _timed(lambda: io.write_matrix(xpath, X, vector=True), device, comm)
    on_root(comm, lambda: _claim(os.path.dirname(_file(xpath)), xpath))
    return t, A, res


def _cold(args, comm, d, rec) -> list[dict]:
    """Collective: the job once in a fresh subprocess (rank 0 launches it, the others wait
    without spinning); its records with cache='cold' plus its whole wall time."""
    argv = sys.argv[1:]
    argv = argv[argv.index("job"):] if "job" in argv else ["job"]
    flags = {"--cold", "-q", "--quiet", "-v", "--verbose"}
    drop = flags | {"--json", "--plot", "--repeat", "--dir"}
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        key = a.split("=", 1)[0]
        if key in drop:
            skip = key not in flags and "=" not in a
            continue
        out.append(a)
    size = comm.Get_size()

    def launch():
        from . import load_records
        fd, path = tempfile.mkstemp(suffix=".jsonl")
        os.close(fd)
        cmd = [sys.executable, "-m", "distla", "bench", *out, "--dir", d, "--repeat", "1",
               "--no-floors", "--quiet", "--json", path]
        if size > 1 or os.environ.get("DISTLA_MPIEXEC"):
            mpiexec = os.environ.get("DISTLA_MPIEXEC") or shutil.which(
                "mpiexec", path=os.path.dirname(sys.executable) + os.pathsep +
                os.environ.get("PATH", ""))
            if not mpiexec:
                raise RuntimeError("--cold with several ranks needs mpiexec on PATH "
                                   "(or DISTLA_MPIEXEC)")
            cmd = [*mpiexec.split(), "-n", str(size), *cmd]
        env = launcher_free_env()      # not this job's launcher state
        t0 = time.perf_counter()
        try:
            p = subprocess.run(cmd, env=env, capture_output=True, text=True,
                               timeout=COLD_TIMEOUT)
            failed = None if p.returncode == 0 else \
                f"exit {p.returncode}: {(p.stdout + p.stderr).strip()[-600:]}"
        except (OSError, subprocess.TimeoutExpired) as e:   # no such mpiexec, or hung
            failed = f"{' '.join(cmd[:3])}...: {e}"
        wall = time.perf_counter() - t0
        try:
            if failed:                 # reported, not fatal: the in-process runs still count
                print(f"distla bench job: warning: --cold: the fresh job failed ({failed}); "
                      f"DISTLA_MPIEXEC / PATH choose its launcher",
                      file=sys.stderr, flush=True)
                return []
            recs = load_records(path, NAME)
        finally:
            os.unlink(path)
        for r in recs:
            r.update(cache="cold", command=_command())
        return recs + [rec("distla", "process", wall, cache="cold",
                           what="the whole fresh command: start-up, imports, MPI and "
                                "device init, the job")]
    return common.reference_rank0(launch, comm)


#: seconds the --cold fresh job may take before it counts as failed (a warning)
COLD_TIMEOUT = 3600


def run(args) -> list[dict]:
    """Collective over COMM_WORLD: run the benchmark; returns the records (rank 0's)."""
    from mpi4py import MPI

    from .. import io
    from ..errors import on_root
    comm = MPI.COMM_WORLD
    n = args.n
    if n < 1 or args.repeat < 1:
        raise ValueError("--n and --repeat must be positive")
    kind = _KIND.get(args.method, "general")
    own = args.dir is None
    d = on_root(comm, lambda: tempfile.mkdtemp(prefix="distla-job-") if own else args.dir)
    apath, xpath = _paths(d, args.format, kind, n, args.dtype, args.seed)
    on_root(comm, lambda: _prepare_dir(d, n, apath, xpath))    # before any work
    device = args.device or common.default_device()
    grid = common.make_grid(args.grid, comm)
    nb = args.nb or common.default_nb(n, device, grid)
    dtype = np.dtype(args.dtype)
    base = dict(nb=nb, grid=f"{grid.nprow}x{grid.npcol}", ranks=comm.size,
                device=device, dtype=dtype.name, method=args.method, format=args.format,
                seed=args.seed, command=_command())
    nfl = common.flops(_FACTOR_FLOPS.get(args.method, "lu"), n)
    thresh = common.default_threshold(args.method, {}, dtype)
    gemv_fl = 2.0 * n * n

    def rec(impl, phase, seconds, nflops=None, **extra):
        r = common.record(NAME, impl, n=n, seconds=seconds, nflops=nflops, **base)
        r["phase"] = phase
        r.setdefault("tflops", None)
        r.update(extra)
        return r

    rows = []
    try:
        if not _have(apath, n, comm):
            from ..problems import problem_entries
            fn = problem_entries(kind, n, seed=args.seed)
            tg, _ = _timed(lambda: io.write_npy_generated(apath, grid, (n, n), (nb, nb), fn,
                                                          dtype=dtype), "cpu", comm)
            on_root(comm, lambda: _claim(d, apath))
            rows.append(rec("distla", "generate", tg))
            if args.floors:
                tw = common.reference_rank0(lambda: _seq_write(d, args.format, (n, n), dtype),
                                            comm)
                rows.append(rec("floor", "generate", tw, what="sequential write, rank 0"))
        if args.cold:
            rows += _cold(args, comm, d, rec)
        A = None
        for rep in range(args.repeat):
            del A
            t, A, res = _job(args, grid, device, nb, apath, xpath, comm)
            cache = "first" if rep == 0 else "warm"
            fl = {"rhs": gemv_fl, "solve": nfl + 2.0 * n * n, "residual": 2 * gemv_fl}
            for ph, s in t.items():
                r = rec("distla", ph, s, fl.get(ph), cache=cache, rep=rep)
                if ph == "residual":
                    r.update(sresid=res["sresid"], berr=res["berr"])
                    common.judge(r, res.get("thresh", thresh), "sresid")
                rows.append(r)
            rows.append(rec("distla", "total", sum(t.values()), cache=cache, rep=rep))
        if args.floors:
            fr = common.reference_rank0(lambda: _seq_read(apath), comm)
            tg = _gemv_floor(A, device, comm)
            tf = _factor_floor(A, args.method, device, comm)
            tw = common.reference_rank0(lambda: _seq_write(d, args.format, (n, 1), dtype),
                                        comm)
            if args.format == "npy":
                tn = common.reference_rank0(lambda: _numpy_read(apath), comm)
                rows.append(rec("numpy", "read", tn, what="np.load, rank 0"))
            floors = {"read": (fr, None, "sequential read into one buffer, rank 0"),
                      "rhs": (tg, gemv_fl, "one local GEMV per rank"),
                      "solve": (tf, nfl, "factorization alone"),
                      "residual": (tg, gemv_fl, "one local GEMV per rank"),
                      "write": (tw, None, "sequential write, rank 0")}
            for ph, (s, f, what) in floors.items():
                if s is not None:
                    rows.append(rec("floor", ph, s, f, what=what))
            rows.append(rec("floor", "total", sum(s for s, _, _ in floors.values()
                                                  if s is not None)))
        del A
    finally:
        comm.Barrier()
        if own and comm.Get_rank() == 0:
            shutil.rmtree(d, ignore_errors=True)
    return rows


if __name__ == "__main__":
    from . import main_argv
    sys.exit(main_argv(["job", *sys.argv[1:]], prog="python -m distla.bench.job"))
