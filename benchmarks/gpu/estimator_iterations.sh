#!/usr/bin/env bash
# One GPU, repository root, carry .base and .whl: the condition estimator with LAPACK's five
# iterations at most (this checkout) against two (tree in .base), alternating: the float64
# solves with their estimate and the mixed solves with their certificate (`distla bench mixed
# --check-rcond`, fp16 factors), then the GPU tests of this checkout on 2 ranks and on 1.
#
#   N=32768 bash benchmarks/gpu/estimator_iterations.sh   (records: $OUT/estimator-iterations.jsonl)
. benchmarks/gpu/device_env.sh
O=${OUT:-/tmp/out}; mkdir -p "$O"
REC="$O/estimator-iterations.jsonl"
ROOT=$PWD
N=${N:-32768}
nvidia-smi --query-gpu=name --format=csv,noheader
for t in before after before after; do
  d=.; [ $t = before ] && d=.base
  tmp=$(mktemp /tmp/est.XXXXXX.jsonl)
  cmd="mpirun -n 1 python3 -m distla.bench mixed --device gpu --n $N --nb 1024 --reps 1 --method cholesky gepp --cond 1e2 1e6 --factor-dtype fp16 --check-rcond --no-ref --json OUT"
  (cd benchmarks/gpu && PYTHONPATH=$ROOT/$d:/tmp/site timeout 200 $M -n 1 python3 -m \
      distla.bench mixed --device gpu --n $N --nb 1024 --reps 1 --method cholesky gepp \
      --cond 1e2 1e6 --factor-dtype fp16 --check-rcond --no-ref --json "$tmp") 2>&1 \
      | grep "^mixed\|^double\|float64" | head -8
  echo "($t)"
  python3 "$ROOT/benchmarks/gpu/tag_records.py" "$tmp" "$t" "$cmd" >> "$REC"
done
bash benchmarks/gpu/gpu_tests.sh 2
