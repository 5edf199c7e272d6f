"""Benchmark: distributed LU (``distla.linalg.lu``: partial pivoting, tournament pivoting, none)
against the single-device reference measured in the same run (SciPy ``lu_factor`` on CPU,
cuSOLVER getrf through ``cupyx.scipy.linalg.lu_factor`` on GPU).

    mpiexec -n 2 python -m distla.bench lu --n 4096 --nb 256 --grid 1x2 --device cpu
    python -m distla.bench.lu ...                (standalone, same options)

The matrix has independent standard normal entries (:func:`distla.bench.common.general_matrix`,
generated in column slabs, the same whatever the grid; within ~1.2x of the local matrix).
Timing: best of ``--reps`` factorizations (``overwrite_a`` on a fresh copy made outside the
timed region), device synchronized and ranks barriered around each, maximum over ranks; it
includes the library's default scan for NaN/Inf (the reference runs without it). Rate:
2n^3/3 - n^2/2 flops. ``--inplace``: no copy at all; every repetition factors a freshly
generated matrix in its own storage, and the check regenerates A in slabs
(:func:`distla.bench.common.regenerated_residual`; no growth factor), so one n x n matrix (plus
O(n nb) workspace) is held: the largest n that fits. Records carry the peak memory per rank
(``host_peak_mb``, on GPU ``device_peak_mb`` from the CuPy pool, ``local_mb``).
``--profile`` (``--trace``) adds the seconds per phase (panel = gather + pivot search + panel
factorization, swap, bcast waits, trsm, update; maximum over ranks) and the host overhead per
step of one extra, separately run factorization (on GPU every phase synchronizes the device, so
the phases add up to more than the timed run). Checks: SRESID of one solve and the growth
factor max|U|/max|A|; SRESID PASS/FAIL against ScaLAPACK's threshold 1 (``check``,
``check_thresh``; a FAIL exits 3: GENP, ``--pivoting none``, can fail on these matrices).
"""
from __future__ import annotations

import argparse

import numpy as np

from ..device.memory import PeakMemory
from ..linalg.methods import GEMM_MODES
from . import common

NAME = "lu"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The benchmark's options (the framework calls this once). Not collective."""
    common.add_problem_arguments(parser, n=(4096,), reps=3, reference=False)
    parser.add_argument("--pivoting", nargs="+", default=["partial"],
                        choices=("partial", "tournament", "none"),
                        help="pivoting strategies to time (default: partial)")
    parser.add_argument("--tree", choices=("binary", "flat"), default="binary",
                        help="tournament reduction tree (default binary)")
    parser.add_argument("--lookahead", type=int, default=1, help="lookahead (0 or 1, default 1)")
    parser.add_argument("--order", choices=("row", "col"), default="row",
                        help="rank order of the process grid")
    parser.add_argument("--gemm", choices=GEMM_MODES, default="native",
                        help="trailing-update GEMMs: native, or for float32 on GPU tensor "
                             "cores: tf32x3 or fp16x3 (split operands, ~float32 "
                             "accuracy), tf32, fp16 "
                             "or bf16 (docs/mixed.md)")
    parser.add_argument("--inplace", action="store_true",
                        help="factor freshly generated matrices in place (no copy of A; the "
                             "residual regenerates A): the largest n that fits")
    parser.add_argument("--warmup", type=int, default=1,
                        help="untimed factorizations first (default 1; CPU: a small matrix "
                             "unless --inplace)")
    parser.add_argument("--panel-leaf", type=int, default=None, metavar="W",
                        help="partial-pivoting panels of at least _lu_loop.PANEL_MIN_ROWS "
                             "rows by recursive halving down to leaves of W columns (GPU: "
                             "distla's leaf kernel; 0: one getrf per panel; default: "
                             "distla.linalg._lu_loop.PANEL_LEAF, docs/perf.md)")
    parser.add_argument("--force-loop", action="store_true",
                        help="on a 1x1 grid run distla's step loop even where the local "
                             "library would be used (to trace its steps)")
    parser.add_argument("--profile", "--trace", dest="profile", action="store_true",
                        help="one extra, traced run: seconds per phase, and the host time "
                             "per step outside kernels and messages (step_overhead_us)")
    parser.add_argument("--no-check", dest="check", action="store_false",
                        help="skip the solve residual and growth factor")
    parser.add_argument("--no-ref", "--no-reference", dest="reference", action="store_false",
                        help="skip the single-device reference")
    parser.add_argument("--ref-threads", type=int, default=None,
                        help="BLAS threads for the CPU reference on rank 0 (default: the "
                             "ranks on the node, at most its cores: the cores the run uses)")


def run(args) -> list[dict]:
    """Collective over COMM_WORLD: run the benchmark; returns the result rows (the same on
    every rank)."""
    from ..linalg import _lu_loop
    saved = dict(_lu_loop.PANEL_LEAF)
    if getattr(args, "panel_leaf", None) is not None:
        _lu_loop.PANEL_LEAF.update({k: int(args.panel_leaf) for k in saved})
    try:
        force = getattr(args, "force_loop", False)
        with common.step_loop(force):
            return common.tag_forced(_run(args), force)
    finally:
        _lu_loop.PANEL_LEAF.update(saved)


