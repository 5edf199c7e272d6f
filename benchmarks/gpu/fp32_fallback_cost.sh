#!/usr/bin/env bash
# One GPU, repository root (carry .whl): where float32-accurate factors (factor_dtype fp32,
# fp16x3 updates) stop being accepted and what their fallback costs: distla bench mixed at
# n = 65536, cond 1e7 and 1e8, GEPP and Cholesky, with the certificate, the float64 solve in
# the same run. JSON lines: $OUT/fp32-fallback.jsonl.
. benchmarks/gpu/device_env.sh
timeout 300 $M -n 1 python3 -m distla bench mixed --device gpu --n 65536 --nb 1024 --reps 1 \
    --factor-dtype fp32 --cond 1e7 1e8 --method gepp cholesky --check-rcond --no-reference \
    --json $OUT/fp32-fallback.jsonl -q
python3 - $OUT/fp32-fallback.jsonl <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print(r["impl"], r.get("method"), r["n"], r.get("cond"), round(r["seconds"], 3),
          r.get("speedup"), r.get("iters"), r.get("fallback"), r.get("berr"), r.get("phases"))
PY
