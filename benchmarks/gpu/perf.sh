#!/usr/bin/env bash
# One H200, repository root, one device call (~6-8 min): issue 16's targets.
#  1. GPU tests of the in-place / peak-memory / tracer code (tests/test_inplace_memory.py,
#     tests/test_trace.py).
#  2. DGEMM rate in the same call (reference rows: distla matmul on 1x1 and CuPy's cuBLAS).
#  3. Cholesky and LU (partial pivoting) at n=65536, nb=1024, in place (targets >= 50 and
#     >= 45 TFLOP/s), with the peak device memory per rank.
#  4. Host overhead per step at n=16384 (the step loop forced on 1x1, traced run).
#  5. The largest problems in place: Cholesky and LU at n=120000 (a 115 GB matrix).
# Records (JSON lines) go to $OUT/perf.jsonl; logs to $OUT/*.log.
. benchmarks/gpu/device_env.sh
O=${OUT:-/tmp/out}; mkdir -p "$O"
J="$O/perf.jsonl"
B="$M -n 1 python3 -m distla bench"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
timeout 200 python3 -m pytest -q --color=no -p no:cacheprovider -m gpu --require-gpu \
    --timeout 150 tests/test_inplace_memory.py tests/test_trace.py > "$O/tests.log" 2>&1
echo "gpu tests rc=$?"; tail -2 "$O/tests.log"
timeout 120 $B matmul --n 32768 --device gpu --reps 3 --json "$J" 2>&1 | tail -4
timeout 150 $B cholesky --n 65536 --nb 1024 --device gpu --inplace --warmup 1 --reps 3 \
    --no-reference --json "$J" 2>&1 | tail -3
timeout 200 $B lu --n 65536 --nb 1024 --device gpu --inplace --warmup 1 --reps 2 \
    --no-ref --json "$J" 2>&1 | tail -3
for nb in 512 1024; do
  timeout 100 $B cholesky --n 16384 --nb $nb --device gpu --force-loop --trace --reps 3 \
      --no-check --no-reference --json "$J" 2>&1 | tail -3
  timeout 100 $B lu --n 16384 --nb $nb --device gpu --force-loop --trace --reps 3 \
      --no-check --no-ref --json "$J" 2>&1 | tail -3
done
timeout 150 $B cholesky --n 120000 --nb 1024 --device gpu --inplace --warmup 0 --reps 1 \
    --no-reference --json "$J" 2>&1 | tail -3
timeout 240 $B lu --n 120000 --nb 1024 --device gpu --inplace --warmup 0 --reps 1 \
    --no-ref --json "$J" 2>&1 | tail -3
echo "records: $(wc -l < "$J") in $J"
