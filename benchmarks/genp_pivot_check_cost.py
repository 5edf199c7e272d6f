"""What GENP's tiny-pivot check costs (``_pivoting.largest_multiplier``) beside the GENP
factorization that runs it and the growth factor's scan of U: CPU time of the process
(robust to a loaded machine), best of --reps of the maximum over ranks.

    mpiexec -n R python benchmarks/genp_pivot_check_cost.py --n 4096 --nb 128 [--tree T]
        [--json OUT]
"""
from __future__ import annotations

import argparse
import sys
import time

from mpi4py import MPI

from distla import DistMatrix, ProcessGrid, linalg
from distla.bench.common import append_jsonl, timed_result
from distla.linalg._pivoting import largest_multiplier


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--nb", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--tree")
    ap.add_argument("--json")
    a = ap.parse_args()
    comm = MPI.COMM_WORLD
    command = f"mpiexec -n {comm.size} python benchmarks/genp_pivot_check_cost.py " + \
        " ".join(sys.argv[1:])
    g = ProcessGrid()
    blk = (a.nb, a.nb)
    A = DistMatrix.random(g, (a.n, a.n), blk, seed=1) + DistMatrix.eye(g, a.n, blk) * a.n

    def best(fn):
        return timed_result(fn, "cpu", comm, a.reps, clock=time.process_time)

    tf, F = best(lambda: linalg.lu_factor(A, pivoting="none", check_finite=False))
    tl, _ = best(lambda: largest_multiplier(F.lu, a.n))
    tg, _ = best(lambda: F.growth_factor())
    rows = [dict(bench="genp_pivot_check_cost", impl=impl, n=a.n, nb=a.nb, ranks=comm.size,
                 device="cpu", seconds=sec, tflops=flops / sec / 1e12 if flops else None,
                 tree=a.tree, clock="process_time", command=command)
            for impl, sec, flops in (("lu_factor(pivoting='none'), the check included", tf,
                                      2 * a.n ** 3 / 3),
                                     ("largest_multiplier (the check)", tl, None),
                                     ("growth_factor (a scan of U, reference)", tg, None))]
    if comm.rank == 0:
        for r in rows:
            print(f"{r['impl']:48s} {r['seconds']:.4f} s", flush=True)
        append_jsonl(a.json, rows)


if __name__ == "__main__":
    main()
