#!/usr/bin/env bash
# One GPU, repository root (carry .whl): the one-shot job's first-use cost with and without
# the background preload (Backend.preload_async, DISTLA_PRELOAD=0 turns it off).
#  1. GPU tests of the touched modules;
#  2. 'distla generate --n 32768' on 8 CPU ranks (the job's file), an emptied CUPY_CACHE_DIR
#     and 'distla warmup';
#  3. 'distla bench job --cold --repeat 1', preload off then on, twice (alternating).
# JSON lines: $OUT/cold-preload-{off,on}.jsonl.
. benchmarks/gpu/device_env.sh
O=${OUT:-/tmp/out}; mkdir -p "$O"
timeout 150 python3 -m pytest -q --color=no -p no:cacheprovider -m gpu --require-gpu \
    --timeout 100 tests/test_gpu_core.py tests/test_trace.py tests/test_cholesky.py \
    tests/test_lu.py tests/test_inplace_memory.py > "$O/tests.log" 2>&1
echo "gpu tests rc=$?"; tail -n 1 "$O/tests.log"
D=/tmp/distla-job; mkdir -p $D
timeout 150 $M -n 8 env OPENBLAS_NUM_THREADS=1 python3 -m distla generate --kind spd \
    --n 32768 --out $D/distla-bench-job-spd-n32768-float64.npy -q
export CUPY_CACHE_DIR=/tmp/fresh-cache; rm -rf $CUPY_CACHE_DIR
t0=$SECONDS; timeout 200 $M -n 1 -x CUPY_CACHE_DIR python3 -m distla warmup | tail -1
echo "warmup $((SECONDS - t0)) s"
for rep in 1 2; do
  for p in 0 1; do
    name=$([ $p = 0 ] && echo off || echo on)
    timeout 120 env DISTLA_PRELOAD=$p $M -n 1 -x CUPY_CACHE_DIR -x DISTLA_PRELOAD python3 -m \
        distla bench job --device gpu --n 32768 --nb 1024 --dir $D --cold --repeat 1 \
        --json "$O/cold-preload-$name.jsonl" 2>&1 | tail -n 14 | sed "s/^/preload $name: /"
  done
done
echo "${SECONDS} s"
