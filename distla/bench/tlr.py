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

Reported per n: build time (``build_s`` = ``compress_s``, after one untimed warm-up build on
GPU, see ``--warmup``) beside the TLR factor time (``factor_s``, copy outside the timed region)
and their ratio, logdet and solve times, the end-to-end rate ``unknowns_per_s = n / (build +
factor + logdet)`` and time ``end_to_end_s`` (build + factor + logdet + solve), the memory per
phase (``mem_build_gib``, ``mem_factor_gib``, ``mem_solve_gib``: largest footprint on one
rank), dense factor time and the speedup; memory of the TLR matrix (compressed footprint and
allocated padded stacks) as a fraction of the dense n x n matrix; ranks min/mean/max before and
after factoring; accuracy: ``||A - L L^T||_2 / ||A||_2`` (10 steps of subspace iteration with 8
random probe vectors, a lower bound; with the exact dense A, or with the TLR matrix under
``--no-dense``), the compression error ``||A - A_tlr||_2 / ||A||_2`` (dense only), the
log-determinant relative error against the dense factor, and the backward error ``||A x - b|| /
(||A|| ||x||)`` of a TLR solve. The factor, compression and backward errors are judged against
``3 max(tol, eps) sqrt(n)`` (the 2-norm image of the build's Frobenius-norm promise; ``check``,
``check_thresh``; a FAIL, e.g. a ``--max-rank`` too small for ``tol``, exits 3). Times are
maxima over ranks. ``--profile`` adds ``prof_<phase>`` seconds (bcast, update, reduce, panel,
potrf, header, compress, trsm, store, ...) of one extra factorization read from a
:class:`distla.trace.Tracer` (device seconds on GPU ranks, maxima over ranks;
``prof_profiled`` is its wall time).
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
    parser.add_argument("--method", choices=("auto", "dense", "aca", "rsvd", "svd"),
                        default="auto", help="build method: auto (the default) = dense "
                        "on every device: every entry evaluated, then randomized "
                        "compression (rsvd); aca (adaptive cross approximation: reads few "
                        "entries, but may miss tol) only when asked; svd: exact truncated "
                        "SVD per tile (see distla.tlr.build)")
    parser.add_argument("--grid", default=None, metavar="PxQ",
                        help="process grid (default: the squarest P x Q)")
    parser.add_argument("--device", choices=("cpu", "gpu"), default=None,
                        help="cpu or gpu (default: gpu if CuPy sees one)")
    parser.add_argument("--no-dense", dest="dense", action="store_false",
                        help="skip the dense matrix: no dense Cholesky, accuracy vs the TLR "
                             "matrix only")
    parser.add_argument("--reps", type=int, default=1, help="best of REPS factorizations")
    parser.add_argument("--warmup", type=int, default=None, metavar="W",
                        help="untimed builds and factorizations before the timed ones "
                             "(default 1 on gpu: the first run compiles kernels; 0 on cpu)")
    parser.add_argument("--beta", type=float, default=0.1, help="kernel length scale")
    parser.add_argument("--nugget", type=float, default=1e-2, help="diagonal nugget")
    parser.add_argument("--seed", type=common.seed_int, default=0)
    parser.add_argument("--profile", "--trace", dest="profile", action="store_true",
                        help="add seconds per phase (distla.trace) of one extra, separately "
                             "run TLR factorization")
    parser.add_argument("--qr", choices=("auto", "lapack", "kernel"), default="auto",
                        help="batched QR in the compressions: auto (LAPACK per tile on cpu, "
                             "the CUDA kernel on gpu), lapack (xp.linalg.qr) or kernel")
    parser.add_argument("--svd", choices=("auto", "lapack", "kernel"), default="auto",
                        help="SVD of the small cores: auto (LAPACK on cpu, the batched Jacobi "
                             "CUDA kernel on gpu), lapack (xp.linalg.svd) or kernel")
    parser.add_argument("--inplace", action="store_true",
                        help="factor the built matrix in its own storage (no copy: the "
                             "largest n that fits; one timed factorization, no warm-up); the "
                             "accuracy is the solve's backward error against a rebuilt TLR "
                             "matrix once the factor is freed (no factorization error)")
    parser.add_argument("--workspace", type=int, default=None,
                        help="MiB of scratch per batched call (default: a quarter of the "
                             "free memory, see distla.tlr._memory)")


