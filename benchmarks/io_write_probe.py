"""Where a multi-rank .npy write's time goes (diagnosis, not a benchmark of record):

    mpiexec -n R python benchmarks/io_write_probe.py --n 16384 --nb 256 --json out.jsonl

For each grid shape given (default: 1 x R and the default grid), best of --reps, each write
to a new file: ``write`` (io.write_npy as it is), ``regroup`` (only the slabs' regrouping
onto 1 x R, nothing written), ``write slab K MiB`` (io.WRITE_SLAB_BYTES = K MiB) and
``np.save (rank 0)`` of the same matrix. Rows carry ``grid`` and the DISTLA_* variables set.
"""
import argparse
import os
import sys

import numpy as np
from mpi4py import MPI

from distla import DistMatrix, ProcessGrid, io
from distla.bench.common import append_jsonl, best_local, timed, timed_result


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=8192)
    ap.add_argument("--nb", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--dir", default="/tmp")
    ap.add_argument("--grids", nargs="*", default=None, help="PxQ shapes (default 1xR, default)")
    ap.add_argument("--slab-mib", type=int, nargs="*", default=[])
    ap.add_argument("--json")
    a = ap.parse_args()
    comm = MPI.COMM_WORLD
    R = comm.size
    command = f"mpiexec -n {R} python benchmarks/io_write_probe.py " + " ".join(sys.argv[1:])
    env = {k: v for k, v in os.environ.items() if k.startswith("DISTLA_")}
    path = os.path.join(a.dir, f"distla_write_probe_{a.n}.npy")
    rows = []

    def rec(impl, grid, sec):
        rows.append({"bench": "io-write-probe", "impl": impl, "n": a.n, "nb": a.nb,
                     "ranks": R, "grid": grid, "device": "cpu", "seconds": sec,
                     "tflops": None, "gbytes_per_s": a.n * a.n * 8 / sec / 1e9,
                     "env": env, "command": command})

    def unlink(p):
        if comm.rank == 0 and os.path.exists(p):
            os.unlink(p)

    shapes = a.grids or ["1x%d" % R, "default"]
    full = None
    for shape in shapes:
        g = ProcessGrid(comm=comm) if shape == "default" else \
            ProcessGrid(*map(int, shape.split("x")), comm=comm)
        label = f"{g.nprow}x{g.npcol}"
        A = DistMatrix.random(g, (a.n, a.n), (a.nb, a.nb), seed=3)
        rec("write", label, timed_result(lambda _: io.write_npy(path, A), comm=comm,
                                         reps=a.reps, setup=lambda: unlink(path))[0])
        if g.nprow > 1:
            def regroup():
                for _ in io._column_slabs(A):
                    pass
            rec("regroup", label, timed(regroup, comm=comm, reps=a.reps))
        default = io.WRITE_SLAB_BYTES
        for mib in a.slab_mib:
            io.WRITE_SLAB_BYTES = mib << 20
            rec(f"write slab {mib} MiB", label,
                timed_result(lambda _: io.write_npy(path, A), comm=comm, reps=a.reps,
                             setup=lambda: unlink(path))[0])
        io.WRITE_SLAB_BYTES = default
        if shape == shapes[0]:       # collective: to_global returns None off rank 0
            full = A.to_global(root=0)
        unlink(path)
        A = None      # freed before the next grid's matrix
    if comm.rank == 0:
        def save(_):
            np.save(path + ".ref.partial.npy", full)
            os.replace(path + ".ref.partial.npy", path + ".ref.npy")
        rec("np.save (rank 0)", "-", best_local(save, reps=a.reps,
                                                setup=lambda: unlink(path + ".ref.npy")))
        os.unlink(path + ".ref.npy")
        for r in rows:
            print(f"{r['impl']:<22} {r['grid']:>6} {r['seconds']:8.4f} s "
                  f"{r['gbytes_per_s']:6.2f} GB/s")
        append_jsonl(a.json, rows)


if __name__ == "__main__":
    main()
