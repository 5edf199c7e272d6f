"""What the tracer's per-step host overhead is made of on CPU ranks (diagnosis).

    mpiexec -n R python benchmarks/step_overhead_probe.py [--n 2048] [--nb 128] [--json F]

Runs the Cholesky and LU step loops (forced on a 1 x 1 grid) three ways, each traced
(``step_overhead_us``: host time per step outside library calls, this thread's CPU clock):

* ``real``: the library's kernels;
* ``stub``: the kernels that touch the trailing matrix (gemm, syrk, trsm, copies, row moves)
  replaced by library-marked no-ops, so the driver's own Python runs with warm caches;
* ``stub+stream``: the same no-ops each reading a 64 MB array first, so the driver's Python
  runs after the caches were flushed, as it does after a real kernel.

The factorization's numbers are meaningless in the stub runs (only the Python is timed); LU
keeps its real getrf (its pivots drive the loop) and runs on one process only (on a process
grid, pivots of panels the stubs left unfactored can send ranks different ways). Collective
over COMM_WORLD.
"""
from __future__ import annotations

import argparse
import json

import numpy as np
from mpi4py import MPI

from distla import DistMatrix
from distla.bench import common
from distla.linalg.cholesky import _potrf_lower
from distla.linalg.lu import lu_factor
from distla.problems import spd_matrix
from distla.trace import Tracer, library

STUBBED = ("gemm", "syrk", "trsm", "copy", "take", "take_rows", "put_rows", "laswp")


def measure(fn, comm) -> float:
    """Median over ranks of the mean traced step overhead of ``fn()`` (best of 3 runs)."""
    best = np.inf
    for _ in range(3):
        with Tracer(overhead_clock="cpu") as tr:
            fn()
        best = min(best, tr.overhead_us("step") or 0.0)
    return float(np.median(comm.allgather(best)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=2048)
    ap.add_argument("--nb", type=int, default=128)
    ap.add_argument("--json")
    a = ap.parse_args()
    comm = MPI.COMM_WORLD
    grid = common.make_grid(None, comm)
    big = np.ones(8 << 20)
    out = []
    with common.step_loop(True):
        for alg in ("cholesky", "lu") if comm.size == 1 else ("cholesky",):
            if alg == "cholesky":
                A = spd_matrix(grid, a.n, a.nb, seed=1)

                def fn():
                    _potrf_lower(A.copy(), 1)
            else:
                A = DistMatrix.random(grid, (a.n, a.n), (a.nb, a.nb), seed=1)

                def fn():
                    lu_factor(A, check_finite=False)
            fn()
            be = A.backend
            for mode in ("real", "stub", "stub+stream"):
                saved = {}
                if mode != "real":
                    stream = mode == "stub+stream"

                    @library
                    def noop(*args, **kw):
                        if stream:
                            big.sum()
                    for name in STUBBED:
                        saved[name] = be.__dict__.get(name)
                        setattr(be, name, noop)
                try:
                    us = measure(fn, comm)
                finally:
                    for name, v in saved.items():
                        if v is None:
                            delattr(be, name)
                        else:
                            setattr(be, name, v)
                rec = common.record("step_overhead_probe", mode, n=a.n, seconds=us * 1e-6,
                                    nb=a.nb, grid=f"{grid.nprow}x{grid.npcol}",
                                    ranks=comm.size, device="cpu", algorithm=alg,
                                    step_overhead_us=us, tflops=None)
                out.append(rec)
                if comm.rank == 0:
                    print(f"{alg:8s} {mode:12s} {grid.nprow}x{grid.npcol}: step overhead "
                          f"{us:7.1f} us", flush=True)
    if a.json and comm.rank == 0:
        with open(a.json, "a") as f:
            for r in out:
                f.write(json.dumps(r, default=common.jsonable) + "\n")


if __name__ == "__main__":
    main()