def _run(args) -> list[dict]:
    """The body of :func:`run` (collective)."""
    from mpi4py import MPI

    from ..linalg.lu import lu_factor, lu_solve
    comm = MPI.COMM_WORLD
    if args.lookahead not in (0, 1):
        raise ValueError(f"--lookahead must be 0 or 1, not {args.lookahead}")
    device = args.device or common.default_device()
    dtype = np.dtype(args.dtype)
    grid = common.make_grid(args.grid, comm, order=getattr(args, "order", "row"))
    gname = f"{grid.nprow}x{grid.npcol}"
    rows = []
    for n in common.parse_sizes(args.n):
        nb = args.nb or common.default_nb(n, device, grid)
        nfl = common.flops("lu", n)
        best_partial = None

        def make(size=n):
            return common.general_matrix(grid, size, nb, seed=args.seed, dtype=dtype,
                                         device=device)
        A = None if args.inplace else make()
        for piv in args.pivoting:
            def factor(W):
                return lu_factor(W, pivoting=piv, overwrite_a=True, tree=args.tree,
                                 lookahead=args.lookahead, gemm=args.gemm)
            common.free_device_pool(device)
            with PeakMemory(device) as peak:
                if args.inplace:
                    best, F = common.timed_fresh(make, factor, device, comm, reps=args.reps,
                                                 warmup=max(0, args.warmup))
                else:
                    # untimed warm-up: communicators, BLAS/LAPACK symbols, GPU handles; on GPU
                    # at the full size, since CuPy compiles its kernels per size class
                    nw = n if device == "gpu" else min(n, 4 * nb * max(grid.nprow, grid.npcol))
                    for _ in range(max(0, args.warmup)):
                        factor(make(nw))
                    best, F = common.timed_result(factor, device, comm, reps=args.reps,
                                                  setup=A.copy)
            rec = common.record(NAME, "distla", n=n, seconds=best, nflops=nfl, nb=nb,
                                grid=gname, ranks=comm.size, device=device, dtype=dtype.name,
                                pivoting=piv, lookahead=args.lookahead)
            if common.local_library(F.lu, "getrf", args.gemm) and piv != "none":
                rec["local_library"] = True   # one LAPACK / cuSOLVER call: nb, lookahead unused
            elif piv == "tournament" and grid.nprow == 1:
                rec["tournament_is_partial"] = True   # one process row: TSLU's single leaf
            if args.panel_leaf is not None:
                rec["panel_leaf"] = args.panel_leaf
            if args.gemm != "native":
                rec["gemm"] = args.gemm
            if piv == "tournament":
                rec["tree"] = args.tree
            rec["gflops"] = nfl / best / 1e9
            if args.inplace:
                rec["inplace"] = True
            rec.update(common.memory_fields(peak, F.lu.local.nbytes, comm, n=n,
                                             copies=1 if args.inplace else 2))
            if piv == "partial":
                best_partial = best
            elif best_partial is not None:
                rec["vs_partial"] = best_partial / best  # > 1: faster than partial pivoting
            if args.check:
                from ..checks import solve_residual
                from ..matrix import DistMatrix
                B = DistMatrix.random(grid, (n, 1), (nb, nb), seed=args.seed + 1, dtype=dtype,
                                      device=device)
                X = lu_solve(F, B)
                if A is None:
                    rec["sresid"] = common.regenerated_residual("general", grid, n, args.seed,
                                                                X, B, dtype)
                else:
                    rec["growth"] = F.growth_factor()
                    rec["sresid"] = solve_residual(A, X, B)
                common.judge(rec, common.default_threshold("gepp", {}, dtype), "sresid")
            del F
            if args.profile:
                W = make() if A is None else A.copy()
                rec.update(common.profiled(
                    lambda: lu_factor(W, pivoting=piv, overwrite_a=True, tree=args.tree,
                                      lookahead=args.lookahead, gemm=args.gemm), device, comm))
                del W
            rows.append(rec)
        del A
        if getattr(args, "reference", True):
            # collective: not in the lambda
            threads = common.reference_thread_counts(comm, args.ref_threads)
            ref = common.reference_rank0(
                lambda: _reference(n, args.seed, dtype, device, args.reps, threads), comm)
            if ref is not None:
                impl, t, threads = ref
                r = common.record(NAME, impl, n=n, seconds=t, nflops=nfl, device=device,
                                  dtype=dtype.name, ranks=1, pivoting="partial")
                r["gflops"] = nfl / t / 1e9
                if threads:
                    r["threads"] = threads
                for d in rows:
                    if d["n"] == n and d["impl"] == "distla":
                        d["vs_ref"] = t / d["seconds"]  # > 1: distla is faster
                rows.append(r)
    return rows


# ---------------------------------------------------------------------------------------
# the single-device reference (rank 0 only)
# ---------------------------------------------------------------------------------------
def _reference(n, seed, dtype, device, reps, threads):
    """(name, best seconds, threads) of the single-device LU, or None if it does not fit.
    Not collective (rank 0)."""
    need = 2.2 * n * n * dtype.itemsize
    if not common.fits(need, device):
        return None
    if device == "gpu":
        import cupy
        from cupyx.scipy.linalg import lu_factor as cu_lu_factor
        A = common.global_normal(n, n, seed, cupy, dtype)
        best = common.best_local(lambda W: cu_lu_factor(W, overwrite_a=True, check_finite=False),
                                 device, reps, setup=lambda: A.copy(order="F"))
        return "cupy(cusolver)", best, None
    import scipy.linalg
    A = common.global_normal(n, n, seed, np, dtype)
    def measure():
        w = min(n, 256)                          # warm-up: the BLAS threads, as distla's
        scipy.linalg.lu_factor(A[:w, :w], check_finite=False)
        return common.best_local(
            lambda W: scipy.linalg.lu_factor(W, overwrite_a=True, check_finite=False), "cpu",
            reps, setup=lambda: np.array(A, order="F"))
    best, got = common.best_over_threads(threads, measure)
    return "scipy", best, got


if __name__ == "__main__":
    import sys

    from . import main_argv
    sys.exit(main_argv(["lu", *sys.argv[1:]], prog="python -m distla.bench.lu"))
