"""Whether the inverted-diagonal-block solves (pblas.inverted_diagonal_solves: the condition
estimate's and the refinement's triangular solves on one GPU) pay at small n: default GEPP
and Cholesky solves with GpuBackend.inverse_block_solves on and off, alternating, best of
--reps after a warm-up, device synchronized.

    python3 benchmarks/gpu/inverse_blocks_small_n.py --n 4096 8192 16384 [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import sys

from distla import DistMatrix, ProcessGrid, linalg, problems
from distla.bench.common import timed
from distla.device.gpu import GpuBackend


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, nargs="+", default=[4096, 8192, 16384])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json")
    a = ap.parse_args()
    g = ProcessGrid()
    command = "python3 benchmarks/gpu/inverse_blocks_small_n.py " + " ".join(sys.argv[1:])
    rows = []
    for n in a.n:
        nb = 512 if n < 24576 else 1024
        for meth in ("gepp", "cholesky"):
            A = problems.conditioned_matrix(g, n, nb, cond=1e2, spd=meth == "cholesky",
                                            device="gpu")
            B = DistMatrix.random(g, (n, 1), (nb, nb), device="gpu", seed=3)
            for _ in range(2):
                for on in (True, False):
                    GpuBackend.inverse_block_solves = on
                    sec = timed(lambda: linalg.solve(A, B, method=meth), "gpu",
                                reps=a.reps, warmup=1)
                    rows.append(dict(bench="inverse_blocks_small_n", impl=f"{meth} solve, "
                                     f"inverse blocks {'on' if on else 'off'}", n=n, nb=nb,
                                     ranks=g.size, device="gpu", seconds=sec, tflops=None,
                                     command=command))
                    print(f"n={n} {meth} inverse blocks {'on ' if on else 'off'} "
                          f"{sec * 1e3:.2f} ms", flush=True)
            GpuBackend.inverse_block_solves = True
    if a.json:
        with open(a.json, "a") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)


if __name__ == "__main__":
    main()
