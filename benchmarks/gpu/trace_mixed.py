"""Where a whole mixed-precision solve spends its time on a grid (diagnosis, not a benchmark).

    mpirun -n 2 python3 benchmarks/gpu/trace_mixed.py --n 32768 --nb 1024 --json F

Solves A X = b (``problems.conditioned_matrix``, cond --cond, SPD for Cholesky) with
``solve(..., precision='mixed', factor_dtype=--factor-dtype)`` once untraced (kernels load),
then once under ``Tracer(sync=True)``: every phase's device seconds (synchronized, so they add
up without stream overlap), printed on rank 0 with the solve's ``info.times``; the float64
solve of the same matrix beside it.
"""
import argparse
import time

from distla import DistMatrix, ProcessGrid, problems
from distla.bench.common import stream
from distla.linalg import solve
from distla.trace import Tracer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=32768)
    ap.add_argument("--nb", type=int, default=1024)
    ap.add_argument("--cond", type=float, default=1e2)
    ap.add_argument("--method", default="cholesky")
    ap.add_argument("--factor-dtype", default="fp16")
    ap.add_argument("--device", default="gpu")
    ap.add_argument("--json")
    a = ap.parse_args()
    g = ProcessGrid()
    A = problems.conditioned_matrix(g, a.n, a.nb, cond=a.cond, seed=1,
                                    spd=a.method == "cholesky", device=a.device)
    B = DistMatrix.random(g, (a.n, 1), (a.nb, a.nb), seed=2, device=a.device)
    kw = dict(method=a.method, return_info=True)
    for precision in ("double", "mixed"):
        extra = dict(precision=precision)
        if precision == "mixed":
            extra["factor_dtype"] = a.factor_dtype
        solve(A, B, **kw, **extra)                     # kernels load, pools fill
        A.backend.synchronize()
        g.comm.Barrier()
        t = time.perf_counter()
        with Tracer(device=a.device, sync=True) as tr:
            _, info = solve(A, B, **kw, **extra)
        A.backend.synchronize()
        total = time.perf_counter() - t
        if g.rank == 0:
            print(f"== {precision}: {total:.4f} s traced; info.times {info.times}; "
                  f"iterations {info.iterations}", flush=True)
            print(tr.table(), flush=True)
        for phase, sec in tr.seconds().items():
            stream(a, dict(bench="trace_mixed", impl=f"{precision} {phase}", n=a.n, nb=a.nb,
                           ranks=g.size, grid=f"{g.nprow}x{g.npcol}", device=a.device,
                           seconds=max(sec, 1e-9), tflops=None, method=a.method,
                           cond=a.cond, factor_dtype=a.factor_dtype, traced_total=total),
                   g.comm)


if __name__ == "__main__":
    main()
