"""Helpers shared by the benchmarks (``distla/bench/NAME.py``), the command line and examples.

* :func:`parse_grid` / :func:`make_grid` -- "PxQ" strings and the grid they name.
* :func:`sync`, :func:`timed`, :func:`timed_result` -- wall time that means the same thing on
  every rank: device synchronized and ranks barriered around each repetition, best of ``reps``,
  maximum over ranks.
* :func:`reference_rank0` -- run a single-process reference (NumPy / CuPy) on rank 0 while the
  other ranks wait without spinning.
* :func:`flops`, :func:`tflops`, :func:`record` -- flop counts and result records.
* :func:`default_threshold`, :func:`judge` -- PASS/FAIL of a record's residual checks against
  a threshold (``check``, ``check_thresh``: what ``distla solve`` prints and records; the
  framework exits 3 when a record FAILs).
* :func:`check_options` -- the common options' ranges, checked before any work.
* :func:`spd_matrix`, :func:`general_matrix`, :func:`covariance_matrix`, :func:`make_problem`
  -- test problems generated block by block from global indices (never formed on one rank; the
  same matrix whatever the grid, block size or device).
* :func:`add_problem_arguments` -- the usual --n/--nb/--grid/--device/--dtype/--reps options.
* :func:`format_table` -- the aligned text table the framework prints.

Collective-ness is stated per function.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import time

import numpy as np

# the grid, device and block-size defaults and the test problems live in the library; the
# benchmarks re-export them under their historical names
from ..defaults import NB_HELP, default_device, default_nb, make_grid, parse_grid
from ..problems import (
    PROBLEM_KINDS,
    covariance_matrix,
    general_matrix,
    global_normal,
    make_problem,
    problem_entries,
    spd_matrix,
)
from ..runtime import _openblas_libs  # noqa: F401 - used by the CLI's info

__all__ = ["parse_grid", "make_grid", "parse_sizes", "default_device", "sync", "timed",
           "timed_result", "timed_fresh", "memory_fields", "regenerated_residual",
           "free_device_pool", "step_loop",
           "reference_rank0", "flops", "tflops", "record", "spd_matrix",
           "general_matrix", "covariance_matrix", "make_problem", "PROBLEM_KINDS",
           "add_problem_arguments", "format_table", "default_nb", "ranks_on_node",
           "reference_threads", "reference_thread_counts", "best_over_threads",
           "blas_threads", "global_normal", "problem_entries",
           "default_threshold", "judge", "check_options"]


# ---------------------------------------------------------------------------------------
# grids and sizes
# ---------------------------------------------------------------------------------------


def seed_int(text: str) -> int:
    """argparse type of a ``--seed``: a non-negative int, as NumPy's generators and
    :meth:`DistMatrix.random` take (a negative one would alias a large one)."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if not 0 <= v < 2 ** 64:
        raise argparse.ArgumentTypeError(f"must be a non-negative int below 2^64, not {v}")
    return v


def parse_sizes(values) -> list[int]:
    """``["1000", "2000,4000"]`` or ``"1000,2000"`` -> ``[1000, 2000, 4000]`` (also accepts
    ``1k``/``32K`` = 1024 multiples). Raises ValueError. Not collective."""
    if isinstance(values, (int, np.integer)):
        return [int(values)]
    if isinstance(values, str):
        values = [values]
    out = []
    for v in values:
        for tok in str(v).replace(",", " ").split():
            t = tok.strip().lower()
            mult = 1
            if t.endswith("k"):
                mult, t = 1024, t[:-1]
            try:
                n = int(t) * mult
            except ValueError:
                raise ValueError(f"--n: a size must be a positive integer, not {tok!r}") \
                    from None
            if n < 1:
                raise ValueError(f"--n: a size must be a positive integer, not {tok!r}")
            out.append(n)
    if not out:
        raise ValueError("no sizes given")
    return out


# ---------------------------------------------------------------------------------------
# timing
# ---------------------------------------------------------------------------------------
def sync(device) -> None:
    """Wait for all queued work on this rank's device (a no-op on 'cpu'). ``device`` is
    'cpu', 'gpu' or a Backend. Not collective."""
    name = getattr(device, "name", device)
    if name == "gpu":
        import cupy
        cupy.cuda.runtime.deviceSynchronize()


