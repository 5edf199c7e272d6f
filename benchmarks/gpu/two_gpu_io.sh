#!/usr/bin/env bash
# Two GPUs, repository root, carry .whl and .base (a worktree of the commit before):
#  1. GPU tests: the serial gpu suite, and the mpi+gpu suite on 2 ranks;
#  2. .npy write/read rates on 8 and 16 CPU ranks of both trees, alternating
#     (benchmarks/gpu/io_ranks_before_after.sh);
#  3. the whole job on 2 GPU ranks (distla bench job, n = 32768, nb 1024, --repeat 2).
# JSON lines: $OUT/io-rate-{before,after}.jsonl, $OUT/job-2gpu.jsonl.
. benchmarks/gpu/device_env.sh
O=${OUT:-/tmp/out}; mkdir -p "$O"
bash benchmarks/gpu/gpu_tests.sh 2
bash benchmarks/gpu/io_ranks_before_after.sh
D=/tmp/distla-job; mkdir -p $D
timeout 150 $M -n 2 python3 -m distla bench job --device gpu --n 32768 --nb 1024 --dir $D \
    --repeat 2 --json "$O/job-2gpu.jsonl" > "$O/job.log" 2>&1; echo "job rc=$?"
python3 - "$O/job-2gpu.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r["phase"] in ("generate", "read", "solve", "total"):
        print(f"{r['impl']:7s} {str(r.get('cache')):6s} {r['phase']:8s} {r['seconds']:.3f}")
PY
echo "${SECONDS} s"
