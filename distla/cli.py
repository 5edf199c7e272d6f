"""The ``distla`` command line (also ``python -m distla``).

Subcommands (every one is run by all ranks of the MPI job, e.g. ``mpiexec -n 4 distla solve``):

* ``solve``    -- solve A X = B from a .npy/.mtx/HDF5 file, print residuals, write X.
* ``generate`` -- write a test matrix (spd, general, covariance) to .npy, HDF5 or .mtx without
  forming it on one rank.
* ``bench``    -- the benchmarks (``distla bench NAME --help``; same as ``python -m
  distla.bench``).
* ``info``     -- ranks, grid, devices, MPI library, NCCL, BLAS, versions.

Errors: one line ``distla: error: ...`` on rank 0 and the same nonzero exit code on every rank
(2: bad usage or input, 1: numerical failure such as a matrix that is not positive definite, 3:
the scaled residual check failed). The machinery for that (:func:`run_main`, :func:`guarded`,
:class:`ArgumentParser`) is shared with ``distla.bench``.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import re
import socket
import sys
import time
import warnings

from . import layout
from .bench.common import default_threshold, flops, json_line, judge, seed_int
from .defaults import NB_HELP, default_nb, make_grid
from .errors import NotPositiveDefiniteError, on_root
from .filebase import append_json_lines, check_jsonl
from .grid import SettingError
from .linalg.methods import LU_PIVOTING, METHODS
from .problems import make_problem, problem_entries
from .runtime import (  # noqa: F401
    EXIT_NUMERIC,
    EXIT_THRESH,
    EXIT_USAGE,
    ArgumentParser,
    CommandError,
    UsageError,
    _world,
    apply_runtime_defaults,
    guarded,
    run_main,
)

__all__ = ["main", "run_main", "ArgumentParser", "CommandError", "UsageError", "guarded",
           "on_root", "METHODS"]



# ---------------------------------------------------------------------------------------
# errors that end a command
# ---------------------------------------------------------------------------------------


class Reporter:
    """Rank-0 output with --quiet / --verbose levels (0 quiet, 1 normal, 2 verbose)."""

    def __init__(self, comm, level: int = 1):
        self.rank0 = comm.Get_rank() == 0
        self.level = level

    def __call__(self, text: str = "", level: int = 1) -> None:
        if self.rank0 and self.level >= level:
            print(text, flush=True)


def _verbosity(args) -> int:
    return 0 if getattr(args, "quiet", False) else (2 if getattr(args, "verbose", False) else 1)


def _add_output_flags(p) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("-q", "--quiet", action="store_true", help="print nothing but errors")
    g.add_argument("-v", "--verbose", action="store_true",
                   help="more detail (generate: the phase timings; warmup: each step; "
                        "any command: the traceback of an error)")


# ---------------------------------------------------------------------------------------
# parser
# ---------------------------------------------------------------------------------------
def build_parser() -> ArgumentParser:
    from . import __version__
    p = ArgumentParser(
        prog="distla",
        description="Distributed dense linear algebra on MPI ranks (CPU or one GPU per rank). "
                    "Run every subcommand under your launcher, e.g. "
                    "'mpiexec -n 4 distla solve --matrix A.npy'.",
        epilog="Exit codes: 0 ok, 1 numerical failure (not SPD, singular), 2 bad usage or "
               "input, 3 scaled residual above the threshold (FAIL).")
    p.add_argument("--version", action="version", version=f"distla {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=ArgumentParser)
    sub.required = True

    s = sub.add_parser("solve", help="solve A X = B for a matrix file; print residuals",
                       description="Solve A X = B with A read from FILE (.npy and HDF5: "
                                   "each rank reads only its own blocks, .npy through MPI-IO; "
                                   "Matrix Market .mtx: read on rank 0). Without --rhs, B = A @ "
                                   "ones (so the exact solution is all ones; the forward error is "
                                   "printed too), or a seeded standard-normal B with "
                                   "--rhs-kind random.")
    s.add_argument("--matrix", "-A", required=True, metavar="FILE",
                   help="A: .npy, .mtx or file.h5:/dataset")
    s.add_argument("--rhs", "-b", metavar="FILE",
                   help="B: .npy, .mtx or file.h5:/dataset; n x k or a length-n vector "
                        "(default: see --rhs-kind)")
    s.add_argument("--rhs-kind", choices=("ones", "random"), default=None,
                   help="B when --rhs is not given: A @ ones (default) or standard normal")
    s.add_argument("--nrhs", type=int, default=None,
                   help="columns of a generated B (default 1; not with --rhs)")
    s.add_argument("--seed", type=seed_int, default=None,
                   help="seed of --rhs-kind random (default 0; only with it)")
    s.add_argument("--method", "-m", choices=METHODS, default="cholesky",
                   help="cholesky (SPD), gepp (LU, partial pivoting), calu (LU, tournament "
                        "pivoting), genp (LU, no pivoting), rbt (random butterflies + LU "
                        "without pivoting + refinement), tlr (tile low-rank Cholesky; "
                        "accuracy -O tol=1e-8). Default: cholesky")
    s.add_argument("--grid", "-g", metavar="PxQ",
                   help="process grid (default: the squarest with P*Q = ranks)")
    s.add_argument("--nb", type=int, metavar="NB",
                   help=NB_HELP)
    s.add_argument("--device", "-d", choices=("cpu", "gpu"), default="cpu",
                   help="where the matrix lives and is factored (default cpu)")
    s.add_argument("--dtype", choices=("float64", "float32"),
                   help="compute precision (default: the file's; a complex matrix stays "
                        "complex, in that precision)")
    s.add_argument("--out", "-o", metavar="FILE",
                   help="write X here: .npy (every rank writes its part, MPI-IO), "
                        "file.h5:/dataset (every rank its part) or .mtx (gathered on rank "
                        "0); not written when the residual check FAILs")
    s.add_argument("--option", "-O", action="append", default=[], metavar="KEY=VALUE",
                   help="extra keyword for the solver, e.g. -O tol=1e-8 (repeatable)")
    s.add_argument("--check", choices=("none", "residual", "full"), default="full",
                   help="after the solve: 'none'; 'residual' (ScaLAPACK's scaled residual "
                        "with PASS/FAIL against the tester's threshold); 'full' (default: "
                        "also the backward error, the forward error when x is known, and "
                        "the condition estimate)")
    s.add_argument("--no-check", dest="check", action="store_const", const="none",
                   help="same as --check none")
    s.add_argument("--thresh", type=float, metavar="T",
                   help="threshold for the scaled residual's PASS/FAIL (default: the "
                        "ScaLAPACK testers' 3 for Cholesky, 1 for the LU methods; for TLR "
                        "3 max(1, tol ||A||_F ||x||_2 / (||A||_inf ||x||_inf eps n))); FAIL "
                        "exits with code 3; not with --check none")
    s.add_argument("--progress", type=float, metavar="SECONDS",
                   help="seconds between progress lines on rank 0 (default: redrawn line "
                        "on a terminal, a plain line every 30 s otherwise; 0: none)")
    s.add_argument("--json", metavar="FILE", help="append a JSON line with the results")
    _add_output_flags(s)

    g = sub.add_parser("generate", help="write a test matrix (.npy, .h5:/dataset, .mtx)",
                       description="Write an n x n test matrix. For .npy every rank computes "
                                   "and writes its own blocks into the file, so it is never "
                                   "formed on one rank (any number of ranks may run it). "
                                   ".mtx output is gathered on rank 0 (moderate n only).")
    g.add_argument("--kind", "-k", choices=("spd", "general", "covariance"), default="spd",
                   help="spd: symmetric diagonally dominant; general: standard normal; "
                        "covariance: a kernel matrix of 2-D points (default spd)")
    g.add_argument("--n", "-n", type=int, required=True)
    g.add_argument("--out", "-o", required=True, metavar="FILE",
                   help=".npy, file.h5:/dataset (or .mtx)")
    g.add_argument("--seed", type=seed_int, default=0)
    g.add_argument("--dtype", choices=("float64", "float32"), default="float64")
    g.add_argument("--nb", type=int, default=256, help="block size used while writing")
    g.add_argument("--rhs-out", metavar="FILE",
                   help="also write b = A @ ones (a length-n vector) here")
    g.add_argument("--kernel", choices=("sqexp", "exp", "matern"), default=None,
                   help="covariance kernel: squared exponential (default), exponential, "
                        "Matern nu=3/2 (--kind covariance only)")
    g.add_argument("--length", type=float, default=None,
                   help="covariance length scale, > 0 (default 0.1; --kind covariance only)")
    g.add_argument("--nugget", type=float, default=None,
                   help="covariance diagonal nugget, >= 0 (default 1e-2; --kind covariance "
                        "only)")
    _add_output_flags(g)

    sub.add_parser("bench", help="run a benchmark (distla bench NAME --help)", add_help=False)
    sub.add_parser("model", help="performance model: predict, recommend, calibrate "
                   "(distla model --help)", add_help=False)

    w = sub.add_parser("warmup", help="compile every GPU kernel once (persistent cache)",
                       description="Run each solver, the checks and the file I/O once at a "
                       "small size so that CuPy's persistent kernel cache (CUPY_CACHE_DIR, "
                       "default ~/.cupy/kernel_cache) holds every kernel a job needs: later "
                       "one-shot runs pay no compilation. Run once per machine or image.")
    w.add_argument("--device", choices=("cpu", "gpu"), default=None,
                   help="gpu (default: what there is to compile) or cpu (runs the CPU paths "
                        "once, e.g. to check an installation)")
    w.add_argument("--n", type=int, default=512, help="problem size (default 512)")
    w.add_argument("--n-large", type=int, default=None, metavar="N",
                   help="second problem size, for the kernels CuPy keys by size class "
                        "(default: every rank's local matrix over 2048 rows; 0 skips it)")
    _add_output_flags(w)

    i = sub.add_parser("info", help="ranks, grid, devices, MPI, NCCL, BLAS, versions")
    i.add_argument("--grid", "-g", metavar="PxQ", help="grid to report (default: squarest)")
    i.add_argument("--json", action="store_true", help="print one JSON object instead")
    _add_output_flags(i)
    return p


def _parse_options(items) -> dict:
    kw = {}
    for item in items:
        if "=" not in item:
            raise CommandError(f"--option expects KEY=VALUE, got {item!r}")
        k, v = item.split("=", 1)
        k = k.strip().replace("-", "_")
        if not k.isidentifier():
            raise CommandError(f"--option: {k!r} is not a valid keyword name")
        if k in kw:
            raise CommandError(f"-O {k} given twice: give each option once")
        low = v.strip().lower()
        if low in ("true", "false"):
            kw[k] = low == "true"
        elif low in ("none", "null"):
            kw[k] = None
        else:
            for conv in (int, float):
                try:
                    kw[k] = conv(v)
                    break
                except ValueError:
                    continue
            else:
                kw[k] = v
    return kw


# ---------------------------------------------------------------------------------------
# shared steps
# ---------------------------------------------------------------------------------------
def _grid(spec, comm):
    """Collective: the grid named by ``--grid`` (deterministic checks, same error on every
    rank)."""
    try:
        return make_grid(spec, comm)
    except SettingError as e:
        raise CommandError(str(e)) from None
    except ValueError as e:
        raise CommandError(f"--grid: {e}") from None


def _check_device(device: str, comm, default: bool = False):
    """Collective: the Backend for ``device``; a clear error on every rank if some rank has no
    GPU (``default``: the device was the command's default, not the user's choice)."""
    from .device import get_backend, gpu_available
    if device == "gpu":
        have = comm.allgather(gpu_available())
        missing = [r for r, h in enumerate(have) if not h]
        if missing:
            ranks = ", ".join(map(str, missing[:8])) + (" ..." if len(missing) > 8 else "")
            raise CommandError(
                f"--device gpu{' (the default of distla warmup)' if default else ''} "
                f"requested, but no usable GPU on rank(s) {ranks} "
                f"(needs CuPy and a CUDA device: pip install 'distla[gpu]'; check "
                f"CUDA_VISIBLE_DEVICES); use --device cpu to run on CPUs")
    with guarded(comm):
        return get_backend(device, comm)


def _writable_format(path) -> bool:
    from . import h5io
    return h5io.is_h5(path) or str(path).lower().endswith((".npy", ".mtx", ".mm"))


def _inspect(path, comm, what):
    from . import io
    try:
        return on_root(comm, lambda: io.inspect(path))
    except (OSError, ValueError) as e:
        raise CommandError(f"{what}: {e}") from None




# -O options that distla solve sets itself (the residual check needs A and B unchanged and
# solves A X = B), and those only the solve entry points take (not the factorizations)
_CLI_OWNED = {"overwrite_a": "A must stay unchanged for the residual check",
              "overwrite_b": "B must stay unchanged for the residual check",
              "trans": "the command solves A X = B (the residual check assumes it)",
              "return_info": "the command asks for it itself",
              "pivoting": "the method chooses the pivoting; use --method gepp (partial), "
                          "calu (tournament) or genp (none)"}
_SOLVE_ONLY = {"precision", "factor_dtype", "max_iter", "fallback", "check_rcond"}


def _check_solver_options(method: str, kw: dict) -> None:
    """CommandError (before any work) for a -O option the command owns or that no function
    of ``method`` takes, naming the ones it does take."""
    from .linalg.solve import solver_options
    for k in kw:
        if k in _CLI_OWNED:
            raise CommandError(f"-O {k}: not settable in distla solve ({_CLI_OWNED[k]})")
    # what solve() passes on, and cho_factor's lower (Cholesky without solve-only options
    # runs cho_factor + cho_solve)
    takes = solver_options(method) | ({"lower"} if method == "cholesky" else set())
    takes -= set(_CLI_OWNED)
    bad = sorted(set(kw) - takes)
    if method == "cholesky" and "lower" in kw and _SOLVE_ONLY & kw.keys():
        raise CommandError(f"-O lower cannot be combined with -O "
                           f"{sorted(_SOLVE_ONLY & kw.keys())[0]} (the solve reads the lower "
                           f"triangle)")
    if bad:
        raise CommandError(f"-O {bad[0]}: not an option of --method {method} (its options: "
                           f"{', '.join(sorted(takes))})")
    mixed = str(kw.get("precision", "double")).lower() == "mixed"
    if (method == "cholesky" or method in LU_PIVOTING) and not mixed:
        for k in ("max_iter", "fallback"):
            if k in kw:
                raise CommandError(f"-O {k} applies with -O precision=mixed only (the "
                                   f"refinement of a mixed-precision solve), not to a "
                                   f"--method {method} solve in one precision")
    if method == "tlr":     # named by the option, before any work
        from .tlr import _args
        from .tlr.batched import METHODS as compressions
        for k, check in (("tol", _args.check_tol), ("max_rank", _args.check_max_rank)):
            if k in kw:
                try:
                    check(kw[k])
                except (TypeError, ValueError) as e:
                    raise CommandError(f"-O {k}={kw[k]}: {e}") from None
        if "compression" in kw and kw["compression"] not in compressions:
            raise CommandError(f"-O compression must be one of {', '.join(compressions)}, "
                               f"not {kw['compression']!r}")


def _method_hint(method: str, e: Exception) -> str | None:
    """The command's message for an A the Cholesky methods cannot take (not symmetric, not
    positive definite), with what to do in the command's terms; None for other errors. The
    same text on every rank."""
    if method not in ("cholesky", "tlr"):
        return None
    text = re.sub(r"^(\[rank \d+\] )?(solve_cholesky|solve|tlr\.[a-z_]+): ", "", str(e))
    if isinstance(e, NotPositiveDefiniteError):
        text = text.rstrip(".")
        return (f"--method {method}: {text}; for a matrix that is not positive definite use "
                f"--method gepp")
    if "not symmetric" in text or "not Hermitian" in text:
        text = re.sub(r"; \S+ reads only one triangle, so pass check_symmetric=False.*$", "",
                      text)
        return (f"--method {method}: {text}; for a general matrix use --method gepp "
                f"(-O check_symmetric=false reads the lower triangle only)")
    return None


def _solver(method: str):
    """The function ``f(A, B, **kw) -> (X, rcond or None, info or None)`` for ``method`` (the
    solvers are imported lazily so that the rest of the command line works whatever is
    installed): :func:`distla.linalg.solve` with ``return_info``, whose info carries the
    condition estimate (its LinAlgWarning is issued there) and, for mixed precision, what the
    solve did. A is left unchanged. ``-O lower=...`` (cho_factor's) takes cho_factor +
    cho_solve_rcond, where ``anorm`` (||A||_inf when already known) spares a pass over A."""
    try:
        from . import linalg
        from .linalg.condition import warn_if_ill_conditioned
        from .pblas import norm
        from .validate import check_finite_result
    except ImportError as e:
        raise CommandError(f"--method {method}: the solvers cannot be imported ({e})") from None

    def run(A, B, anorm=None, **kw):     # (kw checked by cmd_solve before any work)
        if method != "cholesky" or "lower" not in kw:
            # the library's own solve: its checks and warnings (growth, gradual underflow,
            # a non-finite X from finite input), which estimate rcond (and warn) themselves;
            # its warnings named as the command's (--method M) rather than the function's
            caught = []
            try:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    X, info = linalg.solve(A, B, method=method, return_info=True, **kw)
            except (ValueError, NotPositiveDefiniteError) as e:   # (raised on every rank)
                hint = _method_hint(method, e)
                if hint is None:
                    raise
                raise CommandError(hint, EXIT_NUMERIC if isinstance(
                    e, NotPositiveDefiniteError) else EXIT_USAGE) from None
            finally:             # (also before an error: the warnings may say why)
                for w in caught:
                    text = re.sub(r"^(solve_lu|solve_cholesky|solve|rbt_solve|tlr\.solve)"
                                  r"(?=:| \()", f"--method {method}", str(w.message))
                    warnings.warn(text, w.category, stacklevel=2)
            return X, (info.get("rcond") if isinstance(info, dict) else
                       getattr(info, "rcond", None)), info
        # -O lower=...: cho_factor's option (the solve reads the lower triangle)
        anorm = norm(A, 1) if anorm is None else anorm   # Hermitian: ||A||_1 = ||A||_inf
        c = linalg.cho_factor(A, **kw)
        X, rc = linalg.cho_solve_rcond(c, B, anorm)
        warn_if_ill_conditioned(rc, A.dtype, f"--method {method}")
        if kw.get("check_finite", True):   # finite A and B: a non-finite X is overflow
            check_finite_result(X, f"--method {method}")
        return X, rc, None
    return run


# ---------------------------------------------------------------------------------------
# solve
# ---------------------------------------------------------------------------------------
def cmd_solve(args, comm) -> int:
    import numpy as np

    from . import io
    from .matrix import DistMatrix
    from .progress import Progress, Timings, format_rate

    say = Reporter(comm, _verbosity(args))
    if comm.Get_rank() != 0:  # one copy of each warning, not one per rank
        warnings.simplefilter("ignore")
    warnings.formatwarning = lambda msg, cat, *a, **k: f"distla: warning: {msg}\n"
    kw = _parse_options(args.option)
    _check_solver_options(args.method, kw)
    if kw.get("gemm", "native") != "native" and args.device == "cpu":
        raise CommandError(f"-O gemm={kw['gemm']}: CPU ranks have no {kw['gemm']} arithmetic "
                           f"(they compute every gemm mode in float32); use --device gpu, or "
                           f"--dtype float32 for a float32 solve")
    _check_solve_options(args)
    grid = _grid(args.grid, comm)
    backend = _check_device(args.device, comm)
    ainfo = _inspect(args.matrix, comm, "--matrix")
    m, n = ainfo.shape
    if ainfo.ndim != 2 or m != n:
        raise CommandError(f"--matrix: {_shown(ainfo)} holds a {m} x {n} "
                           f"{'vector' if ainfo.ndim == 1 else 'matrix'}; solve needs a "
                           f"square matrix")
    if n == 0:
        raise CommandError(f"--matrix: {_shown(ainfo)} is empty (0 x 0); nothing to solve")
    binfo = None
    if args.rhs is not None:
        binfo = _inspect(args.rhs, comm, "--rhs")
        if binfo.shape[0] != n:
            raise CommandError(f"--rhs: {_shown(binfo)} has {binfo.shape[0]} rows, but the "
                               f"matrix is {n} x {n}")
    if args.out is not None:
        if not _writable_format(args.out):
            raise CommandError(f"--out: {args.out}: unknown extension; use .npy, .mtx or "
                               f"file.h5:/dataset")
        try:
            io.check_writable(args.out, comm)
        except (OSError, ValueError) as e:
            raise CommandError(f"--out: {e}") from None
    if args.json is not None:
        try:
            check_jsonl(args.json, comm)
        except (OSError, ValueError) as e:
            raise CommandError(f"--json: {e}") from None
    inputs = [("--matrix", ainfo)] + ([("--rhs", binfo)] if binfo is not None else [])
    _refuse_same_target(comm, inputs, [("--out", args.out), ("--json", args.json)])
    solver = _solver(args.method)
    dtype = np.dtype(args.dtype) if args.dtype else None
    if dtype is not None and np.dtype(ainfo.dtype).kind == "c":   # a precision: complex stays
        dtype = np.dtype(np.complex64 if dtype == np.float32 else np.complex128)
    nb = min(args.nb, n) if args.nb else default_nb(n, args.device, grid)  # (one block)
    timings = Timings()
    size = comm.Get_size()

    say(f"distla solve: {_shown(ainfo)} ({n} x {n} {ainfo.format}), method {args.method}, "
        f"grid {grid.nprow}x{grid.npcol} ({size} rank{'s' * (size != 1)}), nb {nb}, "
        f"device {args.device}")
    with timings.phase("read matrix", backend, comm), \
            backend.preloading(dtype or ainfo.dtype):   # GPU ranks: libraries load beside
        with _named("--matrix", io.MatrixFileError), guarded(comm):
            A = io.read_matrix(ainfo.path, grid, (nb, nb), device=args.device,
                               dtype=dtype, info=ainfo)
    dtype = A.dtype
    xtrue = None
    anorm = None          # ||A||_inf once known: one pass over A serves every check
    if binfo is not None and binfo.dtype.kind == "c" and dtype.kind != "c":
        if args.method == "tlr" or args.device != "cpu":
            raise CommandError(
                f"--rhs: {_shown(binfo)} is complex but the matrix is real; --method "
                f"{args.method} on {args.device} ranks solves real systems only (solve "
                f"the real and imaginary parts separately, or use another method on CPU "
                f"ranks)")
        say("rhs is complex: the real matrix is promoted to complex")
        dtype = np.dtype(np.complex64 if dtype == np.float32 else np.complex128)
        A = A.astype(dtype)
    with timings.phase("read rhs" if binfo else "make rhs", backend, comm):
        with _named("--rhs", io.MatrixFileError) if binfo else contextlib.nullcontext(), \
                guarded(comm):
            if binfo is not None:
                B = io.read_matrix(binfo.path, grid, (nb, nb), device=args.device,
                                   dtype=dtype, info=binfo)
                rhs_desc = f"{_shown(binfo)} ({B.n} column{'s' * (B.n != 1)})"
            elif args.rhs_kind == "ones":
                xtrue = DistMatrix.from_function(grid, (n, args.nrhs), (nb, nb),
                                                 lambda I, J: 1.0, dtype=dtype,
                                                 device=args.device)
                if args.nrhs <= 16:    # one pass over A: B and ||A||_inf
                    from .checks import product_and_norm
                    B, anorm = product_and_norm(A, xtrue)
                else:
                    B = A @ xtrue
                # NaN/Inf in A shows in B made from it: name A's entry (a pass over A only
                # then), not B's, which the solve's own check would blame first
                if kw.get("check_finite", True) and not np.isfinite(
                        anorm if anorm is not None else B.norm("max")):
                    from .validate import check_finite
                    check_finite(("A", A), what=f"--matrix {_shown(ainfo)}")
                rhs_desc = f"A @ ones ({args.nrhs} column{'s' * (args.nrhs != 1)})"
            else:
                B = DistMatrix.random(grid, (n, args.nrhs), (nb, nb),
                                      seed=rhs_seed(args.seed), dtype=dtype,
                                      device=args.device)
                rhs_desc = (f"standard normal, seed {args.seed} ({args.nrhs} "
                            f"column{'s' * (args.nrhs != 1)})")
    say(f"rhs: {rhs_desc}")
    kind = "cholesky" if args.method in ("cholesky", "tlr") else "lu"
    nflops = flops(kind, n, dtype=A.dtype) + flops("solve", n, B.n, dtype=A.dtype)
    # (progress counts the solvers' operations: real-arithmetic units whatever the dtype)
    nops = flops(kind, n) + flops("solve", n, B.n)
    with timings.phase("solve", backend, comm):
        show = comm.Get_rank() == 0 and say.level >= 1 and args.progress != 0
        with Progress(nops, f"{args.method}", comm=comm, enabled=show,
                      interval=args.progress or None):
            with guarded(comm):
                if args.method == "cholesky" and anorm is None:
                    from .pblas import norm
                    anorm = norm(A, np.inf)
                X, rc, info = solver(A, B, anorm=anorm if args.method == "cholesky" else
                                     None, **kw)
    t_solve = timings.seconds["solve"]
    say(f"solve: {t_solve:.4g} s, {format_rate(nflops / t_solve if t_solve > 0 else 0)} "
        f"(factor + solve, nominal {nflops:.3g} flops)")
    result = {"matrix": ainfo.path, "n": n, "nrhs": B.n, "method": args.method,
              "grid": f"{grid.nprow}x{grid.npcol}", "ranks": size, "nb": nb,
              "device": args.device, "dtype": str(dtype), "seconds": t_solve,
              "gflops": nflops / t_solve / 1e9 if t_solve > 0 else 0.0}
    # a mixed-precision solve (SolveInfo says what was requested; RBTInfo does not)
    if getattr(info, "requested", None) is not None or \
            (str(kw.get("precision", "double")).lower() == "mixed" and
             hasattr(info, "fallback")):
        result.update(precision=info.precision, fallback=info.fallback,
                      iterations=info.iterations)
        if info.fallback:
            say(f"precision: mixed fell back to {info.factor_dtype} ({info.reason})")
        else:
            say(f"precision: mixed, {info.factor_dtype} factors with {info.compute} updates, "
                f"{info.iterations} correction{'s' * (info.iterations != 1)}"
                + (f" ({sum(info.gmres_iterations)} GMRES iterations)"
                   if info.gmres_iterations else ""))
    if rc is not None:
        result["rcond"] = rc
        if args.check == "full":
            say(f"condition        1 / rcond (1-norm estimate)                 = "
                f"{1 / rc if rc > 0 else float('inf'):.4g}")
    if args.check != "none":
        with timings.phase("residual", backend, comm):
            with guarded(comm):
                full = args.check == "full"
                from . import checks
                res = checks.solve_checks(A, X, B, berr=full, anorm=anorm)
                sresid, berr = res["sresid"], res["berr"]
                ferr = None
                if xtrue is not None and full:
                    from .pblas import norm
                    Xm = X if X.same_layout(xtrue) else X.redistribute(
                        block=xtrue.block, src=xtrue.src)
                    ferr = norm(Xm - xtrue, np.inf) / norm(xtrue, np.inf)
        thresh = args.thresh if args.thresh is not None else \
            default_threshold(args.method, kw, dtype, A, X, anorm=res["anorm"])
        result["sresid"] = sresid
        verdict = judge(result, thresh, "sresid")["check"]
        say("scaled residual  ||B - A X||_inf / (||A||_inf ||X||_inf eps n) = "
            f"{sresid:.4g}  {verdict} (threshold {thresh:g})")
        if berr is not None:
            result["berr"] = berr
            say(f"backward error   max_i |B - A X|_i / (|A| |X| + |B|)_i        = "
                f"{berr:.4g}")
        if ferr is not None:
            result["ferr"] = ferr
            say(f"forward error    ||X - ones||_inf / ||ones||_inf              = "
                f"{ferr:.4g}")
    failed = args.check != "none" and result["check"] != "PASS"
    if args.out is not None and failed:
        say(f"solution NOT written to {args.out}: the residual check failed")
    elif args.out is not None:
        with timings.phase("write", backend, comm):
            with _writing("--out"), guarded(comm):
                vector = (binfo.ndim == 1) if binfo is not None else B.n == 1
                io.write_matrix(args.out, X, vector=vector)
        say(f"solution written to {args.out}")
    say("")
    say(timings.table())
    result["phases"] = dict(timings.seconds)
    if args.json:
        _append_json(args.json, result, comm)
    if failed:     # a wrong answer never exits 0 (the record above keeps check=FAIL)
        raise CommandError(f"scaled residual {result['sresid']:.4g} exceeds the threshold "
                           f"{result['check_thresh']:g} (FAIL; --thresh sets it)", EXIT_THRESH)
    return 0


def _check_solve_options(args) -> None:
    """CommandError (before any work) for a solve option out of range or one that does not
    apply to this run (never silently ignored); then fills in the defaults of --rhs-kind,
    --nrhs and --seed."""
    if args.nb is not None and args.nb < 1:
        raise CommandError(f"--nb must be positive, not {args.nb}")
    if args.rhs is not None:
        for opt, v in (("--rhs-kind", args.rhs_kind), ("--nrhs", args.nrhs)):
            if v is not None:
                raise CommandError(f"{opt} does not apply with --rhs: B is read from "
                                   f"{args.rhs} (it shapes a generated B only)")
    if args.seed is not None and args.rhs_kind != "random":
        raise CommandError("--seed does not apply here: it seeds the B of --rhs-kind random "
                           + ("(B is read from --rhs)" if args.rhs is not None else
                              "(B = A @ ones has no seed)"))
    args.rhs_kind = args.rhs_kind or "ones"
    args.nrhs = 1 if args.nrhs is None else args.nrhs
    args.seed = 0 if args.seed is None else args.seed
    if args.nrhs < 1:
        raise CommandError(f"--nrhs must be positive, not {args.nrhs}")
    if args.thresh is not None and args.check == "none":
        raise CommandError("--thresh does not apply with --check none (no residual is "
                           "judged)")
    if args.thresh is not None and not args.thresh >= 0:
        raise CommandError(f"--thresh must be a number >= 0, not {args.thresh}")
    from .progress import check_interval
    try:
        check_interval(args.progress, "--progress")
    except (TypeError, ValueError) as e:
        raise CommandError(str(e)) from None


def _target(path, dataset=None):
    """``(resolved file, dataset or None)`` that a matrix path names (None: the whole file,
    e.g. a .npy). Not collective (resolves links on the file system)."""
    from . import h5io
    if h5io.is_h5(path) and dataset is None:       # an output: where its write would land
        return h5io.resolve(path)
    split = h5io.split_path(path)
    if split is not None:
        path = split[0]
        dataset = dataset or ("/" + split[1].strip("/") if split[1].strip("/") else None)
    return os.path.realpath(path), dataset


def _refuse_same_target(comm, inputs, outputs) -> None:
    """Collective: CommandError on every rank (before any work) when an output names the
    file (HDF5: the dataset -- by identity, so also through a soft, hard or external link)
    of an input -- ``inputs``: ``(option, MatrixInfo)`` -- or of another output --
    ``outputs``: ``(option, path or None)``: one write would destroy the input or the other
    output."""
    from . import h5io

    def key(path, ds):
        return h5io.dataset_key(path, ds) if ds else None

    def check():
        named = [(o, _target(i.path, i.dataset or None), True) for o, i in inputs] + \
            [(o, _target(p), False) for o, p in outputs if p is not None]
        named = [(o, (f, ds), key(f, ds), is_in) for o, (f, ds), is_in in named]
        for k, (out, (f, ds), ident, is_in) in enumerate(named):
            if is_in:
                continue
            for other, (f2, ds2), ident2, other_in in named[:k]:
                same = f == f2 or (os.path.exists(f) and os.path.exists(f2) and
                                   os.path.samefile(f, f2))
                linked = ident is not None and ident == ident2 and ds != ds2
                if linked or (same and (ds is None or ds2 is None or ds == ds2)):
                    what = f"{f2}:{ds2}" if ds2 and ds else f2
                    if linked:
                        what += f" (also reached as {f}:{ds}, an HDF5 link to it)"
                    raise CommandError(
                        f"{out} and {other} name the same "
                        f"{'dataset' if ds2 and ds else 'file'} {what}: writing {out} would "
                        + (f"destroy the input {other}" if other_in else f"replace {other}")
                        + "; give another name")
    on_root(comm, check)


def _append_json(path, obj, comm=None) -> None:
    """Append ``obj`` as one line of standard JSON (NaN and inf as null) to ``path``: on
    rank 0 of ``comm`` (collective: a failure is the same CommandError on every rank)."""
    def append():
        append_json_lines(path, [json_line(obj)])
    try:
        append() if comm is None else on_root(comm, append)
    except OSError as e:
        raise CommandError(f"--json: {path}: cannot append the record "
                           f"({e.strerror or e})") from None


@contextlib.contextmanager
def _named(opt: str, *types):
    """An error of ``types`` (agreed by the ``guarded`` block inside: the same on every
    rank), e.g. a failed write of ``opt``'s file or a malformed one read, as a CommandError
    named by the option."""
    try:
        yield
    except types as e:
        msg = str(e)
        if msg.startswith("[rank 0] "):
            msg = msg[len("[rank 0] "):]
        raise CommandError(f"{opt}: {msg}") from None


def _writing(opt: str):
    """:func:`_named` for the OSError of a failed write."""
    return _named(opt, OSError)


def _shown(info) -> str:
    """How a matrix file is named in messages: ``file.h5:/dataset`` for HDF5."""
    return f"{info.path}:{info.dataset}" if info.format == "h5" and info.dataset else info.path


# ---------------------------------------------------------------------------------------
# generate
# ---------------------------------------------------------------------------------------
def kw_entries(kw: dict) -> dict:
    """make_problem's keywords that also shape problem_entries (dtype goes elsewhere)."""
    return {k: v for k, v in kw.items() if k != "dtype"}


def rhs_seed(seed: int) -> int:
    """The generator seed of ``solve --rhs-kind random --seed S``: a stream of its own, so a
    random B never repeats the columns of a ``generate --kind general --seed S'`` matrix."""
    return int((int(seed) * 0x9E3779B97F4A7C15 + 0x5248535F42) % (2 ** 63 - 25))


def cmd_generate(args, comm) -> int:
    import numpy as np

    from . import io
    from .progress import Timings

    say = Reporter(comm, _verbosity(args))
    if args.n < 1:
        raise CommandError(f"--n must be positive, not {args.n}")
    nbytes = args.n * args.n * np.dtype(args.dtype).itemsize
    if nbytes >= 2 ** 63:     # (MPI-IO's file size: an OverflowError naming no option)
        raise CommandError(f"--n {args.n}: the {args.dtype} matrix would need {nbytes:.3g} "
                           f"bytes, beyond any file's size (2^63)")
    if args.nb < 1:
        raise CommandError(f"--nb must be positive, not {args.nb}")
    given = [o for o, v in (("--kernel", args.kernel), ("--length", args.length),
                            ("--nugget", args.nugget)) if v is not None]
    if given and args.kind != "covariance":
        raise CommandError(f"{given[0]} applies to --kind covariance only (not --kind "
                           f"{args.kind})")
    args.kernel = args.kernel or "sqexp"
    args.length = 0.1 if args.length is None else args.length
    args.nugget = 1e-2 if args.nugget is None else args.nugget
    from .covariance import SCALE_RANGE
    if not SCALE_RANGE[0] <= args.length <= SCALE_RANGE[1]:
        raise CommandError(f"--length must be a number in [{SCALE_RANGE[0]:.3g}, "
                           f"{SCALE_RANGE[1]:.3g}] (its square must be a normal float64), not "
                           f"{args.length}")
    if not 0 <= args.nugget < math.inf:
        raise CommandError(f"--nugget must be a finite number >= 0, not {args.nugget}")
    for opt, path in (("--out", args.out), ("--rhs-out", args.rhs_out)):
        if path is None:
            continue
        if not _writable_format(path):
            raise CommandError(f"{opt}: {path}: unknown extension; use .npy, .mtx or "
                               f"file.h5:/dataset")
        try:
            io.check_writable(path, comm)
        except (OSError, ValueError) as e:
            raise CommandError(f"{opt}: {e}") from None
    _refuse_same_target(comm, [], [("--out", args.out), ("--rhs-out", args.rhs_out)])
    # one process row: each rank's block columns are whole columns, contiguous in the
    # Fortran-ordered file (a P > 1 grid writes pieces of mb rows: 4 ranks, n = 8192,
    # 1.6-2.8 s on 1x4 vs 3.0-4.1 s on 2x2); the file does not depend on the grid
    grid = make_grid((1, comm.Get_size()), comm)
    nb = max(1, min(args.nb, layout.num_blocks(args.n, max(grid.nprow, grid.npcol))))
    kw = {"seed": args.seed, "dtype": np.dtype(args.dtype)}
    if args.kind == "covariance":
        kw.update(length=args.length, nugget=args.nugget, kernel=args.kernel)
    t = Timings()
    mtx = args.out.lower().endswith((".mtx", ".mm"))
    if not mtx:   # generated and written a slab at a time, never whole in memory
        import time

        fn = problem_entries(args.kind, args.n, **kw_entries(kw))
        t0, last = time.perf_counter(), [time.perf_counter()]

        def progress(done):
            now = time.perf_counter()
            if comm.Get_rank() == 0 and (now - last[0] > 5 or done == args.n) and \
                    now - t0 > 5:
                last[0] = now
                say(f"generate: {100 * done / args.n:5.1f}% of the columns, "
                    f"{now - t0:.1f} s elapsed")
        with t.phase("generate + write", None, comm), _writing("--out"), guarded(comm):
            b = io.write_npy_generated(args.out, grid, (args.n, args.n), (nb, nb), fn,
                                       dtype=np.dtype(args.dtype), progress=progress,
                                       row_sums=bool(args.rhs_out))
        say(f"wrote {args.kind} matrix {args.n} x {args.n} {args.dtype} to {args.out}")
        if args.rhs_out:
            with t.phase("rhs", None, comm), _writing("--rhs-out"), guarded(comm):
                writer = io.write_npy if args.rhs_out.lower().endswith(".npy") \
                    else io.write_matrix
                writer(args.rhs_out, b, vector=True)
            say(f"wrote b = A @ ones (length {args.n}) to {args.rhs_out}")
        say(t.table(), level=2)
        return 0
    with t.phase("generate", None, comm), guarded(comm):
        A = make_problem(args.kind, grid, args.n, nb, **kw)
    with t.phase("write", None, comm), _writing("--out"), guarded(comm):
        io.write_matrix(args.out, A)
    say(f"wrote {args.kind} matrix {args.n} x {args.n} {args.dtype} to {args.out}")
    if args.rhs_out:
        from .matrix import DistMatrix
        from .pblas import matmul
        with t.phase("rhs", None, comm), _writing("--rhs-out"), guarded(comm):
            ones = DistMatrix.from_function(grid, (args.n, 1), (nb, nb), lambda I, J: 1.0,
                                            dtype=A.dtype)
            b = matmul(A, ones)
            writer = io.write_npy if args.rhs_out.lower().endswith(".npy") \
                else io.write_matrix
            writer(args.rhs_out, b, vector=True)
        say(f"wrote b = A @ ones (length {args.n}) to {args.rhs_out}")
    say(t.table(), level=2)
    return 0


# ---------------------------------------------------------------------------------------
# info
# ---------------------------------------------------------------------------------------
def _blas_info() -> str:
    try:
        import threadpoolctl
        libs = threadpoolctl.threadpool_info()
        blas = [f"{d.get('internal_api')} {d.get('version')} ({d.get('num_threads')} threads)"
                for d in libs if d.get("user_api") == "blas"]
        if blas:
            return "; ".join(dict.fromkeys(blas))
    except Exception:  # noqa: BLE001 - optional
        pass
    try:
        import numpy as np
        cfg = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        return f"{cfg.get('name')} {cfg.get('version')} (numpy build; threadpoolctl not " \
               f"installed, thread count unknown)"
    except Exception:  # noqa: BLE001
        return "unknown"


def _gpu_info(local_rank: int = 0) -> dict:
    info = {"gpus": 0}
    try:
        import cupy
    except Exception:  # noqa: BLE001
        info["cupy"] = "not installed"
        return info
    info["cupy"] = cupy.__version__
    try:
        nd = cupy.cuda.runtime.getDeviceCount()
        info["gpus"] = nd
        if nd:
            info["gpu_index"] = local_rank % nd  # the device distla selects for this rank
            props = cupy.cuda.runtime.getDeviceProperties(local_rank % nd)
            name = props.get("name", b"")
            info["gpu_name"] = name.decode() if isinstance(name, bytes) else str(name)
            info["cuda_runtime"] = cupy.cuda.runtime.runtimeGetVersion()
            info["cuda_driver"] = cupy.cuda.runtime.driverGetVersion()
    except Exception as e:  # noqa: BLE001
        info["gpu_error"] = str(e).splitlines()[0] if str(e) else type(e).__name__
    try:
        from cupy.cuda import nccl
        v = nccl.get_version()
        info["nccl"] = f"{v // 10000}.{v // 100 % 100}.{v % 100}" if v >= 10000 else \
            f"{v // 1000}.{v // 100 % 10}.{v % 100}"
    except Exception:  # noqa: BLE001
        info["nccl"] = "not available"
    return info


def cmd_info(args, comm) -> int:
    import platform

    import mpi4py
    import numpy as np
    import scipy
    from mpi4py import MPI

    from . import __version__
    from .device import node_local_rank

    grid = _grid(args.grid, comm)
    local_rank = node_local_rank(comm)
    mine = {"rank": comm.Get_rank(), "host": socket.gethostname(), "local_rank": local_rank,
            "grid_pos": [grid.myrow, grid.mycol],
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}
    mine.update(_gpu_info(local_rank))
    everyone = comm.gather(mine, root=0)
    if comm.Get_rank() != 0:
        return 0
    hosts = sorted({r["host"] for r in everyone})
    lib = " ".join(MPI.Get_library_version().strip().splitlines()[0].split())
    g0 = everyone[0]
    out = {
        "distla": __version__, "python": platform.python_version(), "numpy": np.__version__,
        "scipy": scipy.__version__, "mpi4py": mpi4py.__version__,
        "mpi_library": lib, "mpi_standard": "%d.%d" % MPI.Get_version(),
        "ranks": comm.Get_size(), "nodes": len(hosts),
        "grid": f"{grid.nprow}x{grid.npcol}", "blas": _blas_info(),
        "cupy": g0.get("cupy"), "nccl": g0.get("nccl", "not available (no CuPy)"),
        "gpus_per_node": max(r.get("gpus", 0) for r in everyone),
        "threads_env": {k: os.environ[k] for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                                   "MKL_NUM_THREADS") if k in os.environ},
        "per_rank": everyone,
    }
    if args.json:
        print(json.dumps(out, default=str), flush=True)
        return 0
    if _verbosity(args) == 0:
        return 0
    w = 14
    for k in ("distla", "python", "numpy", "scipy", "mpi4py", "mpi_library", "mpi_standard",
              "ranks", "nodes", "grid", "blas", "cupy", "nccl", "gpus_per_node"):
        print(f"{k:<{w}} {out[k]}")
    if out["threads_env"]:
        print(f"{'threads':<{w}} " + " ".join(f"{k}={v}" for k, v in out["threads_env"].items()))
    print()
    print(f"{'rank':>5} {'host':<20} {'local':>5} {'grid':>7} {'gpus':>4}  device")
    for r in everyone:
        dev = r.get("gpu_name", "cpu") if r.get("gpus") else "cpu"
        if r.get("gpus"):
            dev += f" (GPU {r.get('gpu_index', 0)} of {r['gpus']})"
        if r.get("cuda_visible_devices") is not None:
            dev += f", CUDA_VISIBLE_DEVICES={r['cuda_visible_devices']}"
        pos = f"({r['grid_pos'][0]},{r['grid_pos'][1]})"
        print(f"{r['rank']:>5} {r['host'][:20]:<20} {r['local_rank']:>5} {pos:>7} "
              f"{r.get('gpus', 0):>4}  {dev}")
    sys.stdout.flush()
    return 0


