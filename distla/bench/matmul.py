"""Distributed GEMM (SUMMA, distla.pblas.matmul) beside one-process NumPy (CPU) or CuPy (GPU).

For every n: C = A B with n x n random A, B on the P x Q grid, best of --reps (device synced
and ranks barriered around each run); then the same product by NumPy or CuPy on rank 0 alone
(its one GPU, or as many BLAS threads as there are ranks on its node: the same cores) while
the other ranks sleep. The distla row carries
``speedup`` = reference seconds / distla seconds. ``--check`` judges ``relerr`` against
``3 n eps`` (``check``, ``check_thresh``; a FAIL exits 3).

    mpiexec -n 2 python -m distla.bench matmul --device gpu --n 32768 --nb 2048 --grid 1x2
"""
from __future__ import annotations

import functools
import gc

import numpy as np

from .common import (
    add_problem_arguments,
    best_over_threads,
    default_device,
    default_nb,
    flops,
    judge,
    make_grid,
    parse_sizes,
    record,
    reference_rank0,
    reference_thread_counts,
    sync,
    timed,
)


def add_arguments(parser) -> None:
    add_problem_arguments(parser, n=(2048,), reps=3)
    parser.add_argument("--warmup", type=int, default=1,
                        help="untimed runs before the timed ones (default 1)")
    parser.add_argument("--check", action="store_true",
                        help="also report |C x - A (B x)| / |A (B x)| for a random x")
    parser.add_argument("--ref-threads", type=int, default=None, metavar="K",
                        help="BLAS threads of the CPU reference on rank 0 (default: the ranks on "
                             "rank 0's node, at most its cores: the cores the run uses)")


def _free(device) -> None:
    gc.collect()
    if device == "gpu":
        import cupy
        cupy.get_default_memory_pool().free_all_blocks()


def _reference(n, dtype, device, reps, warmup, seed, threads):
    """(seconds, BLAS threads) of one n x n x n product in one process (rank 0), best of
    ``reps``. Not collective."""
    import time
    if device == "gpu":
        import cupy as xp
    else:
        xp = np
    rng = xp.random.default_rng(seed) if device == "cpu" else xp.random
    if device == "gpu":
        xp.random.seed(seed)
        a = rng.standard_normal((n, n), dtype=dtype)
        b = rng.standard_normal((n, n), dtype=dtype)
    else:
        a = rng.standard_normal((n, n)).astype(dtype)
        b = rng.standard_normal((n, n)).astype(dtype)
    c = xp.empty((n, n), dtype=dtype)
    def measure(a=a, b=b, c=c):
        best = float("inf")
        for i in range(warmup + max(1, reps)):
            sync(device)
            t0 = time.perf_counter()
            xp.matmul(a, b, out=c)
            sync(device)
            dt = time.perf_counter() - t0
            if i >= warmup:
                best = min(best, dt)
        return best
    best, got = best_over_threads(threads if device == "cpu" else (None,), measure)
    del a, b, c, measure
    _free(device)
    return best, got


def run(args) -> list[dict]:
    """Collective over COMM_WORLD: the records (distla and reference) for every --n."""
    from mpi4py import MPI

    from ..checks import eps
    from ..device import get_backend
    from ..errors import collective
    from ..matrix import DistMatrix
    from ..pblas import matmul, norm

    comm = MPI.COMM_WORLD
    sizes = parse_sizes(args.n)
    device = args.device or default_device()
    with collective(comm):
        get_backend(device, comm)
        if args.nb is not None and args.nb < 1:
            raise ValueError(f"--nb must be positive, not {args.nb}")
    grid = make_grid(args.grid, comm)
    dtype = np.dtype(args.dtype)
    reference = getattr(args, "reference", True)
    quiet = getattr(args, "quiet", False)
    ranks = comm.Get_size()
    ref_threads = reference_thread_counts(comm, getattr(args, "ref_threads", None))
    out = []
    for n in sizes:
        nb = args.nb or default_nb(n, device, grid)
        A = DistMatrix.random(grid, (n, n), (nb, nb), seed=args.seed, dtype=dtype,
                              device=device)
        B = DistMatrix.random(grid, (n, n), (nb, nb), seed=args.seed + 1, dtype=dtype,
                              device=device)
        C = DistMatrix.zeros(grid, (n, n), (nb, nb), dtype=dtype, device=device)
        t = timed(functools.partial(matmul, A, B, C=C), device, comm, args.reps, args.warmup)
        rec = record("matmul", "distla", n=n, nb=nb, grid=f"{grid.nprow}x{grid.npcol}",
                     ranks=ranks, device=device, dtype=dtype.name, seconds=t,
                     nflops=flops("gemm", n))
        if args.check:
            x = DistMatrix.random(grid, (n, 1), (nb, nb), seed=args.seed + 2, dtype=dtype,
                                  device=device)
            y = matmul(A, matmul(B, x))
            rec["relerr"] = norm(matmul(C, x) - y, np.inf) / max(norm(y, np.inf), 1e-300)
            judge(rec, 3 * n * eps(dtype), "relerr")
        del A, B, C
        _free(device)
        if not quiet and comm.Get_rank() == 0:
            print(f"matmul n={n}: distla {rec['tflops']:.4g} TFLOP/s", flush=True)
        out.append(rec)
        if reference:
            tr, got = reference_rank0(lambda: _reference(n, dtype, device, args.reps,
                                                         args.warmup, args.seed, ref_threads),
                                      comm)
            ref = record("matmul", "cupy" if device == "gpu" else "numpy", n=n, ranks=1,
                         device=device, dtype=dtype.name, seconds=tr, nflops=flops("gemm", n))
            if got is not None:
                ref["threads"] = got
            out.append(ref)
            rec["speedup"] = tr / t if t > 0 else 0.0
    return out
