"""Benchmark: distributed Cholesky (``distla.linalg.cholesky``) against the single-device
reference measured in the same run (SciPy/LAPACK ``cholesky`` on CPU, cuSOLVER through
``cupy.linalg.cholesky`` on GPU).

    mpiexec -n 2 python -m distla.bench cholesky --n 4096 --nb 256 --grid 1x2 --device cpu
    python -m distla.bench.cholesky ...           (standalone, same options)

The matrix is the SPD :func:`distla.bench.common.spd_matrix`, generated in column slabs from
global indices (never globally for distla; within ~1.2x of the local matrix). Timing:
``--warmup`` untimed runs, then best of ``--reps`` factorizations (``overwrite_a`` on a fresh
copy made outside the timed region), device synchronized and ranks barriered around each; the
time is the maximum over ranks, and includes the library's default input checks (the scan for
NaN/Inf and the symmetry probe; the reference runs without them). Rate: n^3/3 + n^2/2 flops.
``--inplace``: no copy at all; every repetition factors a freshly generated matrix in its own
storage and the check regenerates A in slabs
(:func:`distla.bench.common.regenerated_residual`), so one n x n matrix (plus O(n nb)
workspace) is held: the largest n that fits. Records carry the peak memory per rank
(``host_peak_mb``, on GPU ``device_peak_mb`` from the CuPy pool, ``local_mb``). Checks (unless
``--no-check``): the factor residual ``fresid`` and SRESID of one solve, PASS/FAIL against
ScaLAPACK's threshold 3 (``check``, ``check_thresh``; a FAIL exits 3). ``--profile``
(``--trace``) adds the time per phase (panel, broadcasts, update) and the host overhead per
step of one extra, separately run factorization (maximum over ranks).
"""
from __future__ import annotations

import argparse

import numpy as np

from ..device.memory import PeakMemory
from . import common

NAME = "cholesky"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The benchmark's options (the framework calls this once). Not collective."""
    common.add_problem_arguments(parser, n=(4096,), reps=3)
    parser.add_argument("--lookahead", type=int, default=1, help="lookahead depth (default 1)")
    parser.add_argument("--warmup", type=int, default=1,
                        help="untimed factorizations first (library handles, memory pools)")
    parser.add_argument("--order", choices=("row", "col"), default="row",
                        help="rank order of the process grid")
    parser.add_argument("--inplace", action="store_true",
                        help="factor freshly generated matrices in place (no copy of A; the "
                             "residual regenerates A): the largest n that fits")
    parser.add_argument("--update-group", type=int, default=None, metavar="G",
                        help="trailing update: up to G adjacent block columns with their "
                             "diagonal blocks on this rank (all, on 1x1) per SYRK + GEMM pair "
                             "(default: distla.linalg._potrf_loop.UPDATE_GROUP)")
    parser.add_argument("--force-loop", action="store_true",
                        help="on a 1x1 grid run distla's step loop even where the local "
                             "library would be used (to trace its steps)")
    parser.add_argument("--profile", "--trace", dest="profile", action="store_true",
                        help="one extra, traced run: seconds per phase, and the host time "
                             "per step outside kernels and messages (step_overhead_us)")
    parser.add_argument("--no-check", dest="check", action="store_false",
                        help="skip the factor and solve residuals")
    parser.add_argument("--ref-threads", type=int, default=None,
                        help="BLAS threads for the CPU reference on rank 0 (default: the "
                             "ranks on the node, at most its cores: the cores the run uses)")


def run(args) -> list[dict]:
    """Collective over COMM_WORLD: run the benchmark; returns the result rows (the same on
    every rank)."""
    from ..linalg import _potrf_loop
    saved = dict(_potrf_loop.UPDATE_GROUP)
    if getattr(args, "update_group", None) is not None:
        _potrf_loop.UPDATE_GROUP.update({k: int(args.update_group) for k in saved})
    try:
        force = getattr(args, "force_loop", False)
        with common.step_loop(force):
            return common.tag_forced(_run(args), force)
    finally:
        _potrf_loop.UPDATE_GROUP.update(saved)


