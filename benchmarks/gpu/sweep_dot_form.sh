#!/usr/bin/env bash
# One GPU, repository root: the inverted-diagonal-block sweeps with op = T reading t's block
# column (this checkout) against t's block row (tree in .base), alternating: the sweep probe
# at three sizes, then mixed solves with the certificate beside the float64 solve (this
# checkout also has the estimator's host fixes), then the GPU tests of the sweeps' users.
#
#   bash benchmarks/gpu/sweep_dot_form.sh     (records to $OUT/sweep-dot-form.jsonl, ...)
. benchmarks/gpu/device_env.sh
O=${OUT:-/tmp/out}; mkdir -p "$O"
ROOT=$PWD
for n in 65536 32768 16384; do
    for t in before after; do
        d=.; [ $t = before ] && d=.base
        echo "== $t"
        (cd benchmarks/gpu && PYTHONPATH=$ROOT/$d:/tmp/site timeout 100 python3 \
            sweep_gemv_probe.py --n $n --nb 1024 2048 4096 --reps 5 \
            --json "$O/sweep-dot-form-$t.jsonl" 2>&1 | grep -v "inverses\|trsm")
    done
done
for t in before after; do
    d=.; [ $t = before ] && d=.base
    (cd benchmarks/gpu && PYTHONPATH=$ROOT/$d:/tmp/site timeout 200 python3 \
        mixed_rcond_cost.py --tree $t --json "$O/mixed-after-sweep.jsonl" \
        --n 65536 --nb 1024 --reps 1 --cond 1e2 1e4 --method cholesky) 2>&1 | grep -v Warning
done
for t in before after; do
    d=.; [ $t = before ] && d=.base
    (cd benchmarks/gpu && PYTHONPATH=$ROOT/$d:/tmp/site timeout 150 python3 \
        mixed_rcond_cost.py --tree $t --json "$O/mixed-after-sweep.jsonl" \
        --n 32768 --nb 1024 --reps 2 --cond 1e2) 2>&1 | grep -v Warning
done
timeout 250 python3 -m pytest -q --color=no -p no:cacheprovider -m gpu --require-gpu \
    --timeout 150 tests/test_inverse_solves.py tests/test_mixed.py tests/test_lu.py \
    tests/test_cholesky.py > "$O/gpu_tests.log" 2>&1
echo "gpu tests rc=$?"; tail -2 "$O/gpu_tests.log"
