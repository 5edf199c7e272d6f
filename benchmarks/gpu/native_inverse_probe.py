"""One GPU: the float64 step loops with the diagonal block's inverse and a GEMM
(``GpuBackend.NATIVE_INVERSE``) against the triangular solve: LU's ``U12 = L11^-1 A12`` and
Cholesky's panel ``L21 = A21 L11^-T``. n = 65536 in place (nb 2048, the default there),
settings alternating, twice; then n = 32768 with the step loop forced and the residual
checked, each setting. JSON lines to argv[1], each record tagged with its setting.

Run: ``$M -n 1 python3 benchmarks/gpu/native_inverse_probe.py $OUT/native-inverse.jsonl``."""
import json
import sys

import cupy as cp

from distla.bench import main_argv
from distla.device.gpu import GpuBackend

out = sys.argv[1]
tmp = out.replace(".jsonl", "-one.jsonl")


def run(driver, argv, setting, rep):
    GpuBackend.NATIVE_INVERSE = frozenset(setting)
    open(tmp, "w").close()
    main_argv([driver] + argv + ["--json", tmp])
    with open(tmp) as f, open(out, "a") as o:
        for line in f:
            rec = json.loads(line)
            rec.update(native_inverse=sorted(setting), rep=rep,
                       command=f"distla bench {driver} {' '.join(argv)} (GpuBackend."
                               f"NATIVE_INVERSE={sorted(setting)}; native_inverse_probe.py)")
            o.write(json.dumps(rec) + "\n")
            print(rec["impl"], rec["n"], sorted(setting), rec["seconds"], rec.get("tflops"),
                  rec.get("sresid"), flush=True)
    cp.get_default_memory_pool().free_all_blocks()


big = ["--n", "65536", "--device", "gpu", "--inplace", "--warmup", "1", "--reps", "1",
       "--no-reference", "--no-check"]
for rep in (1, 2):
    for s in ((), ("lu",)):
        run("lu", big, s, rep)
    for s in ((), ("cholesky",)):
        run("cholesky", big, s, rep)
small = ["--n", "32768", "--nb", "1024", "--device", "gpu", "--force-loop", "--warmup", "1",
         "--reps", "2", "--no-reference"]
for s in ((), ("lu",)):
    run("lu", small, s, 1)
for s in ((), ("cholesky",)):
    run("cholesky", small, s, 1)
