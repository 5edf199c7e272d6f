"""What a fresh GPU process still pays at first use after the background preload (diagnosis):
cProfile of the first ``product_and_norm`` (the job's right-hand side) and the first
Cholesky solve on an n x n matrix, after :meth:`Backend.preload` ran, and the time of the
second call of each beside it.

    python3 benchmarks/gpu/first_use_profile.py --n 32768 [--top 25]

One process; run it with a warm kernel cache (after ``distla warmup``) to see loading costs
rather than compilation."""
from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import time

import numpy as np

from distla import DistMatrix, ProcessGrid
from distla.bench import common
from distla.checks import product_and_norm
from distla.device import get_backend
from distla.linalg import solve


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=32768)
    ap.add_argument("--nb", type=int, default=1024)
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args()
    g = ProcessGrid(1, 1)
    t = time.perf_counter()
    get_backend("gpu").preload(np.float64)
    print(f"preload {time.perf_counter() - t:.3f} s")
    A = common.spd_matrix(g, a.n, a.nb, seed=1, device="gpu")
    ones = DistMatrix.from_function(g, (a.n, 1), (a.nb, a.nb), lambda I, J: 1.0,
                                    device="gpu")
    for name, fn in (("product_and_norm", lambda: product_and_norm(A, ones)),
                     ("solve", lambda: solve(A, ones, method="cholesky"))):
        common.sync("gpu")
        pr = cProfile.Profile()
        t = time.perf_counter()
        pr.enable()
        fn()
        common.sync("gpu")
        pr.disable()
        first = time.perf_counter() - t
        t = time.perf_counter()
        fn()
        common.sync("gpu")
        print(f"== {name}: first {first:.3f} s, second {time.perf_counter() - t:.3f} s")
        s = io.StringIO()
        pstats.Stats(pr, stream=s).sort_stats("cumtime").print_stats(a.top)
        print(s.getvalue())


if __name__ == "__main__":
    main()
