"""Does the background preload still pay beside the staged read? (diagnosis, one GPU)

One fresh process per run: read the .npy ``--file`` onto the GPU (``io.read_matrix``, slabs of
``--slab-mib``) with or without :meth:`Backend.preloading` beside it, then the first
right-hand side (``product_and_norm``) and the first Cholesky solve, timing each; one JSON
line per run (``--json``). ``--switch-ms`` sets Python's thread switch interval for the read
(the reader waits for the GIL after each blocking call while the preload thread holds it).

    python3 benchmarks/gpu/read_preload_probe.py --file A.npy --preload 1 --slab-mib 64

Run it with a warm kernel cache (after ``distla warmup``), so that first use means loading."""
from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time

from distla import DistMatrix, ProcessGrid, io
from distla.bench import common
from distla.checks import product_and_norm
from distla.device import get_backend
from distla.linalg import solve


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--file", required=True)
    ap.add_argument("--nb", type=int, default=1024)
    ap.add_argument("--preload", type=int, default=1)
    ap.add_argument("--slab-mib", type=int, default=64)
    ap.add_argument("--switch-ms", type=float, default=5.0)
    ap.add_argument("--json")
    a = ap.parse_args()
    g = ProcessGrid(1, 1)
    be = get_backend("gpu")
    io.READ_SLAB_BYTES = a.slab_mib << 20
    info = io.inspect(a.file)
    old = sys.getswitchinterval()
    sys.setswitchinterval(a.switch_ms / 1e3)
    t0 = time.perf_counter()
    with be.preloading(info.dtype) if a.preload else contextlib.nullcontext():
        A = io.read_matrix(info.path, g, (a.nb, a.nb), device="gpu", info=info)
        common.sync("gpu")
        t_read = time.perf_counter() - t0
    t_join = time.perf_counter() - t0 - t_read
    sys.setswitchinterval(old)
    ones = DistMatrix.from_function(g, (A.m, 1), (a.nb, a.nb), lambda i, j: 1.0, device="gpu")
    t = time.perf_counter()
    B, _ = product_and_norm(A, ones)
    common.sync("gpu")
    t_rhs = time.perf_counter() - t
    t = time.perf_counter()
    solve(A, B, method="cholesky", overwrite_a=True)
    common.sync("gpu")
    t_solve = time.perf_counter() - t
    r = {"bench": "read_preload", "impl": "distla", "n": A.m, "nb": a.nb, "ranks": 1,
         "device": "gpu", "preload": a.preload, "slab_mib": a.slab_mib,
         "switch_ms": a.switch_ms, "read": t_read, "join": t_join, "rhs": t_rhs,
         "solve": t_solve, "seconds": t_read + t_join + t_rhs + t_solve, "tflops": None,
         "command": "python3 benchmarks/gpu/read_preload_probe.py " + " ".join(sys.argv[1:])}
    print(" ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}"
                   for k, v in r.items() if k not in ("command", "bench", "impl")))
    if a.json:
        with open(a.json, "a") as f:
            f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
