"""``distla warmup``: compile every device kernel a job uses, once per machine.

CuPy compiles its elementwise/reduction kernels and distla's raw CUDA kernels the first time a
process meets them and keeps the binaries in its kernel cache (``CUPY_CACHE_DIR``, default
``~/.cupy/kernel_cache``), which persists between processes. A one-shot ``distla solve`` on a
machine whose cache is empty pays seconds of compilation. :func:`warmup` runs the whole job at
two sizes on every rank -- write and read a matrix file, the right-hand side, each solver
with its checks and condition estimate, the residual checks, in float64 and float32 -- so
that later runs find every kernel compiled (``benchmarks/gpu/kernel_misses.py`` lists any
that a job still compiles). The second, large size (:func:`large_size`, GPU ranks) reaches
the kernels CuPy compiles per size class: 64-bit indexing and the largest reduction blocks.

Collective over ``comm``; run it once per machine (or container image) and cache directory.
"""
from __future__ import annotations

import math
import os
import tempfile
import time
import warnings

import numpy as np

from . import checks, io
from .errors import LinAlgWarning
from .grid import ProcessGrid
from .linalg import cho_factor, cho_solve_rcond, lu_factor, lu_solve, lu_solve_rcond, rcond, solve
from .linalg.rbt import RBTFallbackWarning
from .linalg.refine import gmres
from .matrix import DistMatrix
from .pblas import matmul, norm
from .problems import make_problem

__all__ = ["warmup", "large_size"]



def large_size(grid: ProcessGrid) -> int:
    """The warmup's second problem size: every rank's local matrix holds more than 2^31
    bytes of float64 (CuPy compiles kernels with 64-bit indexing for such arrays) and more
    than 2048 rows (CuPy's reductions use their largest thread blocks from there: a kernel of
    its own, ~2 s for a CUB reduction). n = 16512 on one rank."""
    return 16512 * math.ceil(math.sqrt(grid.nprow * grid.npcol))


def warmup(comm, device: str = "gpu", n: int = 512, nb: int = 128, say=print,
           n_large: int | None = None) -> dict:
    """Collective: run every solver path once at size ``n`` and, on GPU ranks, once more at
    ``n_large`` (default :func:`large_size`; 0 skips it); returns seconds per step. CuPy keys
    some kernels by size class (a reduction's thread block grows with the rows it reduces),
    so one small size leaves kernels of large jobs uncompiled. Raises the solvers' own
    exceptions (the same on every rank)."""
    grid = ProcessGrid(comm=comm)
    times = {}
    tmpdir = comm.bcast(tempfile.mkdtemp(prefix="distla-warmup-") if comm.Get_rank() == 0
                        else None, root=0)
    if n_large is None:
        n_large = large_size(grid) if device == "gpu" else 0
    try:
        with warnings.catch_warnings():   # ill-conditioned test problems, RBT's fallback
            warnings.simplefilter("ignore", LinAlgWarning)
            warnings.simplefilter("ignore", RBTFallbackWarning)
            _pass(grid, device, n, nb, tmpdir, say, times)
            if n_large:   # what 'distla solve' runs, at a size of each size-keyed kernel
                _pass(grid, device, n_large, 1024, tmpdir, say, times, full=False)
    finally:
        comm.Barrier()
        if comm.Get_rank() == 0:
            import shutil
            shutil.rmtree(tmpdir, ignore_errors=True)
        grid.free()
    return times


def _pass(grid, device, n, nb, tmpdir, say, times, full=True) -> None:
    """Collective: one warmup pass at size n: every problem kind and solver, float64 and
    float32; ``full=False``: the CLI's default job only (float64 Cholesky and LU with their
    checks, condition estimates and file I/O)."""
    for dtype in ((np.float64, np.float32) if full else (np.float64,)):
        for kind in (("spd", "general", "covariance") if full else ("spd", "general")):
            t = time.perf_counter()
            A = make_problem(kind, grid, n, nb, seed=1).astype(dtype)
            path = os.path.join(tmpdir, f"{kind}.npy")
            io.write_npy(path, A)
            A = io.read_matrix(path, grid, (nb, nb), device=device, dtype=dtype)
            ones = DistMatrix.from_function(grid, (n, 1), (nb, nb), lambda I, J: 1.0,
                                            dtype=dtype, device=device)
            matmul(A, ones)                               # PBLAS matmul's kernels
            B, anorm = checks.product_and_norm(A, ones)   # distla solve's rhs and checks
            methods = {"spd": ("cholesky",), "general": ("gepp", "calu", "rbt") if full
                       else ("gepp",),
                       "covariance": ("tlr",) if dtype == np.float64 else ()}[kind]
            for m in methods:
                kw = {"tol": 1e-8} if m == "tlr" else {}
                X = solve(A, B, method=m, **kw)
                checks.solve_residual(A, X, B)
                checks.backward_error(A, X, B)
                checks.solve_checks(A, X, B, anorm=anorm)   # with and without the
                checks.solve_checks(A, X, B)                # row-sum pass
                norm(X - ones, np.inf)
            if kind == "spd":        # distla solve's Cholesky path: solve + rcond
                cho_solve_rcond(cho_factor(A), B, anorm)
            if kind == "general":
                F = lu_factor(A)
                rcond(A, F)
                lu_solve_rcond(F, B)
                gmres(A, B, lambda R: lu_solve(F, R), restart=3)   # GMRES-IR's kernels
            if full and dtype == np.float64 and kind != "covariance":   # mixed: each dtype
                for fd in A.backend.LOWP:
                    solve(A, B, method=methods[0], precision="mixed", factor_dtype=fd)
            key = f"{kind} {np.dtype(dtype).name}" + ("" if full else f" n={n}")
            times[key] = time.perf_counter() - t
            say(f"warmup: {key}: {times[key]:.1f} s")
