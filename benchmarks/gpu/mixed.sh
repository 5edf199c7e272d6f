#!/usr/bin/env bash
# One GPU, repository root, in two device calls of < 10 minutes: the GPU tests of the code that
# mixed precision touches (tensor-core GEMM modes, LU/Cholesky/RBT loops, mixed solves), then
# `distla bench mixed` at n=16384 and n=32768: float64 solve, mixed solves with fp16, bf16,
# tf32 and fp32 (3xTF32) factors, and the one-GPU cuSOLVER reference (cupy) in the same run,
# over a condition sweep 1e2..1e12, for Cholesky and LU with partial pivoting.
#
#   bash benchmarks/gpu/mixed.sh tests    (< 5 minutes: the GPU tests)
#   bash benchmarks/gpu/mixed.sh bench    (< 10 minutes: records to $OUT/mixed-gpu.jsonl;
#                                          bench16 / bench32: one size only)
#   bash benchmarks/gpu/mixed.sh          (both: needs two 10-minute device calls' worth)
#
# Every record is stamped with its "command", "device_name" and "date" (copy the file to
# benchmarks/results/DATE-gpu-mixed.jsonl).
. benchmarks/gpu/device_env.sh
O=${OUT:-/tmp/out}; mkdir -p "$O"
REC="$O/mixed-gpu.jsonl"
DEV=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
PARTS=${*:-tests bench}
T="tests/test_mixed.py tests/test_lu.py tests/test_cholesky.py tests/test_rbt.py"

tests() {
    timeout 120 python3 -m pytest -q --color=no -p no:cacheprovider -m gpu --require-gpu \
        --timeout 100 $T > "$O/mixed_tests_serial.log" 2>&1
    echo "serial gpu tests rc=$?"; tail -3 "$O/mixed_tests_serial.log"
    timeout 150 $M -n 1 python3 -m pytest --with-mpi -q --color=no -p no:cacheprovider \
        -m "mpi and gpu" --require-gpu --timeout 120 $T > "$O/mixed_tests_mpi.log" 2>&1
    echo "mpi gpu tests rc=$?"; tail -3 "$O/mixed_tests_mpi.log"
}

# bench LIMIT_S ARGS...: one `distla bench mixed` call on one GPU, records stamped into $REC
bench() {
    local limit=$1; shift
    local tmp cmd
    tmp=$(mktemp /tmp/mixed.XXXXXX.jsonl)
    cmd="mpirun -n 1 python3 -m distla.bench mixed $*"
    echo "== $cmd"
    timeout "$limit" $M -n 1 python3 -m distla.bench mixed "$@" --json "$tmp" \
        > "$O/mixed_bench_$(echo "$*" | tr -c 'A-Za-z0-9.=-' _ | cut -c1-80).log" 2>&1
    echo "rc=$?"
    python3 - "$tmp" "$REC" "$cmd" "${DEV:-unknown}" <<'PY'
import datetime, json, sys
src, dst, cmd, dev = sys.argv[1:5]
date = datetime.datetime.now(datetime.timezone.utc).date().isoformat()
with open(src) as f, open(dst, "a") as out:
    for line in f:
        if line.strip():
            rec = json.loads(line)
            rec.update(command=cmd, device_name=dev, date=date)
            out.write(json.dumps(rec) + "\n")
            print(rec["impl"], rec.get("method"), rec["n"], rec.get("cond"),
                  round(rec["seconds"], 4), rec.get("speedup"), rec.get("fallback"),
                  rec.get("berr"))
PY
    rm -f "$tmp"
}
C="--cond 1e2 1e4 1e6 1e8 1e10 1e12 --method cholesky gepp"
for part in $PARTS; do
    case $part in
    tests) tests ;;
    bench16) bench 200 --device gpu --n 16384 --nb 1024 --reps 2 --factor-dtype fp16 bf16 tf32 fp32 $C ;;
    bench32) bench 330 --device gpu --n 32768 --nb 1024 --reps 1 --factor-dtype fp16 bf16 tf32 $C ;;
    bench)
        bench 200 --device gpu --n 16384 --nb 1024 --reps 2 --factor-dtype fp16 bf16 tf32 fp32 $C
        bench 330 --device gpu --n 32768 --nb 1024 --reps 1 --factor-dtype fp16 bf16 tf32 $C
        ;;
    *) echo "unknown part '$part' (tests, bench, bench16, bench32)" >&2; exit 2 ;;
    esac
done