# ---------------------------------------------------------------------------------------
# entry point
# ---------------------------------------------------------------------------------------
def cmd_warmup(args, comm) -> int:
    from .warmup import warmup
    say = Reporter(comm, _verbosity(args))
    default = args.device is None
    args.device = args.device or "gpu"
    _check_device(args.device, comm, default=default)
    if args.n < 8:
        raise CommandError(f"--n must be at least 8, not {args.n}")
    if args.n_large is not None and args.n_large < 0:
        raise CommandError(f"--n-large must be >= 0 (0 skips it), not {args.n_large}")
    t = time.perf_counter()
    with guarded(comm):
        warmup(comm, device=args.device, n=args.n, nb=max(4, min(128, args.n // 4)),
               say=lambda text: say(text, level=2), n_large=args.n_large)
    cache = os.environ.get("CUPY_CACHE_DIR", os.path.expanduser("~/.cupy/kernel_cache"))
    say(f"warmup done in {time.perf_counter() - t:.1f} s"
        + (f"; kernel cache: {cache}" if args.device == "gpu" else ""))
    return 0


_COMMANDS = {"solve": cmd_solve, "generate": cmd_generate, "info": cmd_info,
             "warmup": cmd_warmup}


def _same_command_everywhere(argv) -> None:
    """Collective over COMM_WORLD: CommandError on every rank unless every rank got the same
    command line. An MPMD launch (``mpiexec -n 1 distla ... : -n 1 distla ...``) that gave
    the ranks different options hung in the collectives each chose, or silently used rank
    0's file or options."""
    comm = _world()
    if comm.Get_size() == 1:
        return
    lines = comm.allgather(list(argv))
    bad = [r for r, line in enumerate(lines) if line != lines[0]]
    if bad:
        raise CommandError(f"the ranks got different command lines (rank 0: "
                           f"{' '.join(lines[0])!r}; rank {bad[0]}: {' '.join(lines[bad[0]])!r})"
                           f": every rank must run the same distla command")


def _main(argv) -> int:
    _same_command_everywhere(argv)
    if argv and argv[0] == "bench":
        from .bench import main_argv
        return main_argv(argv[1:], prog="distla bench")
    if argv and argv[0] == "model":
        from .model.cli import main_argv as model_main
        return model_main(argv[1:], prog="distla model")
    args = build_parser().parse_args(argv)
    comm = _world()
    return _COMMANDS[args.command](args, comm)


#: the library's advice (keywords) as distla solve's options, in error messages
_CLI_TERMS = (("pivoting='partial' or 'tournament', or method 'gepp', 'calu' or 'rbt'",
               "--method gepp, calu or rbt"),
              ("; pivot_threshold=0 accepts", "; -O pivot_threshold=0 accepts"),
              ("pass check_finite=False to skip", "pass -O check_finite=false to skip"),
              ("pass fallback=True", "pass -O fallback=true"))


def _cli_terms(text: str) -> str:
    for api, cli in _CLI_TERMS:
        text = text.replace(api, cli)
    # a flag given as -O key=0 or =yes: the command line's words for a bool
    return re.sub(r"'?\b(\w+)'?(?: flag)? must be True or False, not '?([^',;]*)'?",
                  r"-O \1 must be true or false, not \2", text)


def _interrupted() -> None:
    """After a KeyboardInterrupt: 'distla: interrupted' (rank 0 of a parallel job), then, in
    a job of several ranks, MPI_Abort with code 130. A rank that only exited would wait in
    MPI_Finalize for ranks that wait for it in a collective (a SIGINT to one rank hung the
    job; DISTLA_ABORT_TIMEOUT does not cover it). MPI is not started here if it was not."""
    sys.stdout.flush()
    mpi = sys.modules.get("mpi4py.MPI")
    try:
        world = mpi.COMM_WORLD if mpi is not None and mpi.Is_initialized() and \
            not mpi.Is_finalized() else None
        rank, size = (world.Get_rank(), world.Get_size()) if world is not None else (0, 1)
    except Exception:  # noqa: BLE001 - interrupted inside MPI's own start-up
        world, rank, size = None, 0, 1
    if rank == 0:
        sys.stderr.write("distla: interrupted\n")
        sys.stderr.flush()
    if world is not None and size > 1:
        world.Abort(130)


def main(argv=None) -> None:
    """Console-script entry point (``distla``): run the command, exit with its code on every
    rank."""
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        apply_runtime_defaults()
        code = run_main(_main, argv, prog="distla",
                        terms=_cli_terms if argv[:1] == ["solve"] else None)
    except KeyboardInterrupt:    # (Ctrl-C, or mpiexec forwarding SIGINT: one line, no
        _interrupted()           # traceback; an output's temporary is already removed)
        code = 130               # 128 + SIGINT, as shells report it
    sys.stdout.flush()
    sys.stderr.flush()
    sys.exit(code)


if __name__ == "__main__":  # pragma: no cover
    main()
