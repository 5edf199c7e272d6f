"""``matmul(A, X, transa=True)`` with few columns beside ``matmul(A, X)``: CPU time of the
process (robust to a loaded machine), best of --reps of the maximum over ranks, for one
column and 16, with NumPy's ``a.T @ x`` on rank 0 as the floor.

    mpiexec -n R python benchmarks/matvec_trans.py --n 4096 --nb 128 [--tree T] [--json OUT]
"""
from __future__ import annotations

import argparse
import sys
import time

from mpi4py import MPI

from distla import DistMatrix, ProcessGrid, pblas
from distla.bench.common import append_jsonl, timed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--nb", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--tree")
    ap.add_argument("--json")
    a = ap.parse_args()
    comm = MPI.COMM_WORLD
    command = f"mpiexec -n {comm.size} python benchmarks/matvec_trans.py " + \
        " ".join(sys.argv[1:])
    g = ProcessGrid()
    blk = (a.nb, a.nb)
    A = DistMatrix.random(g, (a.n, a.n), blk, seed=1)
    rows = []

    def best(fn):
        return timed(fn, "cpu", comm, a.reps, clock=time.process_time)

    for k in (1, 16):
        X = DistMatrix.random(g, (a.n, k), blk, seed=2)
        for ta in (False, True):
            sec = best(lambda: pblas.matmul(A, X, transa=ta))
            rows.append(dict(bench="matvec_trans", impl=f"distla A{'^T' if ta else ''} X",
                             k=k, n=a.n, nb=a.nb, ranks=comm.size, device="cpu",
                             seconds=sec, tflops=2.0 * a.n * a.n * k / sec / 1e12,
                             tree=a.tree, clock="process_time", command=command))
        full, x = A.to_global(0), X.to_global(0)
        if comm.rank == 0:
            c = time.process_time()
            full.T @ x
            sec = time.process_time() - c
            rows.append(dict(bench="matvec_trans", impl="numpy a.T @ x (rank 0)", k=k,
                             n=a.n, nb=a.nb, ranks=1, device="cpu", seconds=sec,
                             tflops=2.0 * a.n * a.n * k / sec / 1e12, tree=a.tree,
                             clock="process_time", command=command))
    if comm.rank == 0:
        for r in rows:
            print(f"{r['impl']:28s} k={r['k']:3d} {r['seconds'] * 1e3:9.2f} ms", flush=True)
        if a.json:
            append_jsonl(a.json, rows)


if __name__ == "__main__":
    main()