def _run(args) -> list[dict]:
    """The body of :func:`run` (collective)."""
    from mpi4py import MPI

    from ..linalg.cholesky import cho_solve, cholesky
    comm = MPI.COMM_WORLD
    device = args.device or common.default_device()
    dtype = np.dtype(args.dtype)
    grid = common.make_grid(args.grid, comm, order=getattr(args, "order", "row"))
    gname = f"{grid.nprow}x{grid.npcol}"
    rows = []
    for n in common.parse_sizes(args.n):
        nb = args.nb or common.default_nb(n, device, grid)
        nfl = common.flops("cholesky", n)

        def make():
            return common.spd_matrix(grid, n, nb, seed=args.seed, dtype=dtype, device=device)

        def factor(W):
            return cholesky(W, lower=True, overwrite_a=True, lookahead=args.lookahead)
        common.free_device_pool(device)
        with PeakMemory(device) as peak:
            if args.inplace:
                A = None
                best, L = common.timed_fresh(make, factor, device, comm, reps=args.reps,
                                             warmup=max(0, getattr(args, "warmup", 1)))
            else:
                A = make()
                for _ in range(max(0, getattr(args, "warmup", 1))):
                    factor(A.copy())
                best, L = common.timed_result(factor, device, comm, reps=args.reps,
                                              setup=A.copy)
        rec = common.record(NAME, "distla", n=n, seconds=best, nflops=nfl, nb=nb, grid=gname,
                            ranks=comm.size, device=device, dtype=dtype.name,
                            lookahead=args.lookahead)
        rec["gflops"] = nfl / best / 1e9
        if common.local_library(L, "potrf"):
            rec["local_library"] = True   # one LAPACK / cuSOLVER call: nb, lookahead unused
        if args.update_group is not None:
            rec["update_group"] = args.update_group
        if args.inplace:
            rec["inplace"] = True
        rec.update(common.memory_fields(peak, L.local.nbytes, comm, n=n,
                                         copies=1 if args.inplace else 2))
        if args.check:
            from ..checks import factor_residual_cholesky, solve_residual
            from ..matrix import DistMatrix
            B = DistMatrix.random(grid, (n, 1), (nb, nb), seed=args.seed + 1, dtype=dtype,
                                  device=device)
            X = cho_solve((L, True), B)
            if A is None:
                rec["sresid"] = common.regenerated_residual("spd", grid, n, args.seed, X, B,
                                                            dtype)
            else:
                rec["fresid"] = factor_residual_cholesky(A, L)
                rec["sresid"] = solve_residual(A, X, B)
            common.judge(rec, common.default_threshold("cholesky", {}, dtype), "fresid",
                         "sresid")
        del L
        if args.profile:
            W = make() if A is None else A.copy()
            rec.update(common.profiled(
                lambda: cholesky(W, overwrite_a=True, lookahead=args.lookahead), device, comm))
            del W
        del A
        rows.append(rec)
        if getattr(args, "reference", True):
            if device == "gpu":
                import cupy
                cupy.get_default_memory_pool().free_all_blocks()
            threads = common.reference_thread_counts(comm, args.ref_threads)   # collective
            ref = common.reference_rank0(
                lambda: _reference(n, args.seed, dtype, device, args.reps, threads), comm)
            if ref is not None:
                impl, t, threads = ref
                r = common.record(NAME, impl, n=n, seconds=t, nflops=nfl, device=device,
                                  dtype=dtype.name, ranks=1)
                r["gflops"] = nfl / t / 1e9
                if threads:
                    r["threads"] = threads
                r["vs_distla"] = t / best   # the rate ratio: > 1: distla is faster
                rows.append(r)
    return rows


# ---------------------------------------------------------------------------------------
# the single-device reference (rank 0 only)
# ---------------------------------------------------------------------------------------
_CHUNK = 2048   # columns generated at a time (bounds the hashing temporaries)


def _fill_spd(out, rows, cols, n, seed, xp):
    """out[:, :] = the entries (rows x cols, global indices) of the benchmark matrix of
    :func:`distla.problems.spd_matrix` (:func:`distla.random.spd_entries`), filled in column
    chunks. Not collective."""
    from ..random import spd_entries
    I = xp.asarray(rows).reshape(-1, 1)
    for c0 in range(0, len(cols), _CHUNK):
        J = xp.asarray(cols[c0:c0 + _CHUNK]).reshape(1, -1)
        out[:, c0:c0 + J.shape[1]] = spd_entries(seed, n, I, J)


def _global_spd(n, seed, xp, dtype=np.float64):
    """The benchmark matrix, formed globally (for the reference only)."""
    out = xp.empty((n, n), dtype=dtype, order="F")
    idx = np.arange(n, dtype=np.int64)
    _fill_spd(out, idx, idx, n, seed, xp)
    return out


def _reference(n, seed, dtype, device, reps, threads):
    """(name, best seconds, threads) of the single-device Cholesky, or None if it does not fit.
    Not collective (rank 0)."""
    need = 3 * n * n * dtype.itemsize
    if not common.fits(need, device):
        return None
    if device == "gpu":
        import cupy
        A = _global_spd(n, seed, cupy, dtype)   # warm-up: handles, workspace
        return "cupy(cusolver)", common.best_local(lambda: cupy.linalg.cholesky(A), device,
                                                   reps, warmup=1), None
    import scipy.linalg
    A = _global_spd(n, seed, np, dtype)
    def measure():
        w = min(n, 256)                          # warm-up: the BLAS threads, as distla's
        scipy.linalg.cholesky(A[:w, :w], lower=True, check_finite=False)
        return common.best_local(
            lambda W: scipy.linalg.cholesky(W, lower=True, overwrite_a=True,
                                            check_finite=False),
            "cpu", reps, setup=lambda: np.array(A, order="F"))
    best, got = common.best_over_threads(threads, measure)
    return "scipy", best, got


if __name__ == "__main__":
    import sys

    from . import main_argv
    sys.exit(main_argv(["cholesky", *sys.argv[1:]], prog="python -m distla.bench.cholesky"))
