# One GPU: LU on a 1x1 grid as it runs by default (cuSOLVER's getrf for n <= LOCAL_UP_TO,
# linalg/_local.py) against distla's step loop with its recursive panels (--force-loop), at
# n = 24576 and 32768 (nb 1024), alternating, twice; the cupy(cusolver) rows are the benchmark's
# own reference in the same run.
. benchmarks/gpu/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
for rep in 1 2; do
  for n in 24576 32768; do
    for mode in "" "--force-loop --no-ref"; do
      CUDA_VISIBLE_DEVICES=0 timeout 120 python3 -m distla.bench lu --device gpu --n $n --nb 1024 \
          --reps 3 $mode --json $OUT/crossover.jsonl 2>&1 | grep -E "distla|cusolver|rror" | cut -c1-120
    done
  done
done
