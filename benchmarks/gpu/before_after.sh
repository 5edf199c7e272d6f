#!/usr/bin/env bash
# One GPU machine, repository root, with the previous tree unpacked in .base/ (carried):
# the GPU tests of this tree, then Cholesky, LU (partial, tournament) and RBT factorization
# benchmarks of both trees in the same call, alternating, JSON lines under $OUT.
. benchmarks/gpu/device_env.sh
O=${OUT:-/tmp/out}; mkdir -p "$O"
timeout 420 $M -n 1 python3 -m pytest --with-mpi -m mpi -q --color=no -p no:cacheprovider \
    --timeout 200 -k "gpu or tf32" tests/ > "$O/tests.log" 2>&1
echo "tests rc=$?"; tail -3 "$O/tests.log"
ROOT=$PWD
for rep in 1 2; do
  for tree in .base .; do
    name=$([ "$tree" = . ] && echo after || echo before)
    cd "$ROOT/$tree"
    export PYTHONPATH=$PWD:/tmp/site
    timeout 200 $M -n 1 python3 -m distla bench cholesky --n 32768 --nb 1024 --device gpu \
        --reps 3 --no-reference --json "$O/bench_$name.jsonl" 2>&1 | grep distla
    timeout 300 $M -n 1 python3 -m distla bench lu --n 32768 --nb 1024 --device gpu \
        --pivoting partial tournament --reps 2 --no-ref --no-check --json "$O/bench_$name.jsonl" \
        2>&1 | grep distla
    timeout 200 $M -n 1 python3 -m distla bench rbt --n 16384 --device gpu --reps 3 \
        --no-reference --json "$O/bench_$name.jsonl" 2>&1 | grep distla
  done
done
cd "$ROOT"
