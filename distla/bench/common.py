"""Helpers shared by the benchmarks (``distla/bench/NAME.py``), the command line and examples.

* :func:`parse_grid` / :func:`make_grid` -- "PxQ" strings and the grid they name.
* :func:`sync`, :func:`timed`, :func:`timed_result` -- wall time that means the same thing on
  every rank: device synchronized and ranks barriered around each repetition, best of ``reps``,
  maximum over ranks.
* :func:`reference_rank0` -- run a single-process reference (NumPy / CuPy) on rank 0 while the
  other ranks wait without spinning.
* :func:`flops`, :func:`tflops`, :func:`record` -- flop counts and result records.
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
import math
import os
import re
import time

import numpy as np

__all__ = ["parse_grid", "make_grid", "parse_sizes", "default_device", "sync", "timed",
           "timed_result", "reference_rank0", "flops", "tflops", "record", "spd_matrix",
           "general_matrix", "covariance_matrix", "make_problem", "PROBLEM_KINDS",
           "add_problem_arguments", "format_table", "default_nb", "ranks_on_node",
           "blas_threads"]


# ---------------------------------------------------------------------------------------
# grids and sizes
# ---------------------------------------------------------------------------------------
_GRID_RE = re.compile(r"^\s*(\d+)\s*[xX*,]\s*(\d+)\s*$")


def parse_grid(spec) -> tuple[int, int] | None:
    """``"2x3"`` -> ``(2, 3)``; ``None``/``""``/``"auto"`` -> ``None`` (the squarest shape).
    Raises ValueError for anything else. Not collective."""
    if spec is None or (isinstance(spec, str) and spec.strip().lower() in ("", "auto")):
        return None
    if isinstance(spec, (tuple, list)) and len(spec) == 2:
        p, q = int(spec[0]), int(spec[1])
    else:
        m = _GRID_RE.match(str(spec))
        if not m:
            raise ValueError(f"grid must look like PxQ (e.g. 2x2), not {spec!r}")
        p, q = int(m.group(1)), int(m.group(2))
    if p < 1 or q < 1:
        raise ValueError(f"grid dimensions must be positive, not {p}x{q}")
    return p, q


def make_grid(spec=None, comm=None, order: str = "row"):
    """Collective: the ProcessGrid named by ``spec`` ("PxQ", a pair, or None for the squarest
    shape) over ``comm`` (default COMM_WORLD). A shape that does not match the rank count
    raises ValueError on every rank with a message saying how many ranks to start."""
    from mpi4py import MPI

    from ..grid import ProcessGrid, squarest_shape
    comm = MPI.COMM_WORLD if comm is None else comm
    size = comm.Get_size()
    shape = parse_grid(spec)  # deterministic: same outcome on every rank
    if shape is None:
        shape = squarest_shape(size)
    p, q = shape
    if p * q != size:
        raise ValueError(
            f"grid {p}x{q} needs {p * q} MPI ranks, but {size} "
            f"{'was' if size == 1 else 'were'} started: run with mpiexec -n {p * q}, or "
            f"pick a grid with P*Q = {size} (e.g. --grid {'x'.join(map(str, squarest_shape(size)))})")
    return ProcessGrid(p, q, comm=comm, order=order)


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
                raise ValueError(f"size must be a positive integer, not {tok!r}") from None
            if n < 1:
                raise ValueError(f"size must be a positive integer, not {tok!r}")
            out.append(n)
    if not out:
        raise ValueError("no sizes given")
    return out


def default_device() -> str:
    """'gpu' when CuPy sees a GPU, else 'cpu'. Not collective."""
    from ..device import gpu_available
    return "gpu" if gpu_available() else "cpu"


def default_nb(n: int, device: str, grid=None) -> int:
    """The default block size (the one table of it; README "Command line"), from one-H200 and
    2-core CPU measurements: 128 on CPU; on GPU 512, or 1024 once the local dimension
    ``n / max(P, Q)`` reaches 24576 (Cholesky n=32768 on one H200: 40.9 TFLOP/s at nb 1024;
    nb 512 wins below 16384, nb 256 loses everywhere). Shrunk so every process row and column
    gets at least one block of an ``n x n`` matrix. Not collective."""
    local = n / max(1, max(grid.nprow, grid.npcol)) if grid is not None else n
    nb = (1024 if local >= 24576 else 512) if device == "gpu" else 128
    if grid is not None:
        nb = min(nb, max(1, -(-n // max(grid.nprow, grid.npcol))))
    return max(1, min(nb, n))


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


def timed_result(fn, device="cpu", comm=None, reps: int = 1, warmup: int = 0):
    """Collective over ``comm`` (default COMM_WORLD): run ``fn()`` ``warmup + reps`` times,
    each time synchronizing the device and barriering before and after. Returns
    ``(best_seconds, last_result)``; the time of a repetition is the maximum over ranks, so
    every rank returns the same number."""
    from mpi4py import MPI
    comm = MPI.COMM_WORLD if comm is None else comm
    best = math.inf
    result = None
    for i in range(int(warmup) + max(1, int(reps))):
        sync(device)
        comm.Barrier()
        t0 = time.perf_counter()
        result = fn()
        sync(device)
        dt = time.perf_counter() - t0
        comm.Barrier()
        dt = comm.allreduce(dt, op=MPI.MAX)
        if i >= warmup:
            best = min(best, dt)
    return best, result


def profiled(fn, device="cpu", comm=None) -> dict:
    """Collective: run ``fn()`` once under a :class:`distla.trace.Tracer` and return
    ``{"t_profiled": wall seconds, "t_<phase>": seconds, ...}``, each the maximum over ranks
    (phases any rank saw; device seconds on GPU ranks)."""
    from mpi4py import MPI

    from ..trace import Tracer
    comm = MPI.COMM_WORLD if comm is None else comm
    sync(device)
    comm.Barrier()
    t0 = time.perf_counter()
    with Tracer(device=device) as tr:
        fn()
        sync(device)
    out = {"t_profiled": comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)}
    sec = tr.seconds()
    names = sorted({ph for names in comm.allgather(sorted(sec)) for ph in names})
    for ph in names:
        out[f"t_{ph}"] = comm.allreduce(sec.get(ph, 0.0), op=MPI.MAX)
    return out


def timed(fn, device="cpu", comm=None, reps: int = 1, warmup: int = 0) -> float:
    """Collective: best-of-``reps`` seconds of ``fn()`` (see :func:`timed_result`)."""
    return timed_result(fn, device, comm, reps, warmup)[0]


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
def flops(op: str, n: int, nrhs: int = 0, m: int | None = None, k: int | None = None) -> float:
    """Conventional flop counts (real arithmetic): 'gemm' 2mnk (m = k = n by default),
    'cholesky' n^3/3, 'lu' 2n^3/3, 'solve' 2 n^2 nrhs (two triangular solves),
    'cholesky_solve' / 'lu_solve' factorization + solve. Not collective."""
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


def record(bench: str, impl: str, *, n: int, seconds: float, nflops: float | None = None,
           **extra) -> dict:
    """One result row: ``{"bench", "impl", "n", ..., "seconds", "tflops"}`` plus ``extra``
    (e.g. nb, grid, ranks, device, dtype, resid). ``impl`` is 'distla' or the reference's name
    ('numpy', 'cupy', 'scipy', ...). Not collective."""
    rec = {"bench": bench, "impl": impl, "n": int(n)}
    rec.update(extra)
    rec["seconds"] = float(seconds)
    if nflops is not None:
        rec["tflops"] = tflops(nflops, seconds)
    return rec


# ---------------------------------------------------------------------------------------
# problems (generated from global indices; the global matrix is never formed)
# ---------------------------------------------------------------------------------------
PROBLEM_KINDS = ("spd", "general", "covariance")


def spd_matrix(grid, n: int, block=64, *, seed: int = 0, dtype=np.float64, device="cpu"):
    """Collective: a symmetric, strictly diagonally dominant (hence SPD) ``n x n`` matrix:
    ``a_ij = u(min(i,j), max(i,j)) - 0.5`` off the diagonal (u uniform in [0, 1) hashed from
    the seed and the indices) and ``a_ii = n``. Well conditioned (cond < 3)."""
    from ..matrix import DistMatrix
    from ..random import hashed_uniform

    def fn(I, J):
        xp = _xp_of(I)
        lo, hi = xp.minimum(I, J), xp.maximum(I, J)
        a = hashed_uniform(seed, lo, hi) - 0.5
        return xp.where(I == J, float(n), a)
    return DistMatrix.from_function(grid, (n, n), _pair(block), fn, dtype=dtype, device=device)


def general_matrix(grid, n: int, block=64, *, seed: int = 0, dtype=np.float64, device="cpu",
                   m: int | None = None):
    """Collective: an ``m x n`` (default square) matrix of independent standard normal entries
    (nonsingular with probability one; condition number grows like n)."""
    from ..matrix import DistMatrix
    return DistMatrix.random(grid, (n if m is None else m, n), _pair(block), seed=seed,
                             dtype=dtype, device=device)


def global_normal(m: int, n: int, seed: int, xp, dtype=np.float64):
    """The entries of :func:`general_matrix` (same seed) formed on one device as an ``m x n``
    column-major array, in column chunks so that the hashing temporaries stay ~16M entries
    (single-device references; not collective)."""
    from ..random import hashed_normal
    out = xp.empty((m, n), dtype=dtype, order="F")
    I = xp.arange(m, dtype=xp.int64).reshape(-1, 1)
    step = max(1, (1 << 24) // max(1, m))
    for j0 in range(0, n, step):
        J = xp.arange(j0, min(n, j0 + step), dtype=xp.int64).reshape(1, -1)
        out[:, j0:j0 + J.shape[1]] = hashed_normal(seed, I, J)
    return out


def covariance_matrix(grid, n: int, block=64, *, seed: int = 0, dtype=np.float64,
                      device="cpu", length: float = 0.1, nugget: float = 1e-2,
                      kernel: str = "sqexp"):
    """Collective: the covariance matrix of ``n`` jittered-grid points in the unit square
    (Morton-ordered, :func:`distla.covariance.points`) under the ``kernel`` 'sqexp'
    (squared exponential, the HiCMA/STARS-H "st-2D-sqexp" problem), 'exp' (exponential) or
    'matern' (nu = 3/2), with length scale ``length`` and ``nugget`` on the diagonal: SPD and
    data-sparse (low-rank off-diagonal tiles), as in a Gaussian-process likelihood."""
    from .. import covariance as cov
    kinds = {"sqexp": cov.SquaredExponential, "exp": cov.Exponential,
             "matern": lambda **k: cov.Matern(nu=1.5, **k)}
    if kernel not in kinds:
        raise ValueError(f"kernel must be one of {', '.join(kinds)}, not {kernel!r}")
    pts = cov.points(n, dim=2, kind="jittered", seed=seed)
    k = kinds[kernel](sigma=1.0, beta=length, nugget=nugget)
    return cov.covariance_matrix(grid, pts, k, _pair(block), device=device, dtype=dtype)


def problem_entries(kind: str, n: int, *, seed: int = 0, length: float = 0.1,
                    nugget: float = 1e-2, kernel: str = "sqexp", xp=np):
    """``fn(I, J)`` giving the entries of :func:`make_problem`'s matrix ``kind`` at global
    index arrays I (column) and J (row), for generating any part of it (not collective)."""
    from ..random import hashed_normal, hashed_uniform
    if kind == "spd":
        def fn(I, J):
            x = _xp_of(I)
            lo, hi = x.minimum(I, J), x.maximum(I, J)
            return x.where(I == J, float(n), hashed_uniform(seed, lo, hi) - 0.5)
        return fn
    if kind == "general":
        return lambda I, J: hashed_normal(seed, I, J)
    if kind == "covariance":
        from .. import covariance as cov
        kinds = {"sqexp": cov.SquaredExponential, "exp": cov.Exponential,
                 "matern": lambda **k: cov.Matern(nu=1.5, **k)}
        if kernel not in kinds:
            raise ValueError(f"kernel must be one of {', '.join(kinds)}, not {kernel!r}")
        pts = cov.points(n, dim=2, kind="jittered", seed=seed)
        return cov.entry_function(pts, kinds[kernel](sigma=1.0, beta=length, nugget=nugget),
                                  xp)
    raise ValueError(f"problem kind must be one of spd, general, covariance, not {kind!r}")


def make_problem(kind: str, grid, n: int, block=64, **kw):
    """Collective: ``spd_matrix``, ``general_matrix`` or ``covariance_matrix`` by name."""
    makers = {"spd": spd_matrix, "general": general_matrix, "covariance": covariance_matrix}
    if kind not in makers:
        raise ValueError(f"problem kind must be one of {', '.join(makers)}, not {kind!r}")
    return makers[kind](grid, n, block, **kw)


def _pair(block):
    return (block, block) if isinstance(block, (int, np.integer)) else tuple(block)


def _xp_of(a):
    if isinstance(a, np.ndarray):
        return np
    import cupy
    return cupy


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
                        help="block size (default: 128 on cpu, 512 on gpu, at most n/max(P,Q))")
    parser.add_argument("--grid", default=None, metavar="PxQ",
                        help="process grid (default: the squarest P x Q with P*Q = ranks)")
    parser.add_argument("--device", choices=("cpu", "gpu"), default=None,
                        help="cpu or gpu (default: gpu if CuPy sees one, else cpu)")
    parser.add_argument("--dtype", choices=tuple(dtypes), default=dtypes[0])
    parser.add_argument("--reps", type=int, default=reps, help=f"best of REPS (default {reps})")
    parser.add_argument("--seed", type=int, default=0)
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
