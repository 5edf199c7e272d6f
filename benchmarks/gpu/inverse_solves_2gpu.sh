#!/usr/bin/env bash
# Two GPUs, repository root, the previous tree in .base/ (carried): the GPU tests on 2 ranks,
# then the mixed-precision solves (cond 1e2, float64 beside them) of both trees on a 1 x 2
# grid, alternating. Usage: bash benchmarks/gpu/inverse_solves_2gpu.sh [N]
. benchmarks/gpu/device_env.sh
N=${1:-32768}
O=${OUT:-/tmp/out}; mkdir -p "$O"
bash benchmarks/gpu/gpu_tests.sh 2 2>&1 | tail -6
ROOT=$PWD
for rep in 1 2; do
  for tree in .base .; do
    name=$([ "$tree" = . ] && echo after || echo before)
    cd "$ROOT/$tree"
    export PYTHONPATH=$PWD:/tmp/site
    echo "== $name (rep $rep)"
    timeout 240 $M -n 2 python3 "$ROOT/benchmarks/gpu/mixed_nb_probe.py" --n "$N" --nb 1024 \
        --method cholesky gepp --factor-dtype fp16 --reps 2 --json "$O/mixed2_${name}_$rep.jsonl" \
        2>&1 | grep "^nb"
  done
done
cd "$ROOT"
