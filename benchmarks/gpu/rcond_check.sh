#!/usr/bin/env bash
# One GPU machine, repository root (issue 15 checks on GPU ranks): the device-parametrized
# condition-estimate / tiny-pivot test and the few-rhs triangular solves on 1 GPU rank
# (--require-gpu: a missing CuPy fails instead of skipping), then the cost of rcond beside
# its factorization on one GPU (records: $OUT/rcond_gpu.jsonl, the factorizations being the
# reference rows of the same run).
. benchmarks/gpu/device_env.sh
O=${OUT:-/tmp/out}; mkdir -p "$O"
timeout 300 $M -n 1 python3 -m pytest --with-mpi -q --color=no -p no:cacheprovider \
    -m "mpi and gpu" --require-gpu --timeout 250 tests/test_validate.py \
    tests/test_gpu_core.py -k "each_device or core_operations" > "$O/rcond_tests.log" 2>&1
echo "gpu rcond tests rc=$?"; tail -2 "$O/rcond_tests.log"
timeout 280 $M -n 1 python3 benchmarks/rcond_cost.py --device gpu --n 8192 16384 32768 \
    --nb 1024 --reps 3 --json "$O/rcond_gpu.jsonl"
echo "rcond_cost rc=$?"
