#!/usr/bin/env bash
# One GPU, repository root, .base/ a worktree of the previous commit and .whl/ pytest-mpi:
#   bash benchmarks/gpu/checks_job_before_after.sh
# GPU tests of the checks and kernels, then for the old (.base) and new tree in one call:
# benchmarks/checks_cost.py and `distla bench job` (warm, 3 repetitions) at n=32768 nb=1024
# on a file made by `distla generate` on 8 CPU ranks. JSON records under $OUT.
. benchmarks/gpu/device_env.sh
B=$PWD/.base; D=/tmp/distla-job; mkdir -p $D
T="tests/test_gpu_core.py tests/test_validate.py tests/test_pblas.py tests/test_mixed.py"
timeout 150 python3 -m pytest -q --color=no -p no:cacheprovider -m gpu --require-gpu --timeout 120 $T 2>&1 | tail -1
timeout 200 $M -n 1 python3 -m pytest --with-mpi -q --color=no -p no:cacheprovider -m "mpi and gpu" --require-gpu --timeout 150 $T 2>&1 | tail -1
timeout 120 $M -n 8 env OPENBLAS_NUM_THREADS=1 python3 -m distla generate --kind spd --n 32768 --out $D/distla-bench-job-spd-n32768-float64.npy > /dev/null 2>&1; echo gen rc=$?
for v in before after; do
  if [ $v = before ]; then P=$B; else P=$PWD; fi
  echo "== $v"
  (cd $P && PYTHONPATH=$P:/tmp/site timeout 120 $M -x PYTHONPATH -n 1 python3 $P/benchmarks/checks_cost.py --device gpu --n 32768 --nb 1024 --reps 3 --json $OUT/checks-$v.jsonl 2>&1 | tail -12)
  (cd $P && PYTHONPATH=$P:/tmp/site timeout 150 $M -x PYTHONPATH -n 1 python3 -m distla bench job --device gpu --n 32768 --nb 1024 --dir $D --repeat 3 --json $OUT/job-$v.jsonl 2>&1 | tail -14)
done
