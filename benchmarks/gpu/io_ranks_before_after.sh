#!/usr/bin/env bash
# The GPU machine's CPU cores (16), repository root, carry .whl and .base (a worktree of the
# commit before): .npy read/write rates on 8 and 16 CPU ranks (benchmarks/io_rate.py, n =
# 16384, nb 256) of both trees, alternating. JSON lines: $OUT/io-rate-{before,after}.jsonl.
. benchmarks/gpu/device_env.sh
O=${OUT:-/tmp/out}; mkdir -p "$O"
for r in 8 16; do
  for tree in .base .; do
    name=$([ $tree = . ] && echo after || echo before)
    echo "== $name, $r ranks"
    (cd $tree && PYTHONPATH=$PWD:/tmp/site timeout 150 $M -n $r --oversubscribe \
        -x OPENBLAS_NUM_THREADS=1 python3 benchmarks/io_rate.py --n 16384 --nb 256 --reps 3 \
        --dir /tmp --json "$O/io-rate-$name.jsonl")
  done
done
echo "${SECONDS} s"
