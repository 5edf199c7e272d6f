#!/usr/bin/env bash
# One H200, repository root, one device call (~6 min; every step is cut to what is left of a
# 570 s budget, so the call never outlives the 10-minute limit): issue 16's targets.
#  1. GPU tests of the in-place / peak-memory / tracer / recursive-panel code.
#  2. DGEMM rate in the same call (reference rows: distla matmul on 1x1 and CuPy's cuBLAS).
#  3. Cholesky and LU (partial pivoting) at n=65536, nb=1024, in place (targets >= 50 and
#     >= 45 TFLOP/s), with the peak device memory per rank.
#  4. The largest problems in place: Cholesky and LU at n=120000 (a 115 GB matrix).
#  5. LU at n=65536 again with recursive panels (getrf leaves of 256 columns), and Cholesky
#     with grouped trailing updates (8 and 64 block columns per SYRK + GEMM pair).
#  6. Host overhead per step at n=16384 (the step loop forced on 1x1, traced run; LU with one
#     getrf per panel and with recursive panels of 128-column leaves), nb 1024 then 512.
# Records (JSON lines) go to $OUT/perf.jsonl, the test log to $OUT/tests.log.
. benchmarks/gpu/device_env.sh
O=${OUT:-/tmp/out}; mkdir -p "$O"
J="$O/perf.jsonl"
B="$M -n 1 python3 -m distla bench"
BUDGET=${PERF_BUDGET:-570}
. benchmarks/gpu/budget.sh
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
timeout 150 python3 -m pytest -q --color=no -p no:cacheprovider -m gpu --require-gpu \
    --timeout 120 tests/test_inplace_memory.py tests/test_trace.py > "$O/tests.log" 2>&1
echo "gpu tests rc=$?"; tail -2 "$O/tests.log"
run 60 $B matmul --n 32768 --device gpu --reps 3 --json "$J"
run 80 $B cholesky --n 65536 --nb 1024 --device gpu --inplace --warmup 1 --reps 3 \
    --no-reference --json "$J"
run 100 $B lu --n 65536 --nb 1024 --device gpu --inplace --warmup 1 --reps 2 --no-ref \
    --json "$J"
run 100 $B cholesky --n 120000 --nb 1024 --device gpu --inplace --warmup 0 --reps 1 \
    --no-reference --json "$J"
run 150 $B lu --n 120000 --nb 1024 --device gpu --inplace --warmup 0 --reps 1 --no-ref \
    --json "$J"
run 100 $B lu --n 65536 --nb 1024 --device gpu --inplace --warmup 1 --reps 2 \
    --panel-leaf 256 --no-ref --json "$J"
for g in 8 64; do
  run 80 $B cholesky --n 65536 --nb 1024 --device gpu --inplace --warmup 1 --reps 3 \
      --update-group $g --no-reference --json "$J"
done
for nb in 1024 512; do
  run 60 $B cholesky --n 16384 --nb $nb --device gpu --force-loop --trace --reps 3 \
      --no-check --no-reference --json "$J"
  for leaf in 0 128; do
    run 60 $B lu --n 16384 --nb $nb --device gpu --force-loop --trace --reps 3 \
        --panel-leaf $leaf --no-check --no-ref --json "$J"
  done
done
echo "records: $(wc -l < "$J") in $J; ${SECONDS} s"
