#!/usr/bin/env bash
# Scaling runs on one multi-GPU host (1, 2, 4 or 8 GPUs): distla's Cholesky, LU (partial
# pivoting, CALU with binary and flat trees) and RBT on every grid shape of the GPU count,
# with cuSOLVERMp potrf/getrf (../shared/peers, carried as .peers/ with its wheel) on the same
# GPUs, grids, sizes and block size in the same call; then the model's prediction of every run.
# Run on the GPU machine from the repository root, one call per part (each fits in 10 minutes):
#
#   PART=strong N=65536  bash benchmarks/scaling.sh      strong scaling at n = 65536
#   PART=strong N=131072 bash benchmarks/scaling.sh      n = 131072 (skipped below 4 GPUs: A and
#                                                         its working copy need 2 x 137 GB)
#   PART=weak            bash benchmarks/scaling.sh      ~40 GB of A per GPU (n = sqrt(5e9 G); WEAK_GB
#                                                         sets the GB, default min(40, 0.3 x memory))
#   PART=tlr N="1048576 2097152" bash benchmarks/scaling.sh   TLR build + factor + logdet + solve
#   PART=peers N=65536   bash benchmarks/scaling.sh      cuSOLVERMp alone (if a distla part timed out)
#
# A call is limited to 10 minutes: estimate a part first with the model, e.g.
#   python3 -m distla model -m h200-nvlink --algo cholesky lu calu rbt --n 131072 --ranks 4 --shapes all
# (x3 for the warm-up and two repetitions, plus matrix generation), and split big parts with
# GRIDS="2x2" or ALGOS="cholesky lu" (n = 131072 and the weak part on 4-8 GPUs need it).
#
# Env: G (GPUs to use, default all visible), GRIDS (default every shape of G), NB (default
# 1024), ALGOS (default "cholesky lu calu calu-flat rbt"), REPS (default 2), PEERS=0 (no
# cuSOLVERMp; on one GPU it also times single-GPU cuSOLVER), OUT (output
# folder; $OUT on the device machine). Records: $OUT/scaling.jsonl (distla, bench records plus
# "command", "part", "gpus"), $OUT/peers.jsonl (cuSOLVERMp), $OUT/model.txt (predicted vs
# measured, h200-nvlink profile). The README table: python benchmarks/scaling_table.py FILES.
# JAXMg (JAX + cuSOLVERMp) is not run: the GPU machines reach no package index and its JAX
# CUDA wheels exceed what a call can carry.
# Inner time limits use timeout --foreground: a plain timeout makes its own process group, so
# an outer `timeout N bash scaling.sh` would end the script but leave a run's ranks holding
# the GPUs (seen once: the next runs failed for want of memory).
set -u
. benchmarks/gpu/device_env.sh
O=${OUT:-/tmp/out}; mkdir -p "$O"
NG=$(nvidia-smi -L | wc -l); G=${G:-$NG}
GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1 | sed 's/NVIDIA //')
GPU_GB=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -n 1)
GPU_GB=$((GPU_GB / 1024))   # MiB -> GiB (H200 ~140, H100 ~79)
WEAK_GB=${WEAK_GB:-$(python3 -c "print(min(40, int(0.3 * $GPU_GB)))")}
PART=${PART:-strong}; NB=${NB:-1024}; REPS=${REPS:-2}
ALGOS=${ALGOS:-"cholesky lu calu calu-flat rbt"}
GRIDS=${GRIDS:-$(python3 -c "from distla.testing import grid_shapes; print(' '.join(f'{p}x{q}' for p, q in grid_shapes($G)))")}
case $PART in
  weak) N=${N:-$(python3 -c "import math; print(int(math.sqrt($WEAK_GB * 1e9 / 8 * $G)) // $NB * $NB)")} ;;
  tlr) N=${N:-1048576} ;;
  *) N=${N:-65536} ;;
esac
for n in $N; do   # A and the timed copy must fit: 2 * 8 n^2 / G <= 85% of one GPU's memory
  if [ "$PART" != tlr ] && [ "$(python3 -c "print(int(16 * $n * $n / $G > 0.85e9 * $GPU_GB))")" = 1 ]; then
    echo "skip n=$n on $G GPUs ($GPU_GB GiB each): does not fit"; exit 0
  fi
done
echo "part=$PART gpus=$G ($GPU_NAME, $GPU_GB GiB) grids=$GRIDS n=$N nb=$NB" | tee -a "$O/log.txt"
note() {  # tag the records appended to $1 since line $2 with the command
  python3 - "$1" "$2" "$3" "$PART" "$G" "gpu $GPU_NAME" <<'PY'
import json, sys
path, start, cmd, part, g, dev = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5]), sys.argv[6]
lines = open(path).read().splitlines()
out = lines[:start] + [json.dumps({**json.loads(l), "command": cmd, "part": part, "gpus": g,
                                   "device": dev}) for l in lines[start:]]
open(path, "w").write("\n".join(out) + "\n")
PY
}
J="$O/scaling.jsonl"; touch "$J"
run() {   # run TIMEOUT bench-args...
  local t=$1; shift
  local start; start=$(wc -l < "$J")
  local cmd="$M -n $G python3 -m distla bench $* --device gpu --nb $NB --n $N --reps $REPS --json $J"
  timeout --foreground "$t" $cmd -q 2>&1 | tail -3
  note "$J" "$start" "$cmd"
}
if [ "$PART" = tlr ]; then
  for grid in $GRIDS; do
    start=$(wc -l < "$J")
    cmd="$M -n $G python3 -m distla bench tlr --device gpu --grid $grid --n $N --tile $NB --tol 1e-8 --no-dense --json $J"
    timeout --foreground 280 $cmd 2>&1 | tail -4; note "$J" "$start" "$cmd"
  done
  exit 0
fi
if [ "$PART" != peers ]; then
  for grid in $GRIDS; do
    for a in $ALGOS; do
      case $a in
        cholesky) run 150 cholesky --grid "$grid" --no-reference --no-check ;;
        lu) run 150 lu --grid "$grid" --no-ref --no-check --pivoting partial ;;
        calu) run 150 lu --grid "$grid" --no-ref --no-check --pivoting tournament --tree binary ;;
        calu-flat) run 150 lu --grid "$grid" --no-ref --no-check --pivoting tournament --tree flat ;;
        rbt) run 150 rbt --grid "$grid" --no-ref --no-gepp ;;
      esac
    done
  done
fi
if [ "${PEERS:-1}" = 0 ]; then
  echo "PEERS=0: cuSOLVERMp skipped"
elif [ -d .peers/whl ]; then   # cuSOLVERMp on the same GPUs, grids, sizes and nb (+ cuSOLVER on 1)
  python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site \
      .peers/whl/*.whl >/dev/null 2>&1
  export CUSOLVERMP_LIB=/tmp/site/nvidia/cu13/lib/libcusolverMp.so.0
  timeout --foreground 240 $M -x CUSOLVERMP_LIB -n "$G" python3 .peers/cusolvermp_bench.py --n "${N// /,}" \
      --nb "$NB" --grid "${GRIDS// /,}" --ops potrf,getrf --reps "$REPS" $([ "$G" = 1 ] && echo --ref) \
      --json "$O/peers.jsonl" 2>&1 | grep -E "^(RESULT|FAIL|SKIP)" | cut -c1-160
else
  echo "no .peers/whl: cuSOLVERMp skipped (see ../shared/peers/README.md)"
fi
python3 -m distla model --machine h200-nvlink --validate "$J" | tee "$O/model.txt" | tail -3
