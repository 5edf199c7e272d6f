"""Paired validation of the performance model on CPU ranks of a shared machine.

    mpiexec -n R python benchmarks/model_validate_cpu.py --machine M.json --n 1024 2048 \\
        --json OUT.jsonl

For every grid shape of R ranks, size and algorithm (Cholesky, LU partial, CALU, RBT): all
ranks first run a short GEMM probe at the same time (nb = --nb inner dimension), then the
factorization (one untimed run, then best of --reps; wall time, ranks barriered, maximum over
ranks). The probe's rate over the machine file's GEMM rate is the speed factor ``f`` of the
machine at that moment (other jobs, ranks sharing cores); the paired prediction is the model's
for a machine whose kernel rates and copy bandwidth are multiplied by ``f`` (and host call
cost divided by it), ranks not sharing devices further. The raw prediction (machine file as
is) is recorded too. Rank 0 appends one JSON line per run: bench, impl, n, nb, grid, ranks,
seconds, predicted_s, predicted_raw_s, err, speed_factor, load1, command.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np


def _probe(be, nb, comm, seconds=0.3):
    """Sustained GEMM rate of every rank over ``seconds`` (all ranks at once; the average,
    not the best: under other jobs' load it is the share of the cores a long run gets),
    minimum over ranks."""
    from mpi4py import MPI
    m = 512
    rng = np.random.default_rng(comm.rank)
    a = np.asfortranarray(rng.standard_normal((m, nb)))
    b = np.asfortranarray(rng.standard_normal((nb, m)))
    c = np.asfortranarray(rng.standard_normal((m, m)))
    comm.Barrier()
    t0 = time.perf_counter()
    k = 0
    while k < 3 or time.perf_counter() - t0 < seconds:
        be.gemm("N", "N", -1.0, a, b, 1.0, c)
        k += 1
    rate = 2.0 * m * m * nb * k / (time.perf_counter() - t0)
    return comm.allreduce(rate, op=MPI.MIN)


def _timed(fn, comm, reps, setup):
    from mpi4py import MPI
    fn(setup())
    best = float("inf")
    for _ in range(reps):
        W = setup()
        comm.Barrier()
        t = time.perf_counter()
        fn(W)
        dt = time.perf_counter() - t
        best = min(best, comm.allreduce(dt, op=MPI.MAX))
    return best


def main(argv=None):
    from mpi4py import MPI

    from distla import DistMatrix, ProcessGrid
    from distla.bench.common import general_matrix, spd_matrix
    from distla.device import get_backend
    from distla.linalg import cholesky, lu_factor, rbt_solve
    from distla.model import Machine, load_machine, predict
    from distla.testing import grid_shapes
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--machine", default="cpu-dev")
    ap.add_argument("--n", nargs="+", type=int, default=[1024, 2048])
    ap.add_argument("--nb", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--algo", nargs="+", default=["cholesky", "lu", "calu", "rbt"])
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    comm = MPI.COMM_WORLD
    M = load_machine(args.machine)
    be = get_backend("cpu")
    R = comm.size
    rpn = min(R, M.devices_per_node)   # the probe already sees ranks sharing cores
    for P, Q in grid_shapes(R):
        grid = ProcessGrid(P, Q)
        for n in args.n:
            for algo in args.algo:
                if algo == "cholesky":
                    A = spd_matrix(grid, n, args.nb)
                    fn = lambda W: cholesky(W, overwrite_a=True)  # noqa: E731
                elif algo in ("lu", "calu"):
                    A = general_matrix(grid, n, args.nb)
                    piv = "partial" if algo == "lu" else "tournament"
                    fn = lambda W, piv=piv: lu_factor(W, pivoting=piv,  # noqa: E731
                                                      overwrite_a=True)
                else:
                    A = general_matrix(grid, n, args.nb)
                    B = DistMatrix.random(grid, (n, 1), (args.nb, args.nb), seed=1)
                    fn = lambda W, B=B: rbt_solve(W, B)  # noqa: E731
                f = _probe(be, args.nb, comm) / M.gemm_rate(args.nb)
                t = _timed(fn, comm, args.reps, (lambda A=A: A.copy()) if algo != "rbt"
                           else (lambda A=A: A))
                f = 0.5 * (f + _probe(be, args.nb, comm) / M.gemm_rate(args.nb))  # before/after
                d = M.to_dict()
                for k in ("gemm", "trsm", "syrk"):
                    d[k] = {x: v * f for x, v in d[k].items()}
                d["potrf"] = {x: v / f for x, v in d["potrf"].items()}
                d["getrf"] = {x: [v[0] / f, v[1] * f] for x, v in d["getrf"].items()}
                d["mem_bw"] *= f
                d["swap_bw"] *= f
                d["scan_bw"] *= f
                d["call"] /= f
                Mf = Machine.from_dict(d)
                pr = predict(algo, n, args.nb, P, Q, Mf, ranks_per_node=rpn).seconds
                raw = predict(algo, n, args.nb, P, Q, M).seconds
                if comm.rank == 0:
                    rec = dict(bench="model-validation", impl="distla", algo=algo, n=n,
                               nb=args.nb, grid=f"{P}x{Q}", ranks=R, device="cpu",
                               seconds=t, predicted_s=pr, predicted_raw_s=raw,
                               err=pr / t - 1, err_raw=raw / t - 1, speed_factor=f,
                               load1=round(os.getloadavg()[0], 2),
                               command=f"mpiexec -n {R} python benchmarks/model_validate_cpu.py "
                                       + " ".join(sys.argv[1:]),
                               machine="2-core development VM shared with other jobs; "
                                       "OPENBLAS_NUM_THREADS=1")
                    print(f"{algo:8s} n={n:5d} {P}x{Q} measured {t:8.4f} s  paired "
                          f"{pr:8.4f} ({100 * (pr / t - 1):+6.1f}%)  raw {raw:8.4f} "
                          f"({100 * (raw / t - 1):+6.1f}%)  f={f:.2f} load={rec['load1']}",
                          flush=True)
                    if args.json:
                        with open(args.json, "a", encoding="utf-8") as fh:
                            fh.write(json.dumps(rec) + "\n")
        grid.free()


if __name__ == "__main__":
    main()
