#!/usr/bin/env bash
# One GPU, repository root, the previous tree unpacked in .base/ (carried): the GPU tests of
# the inverted-diagonal solves and mixed solves, then mixed-precision solves (cond 1e2,
# float64 beside them) and the checks' cost (the rcond estimate) of both trees, alternating.
# JSON lines under $OUT. Usage: bash benchmarks/gpu/inverse_solves_before_after.sh [N]
. benchmarks/gpu/device_env.sh
N=${1:-32768}
O=${OUT:-/tmp/out}; mkdir -p "$O"
timeout 120 python3 benchmarks/gpu/inverse_blocks_cost.py --n "$N" --nb 1024 --json "$O/inverse_cost.jsonl"
timeout 300 python3 -m pytest -m gpu --require-gpu -q --color=no -p no:cacheprovider \
    tests/test_inverse_solves.py > "$O/tests.log" 2>&1; echo "gpu tests rc=$?"; tail -2 "$O/tests.log"
timeout 300 $M -n 1 python3 -m pytest --with-mpi -m "mpi and gpu" --require-gpu -q --color=no \
    -p no:cacheprovider tests/test_mixed.py tests/test_validate.py >> "$O/tests.log" 2>&1
echo "mpi+gpu tests rc=$?"; tail -2 "$O/tests.log"
ROOT=$PWD
for rep in 1 2; do
  for tree in .base .; do
    name=$([ "$tree" = . ] && echo after || echo before)
    cd "$ROOT/$tree"
    export PYTHONPATH=$PWD:/tmp/site
    echo "== $name (rep $rep)"
    timeout 240 python3 "$ROOT/benchmarks/gpu/mixed_nb_probe.py" --n "$N" --nb 1024 \
        --method cholesky gepp --factor-dtype fp16 tf32 --reps 2 --json "$O/mixed_$name.jsonl" \
        2>&1 | tail -6
    [ "$rep" = 1 ] && timeout 200 python3 "$ROOT/benchmarks/checks_cost.py" --device gpu --n "$N" \
        --nb 1024 --reps 3 --json "$O/checks_$name.jsonl" 2>&1 | grep -i "rcond\|no checks"
  done
done
cd "$ROOT"
