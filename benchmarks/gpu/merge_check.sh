#!/usr/bin/env bash
# One GPU machine, repository root: every GPU test (gpu-marked, --require-gpu: a missing CuPy
# fails instead of skipping), then the 1x1 crossover (step loop vs local cuSOLVER call).
. benchmarks/gpu/device_env.sh
O=${OUT:-/tmp/out}; mkdir -p "$O"
timeout 240 python3 -m pytest -q --color=no -p no:cacheprovider -m gpu --require-gpu \
    --timeout 200 tests/ > "$O/tests_serial.log" 2>&1
echo "serial gpu tests rc=$?"; tail -2 "$O/tests_serial.log"
timeout 300 $M -n 1 python3 -m pytest --with-mpi -q --color=no -p no:cacheprovider \
    -m "mpi and gpu" --require-gpu --timeout 200 tests/ > "$O/tests_mpi.log" 2>&1
echo "mpi gpu tests rc=$?"; tail -2 "$O/tests_mpi.log"
timeout 240 python3 benchmarks/crossover.py --device gpu --n 4096 8192 16384 24576 32768 \
    --reps 3 --json "$O/crossover.jsonl"
