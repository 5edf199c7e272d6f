"""Run a distla benchmark over several sizes and print a table (a weak/strong scaling study).

    mpiexec -n 4 python examples/scaling_study.py                       # matmul, n=256..1024
    mpiexec -n 4 python examples/scaling_study.py --bench cholesky --n 500 1000 2000
    for p in 1 2 4; do mpiexec -n $p python examples/scaling_study.py --json scaling.jsonl; done
    python -m distla.bench plot scaling.jsonl --plot scaling.png        # needs matplotlib

Each size runs the benchmark (``distla.bench.run_benchmark``: the same code as ``python -m
distla.bench NAME``) on all ranks, beside its single-process reference (NumPy/SciPy on CPU,
CuPy on GPU, measured on rank 0 alone). The table shows distla's rate, the reference's, the
speedup, and the parallel efficiency speedup / ranks. Appending the records of runs with 1, 2,
4, ... ranks to one --json file gives the data for a strong-scaling plot (rate vs ranks).
Extra options after ``--`` go to the benchmark, e.g. ``-- --device gpu --nb 512``.
"""
import json
import sys

import _env  # noqa: F401  (threads per rank; must come before NumPy and MPI)
from _args import Parser, positive_int
from mpi4py import MPI

from distla.bench import BENCHMARKS, run_benchmark
from distla.runtime import CommandError


def rate(r):
    if "tflops" in r:
        return 1e3 * float(r["tflops"])
    return float(r.get("gflops", 0.0))


def main():
    argv = sys.argv[1:]
    extra = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    p = Parser(description=__doc__.splitlines()[0])
    p.add_argument("--bench", choices=BENCHMARKS, default="matmul")
    p.add_argument("--n", nargs="+", type=positive_int, default=[256, 512, 1024])
    p.add_argument("--reps", type=positive_int, default=2)
    p.add_argument("--json", help="append the records to this JSON-lines file")
    args = p.parse_args(argv)

    comm = MPI.COMM_WORLD
    try:      # the options after -- are the benchmark's: refused alike on every rank
        records = run_benchmark(args.bench, ["--n", *map(str, args.n), "--reps",
                                             str(args.reps), "--quiet", *extra])
    except CommandError as e:
        p.fail(f"{args.bench} benchmark: {e}", e.code)
    if comm.rank != 0:
        return
    if args.json:
        with open(args.json, "a", encoding="utf-8") as f:
            for r in records:
                f.write(json.dumps(r, default=str) + "\n")
    ranks = comm.size
    print(f"{args.bench}: {ranks} rank{'s' * (ranks != 1)}")
    print(f"{'n':>7} {'distla GFLOP/s':>15} {'reference GFLOP/s':>18} {'speedup':>8} "
          f"{'efficiency':>10}")
    for n in args.n:
        mine = [r for r in records if r.get("n") == n and r.get("impl") == "distla"]
        refs = [r for r in records if r.get("n") == n and r.get("impl") != "distla"]
        if not mine:
            continue
        d = max(rate(r) for r in mine)
        ref = max((rate(r) for r in refs), default=0.0)
        sp = d / ref if ref > 0 else float("nan")
        print(f"{n:>7} {d:>15.3f} {ref:>18.3f} {sp:>8.2f} {sp / ranks:>10.2f}")


if __name__ == "__main__":
    main()
