#!/usr/bin/env bash
# One GPU, repository root (carry .whl): does the background preload still pay beside the
# staged read, and at which slab size / thread switch interval? (issue: whole job)
#  1. 'distla generate --n 32768' on 8 CPU ranks, 'distla warmup' into an emptied cache;
#  2. benchmarks/gpu/read_preload_probe.py, one fresh process per variant, variants
#     alternating, twice.
# JSON lines: $OUT/read-preload.jsonl.
. benchmarks/gpu/device_env.sh
O=${OUT:-/tmp/out}; mkdir -p "$O"
D=/tmp/distla-job; mkdir -p $D
F=$D/distla-bench-job-spd-n32768-float64.npy
[ -f $F ] || timeout 150 $M -n 8 env OPENBLAS_NUM_THREADS=1 python3 -m distla generate \
    --kind spd --n 32768 --out $F -q
export CUPY_CACHE_DIR=/tmp/fresh-cache; rm -rf $CUPY_CACHE_DIR
timeout 200 $M -n 1 -x CUPY_CACHE_DIR python3 -m distla warmup | tail -1
for rep in 1 2; do
  for v in "0 64 5" "1 64 5" "1 64 0.1" "0 256 5" "1 256 5" "1 256 0.1"; do
    set -- $v
    timeout 60 $M -n 1 -x CUPY_CACHE_DIR python3 benchmarks/gpu/read_preload_probe.py \
        --file $F --preload $1 --slab-mib $2 --switch-ms $3 --json "$O/read-preload.jsonl"
  done
done
echo "${SECONDS} s"
