#!/usr/bin/env bash
# One H200 (device kind nvidia-h200), repository root, one device call (< 9 minutes in all):
# the TLR pipeline of issue 18 on st-2D-sqexp, tile 2048, tol 1e-8.
#
#   1. distla bench tlr at n = 65536 with the dense reference (dense Cholesky time, logdet
#      relative error and solve backward error against the dense matrix);
#   2. the GP example at n = 65536: TLR maximum-likelihood fit beside the dense fit, kriging
#      at 1000 held-out points (examples/gaussian_process_mle.py);
#   3. distla bench tlr at n = 1048576 without the dense matrix, factored in place (--inplace:
#      no copy of the TLR matrix, no warm-up; the backward error is measured against a
#      rebuilt matrix once the factor is freed; kernels were compiled by 1-2).
#
# Each step runs under its own timeout; a failed step is reported and the next one runs. The
# records (JSON lines with bench, impl, n, ranks, device, seconds, tflops, command, device_name,
# date) go to $OUT/<date>-h200-tlr-million.jsonl (OUT defaults to benchmarks/results), each
# step's output to $OUT/tlr-million-logs/; a summary of the key fields is printed at the end.
# A CPU smoke test of the script itself (sizes and launcher overridable):
#   DEVICE=cpu N1=1024 N2=2048 TILE=128 PREDICT=50 LAUNCH=mpiexec OUT=/tmp/o bash <this file>
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
. benchmarks/gpu/device_env.sh
M=${LAUNCH:-$M}
DEVICE=${DEVICE:-gpu} N1=${N1:-65536} N2=${N2:-1048576} TILE=${TILE:-2048}
PREDICT=${PREDICT:-1000}
O=${OUT:-benchmarks/results}
mkdir -p "$O/tlr-million-logs"
DATE=$(date -u +%F)
REC="$O/$DATE-h200-tlr-million.jsonl"
DEV=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | sort | uniq -c |
      sed 's/^ *//' | paste -sd, -)
FAILED=()

# step NAME LIMIT_S CMD...: run CMD (which writes JSON lines to $TMPJ) under timeout, then
# stamp its records and append them to $REC
step() {
    local name=$1 limit=$2; shift 2
    local log="$O/tlr-million-logs/$name.txt" rc t0
    TMPJ=$(mktemp "${TMPDIR:-/tmp}/tlr-million.XXXXXX.jsonl")
    local cmd="$* --json $TMPJ"
    echo "== [$name, limit ${limit} s] $*"
    t0=$SECONDS
    timeout "$limit" $M -n 1 ${cmd} > "$log" 2>&1
    rc=$?
    tail -n 12 "$log"
    echo "-- $name: exit $rc after $((SECONDS - t0)) s (log: $log)"
    if ((rc != 0)); then FAILED+=("$name (exit $rc$( ((rc == 124)) && echo ', timed out'))"); fi
    python3 - "$TMPJ" "$REC" "$*" "${DEV:-unknown}" "$DATE" <<'PY'
import json, sys
src, dst, cmd, dev, date = sys.argv[1:6]
with open(src) as f, open(dst, "a") as out:
    for line in f:
        if line.strip():
            rec = json.loads(line)
            rec.setdefault("tflops", None)
            rec.update(command="mpirun -n 1 " + cmd, device_name=dev, date=date)
            out.write(json.dumps(rec) + "\n")
PY
    rm -f "$TMPJ"
}

B="python3 -m distla bench tlr --device $DEVICE --tile $TILE --tol 1e-8"
step "tlr-$N1" 110 $B --n "$N1"
step "gp-mle-$N1" 170 python3 examples/gaussian_process_mle.py --device "$DEVICE" --n "$N1" \
    --tile "$TILE" --tol 1e-8 --predict "$PREDICT"
step "tlr-$N2" 240 $B --n "$N2" --no-dense --inplace

echo "== records: $REC"
python3 - "$REC" <<'PY'
import json, sys
keys = {"tlr": ("build_s", "factor_s", "logdet_s", "solve_s", "end_to_end_s", "unknowns_per_s",
                "mem_build_gib", "mem_factor_gib", "mem_solve_gib", "rank_mean", "rank_max",
                "err_logdet", "backward", "speedup"),
        "gp_mle": ("nevals", "beta", "sigma2", "build_s", "factor_s", "solve_s",
                   "rel_diff_beta", "rel_diff_sigma2", "dense_seconds"),
        "gp_krige": ("m", "z2_mean", "coverage95", "rel_diff_mean", "rel_diff_var")}
try:
    recs = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
except OSError:
    recs = []
for r in recs:
    extra = ", ".join(f"{k} {r[k]:.4g}" if isinstance(r[k], float) else f"{k} {r[k]}"
                      for k in keys.get(r["bench"], ()) if r.get(k) is not None)
    print(f"{r['bench']} {r['impl']} n={r['n']}: {r['seconds']:.3f} s; {extra}")
PY
if ((${#FAILED[@]})); then
    echo "FAILED: ${FAILED[*]}"
    exit 1
fi
echo "all steps passed"
