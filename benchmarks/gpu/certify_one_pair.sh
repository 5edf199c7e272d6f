#!/usr/bin/env bash
# One GPU, repository root: mixed-precision solves with and without check_rcond's certificate
# (benchmarks/gpu/mixed_rcond_cost.py, fp16 factors) beside the float64 solve, for the tree in
# .base (before: condition.refined_rcond refines every solution pair the estimator made) and
# this checkout (after: only the pair its estimate comes from), alternating; then the
# mixed-precision GPU tests.
#
#   bash benchmarks/gpu/certify_one_pair.sh     (records to $OUT/certify-one-pair.jsonl)
. benchmarks/gpu/device_env.sh
O=${OUT:-/tmp/out}; mkdir -p "$O"
REC="$O/certify-one-pair.jsonl"
ROOT=$PWD
run() {   # run TREE_DIR LABEL ARGS...
    local dir=$1 label=$2; shift 2
    (cd benchmarks/gpu && PYTHONPATH=$ROOT/$dir:/tmp/site timeout 240 python3 \
        mixed_rcond_cost.py --tree "$label" --json "$REC" "$@") 2>&1 | grep -v Warning
}
C="--n 32768 --nb 1024 --reps 2 --cond 1e2 1e4"
run .base before $C
run . after $C
L="--n 65536 --nb 1024 --reps 1 --cond 1e2 1e4 --method cholesky"
run .base before $L
run . after $L
timeout 200 python3 -m pytest -q --color=no -p no:cacheprovider -m gpu --require-gpu \
    --timeout 150 tests/test_mixed.py > "$O/mixed_tests.log" 2>&1
echo "gpu tests rc=$?"; tail -2 "$O/mixed_tests.log"
timeout 200 $M -n 1 python3 -m pytest --with-mpi -q --color=no -p no:cacheprovider \
    -m "mpi and gpu" --require-gpu --timeout 150 tests/test_mixed.py > "$O/mixed_mpi.log" 2>&1
echo "mpi gpu tests rc=$?"; tail -2 "$O/mixed_mpi.log"