def timed_result(fn, device="cpu", comm=None, reps: int = 1, warmup: int = 0, setup=None,
                 clock=time.perf_counter):
    """Collective over ``comm`` (default COMM_WORLD): run ``fn()`` (or ``fn(setup())``, the
    setup untimed, e.g. a fresh copy of the input) ``warmup + reps`` times, each time
    synchronizing the device and barriering before and after. Returns ``(best_seconds,
    last_result)``; the time of a repetition is the maximum over ranks, so every rank returns
    the same number. ``clock``: wall time by default; ``time.process_time`` measures the
    process's CPU time instead (CPU ranks on a loaded machine). The one timer of every
    distributed benchmark."""
    from mpi4py import MPI
    comm = MPI.COMM_WORLD if comm is None else comm
    best = math.inf
    result = None
    for i in range(int(warmup) + max(1, int(reps))):
        result = None              # the previous result is freed before the next setup/run
        arg = setup() if setup is not None else None
        sync(device)
        comm.Barrier()
        t0 = clock()
        result = fn(arg) if setup is not None else fn()
        sync(device)
        dt = clock() - t0
        comm.Barrier()
        dt = comm.allreduce(dt, op=MPI.MAX)
        if i >= warmup:
            best = min(best, dt)
        del arg
    return best, result


def best_local(fn, device="cpu", reps: int = 1, warmup: int = 0, setup=None) -> float:
    """Not collective (one process, e.g. a single-device reference on rank 0): the best of
    ``reps`` timings of ``fn()`` (or ``fn(setup())``, setup untimed), device synchronized."""
    best = math.inf
    for i in range(int(warmup) + max(1, int(reps))):
        arg = setup() if setup is not None else None
        sync(device)
        t0 = time.perf_counter()
        fn(arg) if setup is not None else fn()
        sync(device)
        if i >= warmup:
            best = min(best, time.perf_counter() - t0)
        del arg
    return best


def profiled(fn, device="cpu", comm=None, overhead_clock="cpu") -> dict:
    """Collective: run ``fn()`` once under a :class:`distla.trace.Tracer` and return
    ``{"t_profiled": wall seconds, "t_<phase>": seconds, ...}``, each the maximum over ranks
    (phases any rank saw; device seconds on GPU ranks). When the driver marks ``"step"``
    phases, also ``steps``, ``step_host_us`` (wall time per step), ``step_overhead_us`` and
    ``step_overhead_median_us`` (mean and median host time per step outside library calls:
    kernels, device reads, messages; on ``overhead_clock``, by default this thread's CPU time,
    see :class:`distla.trace.Tracer`) and ``step_lib_calls`` (library calls per step), each
    the maximum over ranks."""
    from mpi4py import MPI

    from ..trace import Tracer
    comm = MPI.COMM_WORLD if comm is None else comm
    sync(device)
    comm.Barrier()
    t0 = time.perf_counter()
    with Tracer(device=device, overhead_clock=overhead_clock) as tr:
        fn()
        sync(device)
    out = {"t_profiled": comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)}
    sec = tr.seconds()
    names = sorted({ph for names in comm.allgather(sorted(sec)) for ph in names})
    for ph in names:
        out[f"t_{ph}"] = comm.allreduce(sec.get(ph, 0.0), op=MPI.MAX)
    out.update(step_overhead(tr, comm))
    return out


def step_overhead(tr, comm) -> dict:
    """Collective: the per-step fields of :func:`profiled` from tracer ``tr`` (empty when no
    rank traced a ``"step"`` phase)."""
    from mpi4py import MPI
    steps = tr.calls.get("step", 0)
    if not comm.allreduce(steps, op=MPI.MAX):
        return {}
    m = max(steps, 1)
    mine = {"steps": steps, "step_host_us": 1e6 * tr.host["step"] / m,
            "step_overhead_us": tr.overhead_us("step") or 0.0,
            "step_overhead_median_us": tr.overhead_us_median("step") or 0.0,
            "step_lib_calls": tr.lib_calls["step"] / m}
    return {k: comm.allreduce(v, op=MPI.MAX) for k, v in mine.items()}


