#!/usr/bin/env bash
# Validate the performance model (distla/model, docs/model.md) on CPU ranks of this machine:
# calibrate the machine (2 ranks), then time Cholesky, LU with partial and tournament pivoting
# and the RBT solve on 1, 2 and 4 ranks (every grid shape) at small n, and compare each
# measurement with the model's prediction for the calibrated machine.
#   bash benchmarks/model_validate_cpu.sh [OUTDIR]        (venv active, repository root)
# Env: NS (sizes, default "1024 2048 4096"), RANKS (default "1 2 4"), NB (default 128),
# REPS (best of, default 3).
# Writes OUTDIR/machine.json, OUTDIR/measured.jsonl (benchmark records, each with the command
# and the load average), OUTDIR/validation.jsonl and the table on stdout.
set -u
O=${1:-/tmp/model_validate}; mkdir -p "$O"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 MPIR_CVAR_POLLS_BEFORE_YIELD=1
NS=${NS:-"1024 2048 4096"}; RANKS=${RANKS:-"1 2 4"}; NB=${NB:-128}; REPS=${REPS:-3}
MPI=${MPIEXEC:-mpiexec}
timeout 300 $MPI -n 2 python -m distla model --calibrate --out "$O/machine.json" -q || exit 1
shapes() { python -c "from distla.testing import grid_shapes; print(' '.join(f'{p}x{q}' for p, q in grid_shapes($1)))"; }
note() {   # add the command and the load average to the records appended since line $1
  python - "$O/measured.jsonl" "$1" "$2" <<'PY'
import json, os, sys
path, start, cmd = sys.argv[1], int(sys.argv[2]), sys.argv[3]
lines = open(path).read().splitlines()
load = os.getloadavg()[0]
out = lines[:start] + [json.dumps({**json.loads(l), "command": cmd, "load1": round(load, 2),
                                   "machine": "2-core development VM, shared with other jobs"})
                       for l in lines[start:]]
open(path, "w").write("\n".join(out) + "\n")
PY
}
touch "$O/measured.jsonl"
for R in $RANKS; do
  for G in $(shapes "$R"); do
    for B in "cholesky --no-reference --no-check" "lu --no-ref --no-check --pivoting partial tournament" \
             "rbt --no-ref --no-gepp"; do
      start=$(wc -l < "$O/measured.jsonl")
      CMD="$MPI -n $R python -m distla bench $B --device cpu --grid $G --nb $NB --n $NS --reps $REPS"
      timeout 900 $CMD --json "$O/measured.jsonl" -q
      note "$start" "$CMD"
    done
  done
done
timeout 300 $MPI -n 2 python -m distla model --calibrate --out "$O/machine_end.json" -q
python -m distla model --machine "$O/machine.json" --validate "$O/measured.jsonl" \
    --json "$O/validation.jsonl"
python -m distla model --machine "$O/machine_end.json" --validate "$O/measured.jsonl" | tail -1
