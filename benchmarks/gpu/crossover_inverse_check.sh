#!/usr/bin/env bash
# One GPU: LU and Cholesky on a 1x1 grid as they run by default (cuSOLVER's getrf/potrf for
# n <= LOCAL_UP_TO, linalg/_local.py) against distla's step loop (--force-loop), which now
# applies the diagonal block's inverse (GpuBackend.NATIVE_INVERSE), at n = 24576 and 32768
# (nb 1024), alternating, twice. JSON lines: $OUT/crossover.jsonl.
. benchmarks/gpu/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
for rep in 1 2; do
  for n in 24576 32768; do
    for d in lu cholesky; do
      for mode in "" "--force-loop"; do
        CUDA_VISIBLE_DEVICES=0 timeout 120 python3 -m distla.bench $d --device gpu --n $n \
            --nb 1024 --reps 3 --no-reference $mode --json $OUT/crossover.jsonl 2>&1 \
            | grep -E "^ *(lu|cholesky) |rror" | cut -c1-100 | sed "s/^/[$mode] /"
      done
    done
  done
done
