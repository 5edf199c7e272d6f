"""Benchmark: mixed-precision solves vs the float64 solve over a condition-number sweep.

``solve(..., precision='mixed')`` against the float64 solve on the same matrices, with the
single-device reference in the same run.

    mpiexec -n 2 python -m distla.bench mixed --n 4096 --device cpu --method cholesky gepp
    python -m distla.bench mixed --device gpu --n 16384 --factor-dtype fp16 bf16 tf32
    python -m distla.bench.mixed ...               (standalone, same options)

Matrices: :func:`distla.problems.conditioned_matrix` (singular values log-spaced from 1 to
1/cond; symmetric positive definite for Cholesky), one right-hand side. For every n, method
and cond (best of ``--reps``, device synchronized and ranks barriered, maximum over ranks):

* ``distla-double``: ``solve(A, b, method)`` in float64 (no condition estimate, as the mixed
  solve; ``--check-rcond``: with it, and the mixed solves with their condition certificate,
  as the defaults do);
* ``distla-mixed-<factor_dtype>``: ``solve(..., precision='mixed', factor_dtype=...)``, with
  ``speedup`` (float64 seconds / mixed seconds), ``iters`` and ``gmres_it`` (refinement and
  Krylov iterations), ``fallback`` and ``reason``, ``berr`` (componentwise backward error)
  beside the float64 solve's ``berr_double``; every solve's ``berr`` is judged against
  ``3 n eps`` (``check``, ``check_thresh``; a FAIL exits 3);
* the reference, once per n and method on rank 0 (``--no-ref`` skips it): cuSOLVER through
  CuPy on GPU (``cupy.linalg.solve``: getrf + getrs; Cholesky: potrf + two triangular solves),
  SciPy on CPU (with as many BLAS threads as ranks on the node).

Nominal rate: the factorization + solve flops (n^3/3 or 2n^3/3) over the seconds.
"""
from __future__ import annotations

import argparse
import gc
import math
import time

import numpy as np

from . import common

NAME = "mixed"
METHODS = ("cholesky", "gepp", "calu", "rbt")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The benchmark's options (the framework calls this once). Not collective."""
    common.add_problem_arguments(parser, n=(4096,), reps=2, dtypes=("float64",),
                                 reference=False)
    parser.add_argument("--method", nargs="+", choices=METHODS, default=["cholesky", "gepp"],
                        help="solvers (default: cholesky gepp)")
    parser.add_argument("--cond", nargs="+", type=float,
                        default=[1e1, 1e2, 1e4, 1e6, 1e8, 1e10, 1e12],
                        help="condition numbers of the sweep (default 1e1 .. 1e12)")
    parser.add_argument("--factor-dtype", nargs="+", default=None,
                        choices=("fp32", "tf32", "fp16", "bf16"),
                        help="low precisions (default: every one the device has)")
    parser.add_argument("--no-ref", "--no-reference", dest="reference", action="store_false",
                        help="skip the single-device reference (SciPy / cuSOLVER)")
    parser.add_argument("--ref-threads", type=int, default=None,
                        help="BLAS threads for the CPU reference on rank 0 (default: the "
                             "ranks on the node, at most its cores, and one: the faster)")
    parser.add_argument("--check-rcond", action="store_true",
                        help="solve as the defaults do: the float64 solve with its condition "
                             "estimate, the mixed ones with their condition certificate "
                             "(default: neither; RBT always certifies)")


def _free(device) -> None:
    gc.collect()
    if device == "gpu":
        import cupy
        cupy.get_default_memory_pool().free_all_blocks()


def run(args) -> list[dict]:
    """Collective over COMM_WORLD: run the sweep; returns the result rows."""
    from mpi4py import MPI

    from ..device import get_backend
    from ..errors import collective
    comm = MPI.COMM_WORLD
    device = args.device or common.default_device()
    with collective(comm):
        be = get_backend(device, comm)
        fds = args.factor_dtype or list(be.LOWP)
        bad = [f for f in fds if f not in be.LOWP]
        if bad:
            raise ValueError(f"--factor-dtype {' '.join(bad)}: {device} ranks factor in "
                             f"{', '.join(be.LOWP)}")
        bad = [c for c in args.cond if not 1 <= c < _COND_MAX]
        if bad:
            raise ValueError(f"--cond must be at least 1 (a condition number) and below "
                             f"{_COND_MAX:.0e} (float64 cannot hold a matrix of a larger "
                             f"one: its smallest singular values round away), not {bad[0]:g}")
    grid = common.make_grid(args.grid, comm)
    rows = []
    for n in common.parse_sizes(args.n):
        nb = args.nb or common.default_nb(n, device, grid)
        for method in args.method:
            for i, cond in enumerate(args.cond):
                rows += _one(args, grid, n, nb, method, cond, fds, device,
                             reference=args.reference and i == 0)
    return rows


#: the largest condition number of the sweep: 1 / (float64's eps), beyond which the generated
#: matrix is numerically singular (its Cholesky fails, its solves are meaningless)
_COND_MAX = 1 / np.finfo(np.float64).eps


