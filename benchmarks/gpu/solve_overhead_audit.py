"""What a whole solve costs beside its factorization, per method, on one GPU (an audit for
slow checks around the kernels: the growth check made GEPP solves 2.3x their
factorization for a week unnoticed). For each method: the factorization alone (cholesky /
lu_factor with its pivoting), then ``linalg.solve`` with the defaults (input checks,
condition estimate, growth check; RBT: transform, GENP, refinement), best of --reps after a
warm-up, and their ratio.

    python3 benchmarks/gpu/solve_overhead_audit.py --n 32768 --nb 1024 [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import sys
import warnings

from distla import DistMatrix, ProcessGrid, linalg, problems
from distla.bench.common import timed

FACTOR = {"cholesky": lambda A: linalg.cholesky(A),
          "gepp": lambda A: linalg.lu_factor(A),
          "calu": lambda A: linalg.lu_factor(A, pivoting="tournament"),
          "genp": lambda A: linalg.lu_factor(A, pivoting="none"),
          "rbt": lambda A: linalg.lu_factor(A, pivoting="none")}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=32768)
    ap.add_argument("--nb", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--method", nargs="+", default=list(FACTOR))
    ap.add_argument("--device", default="gpu", choices=("gpu", "cpu"))
    ap.add_argument("--json")
    a = ap.parse_args()
    g = ProcessGrid()
    command = "python3 benchmarks/gpu/solve_overhead_audit.py " + " ".join(sys.argv[1:])
    rows = []
    for meth in a.method:
        spd = meth == "cholesky"
        # (GENP needs no pivoting to be stable: a diagonally dominant matrix for it)
        A = problems.conditioned_matrix(g, a.n, a.nb, cond=1e2, spd=spd, device=a.device)
        if meth == "genp":
            A = A + DistMatrix.eye(g, a.n, (a.nb, a.nb), device=a.device) * 4.0
        B = DistMatrix.random(g, (a.n, 1), (a.nb, a.nb), device=a.device, seed=3)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tf = timed(lambda: FACTOR[meth](A), a.device, reps=a.reps, warmup=1)
            ts = timed(lambda: linalg.solve(A, B, method=meth), a.device, reps=a.reps,
                       warmup=1)
        for impl, sec in (("factor", tf), ("solve", ts)):
            rows.append(dict(bench="solve_overhead_audit", impl=f"{meth} {impl}", n=a.n,
                             nb=a.nb, ranks=g.size, device=a.device, seconds=sec, tflops=None,
                             ratio=ts / tf, command=command))
        if g.rank == 0:
            print(f"{meth:9s} factor {tf:.4f} s  solve {ts:.4f} s  solve/factor {ts / tf:.2f}",
                  flush=True)
        A = B = None
    if a.json and g.rank == 0:
        with open(a.json, "a") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)


if __name__ == "__main__":
    main()
