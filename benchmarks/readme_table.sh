#!/usr/bin/env bash
# Reproduces the README's "Measured performance" table on a GPU machine, from the repository
# root (every row's reference is measured in the same run, as the benchmarks do):
#
#   bash benchmarks/readme_table.sh [1gpu] [2gpu] [genp] [tlr] [cpu] [job] [mixed]
#                                   (default: 1gpu 2gpu genp tlr)
#
#   1gpu  one GPU:  Cholesky and LU (partial pivoting) n=32768 beside cuSOLVER; Cholesky n=65536
#   2gpu  two GPUs: matmul n=32768 (1x2) beside CuPy on one GPU; Cholesky 2x1, LU partial and
#         CALU on 1x2 and 2x1, n=65536
#   genp  two GPUs (2x1), n=65536: GENP float64 / float32 / float32 with 3xTF32 updates; RBT
#         double and mixed beside distla's GEPP solve
#   tlr   TLR Cholesky n=65536 on one GPU (tile 1024 and 2048) beside dense Cholesky, and
#         n=262144 on two GPUs (2x1; dense does not fit)
#   cpu   CPU ranks: Cholesky n=4096 nb=256 on 1x2 ranks, one BLAS thread each, beside SciPy
#   job   one GPU: the whole job (generate, read, rhs, solve, check, write) n=32768 nb=1024,
#         a fresh process (--cold) and in-process repetitions, beside each phase's floor
#   mixed one GPU, n=32768: Cholesky and LU, float64 vs mixed (fp16, bf16) at cond 1e2, 1e6,
#         1e10, beside cuSOLVER
#
# Needs one GPU per rank (2 GPUs for 2gpu/genp/tlr: device kind nvidia-h200-x2), CuPy, mpi4py
# and Open MPI's mpirun (benchmarks/gpu/device_env.sh sets it up). Each part's timeouts add
# up to less than 10 minutes, so one part fits one call of a 10-minute device slot.
#
# Writes the benchmarks' JSON records, each stamped with "command", "device_name" and "date",
# to $OUT/<date>-readme-table-<parts>.jsonl (OUT defaults to benchmarks/results), the raw
# output of each command beside it in $OUT/readme-table-logs/, and finally prints the records
# as a table (python benchmarks/records_table.py FILE). Copy the file to benchmarks/results/
# and cite it in the README.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. benchmarks/gpu/device_env.sh
O=${OUT:-benchmarks/results}
mkdir -p "$O/readme-table-logs"
DATE=$(date -u +%F)
PARTS=${*:-1gpu 2gpu genp tlr}
REC="$O/$DATE-readme-table-$(echo $PARTS | tr ' ' -).jsonl"
DEV=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | sort | uniq -c |
      sed 's/^ *//' | paste -sd, -)
STATUS=0

# run LIMIT_S RANKS ARGS...: one benchmark call, its records stamped and appended to $REC
run() {
    local limit=$1 ranks=$2; shift 2
    local tmp log cmd rc
    tmp=$(mktemp "${TMPDIR:-/tmp}/readme-table.XXXXXX.jsonl")
    log="$O/readme-table-logs/$(echo "$*" | tr -c 'A-Za-z0-9.=-' _ | cut -c1-120).txt"
    cmd="mpirun -n $ranks python3 -m distla.bench $*"
    echo "== $cmd"
    timeout "$limit" $M -n "$ranks" python3 -m distla.bench "$@" --json "$tmp" > "$log" 2>&1
    rc=$?
    tail -4 "$log"
    if ((rc != 0)); then echo "!! exit $rc (log: $log)"; STATUS=1; fi
    python3 - "$tmp" "$REC" "$cmd" "${DEV:-unknown}" "$DATE" <<'PY'
import json, sys
src, dst, cmd, dev, date = sys.argv[1:6]
with open(src) as f, open(dst, "a") as out:
    for line in f:
        if line.strip():
            rec = json.loads(line)
            rec.update(command=cmd, device_name=dev, date=date)
            out.write(json.dumps(rec) + "\n")
PY
    rm -f "$tmp"
}

G="--device gpu"
for part in $PARTS; do
    case $part in
    1gpu)
        run 150 1 cholesky $G --n 32768 --nb 1024 --reps 3
        run 150 1 lu $G --n 32768 --nb 1024 --reps 3 --pivoting partial
        run 150 1 cholesky $G --n 65536 --nb 1024 --reps 1 --no-check --no-reference
        ;;
    2gpu)
        run 120 2 matmul $G --n 32768 --nb 2048 --grid 1x2 --reps 3
        run 120 2 cholesky $G --n 65536 --nb 1024 --grid 2x1 --reps 2 --no-check --no-reference
        run 150 2 lu $G --n 65536 --nb 1024 --grid 1x2 --reps 2 --no-ref \
            --pivoting partial tournament
        run 150 2 lu $G --n 65536 --nb 1024 --grid 2x1 --reps 2 --no-ref \
            --pivoting partial tournament
        ;;
    genp)
        run 110 2 lu $G --n 65536 --nb 1024 --grid 2x1 --reps 1 --no-ref --no-check \
            --pivoting none
        run 110 2 lu $G --n 65536 --nb 1024 --grid 2x1 --reps 1 --no-ref --no-check \
            --pivoting none --dtype float32
        run 110 2 lu $G --n 65536 --nb 1024 --grid 2x1 --reps 1 --no-ref --no-check \
            --pivoting none --dtype float32 --gemm tf32x3
        run 220 2 rbt $G --n 65536 --nb 1024 --grid 2x1 --reps 1 --no-ref --precision both
        ;;
    tlr)
        run 180 1 tlr $G --tol 1e-8 --n 65536 --tile 1024 --reps 2
        run 180 1 tlr $G --tol 1e-8 --n 65536 --tile 2048 --reps 2
        run 220 2 tlr $G --tol 1e-8 --n 262144 --tile 2048 --grid 2x1 --no-dense
        ;;
    cpu)
        OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 \
            run 300 2 cholesky --device cpu --n 4096 --nb 256 --grid 1x2 --reps 3
        ;;
    job)
        run 500 1 job $G --n 32768 --nb 1024 --dir /tmp/distla-job --cold --repeat 2
        ;;
    mixed)
        run 300 1 mixed $G --n 32768 --nb 1024 --reps 1 --method cholesky gepp \
            --cond 1e2 1e6 1e10 --factor-dtype fp16 bf16
        ;;
    *)
        echo "unknown part '$part' (1gpu, 2gpu, genp, tlr, cpu, job, mixed)" >&2
        exit 2
        ;;
    esac
done

echo
echo "records: $REC"
python3 benchmarks/records_table.py "$REC"
exit $STATUS
