"""Cost of the condition estimate (rcond) beside the factorization it reuses.

    mpiexec -n 2 python benchmarks/rcond_cost.py --n 2048 4096 --json out.jsonl

For Cholesky and LU with partial pivoting, on the default grid: the factorization (the
reference row, same run), ``rcond`` from its factors alone (pdpocon / pdgecon: the block
Higham-Tisseur estimator, three solves with n x 2-3 blocks), one solve with one right-hand
side, and that solve with the estimate fused into it as ``solve_lu``/``solve_cholesky`` run
it (the estimator's first block solved in the same sweeps; the difference is what the check
adds to a solve), each best of --reps, all interleaved so that a load change on the machine
hits every row. Prints wall seconds (slowest rank)
and CPU seconds (summed over ranks: steadier on a shared machine), each also as a percentage of
the factorization; --json appends one record per row.
"""
import argparse
import shlex
import sys
import time

from mpi4py import MPI

from distla import DistMatrix, ProcessGrid, pblas
from distla.bench.common import append_jsonl
from distla.linalg import cho_rcond, cho_solve, cholesky, lu_factor
from distla.linalg.condition import solve_and_rcond
from distla.linalg.lu import _inverse_ops
from distla.pblas import norm


def timed(comm, fn, be):
    """(wall seconds, CPU seconds, result): the wall time of the slowest rank and the CPU time
    summed over ranks (less sensitive to other jobs on a shared machine)."""
    be.synchronize()
    comm.Barrier()
    t, c = time.perf_counter(), time.process_time()
    out = fn()
    be.synchronize()
    c = time.process_time() - c
    comm.Barrier()
    return (comm.allreduce(time.perf_counter() - t, op=MPI.MAX),
            comm.allreduce(c, op=MPI.SUM), out)


def measure(comm, g, n, nb, reps, device, compare):
    """[(impl, seconds, flops)] for one n: factorizations and their rcond, best of reps."""
    A = DistMatrix.from_function(g, (n, n), (nb, nb),
                                 lambda I, J: 1.0 / (1.0 + abs(I - J)) + n * (I == J),
                                 device=device)
    be = A.backend
    anorm = norm(A, 1)
    best = {}

    def keep(name, t, c, flops):
        w, cpu, _ = best.get(name, (t, c, flops))
        best[name] = (min(w, t), min(cpu, c), flops)

    B = DistMatrix.random(g, (n, 1), (nb, nb), seed=7, device=device)
    for _ in range(reps):
        for fam in ("cholesky", "lu"):
            if fam == "cholesky":
                t, c, L = timed(comm, lambda: cholesky(A, check_finite=False,
                                                       check_symmetric=False), be)
                keep("cholesky (reference)", t, c, n ** 3 / 3)

                def inv(M, L=L):
                    return cho_solve((L, True), M, overwrite_b=True, check_finite=False)
                fac, name, est = L, "Cholesky", (lambda L=L: cho_rcond((L, True), anorm))
                ops = (inv, inv)
            else:
                t, c, F = timed(comm, lambda: lu_factor(A, check_finite=False), be)
                keep("lu_factor partial (reference)", t, c, 2 * n ** 3 / 3)
                F.anorm = anorm
                fac, name, ops = F.lu, "LU", _inverse_ops(F)

                def est(F=F):
                    F._rcond = None
                    return F.rcond()
            t, c, _ = timed(comm, est, be)
            keep(f"rcond from the {name} factor(s)", t, c, 0)
            if compare:
                pblas._FAN_IN_ONLY = True
                t, c, _ = timed(comm, est, be)
                keep(f"rcond {name}, fan-in sweeps (before)", t, c, 0)
                pblas._FAN_IN_ONLY = False
            t, c, _ = timed(comm, lambda ops=ops: ops[0](B.copy()), be)
            keep(f"solve with the {name} factor(s), 1 rhs", t, c, 2 * n * n)
            t, c, _ = timed(comm, lambda ops=ops, fac=fac: solve_and_rcond(
                B.copy(), fac, ops[0], anorm, *ops), be)
            keep(f"solve + rcond fused, {name}", t, c, 0)
            L = F = fac = ops = None
    for name in ("Cholesky", "LU"):     # what the estimate adds to a solve when fused
        t0, c0, _ = best[f"solve with the {name} factor(s), 1 rhs"]
        t1, c1, _ = best[f"solve + rcond fused, {name}"]
        best[f"rcond added to a solve (fused), {name}"] = (max(t1 - t0, 1e-9),
                                                          max(c1 - c0, 1e-9), 0)
    return [(k, *v) for k, v in best.items()]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, nargs="+", default=[2048, 4096])
    p.add_argument("--nb", type=int, default=128)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--device", choices=["cpu", "gpu"], default="cpu")
    p.add_argument("--compare", action="store_true",
                   help="also time rcond with the fan-in-only triangular sweeps (before)")
    p.add_argument("--json")
    p.add_argument("--label", default="", help="appended to the command in the records")
    a = p.parse_args()
    comm = MPI.COMM_WORLD
    g = ProcessGrid(comm=comm)
    command = (f"mpiexec -n {comm.size} python benchmarks/rcond_cost.py "
               + " ".join(map(shlex.quote, sys.argv[1:])) + a.label)
    rows = []
    for n in a.n:
        res = measure(comm, g, n, a.nb, a.reps, a.device, a.compare)
        ref = {k: v[1:3] for k, v in zip(("cholesky", "lu"),
                                          [r for r in res if "reference" in r[0]])}
        for impl, sec, cpu, flops in res:
            base, base_cpu = ref["cholesky" if "holesky" in impl.lower() else "lu"]
            rows.append({"bench": "rcond", "impl": impl, "n": n, "nb": a.nb,
                         "ranks": comm.size, "grid": f"{g.nprow}x{g.npcol}", "device": a.device,
                         "seconds": sec, "tflops": flops / sec / 1e12 if flops else None,
                         "percent_of_factorization": 100 * sec / base, "cpu_seconds": cpu,
                         "cpu_percent_of_factorization": 100 * cpu / base_cpu,
                         "command": command})
    if comm.rank == 0:
        print(f"{'n':<6} {'':<40} {'wall s':>9} {'% of factor':>11} {'CPU s':>9} "
              f"{'% of factor':>11}")
        for r in rows:
            print(f"{r['n']:<6} {r['impl']:<40} {r['seconds']:9.4f} "
                  f"{r['percent_of_factorization']:10.2f}% {r['cpu_seconds']:9.4f} "
                  f"{r['cpu_percent_of_factorization']:10.2f}%")
        append_jsonl(a.json, rows)


if __name__ == "__main__":
    main()
