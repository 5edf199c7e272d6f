#!/usr/bin/env bash
# One GPU, repository root (carry .whl), one device call, steps cut to a 560 s budget; the
# parts named as arguments, in order:
#   tests    GPU tests (whole suite) and the mpi+gpu tests on one rank
#   profile  per-step host overhead (benchmarks/gpu/step_profile.py, n=16384, nb 512, 1024)
#   small    DGEMM, then Cholesky / LU beside cuSOLVER at n = 4096..32768
#   large    Cholesky / LU at n = 65536 in place, traced (phases on the device)
# Records: $OUT/perf16.jsonl; logs under $OUT.
. benchmarks/gpu/device_env.sh
O=${OUT:-/tmp/out}; mkdir -p "$O"
J="$O/perf16.jsonl"
B="$M -n 1 python3 -m distla bench"
BUDGET=${PERF_BUDGET:-560}
RUN_TAIL=12
. benchmarks/gpu/budget.sh
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
for part in "$@"; do case $part in
tests)
  timeout 300 python3 -m pytest -q --color=no -p no:cacheprovider -m gpu --require-gpu \
      --timeout 200 tests/ > "$O/tests.log" 2>&1; echo "gpu tests rc=$?"; tail -2 "$O/tests.log"
  timeout 240 $M -n 1 python3 -m pytest --with-mpi -q --color=no -p no:cacheprovider \
      -m "mpi and gpu" --require-gpu --timeout 150 tests/ > "$O/tests-mpi.log" 2>&1
  echo "mpi gpu tests rc=$?"; tail -2 "$O/tests-mpi.log" ;;
profile)
  for nb in 512 1024; do
    timeout 120 python3 benchmarks/gpu/step_profile.py --n 16384 --nb $nb --top 45 \
        > "$O/step-profile-$nb.log" 2>&1; echo "profile nb $nb rc=$?"
    grep -E "overhead|^step|^update|^panel|^swap" "$O/step-profile-$nb.log"
  done ;;
small)
  run 60 $B matmul --n 32768 --device gpu --reps 3 --json "$J"
  run 120 $B cholesky --n 4096 8192 16384 32768 --device gpu --reps 5 --json "$J"
  run 150 $B lu --n 4096 8192 16384 32768 --device gpu --reps 5 --json "$J" ;;
large)
  run 100 $B cholesky --n 65536 --nb 1024 --device gpu --inplace --warmup 1 --reps 2 \
      --trace --no-reference --json "$J"
  run 120 $B lu --n 65536 --nb 1024 --device gpu --inplace --warmup 1 --reps 2 --trace \
      --no-ref --json "$J" ;;
esac; done
echo "records: $(cat "$J" 2>/dev/null | wc -l) in $J; ${SECONDS} s"
