"""The CPU backend's one-column and one-pass kernels beside what they replace, on each rank's
own local-sized matrix (all ranks at once, as in a distributed solve: they share the memory
bandwidth).

    mpiexec -n 2 python benchmarks/cpu_gemv_probe.py --m 8192 --n 4096 --json out.jsonl

Rows: BLAS gemm with one column against gemv (``CpuBackend._gemm`` picks gemv); trsm with one
column against trsv (``CpuBackend._trsm``); ``A V`` (four columns) plus the rows' absolute
sums as a GEMM and a separate pass against ``CpuBackend.gemv_abs`` (one pass in cache-sized
tiles: the symmetry probe of ``validate.check_symmetric``). Best of --reps, seconds.
"""
import argparse

import numpy as np
from mpi4py import MPI

from distla.bench.common import stream, timed
from distla.device import _lapack
from distla.device.cpu import CpuBackend


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--m", type=int, default=8192)
    p.add_argument("--n", type=int, default=4096)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--json")
    a = p.parse_args()
    comm = MPI.COMM_WORLD
    be = CpuBackend()
    rng = np.random.default_rng(comm.rank)
    A = np.asfortranarray(rng.standard_normal((a.m, a.n)))
    T = np.asfortranarray(np.tril(A[:a.n, :a.n]) + a.n * np.eye(a.n))
    x = np.asfortranarray(rng.standard_normal((a.n, 4)))
    y = np.zeros((a.m, 4), order="F")
    b = np.asfortranarray(rng.standard_normal((a.n, 1)))
    rows = {
        "gemm, 1 column": lambda: _lapack.gemm("N", "N", 1.0, A, x[:, :1], 0.0, y[:, :1]),
        "gemv (CpuBackend._gemm, 1 column)": lambda: _lapack.gemv("N", 1.0, A, x[:, 0], 0.0,
                                                                  y[:, 0]),
        "trsm, 1 column": lambda: _lapack.trsm("L", "L", "N", "N", 1.0, T, b.copy()),
        "trsv (CpuBackend._trsm, 1 column)": lambda: _lapack.trsv("L", "N", "N", T,
                                                                  b.copy()[:, 0]),
        "A V (gemm, 4 columns) + row sums of |A| (slabs)": lambda: (
            _lapack.gemm("N", "N", 1.0, A, x, 0.0, y),
            [np.abs(A[:, j:j + 32]).sum(axis=1) for j in range(0, a.n, 32)]),
        "gemv_abs: A V and row sums in one pass": lambda: be.gemv_abs(A, x, absolute=False,
                                                                      rowsums=True),
    }
    for name, fn in rows.items():
        sec = timed(fn, "cpu", comm=comm, reps=a.reps, warmup=1)
        stream(a, {"bench": "cpu_kernels", "impl": name, "n": a.n, "m": a.m,
                   "ranks": comm.size, "device": "cpu", "seconds": sec, "tflops": None,
                   "command": f"mpiexec -n {comm.size} python benchmarks/cpu_gemv_probe.py "
                              f"--m {a.m} --n {a.n} --reps {a.reps}"}, comm)
        if comm.rank == 0:
            print(f"{name:<50} {1e3 * sec:8.2f} ms")

if __name__ == "__main__":
    main()
