"""`distla generate --kind spd` on CPU ranks: the generator's old entries (two nested hashes
of (min(i,j), max(i,j)), 2^16-entry slabs) beside the symmetric in-place hash
(random.spd_entries, 2^18-entry slabs), each through io.write_npy_generated (what the command
runs), alternating in one process per rank, beside one np.save of the same size on rank 0.

    mpiexec -n 2 python benchmarks/generate_spd.py 8192 OUT.jsonl
"""
import json
import os
import sys
import tempfile
import time

import numpy as np
from mpi4py import MPI

import distla.matrix as M
from distla import ProcessGrid, io
from distla.random import hashed_uniform, spd_entries


def old_entries(n):
    def fn(I, J):
        lo, hi = np.minimum(I, J), np.maximum(I, J)
        return np.where(I == J, float(n), hashed_uniform(0, lo, hi) - 0.5)
    return fn


def main():
    comm = MPI.COMM_WORLD
    g = ProcessGrid()
    n, out = int(sys.argv[1]), sys.argv[2]
    d = comm.bcast(tempfile.mkdtemp() if comm.rank == 0 else None)
    path = os.path.join(d, "A.npy")
    variants = {"old": (16, old_entries(n)), "new": (18, lambda I, J: spd_entries(0, n, I, J))}
    rows = []
    for _ in range(3):
        for name, (slab, fn) in variants.items():
            M._SLAB_ELEMS["cpu"] = 1 << slab
            comm.Barrier()
            t0 = time.perf_counter()
            io.write_npy_generated(path, g, (n, n), (128, 128), fn)
            comm.Barrier()
            rows.append((name, slab, time.perf_counter() - t0))
    if comm.rank == 0:
        a = np.load(path)
        assert np.array_equal(a, a.T) and np.all(np.diag(a) == n)
        t0 = time.perf_counter()
        with open(os.path.join(d, "B.npy"), "wb") as f:
            np.save(f, a)
        floor = time.perf_counter() - t0
        cmd = f"mpiexec -n {comm.size} python benchmarks/generate_spd.py {n} {out}"
        with open(out, "a") as f:
            for name, slab, t in rows:
                f.write(json.dumps({"bench": "generate", "impl": f"distla ({name} generator)",
                                    "n": n, "ranks": comm.size, "device": "cpu",
                                    "slab_elems": 1 << slab, "seconds": t, "tflops": None,
                                    "command": cmd}) + "\n")
            f.write(json.dumps({"bench": "generate", "impl": "np.save (floor)", "n": n,
                                "ranks": 1, "device": "cpu", "seconds": floor, "tflops": None,
                                "command": cmd}) + "\n")
        for name, slab, t in rows:
            print(f"{name:4s} slab 2^{slab}: {t:.2f} s")
        print(f"np.save floor: {floor:.2f} s")
        import shutil
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
