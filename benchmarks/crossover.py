"""Where a 1 x 1 grid should hand the factorization to the local library: times distla's step
loop and the local library call (cuSOLVER / LAPACK, what ``distla.linalg._local`` picks) for
Cholesky and LU with partial pivoting, in the same run, one JSON line per (n, kind, path).

    python benchmarks/crossover.py --device gpu --n 8192 16384 24576 32768 --json out.jsonl
"""
from __future__ import annotations

import argparse

from mpi4py import MPI

from distla import ProcessGrid
from distla.bench import common
from distla.linalg import _local, cholesky, lu_factor


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, nargs="+", default=[2048])
    p.add_argument("--device", default="cpu", choices=("cpu", "gpu"))
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    comm = MPI.COMM_SELF
    g = ProcessGrid(1, 1, comm)
    table = dict(_local.LOCAL_UP_TO)
    rows = []
    for n in a.n:
        nb = common.default_nb(n, a.device, g)
        for kind, make, run in (
                ("potrf", common.spd_matrix, lambda W: cholesky(W, overwrite_a=True,
                                                                check_finite=False,
                                                                check_symmetric=False)),
                ("getrf", common.general_matrix, lambda W: lu_factor(W, overwrite_a=True,
                                                                     check_finite=False))):
            A = make(g, n, nb, seed=1, device=a.device)
            for path, limit in (("loop", 0), ("local", 1 << 62)):
                _local.LOCAL_UP_TO = {k: limit for k in table}
                t, _ = common.timed_result(run, a.device, comm, reps=a.reps, warmup=1,
                                           setup=A.copy)
                op = "cholesky" if kind == "potrf" else "lu"
                rec = common.record("crossover", f"distla-{path}", n=n, seconds=t,
                                    nflops=common.flops(op, n), nb=nb, ranks=1,
                                    device=a.device, kind=kind)
                rows.append(rec)
                print(f"{kind} n={n:6d} nb={nb:5d} {path:6s} {t:8.4f} s "
                      f"{rec['tflops']:7.2f} TFLOP/s", flush=True)
            del A
    _local.LOCAL_UP_TO = table
    common.append_jsonl(a.json, rows)


if __name__ == "__main__":
    main()
