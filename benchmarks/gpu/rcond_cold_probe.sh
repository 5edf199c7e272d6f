#!/usr/bin/env bash
# One GPU machine, repository root, one device call:
#   bash benchmarks/gpu/rcond_cold_probe.sh
# 1. where the condition estimate's time goes on one GPU (profile_rcond.py, n = 16384, 32768);
# 2. 'distla generate --n 32768' on 8 CPU ranks (1 x 8 grid), timed, beside one np.save;
# 3. 'distla warmup', then two fresh one-shot jobs (distla bench job --repeat 1) under cProfile:
#    where a fresh process's seconds go, the top functions by cumulative and own time.
# Records go to $OUT/*.jsonl, the profiles to $OUT/cold-profile-*.txt.
. benchmarks/gpu/device_env.sh
O=${OUT:-/tmp/out}; mkdir -p "$O"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
echo "== profile_rcond"
timeout 200 $M -n 1 python3 benchmarks/gpu/profile_rcond.py --device gpu --n 16384 32768 \
    --json "$O/rcond-profile.jsonl" 2>&1 | grep -v "^$" | tail -40
D=/tmp/distla-job; mkdir -p "$D"; rm -f "$D"/*.npy
echo "== generate n=32768, 8 CPU ranks"
t0=$(date +%s.%N)
timeout 150 $M -n 8 env OPENBLAS_NUM_THREADS=1 python3 -m distla generate --kind spd \
    --n 32768 --out "$D"/distla-bench-job-spd-n32768-float64.npy -q 2>&1 | tail -2
echo "generate rc=$?: $(python3 -c "print(round($(date +%s.%N) - $t0, 2))") s"
python3 -c "
import numpy as np, time
a = np.full((32768, 32768), 1.0); t = time.perf_counter()
with open('/tmp/G2.npy', 'wb') as f: np.save(f, a)
print('np.save of the same size, one process:', round(time.perf_counter() - t, 2), 's')"
rm -f /tmp/G2.npy
export CUPY_CACHE_DIR=/tmp/cupy-cache-probe; rm -rf "$CUPY_CACHE_DIR"
t0=$(date +%s.%N)
timeout 150 $M -x CUPY_CACHE_DIR -n 1 python3 -m distla warmup --device gpu 2>&1 | tail -2
echo "warmup: $(python3 -c "print(round($(date +%s.%N) - $t0, 2))") s"
for i in 1 2; do
    echo "== fresh job $i under cProfile"
    t0=$(date +%s.%N)
    timeout 150 $M -x CUPY_CACHE_DIR -n 1 python3 -m cProfile -o "/tmp/cold$i.prof" -m distla \
        bench job --device gpu --n 32768 --nb 1024 --dir "$D" --repeat 1 --no-floors \
        --json "$O/cold-job-$i.jsonl" 2>&1 | tail -12
    echo "fresh job $i wall: $(python3 -c "print(round($(date +%s.%N) - $t0, 2))") s"
    python3 - "/tmp/cold$i.prof" > "$O/cold-profile-$i.txt" <<'PY'
import pstats, sys
s = pstats.Stats(sys.argv[1])
s.sort_stats("cumulative").print_stats(60)
s.sort_stats("tottime").print_stats(30)
PY
    head -c 2500 "$O/cold-profile-$i.txt" | tail -c 1800
done 2>&1 | grep -v "^$" | cut -c1-160
