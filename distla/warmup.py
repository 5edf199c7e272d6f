"""``distla warmup``: compile every device kernel a job uses, once per machine.

CuPy compiles its elementwise/reduction kernels and distla's raw CUDA kernels the first time a
process meets them and keeps the binaries in its kernel cache (``CUPY_CACHE_DIR``, default
``~/.cupy/kernel_cache``), which persists between processes. A one-shot ``distla solve`` on a
machine whose cache is empty pays seconds of compilation. :func:`warmup` runs the whole job at
a small size on every rank -- write and read a matrix file, the right-hand side, each solver
with its checks and condition estimate, the residual checks, in float64 and float32 -- so
that later runs find every kernel compiled. Kernels whose arrays exceed 2^31 elements use
64-bit indexing and are compiled on first use at that size.

Collective over ``comm``; run it once per machine (or container image) and cache directory.
"""
from __future__ import annotations

import os
import tempfile
import time

import numpy as np

from . import checks, io
from .grid import ProcessGrid
from .linalg import cho_factor, cho_solve_rcond, lu_factor, lu_solve, lu_solve_rcond, rcond, solve
from .linalg.refine import gmres
from .matrix import DistMatrix
from .pblas import matmul, norm
from .problems import make_problem

__all__ = ["warmup"]



def warmup(comm, device: str = "gpu", n: int = 512, nb: int = 128, say=print) -> dict:
    """Collective: run every solver path once at size ``n`` on ``device``; returns seconds per
    step. Raises the solvers' own exceptions (the same on every rank)."""
    grid = ProcessGrid(comm=comm)
    times = {}
    tmpdir = comm.bcast(tempfile.mkdtemp(prefix="distla-warmup-") if comm.Get_rank() == 0
                        else None, root=0)
    try:
        for dtype in (np.float64, np.float32):
            for kind in ("spd", "general", "covariance"):
                t = time.perf_counter()
                A = make_problem(kind, grid, n, nb, seed=1).astype(dtype)
                path = os.path.join(tmpdir, f"{kind}.npy")
                io.write_npy(path, A)
                A = io.read_matrix(path, grid, (nb, nb), device=device, dtype=dtype)
                ones = DistMatrix.from_function(grid, (n, 1), (nb, nb), lambda I, J: 1.0,
                                                dtype=dtype, device=device)
                matmul(A, ones)                               # PBLAS matmul's kernels
                B, anorm = checks.product_and_norm(A, ones)   # distla solve's rhs and checks
                methods = {"spd": ("cholesky",), "general": ("gepp", "calu", "rbt"),
                           "covariance": ("tlr",) if dtype == np.float64 else ()}[kind]
                for m in methods:
                    kw = {"tol": 1e-8} if m == "tlr" else {}
                    X = solve(A, B, method=m, **kw)
                    checks.solve_residual(A, X, B)
                    checks.backward_error(A, X, B)
                    checks.solve_checks(A, X, B, anorm=anorm)   # with and without the
                    checks.solve_checks(A, X, B)                # row-sum pass
                    norm(X - ones, np.inf)
                if kind == "spd":        # distla solve's Cholesky path: solve + rcond fused
                    cho_solve_rcond(cho_factor(A), B, anorm)
                if kind == "general":
                    F = lu_factor(A)
                    rcond(A, F)
                    lu_solve_rcond(F, B)
                    gmres(A, B, lambda R: lu_solve(F, R), restart=3)   # GMRES-IR's kernels
                if dtype == np.float64 and kind != "covariance":    # mixed: each factor dtype
                    for fd in A.backend.LOWP:
                        solve(A, B, method=methods[0], precision="mixed", factor_dtype=fd)
                key = f"{kind} {np.dtype(dtype).name}"
                times[key] = time.perf_counter() - t
                say(f"warmup: {key}: {times[key]:.1f} s")
    finally:
        comm.Barrier()
        if comm.Get_rank() == 0:
            import shutil
            shutil.rmtree(tmpdir, ignore_errors=True)
        grid.free()
    return times
