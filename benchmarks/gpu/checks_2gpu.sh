#!/usr/bin/env bash
# Two GPUs of one host (nvidia-h100-x2), repository root, .base/ a worktree of the previous
# commit (with .whl/ pytest-mpi), two device calls:
#   bash benchmarks/gpu/checks_2gpu.sh tests   GPU tests on one rank, then the mpi+gpu tests
#                                              of the touched modules on 2 ranks (2 GPUs)
#   bash benchmarks/gpu/checks_2gpu.sh bench   benchmarks/checks_cost.py at n=32768 nb=1024
#                                              on one GPU for the old (.base) and new tree,
#                                              then where a mixed solve spends its time on
#                                              2 GPUs (benchmarks/gpu/profile_mixed.py)
# JSON records under $OUT.
. benchmarks/gpu/device_env.sh
B=$PWD/.base
T="tests/test_gpu_core.py tests/test_validate.py tests/test_pblas.py tests/test_mixed.py tests/test_cholesky.py tests/test_lu.py"
case ${1:-tests} in
tests)
  timeout 280 python3 -m pytest -q --color=no -p no:cacheprovider -m gpu --require-gpu --timeout 200 tests/ 2>&1 | tail -3
  timeout 200 $M -n 1 python3 -m pytest --with-mpi -q --color=no -p no:cacheprovider -m "mpi and gpu" --require-gpu --timeout 150 $T 2>&1 | tail -2
  timeout 200 $M -n 2 python3 -m pytest --with-mpi -q --color=no -p no:cacheprovider -m "mpi and gpu" --require-gpu --timeout 150 $T 2>&1 | tail -2
  ;;
bench)
  for v in before after; do
    if [ $v = before ]; then P=$B; else P=$PWD; fi
    echo "== $v"
    (cd $P && PYTHONPATH=$P:/tmp/site timeout 150 $M -x PYTHONPATH -n 1 python3 $P/benchmarks/checks_cost.py --device gpu --n 32768 --nb 1024 --reps 3 --json $OUT/checks-$v.jsonl 2>&1 | tail -14)
  done
  (cd benchmarks/gpu && timeout 240 $M -n 2 python3 profile_mixed.py --n 32768 --nb 1024 --json $OUT/profile-mixed-2gpu.jsonl 2>&1 | grep -v "^ *$" | sort -u | head -60)
  ;;
esac
