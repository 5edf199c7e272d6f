#!/usr/bin/env bash
# GPU machine, repository root, carry .whl: the serial gpu test suite, then the mpi+gpu suite
# on RANKS ranks (one GPU each; default 1). Logs: $OUT/tests.log, $OUT/tests-mpi.log.
#   bash benchmarks/gpu/gpu_tests.sh [RANKS]
. benchmarks/gpu/device_env.sh
O=${OUT:-/tmp/out}; mkdir -p "$O"
R=${1:-1}
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 150 python3 -m pytest -q --color=no -p no:cacheprovider -m gpu --require-gpu \
    --timeout 100 tests/ > "$O/tests.log" 2>&1; echo "gpu tests rc=$?"; tail -n 1 "$O/tests.log"
timeout 200 $M -n "$R" python3 -m pytest --with-mpi -q --color=no -p no:cacheprovider \
    -m "mpi and gpu" --require-gpu --timeout 150 tests/ > "$O/tests-mpi.log" 2>&1
echo "mpi gpu tests ($R ranks) rc=$?"; tail -n 1 "$O/tests-mpi.log"
