#!/usr/bin/env bash
# R (default 2) GPUs of one host, repository root, carry .base and .whl: mixed-precision solves beside
# the float64 ones (`distla bench mixed`, fp16 factors, Cholesky and GEPP, cond 1e2 and 1e4)
# for the tree in .base (before: the refinement's solves are distributed triangular sweeps)
# and this checkout (after: whole copies of the factors on both GPUs, distla/replicate.py),
# alternating; then the GPU tests of the code it touches on 2 ranks and on 1.
#
#   N=32768 R=2 bash benchmarks/gpu/replicated_factors.sh [bench|tests|both]
#   (records to $OUT/replicated-factors.jsonl, each with its tree and command)
. benchmarks/gpu/device_env.sh
O=${OUT:-/tmp/out}; mkdir -p "$O"
REC="$O/replicated-factors.jsonl"
ROOT=$PWD
N=${N:-32768}
R=${R:-2}
TREES=${TREES:-before after}
nvidia-smi --query-gpu=name --format=csv,noheader
if [ "${1:-both}" != tests ]; then
  for t in $TREES; do
    d=.; [ $t = before ] && d=.base
    tmp=$(mktemp /tmp/rep.XXXXXX.jsonl)
    cmd="mpirun -n $R python3 -m distla.bench mixed --device gpu --n $N --nb 1024 --reps 1 --method cholesky gepp --cond 1e2 1e4 --factor-dtype fp16 --no-ref --json OUT"
    (cd benchmarks/gpu && PYTHONPATH=$ROOT/$d:/tmp/site timeout 280 $M -n $R python3 -m \
        distla.bench mixed --device gpu --n $N --nb 1024 --reps 1 --method cholesky gepp \
        --cond 1e2 1e4 --factor-dtype fp16 --no-ref --json "$tmp") 2>&1 | grep "^mixed"
    echo "rc=$? ($t)"
    python3 "$ROOT/benchmarks/gpu/tag_records.py" "$tmp" "$t" "$cmd" >> "$REC"
  done
fi
if [ "${1:-both}" != bench ]; then
  T="tests/test_replicate.py tests/test_mixed.py"
  timeout 200 $M -n $R python3 -m pytest --with-mpi -q --color=no -p no:cacheprovider \
      -m "mpi and gpu" --require-gpu --timeout 150 $T > "$O/tests-mpi2.log" 2>&1
  echo "mpi gpu tests ($R ranks) rc=$?"; tail -n 1 "$O/tests-mpi2.log"
  timeout 120 python3 -m pytest -q --color=no -p no:cacheprovider -m gpu --require-gpu \
      --timeout 100 $T > "$O/tests1.log" 2>&1
  echo "serial gpu tests rc=$?"; tail -n 1 "$O/tests1.log"
fi
