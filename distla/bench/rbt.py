"""Benchmark: RBT solve (butterflies + GENP + refinement) vs GEPP and a one-device reference.

``distla.linalg.rbt_solve`` against distla's partial-pivoting solve on the same matrix and the
single-device reference, in one run.

    mpiexec -n 4 python -m distla.bench rbt --n 4096 --nb 128 --grid 2x2 --device cpu
    mpiexec -n 2 python -m distla.bench rbt --n 65536 --nb 1024 --grid 1x2 --device gpu \\
        --precision both
    python -m distla.bench.rbt ...                 (standalone, same options)

Matrix: ``general_matrix`` (i.i.d. standard normal from global indices, the same on any grid),
one right-hand side (``--nrhs``). Rows per n (best of ``--reps``, device synchronized and ranks
barriered around each solve, maximum over ranks):

* ``distla-rbt`` (per ``--precision``): total seconds (``RBTInfo.times['total']``: the whole
  solve, without the backward-error check) and rate (2n^3/3 flops over the total),
  ``t_transform`` (U^T A V and the right-hand-side butterflies), ``transform_pct`` (its share of
  the total), ``t_genp``, ``iters`` and ``t_refine`` (residuals + solves), ``fallback``,
  ``berr`` (LAPACK componentwise backward error) and ``sresid`` (ScaLAPACK SRESID) of X,
  ``vs_gepp`` = GEPP seconds / RBT seconds (> 1: RBT faster), ``vs_ref``; ``check``: SRESID
  PASS/FAIL against ScaLAPACK's LU threshold 1 (``check_thresh``; a FAIL exits 3), for GEPP too.
* ``distla-gepp``: ``lu_factor(pivoting="partial")`` + ``lu_solve`` on the same matrix.
* ``scipy`` (CPU: ``scipy.linalg.lu_factor`` + ``lu_solve`` with as many BLAS threads as ranks
  on the node) or ``cupy(cusolver)`` (GPU: ``cupyx.scipy.linalg.lu_factor`` + ``lu_solve``,
  getrf + getrs) on rank 0 alone (``--no-ref`` skips it).
"""
from __future__ import annotations

import argparse
import gc
import math
import time

import numpy as np

from . import common

NAME = "rbt"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The benchmark's options (the framework calls this once). Not collective."""
    common.add_problem_arguments(parser, n=(4096,), reps=3, reference=False)
    parser.add_argument("--no-ref", "--no-reference", dest="reference", action="store_false",
                        help="skip the single-device reference (SciPy / cuSOLVER)")
    parser.add_argument("--ref-threads", type=int, default=None,
                        help="BLAS threads for the CPU reference on rank 0 (default: the "
                             "ranks on the node, at most its cores, and one: the faster)")
    parser.add_argument("--precision", choices=("double", "mixed", "both"), default="double",
                        help="RBT factorization precision: double (GENP in --dtype), mixed "
                             "(float32 GENP, float64 refinement) or both (default double)")
    parser.add_argument("--depth", type=int, default=2, help="butterfly depth (default 2)")
    parser.add_argument("--nrhs", type=int, default=1, help="right-hand sides (default 1)")
    parser.add_argument("--order", choices=("row", "col"), default="row",
                        help="rank order of the process grid")
    parser.add_argument("--no-gepp", dest="gepp", action="store_false",
                        help="skip distla's partial-pivoting solve")


def _free(device) -> None:
    gc.collect()
    if device == "gpu":
        import cupy
        cupy.get_default_memory_pool().free_all_blocks()


def _max(comm, v: float) -> float:
    from mpi4py import MPI
    return float(comm.allreduce(float(v), op=MPI.MAX))


def _timed_solve(fn, device, comm):
    """(seconds, result) of one collective solve, synchronized and barriered, max over ranks."""
    common.sync(device)
    comm.Barrier()
    t0 = time.perf_counter()
    out = fn()
    common.sync(device)
    dt = time.perf_counter() - t0
    comm.Barrier()
    return _max(comm, dt), out


