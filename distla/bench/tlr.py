"""Benchmark: TLR (tile low-rank) Cholesky against distla's dense Cholesky on the same matrix.

    mpiexec -n 4 python -m distla.bench tlr --n 8192 --tile 256 --tol 1e-8 --device cpu
    python -m distla.bench tlr --n 65536 --tile 1024 --tol 1e-8 --device gpu
    python -m distla.bench.tlr ...                     (standalone, same options)

Problem: the HiCMA/STARS-H "st-2D-sqexp" covariance (:func:`distla.covariance.default_problem`:
jittered grid in the unit square, Morton order, squared exponential, beta 0.1, sigma 1, nugget
1e-2). The TLR matrix is built tile by tile on each owner (:func:`distla.tlr.from_kernel`,
never dense); the dense matrix (for distla's dense Cholesky and the accuracy checks) only
without ``--no-dense``, evaluated in column chunks and never more than one at a time
(dense Cholesky timed in place on a fresh matrix; the accuracy checks use skinny products
``A X`` with ``n x 8`` probes, never ``L L^T``), so n = 65536 fits one 141 GB GPU.

Reported per n: compression time, TLR factor time (copy outside the timed region), dense
factor time and the speedup; memory of the TLR matrix (compressed footprint and allocated
padded stacks) as a fraction of the dense n x n matrix; ranks min/mean/max before and after
factoring; accuracy: ``||A - L L^T||_2 / ||A||_2`` (10 steps of subspace iteration with 8 random
probe vectors, a lower bound; with the exact dense A, or with the TLR matrix under
``--no-dense``), the compression error ``||A - A_tlr||_2 / ||A||_2`` (dense only), the
log-determinant relative error against the dense factor, and the backward error
``||A x - b|| / (||A|| ||x||)`` of a TLR solve. Times are maxima over ranks.
``--profile`` adds ``prof_<phase>`` seconds (bcast, update, reduce, panel, potrf, header,
compress, trsm, store, ...) of one extra factorization read from a :class:`distla.trace.Tracer`
(device seconds on GPU ranks, maxima over ranks; ``prof_profiled`` is its wall time).
"""
from __future__ import annotations

import argparse
import math

import numpy as np

from . import common

NAME = "tlr"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The benchmark's options (the framework calls this once). Not collective."""
    parser.add_argument("--n", nargs="+", default=["4096"], metavar="N",
                        help="matrix sizes (default 4096; commas and 1k/64k accepted)")
    parser.add_argument("--tile", type=int, default=None, metavar="NB",
                        help="tile size (default 256 on cpu, 1024 on gpu, at most n/max(P,Q))")
    parser.add_argument("--tol", type=float, default=1e-8,
                        help="fixed accuracy (default 1e-8; see distla.tlr.matrix)")
    parser.add_argument("--max-rank", type=int, default=None, help="cap on every tile rank")
    parser.add_argument("--method", choices=("svd", "rsvd", "aca"), default="rsvd",
                        help="compression method (default rsvd)")
    parser.add_argument("--grid", default=None, metavar="PxQ",
                        help="process grid (default: the squarest P x Q)")
    parser.add_argument("--device", choices=("cpu", "gpu"), default=None,
                        help="cpu or gpu (default: gpu if CuPy sees one)")
    parser.add_argument("--no-dense", dest="dense", action="store_false",
                        help="skip the dense matrix: no dense Cholesky, accuracy vs the TLR "
                             "matrix only")
    parser.add_argument("--reps", type=int, default=1, help="best of REPS factorizations")
    parser.add_argument("--beta", type=float, default=0.1, help="kernel length scale")
    parser.add_argument("--nugget", type=float, default=1e-2, help="diagonal nugget")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--profile", action="store_true",
                        help="add seconds per phase (distla.trace) of one extra, separately "
                             "run TLR factorization")
    parser.add_argument("--qr", choices=("auto", "lapack", "kernel"), default="auto",
                        help="batched QR in the compressions: auto (LAPACK per tile on cpu, "
                             "the CUDA kernel on gpu), lapack (xp.linalg.qr) or kernel")
    parser.add_argument("--svd", choices=("auto", "lapack", "kernel"), default="auto",
                        help="SVD of the small cores: auto (LAPACK on cpu, the batched Jacobi "
                             "CUDA kernel on gpu), lapack (xp.linalg.svd) or kernel")
    parser.add_argument("--workspace", type=int, default=None,
                        help="MiB of scratch per batched call (default 256 on cpu, 2048 on gpu)")


