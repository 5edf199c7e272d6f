"""How mixed-precision refinement behaves near its limits: for each (method, cond,
factor_dtype), one ``solve(..., precision='mixed', return_info=True)`` with the refinement's
time budget off, printing the scaled residual after every correction, the GMRES iterations,
the host seconds of each part (low-precision factorization, refinement, fallback) and the
float64 solve's seconds beside it.

    python3 benchmarks/gpu/refine_history.py --n 32768 --nb 1024 --method gepp \\
        --cond 1e3 1e4 --factor-dtype fp16 tf32 [--device gpu] [--json FILE]

One process (a 1 x 1 grid)."""
from __future__ import annotations

import argparse
import json
import time

from distla import DistMatrix, ProcessGrid
from distla.bench import common
from distla.linalg import mixed, refine, solve
from distla.problems import conditioned_matrix


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=32768)
    ap.add_argument("--nb", type=int, default=1024)
    ap.add_argument("--device", default="gpu")
    ap.add_argument("--method", nargs="+", default=["gepp"])
    ap.add_argument("--cond", type=float, nargs="+", default=[1e3, 1e4])
    ap.add_argument("--factor-dtype", nargs="+", default=["fp16", "tf32"])
    ap.add_argument("--ir-switch", type=float, nargs="+", default=[refine.IR_SWITCH],
                    help="values of distla.linalg.refine.IR_SWITCH to run in turn")
    ap.add_argument("--json")
    a = ap.parse_args()
    mixed.REFINE_BUDGET = None
    g = ProcessGrid(1, 1)
    for method in a.method:
        for cond in a.cond:
            A = conditioned_matrix(g, a.n, a.nb, cond=cond, seed=1, spd=method == "cholesky",
                                   device=a.device)
            B = DistMatrix.random(g, (a.n, 1), (a.nb, a.nb), seed=2, device=a.device)
            solve(A, B, method=method, check_rcond=False)           # warm-up
            t64 = common.timed(lambda: solve(A, B, method=method, check_rcond=False),
                               a.device, reps=2)
            for fd in a.factor_dtype:
                for sw in a.ir_switch:
                    refine.IR_SWITCH = sw
                    run_one(a, A, B, method, cond, fd, t64, sw)


def run_one(a, A, B, method, cond, fd, t64, sw):
    """One timed mixed solve (after an untimed one) and its line and record."""
    solve(A, B, method=method, precision="mixed", factor_dtype=fd, check_rcond=False)
    common.sync(a.device)
    t = time.perf_counter()
    X, info = solve(A, B, method=method, precision="mixed", factor_dtype=fd,
                    return_info=True, check_rcond=False)
    common.sync(a.device)
    t = time.perf_counter() - t
    hist = " ".join(f"{h:.1e}" for h in info.history)
    times = {k: round(v, 4) for k, v in info.times.items()}
    print(f"{method} cond {cond:.0e} {fd} switch {sw:g}: {t:.3f} s (float64 {t64:.3f} s, "
          f"{t64 / t:.2f}x) fallback={info.fallback} gmres={info.gmres_iterations} "
          f"times={times}\n    rho: {hist}\n    {info.reason or ''}", flush=True)
    if a.json:
        rec = common.record("refine_history", f"distla-mixed-{fd}", n=a.n, seconds=t,
                            device=a.device, ranks=1, method=method, cond=cond,
                            ir_switch=sw, seconds_double=t64, speedup=t64 / t,
                            history=info.history, gmres_iterations=info.gmres_iterations,
                            fallback=info.fallback, reason=info.reason, times=info.times,
                            tflops=None)
        with open(a.json, "a") as f:
            f.write(json.dumps(rec, default=common.jsonable) + "\n")


if __name__ == "__main__":
    main()