def _one(args, grid, n, nb, method, cond, fds, device, reference) -> list[dict]:
    """Collective: the float64 solve, each mixed solve and (``reference``) the one-device
    reference of one matrix; their records."""
    from ..checks import backward_error, eps
    from ..linalg import solve
    from ..matrix import DistMatrix
    from ..problems import conditioned_matrix
    comm = grid.comm
    A = conditioned_matrix(grid, n, nb, cond=cond, seed=args.seed, spd=method == "cholesky",
                           device=device)
    B = DistMatrix.random(grid, (n, 1), (nb, nb), seed=args.seed + 1, device=device)
    kw = {} if method == "rbt" or args.check_rcond else {"check_rcond": False}
    nfl = common.flops("cholesky_solve" if method == "cholesky" else "lu_solve", n, 1)
    base = dict(nb=nb, grid=f"{grid.nprow}x{grid.npcol}", ranks=comm.size, device=device,
                dtype="float64", method=method, cond=cond,
                check_rcond=method == "rbt" or bool(args.check_rcond))
    quiet = getattr(args, "quiet", False)
    t64, X = common.timed_result(lambda: solve(A, B, method=method, **kw), device, comm,
                                 reps=args.reps, warmup=1 if device == "gpu" else 0)
    berr64 = backward_error(A, X, B)
    thresh = 3 * n * eps(np.float64)          # componentwise backward error: 3 n eps
    rows = [common.stream(args, common.judge(common.record(
        NAME, "distla-double", n=n, seconds=t64, nflops=nfl, **base, berr=berr64), thresh,
        "berr"), comm)]
    for fd in fds:
        t, (X, info) = common.timed_result(
            lambda: solve(A, B, method=method, precision="mixed", factor_dtype=fd,
                          return_info=True, **kw),
            device, comm, reps=args.reps, warmup=1 if device == "gpu" else 0)
        # (RBT's float64 GENP retry counts as a fallback here: X is not from fd's factors)
        fell = bool(info.fallback or info.compute != fd)
        rec = common.record(NAME, f"distla-mixed-{fd}", n=n, seconds=t, nflops=nfl, **base,
                            factor_dtype=fd, speedup=t64 / t, iters=info.iterations,
                            gmres_it=sum(info.gmres_iterations), fallback=fell,
                            reason=info.reason, replicated=getattr(info, "replicated", False),
                            phases={k: round(v, 6) for k, v in info.times.items()},
                            berr=backward_error(A, X, B),
                            berr_double=berr64)
        rows.append(common.stream(args, common.judge(rec, thresh, "berr"), comm))
        _free(device)
        if not quiet and comm.rank == 0:
            print(f"mixed {method} n={n} cond={cond:.0e} {fd}: {t:.4g} s (float64 "
                  f"{t64:.4g} s, speedup {rec['speedup']:.2f}), {rec['iters']} it "
                  f"({rec['gmres_it']} GMRES), fallback={fell}, berr "
                  f"{rec['berr']:.2e} (float64 {berr64:.2e})", flush=True)
    if reference:
        rows += [common.stream(args, r, comm)
                 for r in _reference_rows(A, B, method, args.reps, device, nfl, base, quiet,
                                                 args.ref_threads)]
    return rows


def _reference_rows(A, B, method, reps, device, nfl, base, quiet,
                    ref_threads=None) -> list[dict]:
    """Collective: the one-device reference on rank 0 (gathered A and b), as records."""
    comm = A.grid.comm
    a, b = A.to_global(0), B.to_global(0)
    threads = common.reference_thread_counts(comm, ref_threads)
    ref = common.reference_rank0(lambda: _reference(a, b, method, reps, device, threads),
                                 comm)
    if ref is None:
        return []
    impl, t, got = ref
    rec = common.record(NAME, impl, n=A.n, seconds=t, nflops=nfl, device=device,
                        dtype="float64", ranks=1, method=method, cond=base["cond"])
    if got:
        rec["threads"] = got
    if comm.rank == 0 and not quiet:
        print(f"{impl} {method} n={A.n}: {t:.4g} s", flush=True)
    return [rec]


def _reference(a, b, method, reps, device, threads):
    """(name, best seconds, threads) of the one-device float64 solve, or None when it does not
    fit. Rank 0 only (not collective)."""
    if not common.fits(3 * a.nbytes, device):
        return None
    if device == "gpu":
        import cupy
        import cupyx.scipy.linalg as csl
        ag, bg = cupy.asarray(a, order="F"), cupy.asarray(b)

        def solve():
            if method == "cholesky":
                L = cupy.linalg.cholesky(ag)                          # potrf
                y = csl.solve_triangular(L, bg, lower=True)
                return csl.solve_triangular(L, y, lower=True, trans="T")
            return cupy.linalg.solve(ag, bg)                          # getrf + getrs
        name = "cupy(cusolver)"
        t = common.best_local(solve, "gpu", reps=reps, warmup=1)
        ag = bg = None
        cupy.get_default_memory_pool().free_all_blocks()
        return name, t, None
    import scipy.linalg as sl
    def measure():
        best = math.inf
        for _ in range(max(1, reps)):
            w = np.array(a, order="F")
            t0 = time.perf_counter()
            if method == "cholesky":
                sl.cho_solve(sl.cho_factor(w, lower=True, overwrite_a=True,
                                           check_finite=False), b, check_finite=False)
            else:
                sl.lu_solve(sl.lu_factor(w, overwrite_a=True, check_finite=False), b,
                            check_finite=False)
            best = min(best, time.perf_counter() - t0)
        return best
    best, got = common.best_over_threads(threads, measure)
    return "scipy", best, got


if __name__ == "__main__":
    import sys

    from . import main_argv
    sys.exit(main_argv(["mixed", *sys.argv[1:]], prog="python -m distla.bench.mixed"))