def _timed(fn, device, comm):
    """Collective: seconds of ``fn()`` (device synced, ranks barriered, max over ranks)."""
    return common.timed_result(fn, device, comm, reps=1)


def _free(xp):
    """Return freed device blocks to the device (CuPy's pool keeps them otherwise). Local."""
    if xp is not np:
        xp.get_default_memory_pool().free_all_blocks()


def _dense_matrix(grid, pts, ker, nb, device, chunk_bytes=2 ** 28):
    """Collective: the dense covariance matrix as a DistMatrix, evaluated in column chunks so
    that the kernel's temporaries stay ~``chunk_bytes`` (never a second n x n array)."""
    from .. import covariance as cov
    from ..errors import agree
    from ..matrix import DistMatrix
    n = len(pts)
    A = DistMatrix.zeros(grid, (n, n), (nb, nb), device=device)
    xp = A.xp
    err = None
    try:
        fn = cov.entry_function(pts, ker, xp)
        I = xp.asarray(A.row_indices()).reshape(-1, 1)
        J = np.asarray(A.col_indices())
        step = max(1, chunk_bytes // (8 * 6 * max(1, I.shape[0])))
        for c0 in range(0, J.size, step):
            Jc = xp.asarray(J[c0:c0 + step]).reshape(1, -1)
            A.local[:, c0:c0 + Jc.shape[1]] = fn(I, Jc)
    except Exception as e:  # noqa: BLE001 - agreed on below
        err = e
    agree(grid.comm, err)
    return A


def _dense_matmul(A, X):
    """Collective: ``A X`` replicated ``(n, r)``, for ``X`` replicated ``(n, r)`` on A's
    device (a skinny product: no second dense matrix)."""
    xp = A.xp
    Y = xp.zeros((A.m, X.shape[1]), dtype=A.dtype)
    rows = xp.asarray(A.row_indices())
    cols = xp.asarray(A.col_indices())
    if A.local.size:
        Y[rows] = A.local @ X[cols]
    A.grid.comms(A.device).all.allreduce(Y, "sum")
    return Y


def _power(apply, n, xp, iters=10, r=8, seed=1):
    """Collective (through ``apply``, ``(n, r) -> (n, r)``): estimate (a lower bound) of
    ``||E||_2`` for symmetric E by subspace iteration with ``r`` random probe vectors."""
    X = xp.asarray(np.random.default_rng(seed).standard_normal((n, r)))
    Q, _ = xp.linalg.qr(X)
    est = 0.0
    for _ in range(iters):
        W = apply(Q)
        Q, R = xp.linalg.qr(W)
        est = float(np.linalg.norm(np.asarray(R.get() if hasattr(R, "get") else R), 2))
        if est == 0.0 or not math.isfinite(est):
            return est
    return est


def run(args) -> list[dict]:
    """Collective over COMM_WORLD: run the benchmark; returns the result rows."""
    from mpi4py import MPI

    from .. import covariance as cov
    from .. import tlr
    from ..tlr import batched
    comm = MPI.COMM_WORLD
    device = args.device or common.default_device()
    batched.QR_METHOD, batched.SVD_METHOD = args.qr, args.svd
    grid = common.make_grid(args.grid, comm)
    gname = f"{grid.nprow}x{grid.npcol}"
    work = int(args.workspace or (2048 if device == "gpu" else 256)) << 20
    rows = []
    for n in common.parse_sizes(args.n):
        nb = args.tile or min(1024 if device == "gpu" else 256,
                              max(1, -(-n // max(grid.nprow, grid.npcol))))
        pts, ker = cov.default_problem(n, seed=args.seed, beta=args.beta, nugget=args.nugget)
        base = dict(n=n, nb=nb, grid=gname, ranks=grid.size, device=device, dtype="float64",
                    tol=args.tol, qr=args.qr, svd=args.svd)
        # --- TLR: compress (never dense), factor --------------------------------------
        t_comp, T = _timed(lambda: tlr.from_kernel(
            grid, pts, ker, nb, tol=args.tol, max_rank=args.max_rank, method=args.method,
            device=device, seed=args.seed, workspace=work), device, comm)
        best, L = math.inf, None
        warm = 1 if device == "gpu" else 0   # first run compiles kernels: untimed on GPU
        for rep in range(warm + max(1, args.reps)):
            Tc = T.copy()
            dt, L = _timed(lambda: tlr.cholesky(Tc, overwrite=True, workspace=work),
                           device, comm)
            if rep >= warm:
                best = min(best, dt)
            Tc = None  # free the copy
            _free(L.xp)
        t_fact = best
        ld_tlr = L.logdet()
        xp = L.xp
        b = xp.asarray(np.random.default_rng(args.seed + 1).standard_normal(n))
        t_solve, x = _timed(lambda: tlr.cho_solve(L, b), device, comm)
        rec = common.record(NAME, "distla-tlr", seconds=t_fact, **base,
                            compress_s=t_comp, solve_s=t_solve,
                            mem_frac=T.nbytes / T.nbytes_dense,
                            alloc_frac=T.nbytes_allocated / T.nbytes_dense,
                            mem_gib=T.nbytes / 2 ** 30,
                            rank_min=T.ranks.min, rank_mean=round(T.ranks.mean, 2),
                            rank_max=T.ranks.max, L_rank_mean=round(L.ranks.mean, 2),
                            L_rank_max=L.ranks.max, capped=T.info.get("capped", 0)
                            + L.info.get("factor_capped", 0))
        if getattr(args, "profile", False):   # phases from distla.trace, max over ranks
            Tp = T.copy()
            prof = common.profiled(lambda: tlr.cholesky(Tp, overwrite=True, workspace=work),
                                   device, comm)
            rec.update({f"prof_{k[2:]}": v for k, v in prof.items()})
            Tp = None
            _free(xp)
        dense_rec = None
        if args.dense:
            # at most one dense n x n matrix alive at a time (plus the dense Cholesky's own
            # workspace): fresh matrix -> factor in place -> logdet -> freed; then a fresh
            # matrix for the accuracy checks by skinny products with random probes.
            from ..linalg.cholesky import cholesky as dense_cholesky
            from ..linalg.cholesky import logdet as dense_logdet

            def make():
                return _dense_matrix(grid, pts, ker, nb, device)
            best = math.inf
            for rep in range(warm + max(1, args.reps)):
                A = make()
                dt, Ld = _timed(lambda: dense_cholesky(A, overwrite_a=True), device, comm)
                if rep >= warm:
                    best = min(best, dt)
                ld_dense = dense_logdet(Ld)
                del A, Ld
                _free(xp)
            dense_rec = common.record(NAME, "distla-dense", seconds=best,
                                      nflops=common.flops("cholesky", n), **base)
            A = make()
            nA = _power(lambda X: _dense_matmul(A, X), n, xp)
            e_fact = _power(lambda X: _dense_matmul(A, X) - L.matvec(L.matvec(X, trans=True)),
                            n, xp) / nA
            e_comp = _power(lambda X: _dense_matmul(A, X) - T.matvec(X), n, xp) / nA
            r = _dense_matmul(A, x[:, None])[:, 0] - b
            del A
            _free(xp)
            rec.update(speedup=best / t_fact if t_fact > 0 else float("nan"),
                       err_fact=e_fact, err_comp=e_comp,
                       err_logdet=abs(ld_tlr - ld_dense) / abs(ld_dense))
        else:
            nA = _power(T.matvec, n, xp)
            e_fact = _power(lambda X: T.matvec(X) - L.matvec(L.matvec(X, trans=True)),
                            n, xp) / nA
            r = T.matvec(x) - b
            rec.update(err_fact_vs_tlr=e_fact)
        rec["backward"] = float(xp.linalg.norm(r)) / (nA * float(xp.linalg.norm(x)))
        rec["logdet"] = ld_tlr
        rows.append(rec)
        if dense_rec is not None:
            rows.append(dense_rec)
        T = L = x = b = r = None  # free before the next size
        _free(xp)
    return rows


if __name__ == "__main__":
    import sys

    from . import main_argv
    sys.exit(main_argv(["tlr", *sys.argv[1:]], prog="python -m distla.bench.tlr"))
