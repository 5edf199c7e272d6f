#!/usr/bin/env bash
# One GPU, repository root, the previous tree in .base/ (carried with .whl): the GPU tests of
# the touched modules, then for both trees, alternating, in the same call:
#   benchmarks/gpu/small_n_probe.py at n = 4096..32768 (the whole call and its pieces),
#   distla bench cholesky / lu at n = 4096..32768 with the cuSOLVER reference rows,
#   and (after only) Cholesky / LU at n = 65536 in place.
# JSON lines under $OUT: small-{before,after}.jsonl, bench-{before,after}.jsonl.
. benchmarks/gpu/device_env.sh
O=${OUT:-/tmp/out}; mkdir -p "$O"
ROOT=$PWD
timeout 150 python3 -m pytest -q --color=no -p no:cacheprovider -m gpu --require-gpu \
    --timeout 100 tests/test_gpu_core.py tests/test_cholesky.py tests/test_lu.py \
    tests/test_validate.py tests/test_matrix.py > "$O/tests.log" 2>&1
echo "gpu tests rc=$?"; tail -1 "$O/tests.log"
timeout 150 $M -n 1 python3 -m pytest --with-mpi -q --color=no -p no:cacheprovider \
    -m "mpi and gpu" --require-gpu --timeout 100 tests/test_gpu_core.py tests/test_cholesky.py \
    tests/test_lu.py tests/test_validate.py > "$O/tests-mpi.log" 2>&1
echo "mpi gpu tests rc=$?"; tail -1 "$O/tests-mpi.log"
for tree in .base . ; do
  name=$([ "$tree" = . ] && echo after || echo before)
  echo "== $name"
  cd "$ROOT/$tree"; export PYTHONPATH=$PWD:/tmp/site
  timeout 100 python3 "$ROOT/benchmarks/gpu/small_n_probe.py" --n 4096 8192 16384 32768 \
      --reps 10 --json "$O/small-$name.jsonl" 2>&1 | grep -E "distla|reference|checks|zero|norm"
  timeout 100 $M -n 1 python3 -m distla bench cholesky --n 4096 8192 16384 32768 \
      --device gpu --reps 5 --no-check --json "$O/bench-$name.jsonl" 2>&1 | grep -E "^ *cholesky"
  timeout 100 $M -n 1 python3 -m distla bench lu --n 4096 8192 16384 32768 --device gpu \
      --reps 5 --no-check --json "$O/bench-$name.jsonl" 2>&1 | grep -E "^ *lu"
done
cd "$ROOT"; export PYTHONPATH=$PWD:/tmp/site
timeout 90 $M -n 1 python3 -m distla bench cholesky --n 65536 --nb 1024 --device gpu --inplace \
    --warmup 1 --reps 2 --no-reference --json "$O/bench-after.jsonl" 2>&1 | grep -E "^ *cholesky"
timeout 100 $M -n 1 python3 -m distla bench lu --n 65536 --nb 1536 --device gpu --inplace \
    --warmup 1 --reps 2 --no-ref --json "$O/bench-after.jsonl" 2>&1 | grep -E "^ *lu"
echo "${SECONDS} s"
