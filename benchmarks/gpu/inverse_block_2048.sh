#!/usr/bin/env bash
# One GPU, repository root: mixed-precision solves (with their certificate) and the float64
# solves beside them at n = 65536, for the tree in .base (before: the inverted diagonal
# blocks of the refinement's and the estimate's solves are the matrix's nb = 1024 blocks)
# and this checkout (after: 2048 wide from n = 49152 on), alternating; then the GPU tests.
#
#   bash benchmarks/gpu/inverse_block_2048.sh     (records to $OUT/inverse-block-2048.jsonl)
. benchmarks/gpu/device_env.sh
O=${OUT:-/tmp/out}; mkdir -p "$O"
REC="$O/inverse-block-2048.jsonl"
ROOT=$PWD
for t in before after; do
    d=.; [ $t = before ] && d=.base
    (cd benchmarks/gpu && PYTHONPATH=$ROOT/$d:/tmp/site timeout 220 python3 \
        mixed_rcond_cost.py --tree $t --json "$REC" --n 65536 --nb 1024 --reps 1 \
        --cond 1e2 1e4 --method cholesky) 2>&1 | grep -v Warning
done
for t in before after; do
    d=.; [ $t = before ] && d=.base
    (cd benchmarks/gpu && PYTHONPATH=$ROOT/$d:/tmp/site timeout 150 python3 \
        mixed_rcond_cost.py --tree $t --json "$REC" --n 65536 --nb 1024 --reps 1 \
        --cond 1e2 --method gepp) 2>&1 | grep -v Warning
done
timeout 200 python3 -m pytest -q --color=no -p no:cacheprovider -m gpu --require-gpu \
    --timeout 150 tests/test_inverse_solves.py tests/test_mixed.py > "$O/gpu_tests.log" 2>&1
echo "gpu tests rc=$?"; tail -2 "$O/gpu_tests.log"
