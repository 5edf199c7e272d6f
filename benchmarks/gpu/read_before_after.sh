#!/usr/bin/env bash
# One GPU, repository root, carry .whl and .base (a worktree of the commit before): the
# one-shot job's read phase before/after reading .npy slabs through pinned buffers whose copies
# to the device overlap the next slab's read (Backend.staging).
#  1. GPU tests of the touched modules (serial and one MPI rank);
#  2. 'distla generate --n 32768' on 8 CPU ranks (the job's file);
#  3. 'distla bench job --repeat 2' of both trees, alternating twice;
#  4. benchmarks/io_rate.py on GPU ranks with slabs of 16 / 64 (default) / 256 MiB.
# JSON lines: $OUT/job-{before,after}.jsonl, $OUT/io-rate-gpu.jsonl.
. benchmarks/gpu/device_env.sh
O=${OUT:-/tmp/out}; mkdir -p "$O"
timeout 120 python3 -m pytest -q --color=no -p no:cacheprovider -m gpu --require-gpu \
    --timeout 100 tests/test_gpu_core.py tests/test_io.py 2>&1 | tail -n 1
timeout 120 $M -n 1 python3 -m pytest --with-mpi -q --color=no -p no:cacheprovider \
    -m "mpi and gpu" --require-gpu --timeout 100 tests/test_io.py tests/test_gpu_core.py \
    tests/test_h5io.py 2>&1 | tail -n 1
D=/tmp/distla-job; mkdir -p $D
timeout 150 $M -n 8 env OPENBLAS_NUM_THREADS=1 python3 -m distla generate --kind spd \
    --n 32768 --out $D/distla-bench-job-spd-n32768-float64.npy -q
for rep in 1 2; do
  for tree in .base .; do
    name=$([ $tree = . ] && echo after || echo before)
    (cd $tree && timeout 120 $M -n 1 python3 -m distla bench job --device gpu --n 32768 \
        --nb 1024 --dir $D --repeat 2 --json "$O/job-$name.jsonl" > /dev/null 2>&1)
    echo "$name rc=$?"
  done
done
python3 - "$O" <<'PY'
import json, sys
for name in ("before", "after"):
    for line in open(f"{sys.argv[1]}/job-{name}.jsonl"):
        r = json.loads(line)
        if r["phase"] in ("read", "solve", "total"):
            print(f"{name:7s} {r['impl']:7s} {str(r.get('cache')):6s} {r['phase']:6s} "
                  f"{r['seconds']:.3f}")
PY
timeout 200 $M -n 1 python3 benchmarks/io_rate.py --n 32768 --nb 1024 --device gpu --reps 3 \
    --slab-mib 16 256 --dir /tmp --json "$O/io-rate-gpu.jsonl"
echo "$SECONDS s"
