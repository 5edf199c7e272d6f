"""Storage order of DistMatrix arithmetic results on one GPU, and what it costs a kernel that
reads them later (diagnosis): the layout (F/C, strides) of A, I, I*4, A + I*4, A*2, then LU
without pivoting of A and of A + 4I, twice each, device synchronized.

    python3 benchmarks/gpu/order_probe.py [--n 16384] [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import warnings

import cupy as cp

from distla import DistMatrix, ProcessGrid, linalg, problems


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=16384)
    ap.add_argument("--tree", default=None)
    ap.add_argument("--json")
    a = ap.parse_args()
    warnings.simplefilter("ignore")
    g = ProcessGrid()
    n = a.n
    A = problems.conditioned_matrix(g, n, 1024, cond=1e2, device="gpu")
    E = DistMatrix.eye(g, n, (1024, 1024), device="gpu")
    for name, M in (("A", A), ("E", E), ("E*4", E * 4.0), ("A+E*4", A + E * 4.0),
                    ("A*2", A * 2.0)):
        f = M.local.flags
        print(name, "F" if f.f_contiguous else "", "C" if f.c_contiguous else "",
              M.local.strides, flush=True)
    B = A + E * 4.0
    rows = []
    for name, M in (("A", A), ("A+4I", B), ("A", A), ("A+4I", B)):
        cp.cuda.Device().synchronize()
        t = time.perf_counter()
        linalg.lu_factor(M, pivoting="none")
        cp.cuda.Device().synchronize()
        sec = time.perf_counter() - t
        print(name, round(sec, 4), flush=True)
        rows.append(dict(bench="order_probe", impl=f"lu_factor(pivoting='none') of {name}",
                         tree=a.tree, n=n, nb=1024, ranks=g.size, device="gpu", seconds=sec,
                         tflops=None, f_contiguous=bool(M.local.flags.f_contiguous),
                         command="python3 benchmarks/gpu/order_probe.py " +
                         " ".join(sys.argv[1:])))
    if a.json and g.rank == 0:
        with open(a.json, "a") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)


if __name__ == "__main__":
    main()
