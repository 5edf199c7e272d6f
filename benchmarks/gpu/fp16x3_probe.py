"""One GPU: float32-accurate factors (factor_dtype 'fp32') from 3xTF32 updates
(``GpuBackend.FP32_MODE = 'tf32x3'``: one TF32 GEMM of split operands) against two fp16 GEMMs
of scaled high and low halves ('fp16x3'), in the mixed-precision solves of ``distla bench
mixed`` (with the certificate, the float64 solve in the same run), settings alternating.
JSON lines to argv[1], each record tagged with its FP32_MODE; argv[2:]: the sizes (default
65536).

Run: ``$M -n 1 python3 benchmarks/gpu/fp16x3_probe.py $OUT/fp16x3.jsonl 65536``."""
import json
import sys

import cupy as cp

from distla.bench import main_argv
from distla.device.gpu import GpuBackend

out = sys.argv[1]
sizes = [int(x) for x in sys.argv[2:]] or [65536]
tmp = out.replace(".jsonl", "-one.jsonl")
for n in sizes:
    for mode in ("tf32x3", "fp16x3"):
        GpuBackend.FP32_MODE = mode
        argv = ["mixed", "--device", "gpu", "--n", str(n), "--nb", "1024", "--reps", "1",
                "--factor-dtype", "fp32", "--cond", "1e2", "1e6", "--method", "gepp",
                "cholesky", "--check-rcond", "--no-reference"]
        open(tmp, "w").close()
        main_argv(argv + ["--json", tmp, "-q"])
        with open(tmp) as f, open(out, "a") as o:
            for line in f:
                rec = json.loads(line)
                rec.update(fp32_mode=mode, command=f"distla bench {' '.join(argv)} (GpuBackend."
                           f"FP32_MODE={mode!r}; fp16x3_probe.py)")
                o.write(json.dumps(rec) + "\n")
                ph = rec.get("phases") or {}
                print(mode, rec["impl"], rec.get("method"), rec["n"], rec.get("cond"),
                      round(rec["seconds"], 3), rec.get("speedup"), rec.get("iterations"),
                      rec.get("fallback"), rec.get("backward_error"),
                      {k: round(v, 3) for k, v in ph.items()}, flush=True)
        cp.get_default_memory_pool().free_all_blocks()
