"""What certifying A's condition costs a mixed-precision solve on one GPU (diagnosis): the
mixed solves (``--cond``, default 1e2, one right-hand side) with ``check_rcond`` on (the
default: condition.refined_rcond) and off, beside the float64 solve with its own estimate,
best of --reps after a warm-up. ``--tree`` labels the records (before/after runs of two
checkouts: run it with PYTHONPATH pointing at each).

    python3 benchmarks/gpu/mixed_rcond_cost.py --n 32768 --nb 1024 [--cond 1e2 1e4]
        [--method cholesky gepp] [--tree LABEL] [--json OUT]
"""
from __future__ import annotations

import argparse
import json

from probe_timing import timed

from distla import DistMatrix, ProcessGrid, linalg, problems


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=32768)
    ap.add_argument("--nb", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--cond", type=float, nargs="+", default=[1e2])
    ap.add_argument("--method", nargs="+", default=["cholesky", "gepp"])
    ap.add_argument("--tree", default=None)
    ap.add_argument("--json")
    a = ap.parse_args()
    g = ProcessGrid()
    rows = []
    for meth, cond in ((m, c) for m in a.method for c in a.cond):
        A = problems.conditioned_matrix(g, a.n, a.nb, cond=cond, spd=meth == "cholesky",
                                        device="gpu")
        B = DistMatrix.random(g, (a.n, 1), (a.nb, a.nb), device="gpu", seed=3)
        for prec, fd, check in (("double", None, True), ("mixed", "fp16", False),
                                ("mixed", "fp16", True)):
            kw = dict(method=meth, precision=prec, check_rcond=check, return_info=True)
            if fd:
                kw["factor_dtype"] = fd
            # best of reps + 1 runs (the first loads kernels); the info of the last
            best, (_, info) = timed(A.backend, lambda: linalg.solve(A, B, **kw), a.reps + 1)
            row = dict(bench="mixed_rcond_cost", impl=f"{meth} {prec} {fd or ''} "
                       f"check_rcond={check}", n=a.n, nb=a.nb, ranks=g.size, device="gpu",
                       seconds=best, tflops=None, cond=cond, tree=a.tree,
                       fallback=info.fallback, gmres_it=list(info.gmres_iterations),
                       iters=info.iterations, reason=info.reason,
                       times={k: round(v, 4) for k, v in info.times.items()})
            rows.append(row)
            if g.rank == 0:
                print(f"{a.tree or ''} cond={cond:.0e} {row['impl']:40s} {best:.4f} s "
                      f"fallback={info.fallback} iters={info.iterations} gmres="
                      f"{info.gmres_iterations} {row['times']} {info.reason or ''}",
                      flush=True)
        A = B = None
    if a.json and g.rank == 0:
        with open(a.json, "a") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)


if __name__ == "__main__":
    main()
