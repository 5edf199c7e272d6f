#!/usr/bin/env bash
# One GPU, repository root (carry .whl): at n = 65536 in place, the grouped trailing update of
# Cholesky (update group 1, 8, 16 block columns per SYRK + GEMM pair) and nb 1024 / 1536 for
# Cholesky and LU, each configuration twice, alternating (rates vary ~1% between runs).
# JSON lines: $OUT/large-sweep.jsonl.
. benchmarks/gpu/device_env.sh
O=${OUT:-/tmp/out}; mkdir -p "$O"; J="$O/large-sweep.jsonl"
B="$M -n 1 python3 -m distla bench"
for rep in 1 2; do
  for cfg in "1024 1" "1024 8" "1024 16" "1536 1" "1536 8"; do
    set -- $cfg
    timeout 60 $B cholesky --n 65536 --nb $1 --update-group $2 --device gpu --inplace \
        --warmup 1 --reps 2 --no-reference --no-check --json "$J" 2>&1 | grep -E "^ *cholesky"
  done
  for nb in 1024 1536; do
    timeout 70 $B lu --n 65536 --nb $nb --device gpu --inplace --warmup 1 --reps 2 --no-ref \
        --no-check --json "$J" 2>&1 | grep -E "^ *lu"
  done
done
echo "${SECONDS} s"