def timed_fresh(make, fn, device="cpu", comm=None, reps: int = 1, warmup: int = 0):
    """Collective over ``comm`` (default COMM_WORLD): like :func:`timed_result` for in-place
    work: each of the ``warmup + reps`` repetitions runs ``fn(make())`` on a freshly made
    input (``make`` untimed, e.g. regenerating the problem from its seed), and the previous
    result is dropped before the next input is made, so one input is alive at a time.
    Returns ``(best_seconds, last_result)``."""
    from mpi4py import MPI
    comm = MPI.COMM_WORLD if comm is None else comm
    best, result = math.inf, None
    for i in range(int(warmup) + max(1, int(reps))):
        result = None
        arg = make()
        sync(device)
        comm.Barrier()
        t0 = time.perf_counter()
        result = fn(arg)
        sync(device)
        dt = time.perf_counter() - t0
        del arg
        comm.Barrier()
        dt = comm.allreduce(dt, op=MPI.MAX)
        if i >= warmup:
            best = min(best, dt)
    return best, result


def tag_forced(rows: list[dict], force: bool) -> list[dict]:
    """``rows`` with ``force_loop: true`` on distla's rows when ``force`` (so the records of a
    forced loop and of the default path stay apart). Not collective."""
    if force:
        for r in rows:
            if r.get("impl") == "distla":
                r["force_loop"] = True
    return rows


@contextlib.contextmanager
def step_loop(force: bool):
    """Context: with ``force``, a 1 x 1 grid runs distla's step loop instead of handing the
    factorization to the local library (:mod:`distla.linalg._local`), e.g. to trace its steps
    at sizes where the library is used. Not collective (set it on every rank alike)."""
    if not force:
        yield
        return
    from ..linalg import _local
    saved = dict(_local.LOCAL_UP_TO)
    _local.LOCAL_UP_TO.update({k: 0 for k in saved})
    try:
        yield
    finally:
        _local.LOCAL_UP_TO.update(saved)


def free_device_pool(device) -> None:
    """On 'gpu': return the CuPy pool's cached blocks to CUDA, so that the peak measured next
    is the benchmark's own. Not collective."""
    if device == "gpu":
        import cupy
        cupy.get_default_memory_pool().free_all_blocks()


def memory_fields(peak, local_bytes: int, comm=None, n: int | None = None,
                  copies: int = 1) -> dict:
    """Collective: record fields from a :class:`distla.device.memory.PeakMemory` ``peak``:
    ``host_peak_mb`` (maximum resident set), ``device_peak_mb`` (GPU: the CuPy pool's
    high-water mark), ``local_mb`` (this rank's local matrix) and ``device_peak_ratio``
    (device peak / local matrix), each the maximum over ranks (MB = 1e6 bytes). With ``n``
    (the order run) also ``largest_n``: the largest order the same run (same grid, mode and
    block size) fits on every rank, extrapolated from the measured peak
    (:func:`distla.device.memory.largest_n`, ``copies`` matrices held at once) against the
    memory of the device holding the matrix (GPU ranks: the GPU; CPU ranks: the node's
    available memory shared by its ranks)."""
    from mpi4py import MPI

    from ..device import memory
    comm = MPI.COMM_WORLD if comm is None else comm
    out = {"local_mb": comm.allreduce(local_bytes, op=MPI.MAX) / 1e6,
           "host_peak_mb": comm.allreduce(peak.host_bytes or 0, op=MPI.MAX) / 1e6}
    dev = comm.allreduce(-1 if peak.device_bytes is None else peak.device_bytes, op=MPI.MAX)
    if dev >= 0:
        out["device_peak_mb"] = dev / 1e6
        ratios = comm.allgather(peak.device_bytes / local_bytes if local_bytes and
                                peak.device_bytes is not None else 0.0)
        out["device_peak_ratio"] = max(ratios)
    if n is not None:
        gpu = peak.device_bytes is not None
        if gpu:
            used, cap = peak.device_bytes, memory.capacity_bytes(True)
        else:   # the node's memory is shared by its ranks; the block's growth of the RSS
            used = max(0, (peak.host_bytes or 0) - peak.host_start)
            cap = memory.capacity_bytes(False) / ranks_on_node(comm) - peak.host_start
        mine = memory.largest_n(n, local_bytes, used, cap, copies) if local_bytes else \
            np.iinfo(np.int64).max
        out["largest_n"] = comm.allreduce(int(mine), op=MPI.MIN)
    return out


