"""Generator slab size on CPU ranks: problems.spd_matrix + MPI-IO write with the old (2^22
entries) and the cache-sized (2^16) column slabs of DistMatrix.from_function, alternating in one
process per rank, beside one np.save of the same size on rank 0.

    mpiexec -n 2 python benchmarks/generate_slabs.py 8192 OUT.jsonl
"""
import json
import sys
import time

import numpy as np
from mpi4py import MPI

import distla.matrix as M
from distla import ProcessGrid, io, problems


def main():
    comm = MPI.COMM_WORLD
    g = ProcessGrid()
    n, out = int(sys.argv[1]), sys.argv[2]
    rows = []
    for _ in range(3):
        for s in (22, 16):
            M._SLAB_ELEMS["cpu"] = 1 << s
            comm.Barrier()
            t0 = time.perf_counter()
            A = problems.spd_matrix(g, n, 256)
            comm.Barrier()
            t1 = time.perf_counter()
            io.write_npy("/tmp/gen_b.npy", A)
            comm.Barrier()
            t2 = time.perf_counter()
            del A
            rows.append(dict(bench="generate", impl=f"distla-slab-2^{s}", n=n, ranks=comm.size,
                             device="cpu", seconds=t2 - t0, generate_s=t1 - t0,
                             write_s=t2 - t1, tflops=None))
    if comm.rank == 0:
        a = np.random.default_rng(0).random((n, n))
        t0 = time.perf_counter()
        np.save("/tmp/gen_np.npy", a)
        rows.append(dict(bench="generate", impl="numpy-save (one process, same size)", n=n,
                         ranks=1, device="cpu", seconds=time.perf_counter() - t0, tflops=None))
        cmd = f"mpiexec -n {comm.size} python benchmarks/generate_slabs.py {n} OUT"
        with open(out, "w") as f:
            for r in rows:
                r["command"] = cmd
                f.write(json.dumps(r) + "\n")
        for r in rows:
            print(r["impl"], round(r["seconds"], 3), round(r.get("generate_s", 0), 3),
                  round(r.get("write_s", 0), 3))


if __name__ == "__main__":
    main()
