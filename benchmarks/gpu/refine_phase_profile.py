"""Where a mixed-precision solve's refinement spends its time on one GPU (diagnosis): the
fp16 Cholesky (or GEPP) solve of a conditioned matrix, once untimed, once timed, then once
under the tracer with the device synchronized at every phase boundary (device seconds per
phase: factor, first solve, residuals, corrections, acceptance, certificate).

    python3 benchmarks/gpu/refine_phase_profile.py --n 65536 --nb 1024 --cond 1e4 [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import time

from distla import DistMatrix, ProcessGrid, linalg, problems
from distla.trace import Tracer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=65536)
    ap.add_argument("--nb", type=int, default=1024)
    ap.add_argument("--cond", type=float, default=1e4)
    ap.add_argument("--method", default="cholesky")
    ap.add_argument("--json")
    a = ap.parse_args()
    g = ProcessGrid()
    A = problems.conditioned_matrix(g, a.n, a.nb, cond=a.cond, spd=a.method == "cholesky",
                                    device="gpu")
    B = DistMatrix.random(g, (a.n, 1), (a.nb, a.nb), device="gpu", seed=3)
    kw = dict(method=a.method, precision="mixed", factor_dtype="fp16", return_info=True)
    linalg.solve(A, B, **kw)
    A.backend.synchronize()
    t = time.perf_counter()
    X, info = linalg.solve(A, B, **kw)
    A.backend.synchronize()
    wall = time.perf_counter() - t
    with Tracer(device="gpu", sync=True) as tr:
        linalg.solve(A, B, **kw)
    summ = tr.summary()
    if g.rank == 0:
        print(f"n={a.n} cond={a.cond:g} {a.method}: {wall:.4f} s, {info.iterations} "
              f"corrections, history {[f'{h:.2g}' for h in info.history]}")
        print(tr.table(), flush=True)
    if a.json and g.rank == 0:
        with open(a.json, "a") as f:
            f.write(json.dumps(dict(bench="refine_phase_profile", impl=f"{a.method} fp16",
                                    n=a.n, nb=a.nb, ranks=g.size, device="gpu", seconds=wall,
                                    tflops=None, cond=a.cond, iterations=info.iterations,
                                    history=info.history, phases=summ)) + "\n")


if __name__ == "__main__":
    main()
