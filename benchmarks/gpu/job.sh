#!/usr/bin/env bash
# One GPU machine (nvidia-h200 or nvidia-h100-x1), repository root, one device call:
#   bash benchmarks/gpu/job.sh
# 1. 'distla generate --n 32768' on 8 CPU ranks, timed, beside one np.save of the same size
#    (the file is the one the job below reuses);
# 2. the whole job with an EMPTY kernel cache: 'distla bench job' on one GPU, n=32768 nb=1024,
#    --cold (a fresh process) then 2 in-process repetitions (first, warm), each phase beside
#    its floor (sequential np.load / np.save, the factorization alone, one GEMV);
# 3. 'distla warmup', then the same job again (the one-shot cost after warmup);
# 4. the block-size table's evidence: Cholesky on one GPU at n=16384 and 32768, nb 512/1024;
# 5. the mpi-marked tests of the touched modules on one GPU rank (pblas/checks, h5io).
# Records (JSON lines, each with its command) go to $OUT/gpu-job.jsonl; logs beside them.
. benchmarks/gpu/device_env.sh
O=${OUT:-/tmp/out}; mkdir -p "$O"
R="$O/gpu-job.jsonl"
D=/tmp/distla-job; mkdir -p "$D"
now() { date +%s.%N; }
DEV=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)

# stamp FILE CMD: append FILE's records to $R with the command and device name
stamp() {
    python3 - "$1" "$R" "$2" "${DEV:-unknown}" <<'PY'
import json, sys
src, dst, cmd, dev = sys.argv[1:5]
with open(src) as f, open(dst, "a") as out:
    for line in f:
        if line.strip():
            rec = json.loads(line)
            rec.update(command=cmd, device_name=dev)
            out.write(json.dumps(rec) + "\n")
PY
    rm -f "$1"
}

echo "== generate n=32768 on 8 CPU ranks"
rm -f "$D"/distla-bench-job-spd-n32768-float64.npy
t0=$(now)
timeout 150 $M -n 8 env OPENBLAS_NUM_THREADS=1 python3 -m distla generate --kind spd \
    --n 32768 --out "$D"/distla-bench-job-spd-n32768-float64.npy > "$O/generate.log" 2>&1
rc=$?; tg=$(python3 -c "print(round($(now) - $t0, 2))")
echo "generate rc=$rc: $tg s"
ts=$(python3 -c "
import numpy as np, time
a = np.full((32768, 32768), 1.0)
t = time.perf_counter()
with open('/tmp/G2.npy', 'wb') as f:
    np.save(f, a)
print(time.perf_counter() - t)")
rm -f /tmp/G2.npy
echo "np.save of the same size, one process: $ts s"
python3 - "$R" "$tg" "$ts" "${DEV:-unknown}" <<'PY'
import json, sys
dst, tg, ts, dev = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
base = {"bench": "generate", "n": 32768, "device": "cpu (GPU machine)", "tflops": None,
        "device_name": dev, "phase": "generate"}
with open(dst, "a") as f:
    f.write(json.dumps({**base, "impl": "distla", "ranks": 8, "seconds": tg, "command":
        "mpirun -n 8 python3 -m distla generate --kind spd --n 32768 --out A.npy "
        "(whole command, wall)"}) + "\n")
    f.write(json.dumps({**base, "impl": "floor", "ranks": 1, "seconds": ts, "command":
        "np.save of a 32768 x 32768 float64 array, one process"}) + "\n")
PY

for cache in empty warmed; do
    if [ $cache = empty ]; then
        export CUPY_CACHE_DIR=/tmp/cupy-cache-empty; rm -rf "$CUPY_CACHE_DIR"
    else
        export CUPY_CACHE_DIR=/tmp/cupy-cache-warm; rm -rf "$CUPY_CACHE_DIR"
        t0=$(now)
        timeout 150 $M -x CUPY_CACHE_DIR -n 1 python3 -m distla warmup --device gpu \
            > "$O/warmup.log" 2>&1
        echo "distla warmup: rc=$? $(python3 -c "print(round($(now) - $t0, 2))") s"
        tail -3 "$O/warmup.log"
    fi
    C="distla bench job --device gpu --n 32768 --nb 1024 --dir $D --cold --repeat 2"
    echo "== $C (kernel cache: $cache)"
    # --cold launches its fresh job with DISTLA_MPIEXEC (Open MPI's singleton start-up failed
    # inside an mpirun job: "Unable to start a daemon on the local node")
    export DISTLA_MPIEXEC="$M -x CUPY_CACHE_DIR"   # the fresh job uses this cache too
    timeout 200 $M -x CUPY_CACHE_DIR -x DISTLA_MPIEXEC -n 1 python3 -m distla bench job \
        --device gpu --n 32768 \
        --nb 1024 --dir "$D" --cold --repeat 2 --json /tmp/job.jsonl > "$O/job-$cache.log" 2>&1
    echo "rc=$?"
    python3 - /tmp/job.jsonl "$cache" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    r["kernel_cache"] = sys.argv[2]
    print(f"{r['impl']:6} {r['phase']:9} {str(r.get('cache', '')):5} {r['seconds']:8.3f} s "
          f"{r.get('tflops') or 0:7.2f} TF/s {r.get('what', '')}")
PY
    python3 - /tmp/job.jsonl "$cache" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
with open(sys.argv[1], "w") as f:
    for r in rows:
        r["kernel_cache"] = sys.argv[2]
        f.write(json.dumps(r) + "\n")
PY
    stamp /tmp/job.jsonl "mpirun -n 1 python3 -m $C (CUPY_CACHE_DIR $cache)"
done

echo "== block size evidence: Cholesky on one GPU, nb 512 and 1024"
for nb in 512 1024; do
    C="distla bench cholesky --device gpu --n 16384 32768 --nb $nb --reps 3 --no-check"
    timeout 90 $M -n 1 python3 -m distla bench cholesky --device gpu --n 16384 32768 \
        --nb $nb --reps 3 --no-check --no-reference --json /tmp/nb.jsonl 2>&1 | tail -3
    stamp /tmp/nb.jsonl "mpirun -n 1 python3 -m $C --no-reference"
done
echo "== tests"
timeout 150 $M -n 1 python3 -m pytest --with-mpi -m "mpi and gpu" --require-gpu -q \
    --color=no -p no:cacheprovider --timeout 120 tests/test_pblas.py tests/test_h5io.py > "$O/tests.log" 2>&1
echo "tests rc=$?"; tail -2 "$O/tests.log"

echo "records: $R"
