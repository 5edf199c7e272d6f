"""Where a GPU rank's step loop spends host time (issue: per-step overhead): cProfile of the
forced step loop on a 1 x 1 grid, sorted by own time, for Cholesky and LU.

    python3 benchmarks/gpu/step_profile.py --n 16384 --nb 512 [--device gpu] [--top 40]

Prints, per factorization, the traced host overhead per step (distla.trace, this thread's CPU
clock) and the functions with the most own time over ``--reps`` profiled runs. Not
collective (one process)."""
from __future__ import annotations

import argparse
import cProfile
import io
import pstats

from distla import DistMatrix, ProcessGrid
from distla.bench import common
from distla.linalg.cholesky import cholesky
from distla.linalg.lu import lu_factor
from distla.problems import spd_matrix
from distla.trace import Tracer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=16384)
    ap.add_argument("--nb", type=int, default=512)
    ap.add_argument("--device", default="gpu")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--algos", nargs="+", default=["cholesky", "lu"])
    a = ap.parse_args()
    g = ProcessGrid(1, 1)
    with common.step_loop(True):
        for alg in a.algos:
            if alg == "cholesky":
                A = spd_matrix(g, a.n, a.nb, seed=1, device=a.device)

                def f():
                    return cholesky(A.copy(), overwrite_a=True, check_finite=False,
                                    check_symmetric=False)
            else:
                A = DistMatrix.random(g, (a.n, a.n), (a.nb, a.nb), seed=1, device=a.device)

                def f():
                    return lu_factor(A, check_finite=False)
            f()
            f()
            for _ in range(2):
                with Tracer(device=a.device, overhead_clock="cpu") as tr:
                    f()
                print(f"{alg} n={a.n} nb={a.nb}: step overhead {tr.overhead_us('step'):.0f} us "
                      f"(median {tr.overhead_us_median('step'):.0f}), lib calls/step "
                      f"{tr.lib_calls['step'] / tr.calls['step']:.1f}")
            print(tr.table())
            pr = cProfile.Profile()
            pr.enable()
            for _ in range(a.reps):
                f()
            pr.disable()
            s = io.StringIO()
            pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(a.top)
            print(s.getvalue())


if __name__ == "__main__":
    main()
