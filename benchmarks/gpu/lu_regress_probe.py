"""GPU LU solve phases (diagnosis of the growth-factor regression): lu_factor, lu_solve,
growth_factor and solve(method='gepp') with and without the condition estimate, best of 3;
tag 'profile' adds cProfiles (by own time) of five GEPP and five Cholesky solves.

    python3 benchmarks/gpu/lu_regress_probe.py N TAG   (PYTHONPATH: the tree to time)
"""
import cProfile
import io
import pstats
import sys
import time

import cupy as cp

from distla import DistMatrix, ProcessGrid, linalg, problems


def main():
    g = ProcessGrid()
    n, tag = int(sys.argv[1]), sys.argv[2]
    A = problems.conditioned_matrix(g, n, 1024, cond=1e2, device="gpu")
    B = DistMatrix.random(g, (n, 1), (1024, 1024), device="gpu", seed=3)

    def t(name, f, reps=3):
        best, r = float("inf"), None
        for _ in range(reps):
            cp.cuda.Device().synchronize()
            t0 = time.perf_counter()
            r = f()
            cp.cuda.Device().synchronize()
            best = min(best, time.perf_counter() - t0)
        print(tag, n, f"{name:30s} {best:.4f}", flush=True)
        return r
    F = t("lu_factor", lambda: linalg.lu_factor(A))
    t("lu_solve", lambda: linalg.lu_solve(F, B))
    t("F.rcond", lambda: F.rcond())
    t("growth_factor", lambda: F.growth_factor())
    t("solve gepp check_rcond", lambda: linalg.solve(A, B, method="gepp"))
    t("solve gepp no rcond", lambda: linalg.solve(A, B, method="gepp", check_rcond=False))
    if tag == "profile":
        for meth in ("gepp", "cholesky"):
            M = A if meth == "gepp" else problems.conditioned_matrix(
                g, n, 1024, cond=1e2, spd=True, device="gpu")
            linalg.solve(M, B, method=meth)
            pr = cProfile.Profile()
            pr.enable()
            for _ in range(5):
                linalg.solve(M, B, method=meth)
            cp.cuda.Device().synchronize()
            pr.disable()
            s = io.StringIO()
            pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(22)
            print(meth, s.getvalue()[:5000])


if __name__ == "__main__":
    main()
