#!/usr/bin/env bash
# Run a distla program on this machine: one MPI rank per GPU (--gpu) or per core (--cpu).
#
#   launch/local.sh [-n RANKS] [--cpu | --gpu] [--dry-run] COMMAND [ARGS...]
#
# COMMAND is what every rank runs: `distla ...` (the console script, or `python -m distla`
# when it is not installed), a script `file.py ...` (run with the python next to mpiexec's
# venv), or any program. Examples:
#
#   launch/local.sh -n 4 distla solve --matrix A.npy --method cholesky
#   launch/local.sh --gpu distla bench matmul --device gpu --n 16384
#   launch/local.sh -n 4 examples/spd_solve.py --n 4000
#
# Defaults: --gpu when nvidia-smi lists GPUs (ranks = GPUs, or the entries of
# CUDA_VISIBLE_DEVICES), else --cpu (ranks = cores; CUDA_VISIBLE_DEVICES alone does not
# select --gpu). Each rank picks its GPU from its node-local rank inside distla
# (distla/device/), so CUDA_VISIBLE_DEVICES is left alone.
# With --cpu the BLAS threads per rank are cores / ranks (OPENBLAS_NUM_THREADS,
# OMP_NUM_THREADS, MKL_NUM_THREADS), unless you set them.
#
# Environment:
#   MPIEXEC         launcher to use (default: $VIRTUAL_ENV/bin/mpiexec, then the mpiexec next
#                   to `python`, then mpiexec on PATH)
#   PYTHON          python for .py scripts and `python -m distla` (default: next to mpiexec,
#                   else python3)
#   NCCL_NVLS_ENABLE  defaults to 0 here (NVLink SHARP/multicast off; see README)
set -euo pipefail

usage() { sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }

RANKS=""
MODE=""
DRY=""
while (($#)); do
    case $1 in
        -n|--ranks|-np)
            (($# >= 2)) || { echo "local.sh: $1 needs a number of ranks" >&2; usage 2; }
            RANKS=$2; shift 2 ;;
        --cpu) MODE=cpu; shift ;;
        --gpu) MODE=gpu; shift ;;
        --dry-run) DRY=1; shift ;;
        -h|--help) usage 0 ;;
        --) shift; break ;;
        -*) echo "local.sh: unknown option $1" >&2; usage 2 ;;
        *) break ;;
    esac
done
(($#)) || { echo "local.sh: no command given" >&2; usage 2; }
if [[ -n $RANKS && ! $RANKS =~ ^[1-9][0-9]*$ ]]; then
    echo "local.sh: -n needs a positive number, not '$RANKS'" >&2; exit 2
fi

# ---- the launcher: the venv's own mpiexec first (it matches the mpi4py there) ---------------
if [[ -z ${MPIEXEC:-} ]]; then
    for cand in "${VIRTUAL_ENV:+$VIRTUAL_ENV/bin/mpiexec}" \
                "$(dirname "$(command -v python 2>/dev/null || echo /nonexistent)")/mpiexec" \
                "$(command -v mpiexec 2>/dev/null || true)"; do
        if [[ -n $cand && -x $cand ]]; then MPIEXEC=$cand; break; fi
    done
fi
[[ -n ${MPIEXEC:-} ]] || { echo "local.sh: no mpiexec found (pip install 'distla[mpi]' or set MPIEXEC)" >&2; exit 2; }
BINDIR=$(dirname "$MPIEXEC")
if [[ -z ${PYTHON:-} ]]; then
    if [[ -x $BINDIR/python ]]; then PYTHON=$BINDIR/python; else PYTHON=$(command -v python3 || command -v python); fi
fi

# ---- how many ranks ---------------------------------------------------------------------------
smi_gpus() {
    if command -v nvidia-smi >/dev/null 2>&1; then
        nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true
    else
        echo 0
    fi
}
count_gpus() {
    if [[ -n ${CUDA_VISIBLE_DEVICES+x} ]]; then
        local v=${CUDA_VISIBLE_DEVICES//[[:space:]]/}
        [[ -z $v || $v == -1 ]] && { echo 0; return; }
        awk -F, '{n = 0; for (i = 1; i <= NF; i++) if ($i != "") n++; print n}' <<<"$v"
    elif command -v nvidia-smi >/dev/null 2>&1; then
        nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true
    else
        echo 0
    fi
}
CORES=$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)
NGPU=$(count_gpus)
if [[ -z $MODE ]]; then
    # (CUDA_VISIBLE_DEVICES alone is no GPU: it is often set on machines without one)
    if ((NGPU > 0)) && (($(smi_gpus) > 0)); then MODE=gpu; else MODE=cpu; fi
fi
if [[ $MODE == gpu ]] && ((NGPU == 0)); then
    echo "local.sh: --gpu but no GPU is visible (nvidia-smi / CUDA_VISIBLE_DEVICES)" >&2; exit 2
fi
if [[ -z $RANKS ]]; then
    if [[ $MODE == gpu ]]; then
        RANKS=$NGPU
    else
        RANKS=$CORES
    fi
fi

# ---- environment --------------------------------------------------------------------------------
if [[ $MODE == cpu ]]; then
    T=$((CORES / RANKS)); ((T >= 1)) || T=1
    export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-$T}
    export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$T}
    export MKL_NUM_THREADS=${MKL_NUM_THREADS:-$T}
else
    # One rank per GPU; a few CPU threads each for host-side work.
    T=$((CORES / RANKS)); ((T >= 1)) || T=1
    export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$T}
    export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
fi
EXTRA=()
if "$MPIEXEC" --version 2>&1 | grep -qi "open mpi\|open-mpi\|openrte"; then
    ((RANKS > CORES)) && EXTRA+=(--oversubscribe)
    if [[ $(id -u) == 0 ]]; then
        export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    fi
    # (Open MPI binds each of 1-2 ranks to one core: a rank's T BLAS threads would share it)
    EXTRA+=(--bind-to none)
else
    # MPICH (Hydra): with more ranks than cores, waiting ranks must yield the CPU.
    ((RANKS > CORES)) && export MPIR_CVAR_POLLS_BEFORE_YIELD=${MPIR_CVAR_POLLS_BEFORE_YIELD:-1}
fi

# ---- the command each rank runs -----------------------------------------------------------------
CMD=("$@")
case ${CMD[0]} in
    *.py) CMD=("$PYTHON" "${CMD[@]}") ;;
    distla)
        if [[ -x $BINDIR/distla ]]; then CMD[0]=$BINDIR/distla
        elif ! command -v distla >/dev/null 2>&1; then CMD=("$PYTHON" -m distla "${CMD[@]:1}"); fi ;;
esac

echo "local.sh: $RANKS rank(s), $MODE mode, $(basename "$MPIEXEC") = $MPIEXEC" >&2
if [[ -n $DRY ]]; then
    printf '%q ' "$MPIEXEC" -n "$RANKS" "${EXTRA[@]}" "${CMD[@]}"; echo
    exit 0
fi
exec "$MPIEXEC" -n "$RANKS" "${EXTRA[@]}" "${CMD[@]}"
