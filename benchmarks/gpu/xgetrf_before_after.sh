#!/usr/bin/env bash
# One GPU, repository root, the previous tree in .base/ (carried with .whl): the 64-bit getrf
# (this tree) against the legacy one (.base), in the same call:
#   the probe's pivot comparison and backward error, the GPU tests of the LU paths,
#   distla bench lu at n = 4096..32768 (cuSOLVER reference rows) and at 65536 in place,
#   and the mixed LU solve at 32768 (fp16, tf32; cond 1e2), trees alternating.
# JSON lines under $OUT.
. benchmarks/gpu/device_env.sh
O=${OUT:-/tmp/out}; mkdir -p "$O"
ROOT=$PWD
timeout 120 python3 benchmarks/gpu/getrf_alg_probe.py --reps 3 --json "$O/getrf-alg.jsonl" 2>&1 \
    | grep -E "4096|backward" | head -8
timeout 200 python3 -m pytest -q --color=no -p no:cacheprovider -m gpu --require-gpu \
    --timeout 150 tests/test_gpu_core.py tests/test_lu.py tests/test_mixed.py tests/test_rbt.py \
    > "$O/tests.log" 2>&1; echo "gpu tests rc=$?"; tail -n 1 "$O/tests.log"
timeout 200 $M -n 1 python3 -m pytest --with-mpi -q --color=no -p no:cacheprovider \
    -m "mpi and gpu" --require-gpu --timeout 150 tests/test_gpu_core.py tests/test_lu.py \
    tests/test_mixed.py tests/test_bad_inputs.py > "$O/tests-mpi.log" 2>&1
echo "mpi gpu tests rc=$?"; tail -n 1 "$O/tests-mpi.log"
for tree in .base . .base . ; do
  name=$([ "$tree" = . ] && echo after || echo before)
  echo "== $name"
  cd "$ROOT/$tree"; export PYTHONPATH=$PWD:/tmp/site
  timeout 60 $M -n 1 python3 -m distla bench lu --n 4096 8192 16384 32768 --device gpu \
      --reps 5 --no-check --json "$O/bench-$name.jsonl" 2>&1 | grep -E "^ *lu"
done
for tree in .base . ; do
  name=$([ "$tree" = . ] && echo after || echo before)
  echo "== $name"
  cd "$ROOT/$tree"; export PYTHONPATH=$PWD:/tmp/site
  timeout 60 $M -n 1 python3 -m distla bench lu --n 65536 --nb 1024 --device gpu --inplace \
      --warmup 1 --reps 2 --no-ref --no-check --json "$O/bench-$name.jsonl" 2>&1 | grep -E "^ *lu"
  timeout 100 $M -n 1 python3 -m distla bench mixed --n 32768 --nb 1024 --method gepp \
      --cond 1e2 --factor-dtype tf32 fp16 --no-ref --json "$O/mixed-$name.jsonl" 2>&1 \
      | grep -E "gepp" | head -6
done
echo "${SECONDS} s"
