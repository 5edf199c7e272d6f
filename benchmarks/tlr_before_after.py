"""One TLR build + factorization, for before/after comparisons of two source trees.

    PYTHONPATH=OLD_TREE python benchmarks/tlr_before_after.py 4096 256 rsvd 256 before
    PYTHONPATH=.        python benchmarks/tlr_before_after.py 4096 256 rsvd 256 after

Arguments: n, tile, build method, workspace (MiB), a label. Prints one JSON line with wall and
process CPU seconds of ``tlr.from_kernel`` (st-2D-sqexp, tol 1e-8) and ``tlr.cholesky``
(CPU seconds are steadier than wall time on a shared machine). Alternate the two trees in one
shell loop so that both see the same load. Collective over COMM_WORLD.
"""
import json
import os
import sys
import time

from mpi4py import MPI

from distla import covariance as cov
from distla import tlr
from distla.grid import ProcessGrid


def main():
    n, nb, method, ws, label = (int(sys.argv[1]), int(sys.argv[2]), sys.argv[3],
                                int(sys.argv[4]) << 20, sys.argv[5])
    g = ProcessGrid(comm=MPI.COMM_WORLD)
    pts, ker = cov.default_problem(n)
    c0, t0 = time.process_time(), time.perf_counter()
    T = tlr.from_kernel(g, pts, ker, nb, tol=1e-8, method=method, workspace=ws)
    tb, cb = time.perf_counter() - t0, time.process_time() - c0
    c0, t0 = time.process_time(), time.perf_counter()
    L = tlr.cholesky(T, workspace=ws)
    tf, cf = time.perf_counter() - t0, time.process_time() - c0
    ld = L.logdet()
    if g.rank == 0:
        print(json.dumps({"code": label, "n": n, "nb": nb, "method": method, "build_s": tb,
                          "factor_s": tf, "build_cpu_s": cb, "factor_cpu_s": cf,
                          "rank_mean": T.ranks.mean, "logdet": ld,
                          "load": os.getloadavg()[0]}), flush=True)


if __name__ == "__main__":
    main()