def threshold(tol, n) -> float:
    """The PASS/FAIL threshold of the relative 2-norm errors (factor, compression, backward):
    the build promises ``||A - A_tlr||_F <= tol ||A||_F``, and ``||E||_2 <= ||E||_F``,
    ``||A||_F <= sqrt(n) ||A||_2``, so ``3 max(tol, eps) sqrt(n)``. Not collective."""
    from ..checks import eps
    return 3.0 * max(tol or 0.0, eps(np.float64)) * math.sqrt(n)


def common_xp(device):
    """numpy, or cupy on GPU ranks (local)."""
    if device == "gpu":  # pragma: no cover - needs a GPU
        import cupy
        return cupy
    return np


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
    from ..tlr import batched
    comm = MPI.COMM_WORLD
    if args.inplace and args.dense:
        raise ValueError("--inplace needs --no-dense (the dense comparison keeps the TLR "
                         "matrix beside its factor)")
    device = args.device or common.default_device()
    batched.QR_METHOD, batched.SVD_METHOD = args.qr, args.svd
    grid = common.make_grid(args.grid, comm)
    rows = []
    for n in common.parse_sizes(args.n):
        nb = args.tile or min(1024 if device == "gpu" else 256,
                              max(1, -(-n // max(grid.nprow, grid.npcol))))
        pts, ker = cov.default_problem(n, seed=args.seed, beta=args.beta, nugget=args.nugget)
        base = {"n": n, "nb": nb, "grid": f"{grid.nprow}x{grid.npcol}", "ranks": grid.size,
                "device": device, "dtype": "float64", "tol": args.tol, "qr": args.qr,
                "svd": args.svd}
        run = _TLRRun(args, grid, device, pts, ker, nb)
        rec = run.measure(base)
        if args.dense:
            rows += [rec, run.against_dense(rec, base)]
        else:
            run.against_tlr(rec)
            rows.append(rec)
        common.judge(rec, threshold(args.tol, n), "err_fact", "err_comp", "err_fact_vs_tlr",
                     "backward")
        run = None  # free before the next size
        _free(common_xp(device))
    return rows


class _TLRRun:
    """One size of the benchmark: the TLR build, factor, logdet and solve, then the checks
    (collective over the grid)."""

    def __init__(self, args, grid, device, pts, ker, nb):
        self.args, self.grid, self.device = args, grid, device
        self.pts, self.ker, self.nb, self.n = pts, ker, nb, len(pts)
        self.work = int(args.workspace) << 20 if args.workspace else None
        self.warm = (1 if device == "gpu" else 0) if args.warmup is None else max(0, args.warmup)

    def build(self):
        from .. import tlr
        a = self.args
        return tlr.from_kernel(self.grid, self.pts, self.ker, self.nb, tol=a.tol,
                               max_rank=a.max_rank, method=a.method, device=self.device,
                               seed=a.seed, workspace=self.work)

    def factor(self, T):
        from .. import tlr
        return tlr.cholesky(T, overwrite=True, workspace=self.work)

    def measure(self, base):
        """Build (best after the warm-up), factor (best of reps, each on a fresh copy),
        logdet, solve; the record with times, rates, memory per phase and ranks."""
        from .. import tlr
        dev, comm = self.device, self.grid.comm
        t_build, T = common.timed_result(self.build, dev, comm, warmup=self.warm)
        stats = dict(mem_build_gib=T.info["mem_build"] / 2.0 ** 30,
                     mem_frac=T.nbytes / T.nbytes_dense,
                     alloc_frac=T.nbytes_allocated / T.nbytes_dense,
                     mem_gib=T.nbytes / 2.0 ** 30, rank_min=T.ranks.min,
                     rank_mean=round(T.ranks.mean, 2), rank_max=T.ranks.max,
                     capped=T.info.get("capped", 0), method=T.info["method"])
        if getattr(self.args, "inplace", False):     # T becomes L: no copy
            t_fact, L = common.timed_result(lambda: self.factor(T), dev, comm)
            T = None
        else:
            t_fact, L = common.timed_result(self.factor, dev, comm,
                                            reps=max(1, self.args.reps), warmup=self.warm,
                                            setup=T.copy)
        xp = L.xp
        b = xp.asarray(np.random.default_rng(self.args.seed + 1).standard_normal(self.n))
        t_ld, ld = common.timed_result(L.logdet, dev, comm)
        t_solve, x = common.timed_result(lambda: tlr.cho_solve(L, b), dev, comm)
        self.T, self.L, self.b, self.x, self.logdet = T, L, b, x, ld
        gib = 2.0 ** 30
        stats["capped"] += L.info.get("factor_capped", 0)
        rec = common.record(
            NAME, "distla-tlr", seconds=t_fact, **base, **stats,
            compress_s=t_build, build_s=t_build, factor_s=t_fact, logdet_s=t_ld,
            solve_s=t_solve, build_over_factor=t_build / t_fact if t_fact > 0 else None,
            unknowns_per_s=self.n / (t_build + t_fact + t_ld),
            end_to_end_s=t_build + t_fact + t_ld + t_solve,
            warmup=0 if T is None else self.warm, inplace=T is None,
            mem_factor_gib=L.info["mem_factor"] / gib,
            mem_solve_gib=L.info.get("mem_solve", 0) / gib,
            L_rank_mean=round(L.ranks.mean, 2), L_rank_max=L.ranks.max, logdet=ld)
        if getattr(self.args, "profile", False) and T is not None:   # phases, max over ranks
            prof = common.profiled(lambda: self.factor(T.copy()), dev, comm)
            rec.update({f"prof_{k[2:]}": v for k, v in prof.items()})
            prof = common.profiled(self.build, dev, comm)
            rec.update({f"prof_build_{k[2:]}": v for k, v in prof.items()})
            _free(xp)
        return rec

    def against_dense(self, rec, base):
        """At most one dense n x n matrix alive at a time (plus the dense Cholesky's own
        workspace): fresh matrix -> factor in place -> logdet -> freed; then a fresh matrix for
        the accuracy checks by skinny products with random probes. Returns the dense row."""
        from ..linalg.cholesky import cholesky as dense_cholesky
        from ..linalg.cholesky import logdet as dense_logdet
        dev, comm, xp, n = self.device, self.grid.comm, self.L.xp, self.n
        T, L, x, b = self.T, self.L, self.x, self.b
        best, Ld = common.timed_result(lambda A: dense_cholesky(A, overwrite_a=True), dev,
                                       comm, reps=max(1, self.args.reps), warmup=self.warm,
                                       setup=self.dense)
        ld_dense = dense_logdet(Ld)
        del Ld
        _free(xp)
        A = self.dense()
        nA = _power(lambda X: _dense_matmul(A, X), n, xp)
        e_fact = _power(lambda X: _dense_matmul(A, X) - L.matvec(L.matvec(X, trans=True)),
                        n, xp) / nA
        e_comp = _power(lambda X: _dense_matmul(A, X) - T.matvec(X), n, xp) / nA
        r = _dense_matmul(A, x[:, None])[:, 0] - b
        A = None
        _free(xp)
        rec.update(speedup=best / rec["factor_s"] if rec["factor_s"] > 0 else float("nan"),
                   err_fact=e_fact, err_comp=e_comp,
                   err_logdet=abs(self.logdet - ld_dense) / abs(ld_dense),
                   backward=float(xp.linalg.norm(r)) / (nA * float(xp.linalg.norm(x))))
        return common.record(NAME, "distla-dense", seconds=best,
                             nflops=common.flops("cholesky", n), **base)

    def dense(self):
        return _dense_matrix(self.grid, self.pts, self.ker, self.nb, self.device)

    def against_tlr(self, rec):
        """Accuracy against the TLR matrix itself (no dense matrix)."""
        T, L, x, b, xp, n = self.T, self.L, self.x, self.b, self.L.xp, self.n
        e_fact = None
        if T is None:                       # factored in place: rebuild once L is freed
            self.L = L = None
            _free(xp)
            T = self.build()
        nA = _power(T.matvec, n, xp)
        if L is not None:
            e_fact = _power(lambda X: T.matvec(X) - L.matvec(L.matvec(X, trans=True)), n,
                            xp) / nA
        r = T.matvec(x) - b
        rec.update(err_fact_vs_tlr=e_fact,
                   backward=float(xp.linalg.norm(r)) / (nA * float(xp.linalg.norm(x))))


if __name__ == "__main__":
    import sys

    from . import main_argv
    sys.exit(main_argv(["tlr", *sys.argv[1:]], prog="python -m distla.bench.tlr"))