def run(args) -> list[dict]:
    """Collective over COMM_WORLD: run the benchmark; returns the result rows."""
    from mpi4py import MPI

    from ..checks import backward_error, solve_residual
    from ..device import get_backend
    from ..errors import collective
    from ..linalg.lu import lu_factor, lu_solve
    from ..linalg.rbt import rbt_solve
    from ..matrix import DistMatrix
    comm = MPI.COMM_WORLD
    device = args.device or common.default_device()
    dtype = np.dtype(args.dtype)
    precisions = ("double", "mixed") if args.precision == "both" else (args.precision,)
    with collective(comm):
        get_backend(device, comm)
        if args.nb is not None and args.nb < 1:
            raise ValueError(f"--nb must be positive, not {args.nb}")
        if args.nrhs < 1 or args.reps < 1:
            raise ValueError("--nrhs and --reps must be positive")
        if "mixed" in precisions and dtype != np.float64:
            raise ValueError("--precision mixed needs --dtype float64")
    grid = common.make_grid(args.grid, comm, order=args.order)
    gname = f"{grid.nprow}x{grid.npcol}"
    quiet = getattr(args, "quiet", False)
    rows = []
    for n in common.parse_sizes(args.n):
        nb = args.nb or common.default_nb(n, device, grid)
        nfl = common.flops("lu", n)
        A = common.general_matrix(grid, n, nb, seed=args.seed, dtype=dtype, device=device)
        B = DistMatrix.random(grid, (n, args.nrhs), (nb, nb), seed=args.seed + 1,
                              dtype=dtype, device=device)
        base = dict(nb=nb, grid=gname, ranks=comm.size, device=device, dtype=dtype.name,
                    nrhs=args.nrhs)
        rbt_rows = []
        for prec in precisions:
            best, keep = math.inf, None
            if device == "gpu":  # untimed: CuPy compiles its kernels per size class
                rbt_solve(A, B, depth=args.depth, seed=args.seed, precision=prec)
            for rep in range(args.reps):
                _, (X, info) = _timed_solve(
                    lambda: rbt_solve(A, B, depth=args.depth, seed=args.seed + rep,
                                      precision=prec, return_info=True), device, comm)
                # the solve itself, without the backward errors return_info adds afterwards
                t = _max(comm, info.times["total"])
                if t < best:
                    best, keep = t, (X, info)
                del X
            X, info = keep
            tt = {k: _max(comm, v) for k, v in sorted(info.times.items())}
            rec = common.record(NAME, "distla-rbt", n=n, seconds=best, nflops=nfl, **base,
                                precision=prec, depth=args.depth)
            rec.update(t_transform=tt.get("transform", 0.0), t_genp=tt.get("factor", 0.0),
                       iters=info.iterations, t_refine=tt.get("refine", 0.0),
                       t_fallback=tt.get("fallback", 0.0), fallback=info.fallback,
                       factor_dtype=info.factor_dtype,
                       transform_pct=100.0 * tt.get("transform", 0.0) / best,
                       berr=info.backward_error, sresid=info.residual,
                       gmres_it=sum(info.gmres_iterations))
            common.judge(rec, common.default_threshold("rbt", {}, dtype), "sresid")
            del X, keep
            _free(device)
            rows.append(rec)
            rbt_rows.append(rec)
            if not quiet and comm.rank == 0:
                print(f"rbt n={n} {prec}: {best:.4g} s ({rec['tflops']:.4g} TFLOP/s), "
                      f"transform {rec['t_transform']:.3g} s ({rec['transform_pct']:.2f}%), "
                      f"GENP {rec['t_genp']:.3g} s ({info.factor_dtype}), refine "
                      f"{rec['iters']} it ({rec['gmres_it']} GMRES) {rec['t_refine']:.3g} s, "
                      f"fallback={info.fallback}, "
                      f"berr {rec['berr']:.2e}", flush=True)
        if args.gepp:
            best, X = math.inf, None
            if device == "gpu":  # untimed warm-up, as for RBT
                lu_solve(lu_factor(A, pivoting="partial"), B)
            for _ in range(args.reps):
                X = None
                _free(device)
                t, X = _timed_solve(lambda: lu_solve(lu_factor(A, pivoting="partial"), B),
                                    device, comm)
                best = min(best, t)
            rec = common.record(NAME, "distla-gepp", n=n, seconds=best, nflops=nfl, **base,
                                berr=backward_error(A, X, B), sresid=solve_residual(A, X, B))
            common.judge(rec, common.default_threshold("gepp", {}, dtype), "sresid")
            del X
            _free(device)
            rows.append(rec)
            for r in rbt_rows:
                r["vs_gepp"] = best / r["seconds"]
            if not quiet and comm.rank == 0:
                print(f"gepp n={n}: {best:.4g} s ({rec['tflops']:.4g} TFLOP/s), "
                      f"berr {rec['berr']:.2e}", flush=True)
        A = B = None  # free the matrices before the reference runs
        _free(device)
        if getattr(args, "reference", True):
            threads = common.reference_thread_counts(comm, args.ref_threads)  # collective
            ref = common.reference_rank0(
                lambda: _reference(n, args.nrhs, args.seed, dtype, device, args.reps,
                                   threads), comm)
            if ref is not None:
                impl, t, threads = ref
                r = common.record(NAME, impl, n=n, seconds=t, nflops=nfl, device=device,
                                  dtype=dtype.name, ranks=1, nrhs=args.nrhs)
                if threads:
                    r["threads"] = threads
                rows.append(r)
                for rr in rbt_rows:
                    rr["vs_ref"] = t / rr["seconds"]
                if not quiet and comm.rank == 0:
                    print(f"{impl} n={n}: {t:.4g} s ({r['tflops']:.4g} TFLOP/s)", flush=True)
    return rows


