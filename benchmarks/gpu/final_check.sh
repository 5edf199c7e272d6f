#!/usr/bin/env bash
# One GPU machine, repository root: GPU tests, then the whole solve job (n=32768, Cholesky)
# after 'distla warmup' with a fresh kernel cache, and warm.
. benchmarks/gpu/device_env.sh
O=${OUT:-/tmp/out}; mkdir -p "$O"
T() { python3 -c "import time; print(f'{time.time():.3f}')"; }
D() { python3 -c "print(f'{$(T) - $1:.2f}')"; }
timeout 300 $M -n 1 python3 -m pytest --with-mpi -q --color=no -p no:cacheprovider \
    --timeout 150 -m gpu --require-gpu tests/ > "$O/tests.log" 2>&1
echo "tests rc=$?"; tail -2 "$O/tests.log"
cd /tmp
timeout 150 $M -n 8 python3 -m distla generate --kind spd --n 32768 --out /tmp/A.npy -q
export CUPY_CACHE_DIR=/tmp/cupy_cache_fresh; rm -rf $CUPY_CACHE_DIR
t0=$(T); timeout 200 $M -n 1 -x CUPY_CACHE_DIR python3 -m distla warmup | tail -1; echo "warmup: $(D $t0) s"
S="python3 -m distla solve --matrix /tmp/A.npy --method cholesky --device gpu --nb 1024 --json $O/job.jsonl"
for run in after-warmup warm; do
  t0=$(T); timeout 200 $M -n 1 -x CUPY_CACHE_DIR $S | grep -E "^(read|make|solve|residual|total) "; echo "$run: $(D $t0) s"
done
