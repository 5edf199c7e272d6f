#!/usr/bin/env bash
# One GPU, repository root (carry .whl): Cholesky and LU at n = 65536 in place with nb 1024,
# 1536 and 2048 (alternating, twice), then the mixed fp16 Cholesky solve at cond 1e6 (whose
# fp16 factorization breaks down: the float64 fallback's cost) at n = 32768 and 65536.
# JSON lines: $OUT/nb-large.jsonl, $OUT/mixed-fallback.jsonl.
. benchmarks/gpu/device_env.sh
O=${OUT:-/tmp/out}; mkdir -p "$O"; J="$O/nb-large.jsonl"
B="$M -n 1 python3 -m distla bench"
for rep in 1 2; do
  for nb in 1024 1536 2048; do
    timeout 60 $B cholesky --n 65536 --nb $nb --device gpu --inplace --warmup 1 --reps 1 \
        --no-reference --no-check --json "$J" 2>&1 | grep -E "^ *cholesky"
    timeout 70 $B lu --n 65536 --nb $nb --device gpu --inplace --warmup 1 --reps 1 --no-ref \
        --no-check --json "$J" 2>&1 | grep -E "^ *lu"
  done
done
for n in 32768 65536; do
  timeout 120 $B mixed --device gpu --n $n --nb 1024 --reps 1 --factor-dtype fp16 --cond 1e6 \
      --method cholesky --check-rcond --no-reference --json "$O/mixed-fallback.jsonl" -q
done
python3 - "$O/mixed-fallback.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print(r["impl"], r["n"], r["cond"], round(r["seconds"], 3), r.get("speedup"), r.get("phases"))
PY
echo "${SECONDS} s"
