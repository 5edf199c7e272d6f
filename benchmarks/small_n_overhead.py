"""One CPU rank at small n: a whole default solve (from_global, solve, to_global) beside
SciPy's solve of the same system, CPU time, best of --reps (what a user calling distla on
one rank pays over scipy.linalg).

    python benchmarks/small_n_overhead.py [--n 64 256 1024] [--tree LABEL] [--json F]
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
import scipy.linalg as sla
from mpi4py import MPI

from distla import DistMatrix, ProcessGrid, linalg


def best(fn, reps):
    fn()
    out = np.inf
    for _ in range(reps):
        t = time.thread_time()
        fn()
        out = min(out, time.thread_time() - t)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, nargs="+", default=[64, 256, 1024])
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--tree")
    ap.add_argument("--json")
    a = ap.parse_args()
    g = ProcessGrid(1, 1, MPI.COMM_SELF)
    rng = np.random.default_rng(0)
    rows = []
    for n in a.n:
        x = rng.standard_normal((n, n))
        problems = {"gepp": (x + n * np.eye(n), {}),
                    "cholesky": (x @ x.T + n * np.eye(n), {"assume_a": "pos"})}
        b = rng.standard_normal((n, 1))
        for method, (m, kw) in problems.items():
            def ours():
                A = DistMatrix.from_global(g, m, block=128)
                B = DistMatrix.from_global(g, b, block=128)
                return linalg.solve(A, B, method=method).to_global(0)
            t_d, t_s = best(ours, a.reps), best(lambda: sla.solve(m, b, **kw), a.reps)
            for impl, t in (("distla", t_d), ("scipy", t_s)):
                rows.append(dict(bench="small_n_overhead", impl=impl, method=method, n=n,
                                 ranks=1, device="cpu", seconds=t, tflops=None,
                                 tree=a.tree, clock="cpu",
                                 command="python benchmarks/small_n_overhead.py "
                                         + " ".join(sys.argv[1:])))
            print(f"{a.tree or ''} n={n:5d} {method:8s} distla {t_d * 1e3:8.2f} ms  scipy "
                  f"{t_s * 1e3:8.2f} ms  ratio {t_d / t_s:6.1f}", flush=True)
    if a.json:
        with open(a.json, "a") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)


if __name__ == "__main__":
    main()
