"""One GPU: cuBLAS DSYRK against the split SYRK (``GpuBackend.SYRK_SPLIT``: halves
recursively, the off-diagonal quadrant one DGEMM) at the Cholesky update's shapes (k = 1024),
beside DGEMM of the same n and k; then the Cholesky step loop at n = 65536 (nb 1024, in place)
with each setting, alternating. JSON lines to argv[1].

Run: ``$M -n 1 python3 benchmarks/gpu/syrk_split_probe.py $OUT/syrk-split.jsonl``."""
import json
import sys

import cupy as cp
from probe_timing import best

from distla.bench import main_argv
from distla.device import get_backend
from distla.device.gpu import GpuBackend

out = sys.argv[1]
be = get_backend("gpu")
dev = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()


def emit(rec):
    rec.update(device=dev, ranks=1, command="python3 benchmarks/gpu/syrk_split_probe.py")
    with open(out, "a") as f:
        f.write(json.dumps(rec) + "\n")
    print(json.dumps(rec), flush=True)


k = 1024
for n in (2048, 4096, 8192, 16384):
    a = cp.asfortranarray(cp.random.rand(k, n) - 0.5)       # the loop's LT: k x n, 'T'
    c0 = cp.asfortranarray(cp.random.rand(n, n))
    ref = None
    for split in (0, 1024, 2048, 4096):
        if split and split >= n:
            continue
        GpuBackend.SYRK_SPLIT = split
        c = c0.copy(order="F")
        t = best(lambda: be.syrk("L", "T", -1.0, a, 1.0, c))
        c = c0.copy(order="F")
        be.syrk("L", "T", -1.0, a, 1.0, c)
        low = cp.tril(c)
        ref = low if ref is None else ref
        diff = float(cp.abs(low - ref).max())
        emit(dict(bench="syrk_split", impl=f"syrk split={split}", n=n, k=k, seconds=t,
                  tflops=n * n * k / t / 1e12, max_diff_vs_unsplit=diff))
    GpuBackend.SYRK_SPLIT = 0
    b = cp.asfortranarray(cp.random.rand(k, n))
    c = c0.copy(order="F")
    t = best(lambda: be.gemm("T", "N", -1.0, a, b, 1.0, c))
    emit(dict(bench="syrk_split", impl="gemm (reference)", n=n, k=k, seconds=t,
              tflops=2.0 * n * n * k / t / 1e12))
    cp.get_default_memory_pool().free_all_blocks()

J = out.replace(".jsonl", "-cholesky.jsonl")
for rep in (1, 2):
    for split, group in ((0, 8), (2048, 8), (4096, 8), (2048, 16)):
        GpuBackend.SYRK_SPLIT = split
        print(f"cholesky n=65536 SYRK_SPLIT={split} update-group={group}", flush=True)
        argv = ["cholesky", "--n", "65536", "--nb", "1024", "--update-group", str(group),
                "--device", "gpu", "--inplace", "--warmup", "1", "--reps", "2",
                "--no-reference", "--no-check", "--json", J]
        open(J, "w").close()
        main_argv(argv)
        with open(J) as f, open(out, "a") as o:      # each record tagged with its setting
            for line in f:
                rec = json.loads(line)
                rec.update(syrk_split=split, update_group=group, rep=rep,
                           command="distla bench " + " ".join(argv[:-2]) +
                           f" (GpuBackend.SYRK_SPLIT={split}; syrk_split_probe.py)")
                o.write(json.dumps(rec) + "\n")
                print(rec["impl"], rec["seconds"], rec.get("tflops"), flush=True)
        cp.get_default_memory_pool().free_all_blocks()
