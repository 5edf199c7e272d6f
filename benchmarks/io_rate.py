"""Read and write rates of distla's .npy I/O beside a sequential read of the same file.

    mpiexec -n R python benchmarks/io_rate.py --n 8192 --dir /tmp --json out.jsonl

Rows (same run, same file, page cache warm after the first touch): ``sequential read``
(rank 0 reads the whole file into memory with one ``readinto``: the floor), ``read mpiio``
(``io.read_matrix``: one collective MPI_File_read_all per rank), ``read memmap`` (the
memory-mapped path, ``DISTLA_IO=memmap``), ``write mpiio`` (``io.write_npy``) and ``np.save``
on rank 0 of the gathered matrix (a one-process floor for writing, written the same way: a new
file renamed into place). Best of --reps; each write makes a new file (the previous one is
removed first, untimed: renaming over an existing file makes ext4 flush the new one to disk
first, 1.4 s for 512 MB on the development machine, a file-system cost the floor would not
pay).
``--h5`` adds the HDF5 rows: ``write h5`` / ``read h5`` (``file.h5:/A`` through
``distla.h5io``) beside ``h5py write (rank 0)`` / ``h5py read (rank 0)`` of the same data.
``--memmap`` adds the memory-mapped read; ``--device gpu`` reads onto GPU ranks (the write
side stays on CPU ranks); ``--slab-mib`` adds reads with other slab sizes. Every record
carries the command line, and ``--variant`` (a label, e.g. the DISTLA_IO_WRITE tried) with
``write_slab_bytes`` (``--write-slab-mib``); ``--no-read`` keeps the write rows only.
"""
import argparse
import os
import sys
import time

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
    ap.add_argument("--json")
    ap.add_argument("--h5", action="store_true", help="also the HDF5 rows")
    ap.add_argument("--memmap", action="store_true", help="also the memory-mapped read")
    ap.add_argument("--device", default="cpu", choices=("cpu", "gpu"),
                    help="where 'read mpiio' puts the matrix (gpu: through pinned slabs)")
    ap.add_argument("--slab-mib", type=int, nargs="*", default=[],
                    help="also 'read mpiio' with these io.READ_SLAB_BYTES (MiB)")
    ap.add_argument("--no-write", action="store_true",
                    help="write the file once, untimed (no write rows)")
    ap.add_argument("--no-read", action="store_true",
                    help="only the write rows (write mpiio, np.save)")
    ap.add_argument("--write-slab-mib", type=int,
                    help="io.WRITE_SLAB_BYTES for 'write mpiio' (MiB)")
    ap.add_argument("--variant", help="recorded in every row (e.g. DISTLA_IO_WRITE's value)")
    a = ap.parse_args()
    command = f"mpiexec -n {MPI.COMM_WORLD.size} python benchmarks/io_rate.py " + \
        " ".join(sys.argv[1:])
    comm = MPI.COMM_WORLD
    g = ProcessGrid(comm=comm)
    n, nb = a.n, a.nb
    path = os.path.join(a.dir, f"distla_io_rate_{n}.npy")
    A = DistMatrix.random(g, (n, n), (nb, nb), seed=3)
    nbytes = n * n * 8
    rows = []

    def rec(impl, sec):
        rows.append({"bench": "io", "impl": impl, "n": n, "nb": nb, "ranks": comm.size,
                     "device": a.device if impl.startswith("read mpiio") else "cpu",
                     "seconds": sec, "tflops": None,
                     "gbytes_per_s": nbytes / sec / 1e9, "command": command,
                     "variant": a.variant, "write_slab_bytes": io.WRITE_SLAB_BYTES})

    def unlink(p):   # untimed: each write makes a new file (renamed over an existing one,
        if comm.rank == 0 and os.path.exists(p):   # ext4 first flushes it to disk: 1.4 s
            os.unlink(p)                            # for 512 MB here, a file system cost)

    if a.write_slab_mib:
        io.WRITE_SLAB_BYTES = a.write_slab_mib << 20
    if a.no_write:
        io.write_npy(path, A)
    else:
        rec("write mpiio", timed_result(lambda _: io.write_npy(path, A), comm=comm,
                                        reps=a.reps, setup=lambda: unlink(path))[0])
    full = A.to_global(root=0) if not a.no_write else None
    if comm.rank == 0 and not a.no_write:   # like io.write_npy: a new file, renamed
        def save(_):
            np.save(path + ".ref.partial.npy", full)
            os.replace(path + ".ref.partial.npy", path + ".ref.npy")
        rec("np.save (rank 0)", best_local(save, reps=a.reps,
                                           setup=lambda: unlink(path + ".ref.npy")))
        os.unlink(path + ".ref.npy")
    del full
    if a.no_read:
        a.slab_mib, a.memmap, a.h5 = [], False, False
    buf = np.empty(os.path.getsize(path), dtype=np.uint8) \
        if comm.rank == 0 and not a.no_read else None

    def seq():
        if comm.rank == 0:
            with open(path, "rb", buffering=0) as f:
                f.readinto(buf)
    if not a.no_read:
        rec("sequential read (rank 0)", timed(seq, comm=comm, reps=a.reps))
    buf = None

    def read():
        io.read_matrix(path, g, (nb, nb), device=a.device)
        if a.device == "gpu":
            import cupy
            cupy.cuda.Device().synchronize()
    if not a.no_read:
        rec("read mpiio", timed(read, comm=comm, reps=a.reps))
    default = io.READ_SLAB_BYTES
    for mib in a.slab_mib:
        io.READ_SLAB_BYTES = mib << 20
        rec(f"read mpiio slab {mib} MiB", timed(read, comm=comm, reps=a.reps))
    io.READ_SLAB_BYTES = default
    if a.memmap:
        os.environ["DISTLA_IO"] = "memmap"
        rec("read memmap", timed(lambda: io.read_matrix(path, g, (nb, nb)), comm=comm, reps=a.reps))
        os.environ.pop("DISTLA_IO")
    if a.h5:
        import h5py
        h5 = path[:-4] + ".h5"
        rec("write h5", timed(lambda: io.write_matrix(h5 + ":/A", A), comm=comm, reps=a.reps))
        full = A.to_global(root=0)
        if comm.rank == 0:
            t = time.perf_counter()
            with h5py.File(h5 + ".ref.h5", "w") as f:
                f.create_dataset("A", data=full)
            rec("h5py write (rank 0)", time.perf_counter() - t)
            os.unlink(h5 + ".ref.h5")
        del full

        def seq_h5():
            if comm.rank == 0:
                with h5py.File(h5, "r") as f:
                    f["A"][...]
        rec("h5py read (rank 0)", timed(seq_h5, comm=comm, reps=a.reps))
        rec("read h5", timed(lambda: io.read_matrix(h5 + ":/A", g, (nb, nb)), comm=comm,
                             reps=a.reps))
        if comm.rank == 0:
            os.unlink(h5)
    if comm.rank == 0:
        os.unlink(path)
        for r in rows:
            print(f"{r['impl']:<26} {r['seconds']:8.4f} s  {r['gbytes_per_s']:6.2f} GB/s")
        append_jsonl(a.json, rows)


if __name__ == "__main__":
    main()
