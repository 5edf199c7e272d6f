#!/usr/bin/env bash
# One GPU, repository root: the condition estimator's host work (before, tree in .base: a
# stable sort of all n row maxima and a Python pass over them per estimate, every solution
# pair of the certificate refined; after, this checkout: the few largest only, one pair),
# alternating: mixed solves with and without the certificate beside the float64 solve, and
# the default solves beside their factorizations at small n; then the certificate's profile
# and the GPU tests of the estimate's users.
#
#   bash benchmarks/gpu/estimator_host.sh     (records to $OUT/estimator-host.jsonl)
. benchmarks/gpu/device_env.sh
O=${OUT:-/tmp/out}; mkdir -p "$O"
REC="$O/estimator-host.jsonl"
ROOT=$PWD
mixed() {   # mixed TREE_DIR LABEL ARGS...
    local dir=$1 label=$2; shift 2
    (cd benchmarks/gpu && PYTHONPATH=$ROOT/$dir:/tmp/site timeout 200 python3 \
        mixed_rcond_cost.py --tree "$label" --json "$REC" "$@") 2>&1 | grep -v Warning
}
audit() {   # audit TREE_DIR LABEL ARGS...
    local dir=$1 label=$2; shift 2
    echo "== $label"
    PYTHONPATH=$ROOT/$dir:/tmp/site timeout 120 python3 benchmarks/gpu/solve_overhead_audit.py \
        --json "$O/audit-$label.jsonl" "$@" 2>&1 | grep -v Warning
}
for t in before after; do
    d=.; [ $t = before ] && d=.base
    audit $d $t --n 4096 --nb 512 --reps 5 --method cholesky gepp
done
for t in before after; do
    d=.; [ $t = before ] && d=.base
    mixed $d $t --n 32768 --nb 1024 --reps 2 --cond 1e2
done
for t in before after; do
    d=.; [ $t = before ] && d=.base
    mixed $d $t --n 65536 --nb 1024 --reps 1 --cond 1e2 --method cholesky
done
(cd benchmarks/gpu && timeout 120 python3 certificate_profile.py --n 65536 --nb 1024 --reps 2 \
    --json "$O/cert-profile-after.jsonl" 2>&1 | grep -v Warn)
timeout 250 python3 -m pytest -q --color=no -p no:cacheprovider -m gpu --require-gpu \
    --timeout 150 tests/test_mixed.py tests/test_inverse_solves.py tests/test_lu.py \
    tests/test_cholesky.py > "$O/gpu_tests.log" 2>&1
echo "gpu tests rc=$?"; tail -2 "$O/gpu_tests.log"