# ---------------------------------------------------------------------------------------
# single-device reference (rank 0 only)
# ---------------------------------------------------------------------------------------
def _reference(n, nrhs, seed, dtype, device, reps, threads):
    """(name, best seconds of lu_factor + lu_solve, threads) or None when it does not fit.
    Not collective (rank 0)."""
    need = (2 * n * n + 2 * n * nrhs) * dtype.itemsize
    if not common.fits(need, device):
        return None
    if device == "gpu":
        import cupy
        import cupyx.scipy.linalg as csl
        a = common.global_normal(n, n, seed, cupy, dtype)
        b = common.global_normal(n, nrhs, seed + 1, cupy, dtype)
        best = math.inf
        for _ in range(max(1, reps)):
            w = a.copy(order="F")
            cupy.cuda.runtime.deviceSynchronize()
            t0 = time.perf_counter()
            x = csl.lu_solve(csl.lu_factor(w, overwrite_a=True, check_finite=False), b,
                             check_finite=False)
            cupy.cuda.runtime.deviceSynchronize()
            best = min(best, time.perf_counter() - t0)
            del x, w
        del a, b
        cupy.get_default_memory_pool().free_all_blocks()
        return "cupy(cusolver)", best, None

    import scipy.linalg as sl
    a = common.global_normal(n, n, seed, np, dtype)
    b = common.global_normal(n, nrhs, seed + 1, np, dtype)
    def measure():
        best = math.inf
        for _ in range(max(1, reps)):
            w = np.array(a, order="F")
            t0 = time.perf_counter()
            sl.lu_solve(sl.lu_factor(w, overwrite_a=True, check_finite=False), b,
                        check_finite=False)
            best = min(best, time.perf_counter() - t0)
        return best
    best, got = common.best_over_threads(threads, measure)
    return "scipy", best, got


if __name__ == "__main__":
    import sys

    from . import main_argv
    sys.exit(main_argv(["rbt", *sys.argv[1:]], prog="python -m distla.bench.rbt"))
