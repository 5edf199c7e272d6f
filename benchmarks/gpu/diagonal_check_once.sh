#!/usr/bin/env bash
# One GPU, repository root: a mixed-precision correction's pieces and the mixed Cholesky
# solves with the certificate, for the tree in .base (before: every triangular solve reads
# the factor's diagonal for its zero check, with index arrays copied to the device each
# time) and this checkout (after: once per factor inside inverted_diagonal_solves, the
# index arrays cached on the device), alternating; then the GPU tests of the solves.
#
#   bash benchmarks/gpu/diagonal_check_once.sh     (records to $OUT/diagonal-check-once.jsonl)
. benchmarks/gpu/device_env.sh
O=${OUT:-/tmp/out}; mkdir -p "$O"
REC="$O/diagonal-check-once.jsonl"
ROOT=$PWD
for t in before after; do
    d=.; [ $t = before ] && d=.base
    echo "== $t"
    (cd benchmarks/gpu && PYTHONPATH=$ROOT/$d:/tmp/site timeout 100 python3 \
        correction_profile.py --n 65536 --json "$O/correction-$t.jsonl" 2>&1 | grep -v Warn)
done
for t in before after; do
    d=.; [ $t = before ] && d=.base
    (cd benchmarks/gpu && PYTHONPATH=$ROOT/$d:/tmp/site timeout 200 python3 \
        mixed_rcond_cost.py --tree $t --json "$REC" --n 65536 --nb 1024 --reps 1 \
        --cond 1e2 1e4 --method cholesky) 2>&1 | grep -v Warning
done
for t in before after; do
    d=.; [ $t = before ] && d=.base
    (cd benchmarks/gpu && PYTHONPATH=$ROOT/$d:/tmp/site timeout 120 python3 \
        mixed_rcond_cost.py --tree $t --json "$REC" --n 32768 --nb 1024 --reps 2 \
        --cond 1e2) 2>&1 | grep -v Warning
done
timeout 250 python3 -m pytest -q --color=no -p no:cacheprovider -m gpu --require-gpu \
    --timeout 150 tests/test_inverse_solves.py tests/test_pblas.py tests/test_mixed.py \
    tests/test_lu.py tests/test_cholesky.py tests/test_validate.py > "$O/gpu_tests.log" 2>&1
echo "gpu tests rc=$?"; tail -2 "$O/gpu_tests.log"