def regenerated_residual(kind: str, grid, n: int, seed: int, X, B, dtype=np.float64) -> float:
    """Collective: ScaLAPACK's SRESID ``||B - A X||_inf / (||A||_inf ||X||_inf eps n)`` for
    one right-hand side (X and B n x 1 DistMatrix), with A the benchmark problem ``kind``
    ('spd' or 'general', :func:`distla.problems.problem_entries`) regenerated from its seed
    in column slabs of this rank's part of A: no copy of A is kept for the check (in-place
    benchmarks factor the only one). Entries are cast to ``dtype`` as the factored matrix
    was; the products accumulate in float64."""
    from mpi4py import MPI

    from .. import layout
    from ..checks import eps
    from ..matrix import _SLAB_ELEMS
    be = B.backend
    xp = be.xp
    x = X.to_global(root=None)[:, 0].astype(np.float64)
    b = B.to_global(root=None)[:, 0].astype(np.float64)
    # my rows and columns of A in the layout of a matrix with X's row blocks
    P, Q, nb = grid.nprow, grid.npcol, X.mb
    rows = layout.local_indices(n, nb, grid.myrow, 0, P)
    cols = layout.local_indices(n, nb, grid.mycol, 0, Q)
    fn = problem_entries(kind, n, seed=seed, xp=xp)
    I = xp.asarray(rows).reshape(-1, 1)
    y = xp.zeros(len(rows), dtype=np.float64)
    rowabs = xp.zeros(len(rows), dtype=np.float64)
    xd = xp.asarray(x)
    w = max(1, min(len(cols), _SLAB_ELEMS[be.name] // max(1, len(rows)),
                   -(-len(cols) // 32)))
    for c in range(0, len(cols), w):
        Jv = xp.asarray(cols[c:c + w])
        vals = xp.asarray(fn(I, Jv.reshape(1, -1))).astype(dtype).astype(np.float64)
        vals = xp.broadcast_to(vals, (len(rows), Jv.size))
        y += vals @ xd[Jv]
        rowabs += xp.abs(vals).sum(axis=1)
        del vals
    part = np.concatenate([np.asarray(be.to_host(y)), np.asarray(be.to_host(rowabs))])
    grid.row_comm.Allreduce(MPI.IN_PLACE, part, op=MPI.SUM)   # sum over process columns
    y, rowabs = part[:len(rows)], part[len(rows):]
    rmax = float(np.max(np.abs(b[rows] - y))) if len(rows) else 0.0
    amax = float(rowabs.max()) if len(rows) else 0.0
    rmax, amax = grid.allreduce(rmax, "max"), grid.allreduce(amax, "max")
    xnorm = float(np.max(np.abs(x))) if n else 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(rmax / (amax * xnorm * eps(np.dtype(dtype)) * n)) if n else 0.0


def timed(fn, device="cpu", comm=None, reps: int = 1, warmup: int = 0,
          clock=time.perf_counter) -> float:
    """Collective: best-of-``reps`` seconds of ``fn()`` (see :func:`timed_result`)."""
    return timed_result(fn, device, comm, reps, warmup, clock=clock)[0]


def reference_rank0(fn, comm=None, poll: float = 0.01):
    """Collective over ``comm`` (default COMM_WORLD): ``fn()`` runs on rank 0 only (e.g. a
    single-process NumPy or CuPy reference) and its result (picklable) is returned on every
    rank. The other ranks wait in a sleeping poll, so they leave the CPU to rank 0. An exception
    on rank 0 is raised on every rank. ``fn`` must not communicate (no collective can complete
    while the other ranks wait here): compute what needs ``comm`` before, e.g.
    ``k = ranks_on_node(comm); reference_rank0(lambda: ref(k))``."""
    from mpi4py import MPI

    from ..errors import agree
    comm = MPI.COMM_WORLD if comm is None else comm
    result, err = None, None
    if comm.Get_rank() == 0:
        try:
            result = fn()
        except Exception as e:  # noqa: BLE001 - agreed below
            err = e
    req = comm.Ibarrier()
    while not req.Test():
        time.sleep(poll)
    agree(comm, err)
    return comm.bcast(result, root=0)


def ranks_on_node(comm=None) -> int:
    """Collective over ``comm`` (default COMM_WORLD): how many of its ranks share this node
    (a shared-memory split) -- the cores (or GPUs) a run uses on one node."""
    from mpi4py import MPI
    comm = MPI.COMM_WORLD if comm is None else comm
    local = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())
    k = local.Get_size()
    local.Free()
    return k


def reference_threads(comm=None) -> int:
    """Collective over ``comm``: the BLAS threads of a one-process CPU reference, the cores
    the run uses on this node: its ranks here, but at most the node's cores (4 ranks on a
    2-core machine gave the reference 4 threads on 2 cores: 5.3 s for what 1 thread does in
    0.015 s, and a bogus speedup)."""
    return max(1, min(ranks_on_node(comm), os.cpu_count() or 1))


def reference_thread_counts(comm=None, given: int | None = None) -> tuple:
    """Collective over ``comm``: the BLAS thread counts a one-process CPU reference is timed
    with, the fastest counting: ``(given,)`` when the user chose one (``--ref-threads``),
    else :func:`reference_threads` and, when that is more than one, 1 as well. On a busy
    node threaded BLAS can be orders of magnitude slower than one thread (its threads spin
    against the other work: a 2-thread Cholesky of n = 256 took 0.4-0.67 s against 0.0004 s
    with one), which recorded speedups of 57-85x for distla; the one-thread timing bounds
    that."""
    if given:
        return (int(given),)
    k = reference_threads(comm)
    return (k, 1) if k > 1 else (k,)


def best_over_threads(counts, measure):
    """Not collective (a rank-0 reference): ``(seconds, threads)``, the least of ``measure()``
    (seconds) run under each BLAS thread count of ``counts`` (:func:`blas_threads`; threads
    None when they could not be controlled)."""
    best = None
    for k in counts:
        with blas_threads(k) as got:
            t = measure()
        if best is None or t < best[0]:
            best = (t, got)
    return best


@contextlib.contextmanager
def blas_threads(k: int | None):
    """Context: NumPy's and SciPy's BLAS use ``k`` threads inside the block (threadpoolctl
    when installed, else the OpenBLAS libraries' own setters); yields the count in effect
    (None when it could not be controlled, or ``k`` is None). Not collective."""
    if k is None:
        yield None
        return
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        threadpool_limits = None
    if threadpool_limits is not None:
        with threadpool_limits(limits=int(k), user_api="blas"):
            yield int(k)
        return
    import numpy  # noqa: F401 - make sure both libraries are loaded
    import scipy.linalg  # noqa: F401
    libs = _openblas_libs()
    if not libs:
        yield None
        return
    old = [g() for _, g in libs]
    for s, _ in libs:
        s(int(k))
    try:
        yield int(libs[0][1]())
    finally:
        for (s, _), o in zip(libs, old):
            s(o)


def fits(nbytes: float, device: str) -> bool:
    """Whether ``nbytes`` fit in this rank's free memory (90% of the GPU's free memory on
    'gpu', 80% of the available host memory on 'cpu'). Not collective."""
    if device == "gpu":
        import cupy
        free, _ = cupy.cuda.runtime.memGetInfo()
        return nbytes <= 0.9 * free
    try:
        avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return True
    return nbytes <= 0.8 * avail


# ---------------------------------------------------------------------------------------
# flops and records
# ---------------------------------------------------------------------------------------
def flops(op: str, n: int, nrhs: int = 0, m: int | None = None, k: int | None = None,
          dtype=None) -> float:
    """Conventional flop counts: 'gemm' 2mnk (m = k = n by default), 'cholesky' n^3/3 + n^2/2,
    'lu' 2n^3/3 - n^2/2 (LAPACK's counts for potrf and getrf), 'solve' 2 n^2 nrhs (two
    triangular solves), 'cholesky_solve' / 'lu_solve' factorization + solve; in real flops,
    four per operation for a complex ``dtype`` (a complex multiply-add is four real multiplies
    and four adds: LAPACK's and ScaLAPACK's convention). Not collective."""
    if dtype is not None and np.dtype(dtype).kind == "c":
        return 4.0 * flops(op, n, nrhs, m, k)
    n = float(n)
    if op == "gemm":
        m = n if m is None else float(m)
        k = n if k is None else float(k)
        return 2.0 * m * n * k
    if op == "cholesky":
        return n ** 3 / 3.0 + n ** 2 / 2.0
    if op == "lu":
        return 2.0 * n ** 3 / 3.0 - n ** 2 / 2.0
    if op == "solve":
        return 2.0 * n * n * nrhs
    if op == "cholesky_solve":
        return flops("cholesky", n) + flops("solve", n, nrhs)
    if op == "lu_solve":
        return flops("lu", n) + flops("solve", n, nrhs)
    raise ValueError(f"unknown operation {op!r}")


def tflops(nflops: float, seconds: float) -> float:
    """TFLOP/s (0 when ``seconds`` is not positive). Not collective."""
    return nflops / seconds / 1e12 if seconds > 0 else 0.0


def stream(args, rec: dict, comm) -> dict:
    """Append ``rec`` to ``--json``'s file now, on rank 0 (the framework then does not write it
    again at the end), so that a long sweep stopped by a time limit keeps what it measured.
    Returns ``rec``. Call on every rank (only rank 0 writes)."""
    path = getattr(args, "json", None)
    if path:
        if comm.Get_rank() == 0:
            append_jsonl(path, [rec])
        rec[STREAMED] = True
    return rec


def local_library(A, kind: str, gemm: str = "native") -> bool:
    """Whether the factorization of ``A`` ('potrf' or 'getrf') was one call of the local
    library (a 1 x 1 grid: LAPACK, cuSOLVER; the step loop's nb and lookahead then did not
    apply), as the drivers decide it. Not collective."""
    from ..linalg._local import use_local
    return A.backend.computes_in_fp32(gemm or "native") and use_local(A, kind)


def json_safe(obj):
    """``obj`` as standard JSON data: every non-finite float (NaN, inf) as None (``null``),
    NumPy scalars as Python numbers (booleans as booleans, integers as ints), anything else
    as its text."""
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if isinstance(obj, (bool, int, str)) or obj is None:
        return obj
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, np.integer):
        return int(obj)
    try:
        v = float(obj)
    except (TypeError, ValueError):
        return str(obj)
    return v if math.isfinite(v) else None


def json_line(rec) -> str:
    """One record as a line of standard JSON (:func:`json_safe`: NaN and infinities are
    null, as ``distla solve --json`` writes them)."""
    return json.dumps(json_safe(rec), allow_nan=False)


def jsonable(v):
    """JSON's fallback for record values: numbers as floats (NumPy scalars), else text."""
    try:
        return float(v)
    except (TypeError, ValueError):
        return str(v)


STREAMED = "_streamed"   # record key: already written by stream()


def append_jsonl(path, rows) -> None:
    """Append each record of ``rows`` to the JSON-lines file ``path`` (nothing when ``path``
    is None). Not collective: the caller's rank writes."""
    if not path:
        return
    from ..filebase import append_json_lines
    append_json_lines(path, [json_line(r) for r in rows])


def record(bench: str, impl: str, *, n: int, seconds: float, nflops: float | None = None,
           **extra) -> dict:
    """One result row: ``{"bench", "impl", "n", ..., "seconds", "tflops"}`` plus ``extra``
    (e.g. nb, grid, ranks, device, dtype, resid); ``tflops`` is None without ``nflops`` (an
    operation with no flop count), so every row has the field. ``impl`` is 'distla' or the
    reference's name ('numpy', 'cupy', 'scipy', ...). Not collective."""
    rec = {"bench": bench, "impl": impl, "n": int(n)}
    rec.update(extra)
    rec["seconds"] = float(seconds)
    if nflops is not None:
        rec["tflops"] = tflops(nflops, seconds)
    else:
        rec.setdefault("tflops", None)
    return rec


# ---------------------------------------------------------------------------------------
# checks: PASS / FAIL against a stated threshold
# ---------------------------------------------------------------------------------------
def default_threshold(method: str, kw: dict, dtype, A=None, X=None, anorm=None) -> float:
    """The scaled residual's PASS/FAIL threshold: ScaLAPACK's testers use 3 for Cholesky and
    1 for LU (SRESID is scaled by ``n eps``). A TLR solve is exact for ``A + E`` with
    ``||E||_F <= tol ||A||_F``, so ``||B - A X||_inf <= ||B - A X||_2 <= tol ||A||_F
    ||x||_2`` per column: its threshold is that bound in SRESID's units, ``3 max(1, tol
    ||A||_F max_j(||x_j||_2 / ||x_j||_inf) / (||A||_inf eps n))`` (``tol`` from ``-O tol``,
    else ``tlr.solve``'s default; None, fixed rank only, certifies nothing beyond eps), which
    needs A and X (collective then: one pass over A for ``||A||_F``, and one for
    ``||A||_inf`` unless ``anorm`` gives it, as the residual check does); without them the
    loosest form of the bound, ``3 max(1, tol / eps)`` (``||A||_F <= sqrt(n) ||A||_inf``,
    ``||x||_2 <= sqrt(n) ||x||_inf``). On covariance matrices the residuals measured
    0.02-0.07 of the bound (tol 1e-2 .. 1e-8)."""
    if method != "tlr":
        return 3.0 if method == "cholesky" else 1.0
    import inspect

    from ..checks import eps as unit_roundoff
    from ..tlr import solve as tlr_solve
    tol = kw.get("tol", inspect.signature(tlr_solve).parameters["tol"].default)
    eps = unit_roundoff(dtype)
    if A is None or X is None or not tol or not A.n:
        return 3.0 * max(1.0, (tol or eps) / eps)
    x = np.asarray(X.to_global(None), dtype=np.complex128 if X.dtype.kind == "c"
                   else np.float64)
    xinf = np.abs(x).max(axis=0)
    shape = np.where(xinf > 0, np.linalg.norm(x, axis=0) / np.where(xinf > 0, xinf, 1), 0)
    anorm = A.norm(np.inf) if anorm is None else anorm
    bound = tol * A.norm("fro") * float(shape.max(initial=0.0)) / (anorm * eps * A.n)
    return 3.0 * max(1.0, bound) if np.isfinite(bound) else 3.0 * max(1.0, tol / eps)


def judge(rec: dict, thresh: float, *keys) -> dict:
    """Set ``rec["check"]`` to 'PASS' when every value ``rec[k]`` of ``keys`` (absent or None:
    not measured, skipped) is at most ``thresh`` (NaN fails: :func:`distla.checks.passes`),
    else 'FAIL', and ``rec["check_thresh"] = thresh``, as ``distla solve``'s record. Returns
    ``rec``. Not collective."""
    from ..checks import passes
    vals = [rec[k] for k in keys if rec.get(k) is not None]
    rec["check"] = "PASS" if all(passes(v, thresh) for v in vals) else "FAIL"
    rec["check_thresh"] = float(thresh)
    return rec


# (option, smallest value, its wording): checked by check_options when the benchmark has it
_RANGES = (("reps", 1, "positive"), ("repeat", 1, "positive"), ("warmup", 0, "non-negative"),
           ("nb", 1, "positive"), ("tile", 1, "positive"), ("workspace", 1, "positive (MiB)"),
           ("ref_threads", 1, "positive"), ("nrhs", 1, "positive"), ("depth", 0,
           "non-negative"), ("max_rank", 0, "non-negative"), ("panel_leaf", 0,
           "non-negative"), ("update_group", 1, "positive"), ("lookahead", 0, "non-negative"))


def check_options(args) -> None:
    """ValueError (before any work) for a common option outside its range (``--reps 0``,
    ``--warmup -1``, ``--tile 0``, ...; an option left at None keeps its default). Not
    collective (deterministic: the same outcome on every rank)."""
    for name, low, words in _RANGES:
        v = getattr(args, name, None)
        if v is not None and v < low:
            raise ValueError(f"--{name.replace('_', '-')} must be {words}, not {v}")
    tol = getattr(args, "tol", None)
    if tol is not None and not 0 < tol < 1:
        raise ValueError(f"--tol must be in (0, 1), not {tol}")
    if getattr(args, "json", None) == "":
        raise ValueError("--json needs a file name (it was empty)")
    if getattr(args, "tree", "binary") != "binary" and \
            "tournament" not in (getattr(args, "pivoting", None) or ["tournament"]):
        raise ValueError(f"--tree {args.tree} applies to --pivoting tournament only")
    gemm = getattr(args, "gemm", None)
    if gemm not in (None, "native") and (getattr(args, "device", None) or
                                         default_device()) == "cpu":
        raise ValueError(f"--gemm {gemm}: CPU ranks have no {gemm} arithmetic (they compute "
                         f"every --gemm mode in float32, so the record would be mislabelled); "
                         f"use --device gpu, or --gemm native")


# ---------------------------------------------------------------------------------------
# problems (generated from global indices; the global matrix is never formed)
# ---------------------------------------------------------------------------------------


# ---------------------------------------------------------------------------------------
# options and output
# ---------------------------------------------------------------------------------------
def add_problem_arguments(parser: argparse.ArgumentParser, *, n=(1024,), nb=None, reps=3,
                          dtypes=("float64", "float32"), reference=True) -> None:
    """Add the usual benchmark options: ``--n N [N ...]`` (sizes; commas and 1k/32k accepted),
    ``--nb NB`` (default: :func:`default_nb`), ``--grid PxQ`` (default: squarest),
    ``--device cpu|gpu`` (default: gpu if one is visible), ``--dtype``, ``--reps`` (best of),
    ``--seed`` and, with ``reference``, ``--no-reference``. Use :func:`parse_sizes` on
    ``args.n``. Not collective."""
    parser.add_argument("--n", nargs="+", default=[str(v) for v in n], metavar="N",
                        help=f"matrix sizes (default: {' '.join(map(str, n))})")
    parser.add_argument("--nb", type=int, default=nb, metavar="NB",
                        help=NB_HELP)
    parser.add_argument("--grid", default=None, metavar="PxQ",
                        help="process grid (default: the squarest P x Q with P*Q = ranks)")
    parser.add_argument("--device", choices=("cpu", "gpu"), default=None,
                        help="cpu or gpu (default: gpu if CuPy sees one, else cpu)")
    parser.add_argument("--dtype", choices=tuple(dtypes), default=dtypes[0])
    parser.add_argument("--reps", type=int, default=reps, help=f"best of REPS (default {reps})")
    parser.add_argument("--seed", type=seed_int, default=0)
    if reference:
        parser.add_argument("--no-reference", dest="reference", action="store_false",
                            help="skip the single-process reference measurement")


def _fmt(v) -> str:
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        v = float(v)
        if v == 0:
            return "0"
        if v != v or abs(v) >= 1e5 or abs(v) < 1e-3:
            return f"{v:.3e}"
        return f"{v:.4g}"
    return str(v)


def format_table(records: list[dict], columns=None) -> str:
    """An aligned text table of ``records`` (columns: the union of keys in first-seen order,
    or ``columns``). Not collective."""
    if not records:
        return "(no results)"
    if columns is None:
        columns = []
        for r in records:
            columns += [k for k in r if k not in columns]
    rows = [[_fmt(r.get(c, "")) for c in columns] for r in records]
    widths = [max(len(c), *(len(row[i]) for row in rows)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.rjust(w) for c, w in zip(columns, widths)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(v.rjust(w) for v, w in zip(row, widths)) for row in rows]
    return "\n".join(lines)
