#!/usr/bin/env bash
# Two GPUs of one host (nvidia-h200-x2), repository root, carry .whl; one device call each:
#   bash benchmarks/gpu/mixed_2gpu_and_lu_nb.sh mixed   distla bench mixed on 2 GPUs (1x2),
#       n = 65536: fp32 (fp16x3) and fp16 factors at cond 1e2 and 1e6, GEPP and Cholesky,
#       with the certificate, the float64 solve in the same run -> $OUT/mixed-2gpu.jsonl
#   bash benchmarks/gpu/mixed_2gpu_and_lu_nb.sh lunb    LU in place on one GPU, n = 65536,
#       nb 1536 / 2048 / 2560 alternating, twice (the diagonal block's inverse applied by a
#       GEMM) -> $OUT/lu-nb.jsonl
. benchmarks/gpu/device_env.sh
case ${1:-mixed} in
mixed)
  timeout 540 $M -n 2 python3 -m distla bench mixed --device gpu --n 65536 --nb 1024 \
      --reps 1 --factor-dtype fp32 fp16 --cond 1e2 1e6 --method gepp cholesky --check-rcond \
      --no-reference --json $OUT/mixed-2gpu.jsonl 2>&1 | grep -E "^ *(cholesky|gepp|mixed)|rror" | head -30
  ;;
lunb)
  for rep in 1 2; do
    for nb in 1536 2048 2560; do
      CUDA_VISIBLE_DEVICES=0 timeout 80 python3 -m distla bench lu --n 65536 --nb $nb \
          --device gpu --inplace --warmup 1 --reps 1 --no-ref --no-check \
          --json $OUT/lu-nb.jsonl 2>&1 | grep -E "^ *lu|rror" | cut -c1-110
    done
  done
  ;;
esac
