"""Build methods of TLR matrices side by side: 'dense' (every entry, randomized compression)
against 'aca' (O(nb k) entries per tile), on the same problem, interleaved in the same run.

    python benchmarks/tlr_build.py --n 4096 8192 --tile 128 256 512 --reps 2 --json FILE
    mpiexec -n 4 python benchmarks/tlr_build.py --device gpu ...      (one GPU per rank)

Per (n, tile, method), the best of ``--reps`` builds (repetitions of the methods alternate, so
that a shared machine's load falls on both alike), the mean tile rank, the memory of the
build (``mem_build``), the global error ``||A - A_tlr||_F / (tol ||A||_F)`` against the dense
matrix (``--check``, only for n where the dense matrix fits) and, for the first method,
the time of one factorization for scale (``factor_s``). Collective over COMM_WORLD.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np
from mpi4py import MPI

from distla import covariance as cov
from distla import tlr
from distla.defaults import make_grid


def _kernel(name, beta):
    return {"sqexp": cov.SquaredExponential(beta=beta, nugget=1e-2),
            "exp": cov.Exponential(beta=beta, nugget=1e-2),
            "matern": cov.Matern(beta=beta, nu=1.5, nugget=1e-2)}[name]


def _error(T, pts, ker):
    """Collective: ``||A - A_tlr||_F / (tol ||A||_F)`` with the dense matrix (small n)."""
    A = cov.covariance_matrix(T.grid, pts, ker, block=T.nb, device=T.device)
    E = (A - T.to_dense()).norm("fro")
    return float(E) / (T.tol * float(A.norm("fro")))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, nargs="+", default=[4096])
    p.add_argument("--tile", type=int, nargs="+", default=[256])
    p.add_argument("--methods", nargs="+", default=["dense", "aca"])
    p.add_argument("--kernel", default="sqexp", choices=("sqexp", "exp", "matern"))
    p.add_argument("--beta", type=float, default=0.1)
    p.add_argument("--tol", type=float, default=1e-8)
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--device", default="cpu", choices=("cpu", "gpu"))
    p.add_argument("--check", action="store_true", help="error against the dense matrix")
    p.add_argument("--no-factor", dest="factor", action="store_false",
                   help="skip the factorization timed for scale")
    p.add_argument("--note", default="", help="free text stored in every record")
    p.add_argument("--json", default=None, help="append JSON lines to this file (rank 0)")
    args = p.parse_args(argv)
    comm = MPI.COMM_WORLD
    grid = make_grid(None, comm)
    ker = _kernel(args.kernel, args.beta)
    for n in args.n:
        pts = cov.points(n, kind="jittered", seed=0)
        for nb in args.tile:
            best = {m: (np.inf, None, None) for m in args.methods}
            for _ in range(args.reps):
                for m in args.methods:
                    comm.Barrier()
                    t0, c0 = time.perf_counter(), time.process_time()
                    T = tlr.from_kernel(grid, pts, ker, nb, tol=args.tol, method=m,
                                        device=args.device)
                    dt = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
                    cpu = comm.allreduce(time.process_time() - c0, op=MPI.MAX)
                    if dt < best[m][0]:
                        best[m] = (dt, T, cpu)
            factor_s = None
            for m in args.methods:
                dt, T, cpu = best[m]
                if factor_s is None and args.factor:
                    comm.Barrier()
                    t0 = time.perf_counter()
                    tlr.cholesky(T)
                    factor_s = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
                rec = {"bench": "tlr-build", "impl": f"distla-tlr-{m}", "n": n, "nb": nb,
                       "ranks": comm.size, "grid": f"{grid.nprow}x{grid.npcol}",
                       "device": args.device, "kernel": args.kernel, "tol": args.tol,
                       "seconds": dt, "cpu_s": cpu, "tflops": None,
                       "rank_mean": round(T.ranks.mean, 2),
                       "rank_max": T.ranks.max, "mem_build_gib": T.info["mem_build"] / 2 ** 30,
                       "factor_s": factor_s, "load": os.getloadavg()[0], "note": args.note,
                       "command": "python benchmarks/tlr_build.py " + " ".join(
                           argv if argv is not None else sys.argv[1:])}
                if args.check:
                    rec["err_over_tol"] = _error(T, pts, ker)
                if comm.rank == 0:
                    print(json.dumps(rec), flush=True)
                    if args.json:
                        with open(args.json, "a") as f:
                            f.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main()
