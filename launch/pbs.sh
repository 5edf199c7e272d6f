#!/usr/bin/env bash
# distla on a PBS Pro / OpenPBS / Torque cluster: one MPI rank per GPU.
#
#   qsub -v DISTLA_ARGS="distla solve --matrix /scratch/A.npy --device gpu" launch/pbs.sh
#   qsub -l select=2:ncpus=32:ngpus=4:mpiprocs=4 -v DISTLA_ARGS="distla bench cholesky --device gpu" launch/pbs.sh
#
# PBS passes no arguments to a job script, so the command every rank runs goes in DISTLA_ARGS.
# Edit the #PBS lines for your site (queue, account, walltime); `mpiprocs` = ranks per node =
# GPUs per node. Each rank picks its GPU from its node-local rank inside distla
# (OMPI_COMM_WORLD_LOCAL_RANK / MPI_LOCALRANKID / PMI_LOCAL_RANK), so no wrapper sets
# CUDA_VISIBLE_DEVICES. For CPU ranks set DISTLA_CPU=1 (BLAS threads = ncpus / mpiprocs).
#
# Environment: DISTLA_VENV (virtualenv to activate), MPIEXEC (default: mpiexec on PATH after
# the site setup), NCCL_* (see README).
#
#PBS -N distla
#PBS -l select=1:ncpus=32:ngpus=4:mpiprocs=4
#PBS -l walltime=00:30:00
#PBS -j oe
##PBS -q gpu
##PBS -A myproject
set -euo pipefail
cd "${PBS_O_WORKDIR:-.}"

# ---- site setup (edit) --------------------------------------------------------------------------
# module load cuda/12 openmpi/5
if [[ -n ${DISTLA_VENV:-} ]]; then
    # shellcheck disable=SC1091
    source "$DISTLA_VENV/bin/activate"
fi

[[ -n ${PBS_JOBID:-} ]] || {
    echo "pbs.sh: not inside a PBS job (PBS_JOBID unset): submit it with qsub -v DISTLA_ARGS=\"...\" launch/pbs.sh" >&2; exit 2; }
[[ -r ${PBS_NODEFILE:-} ]] || {
    echo "pbs.sh: PBS_NODEFILE ('${PBS_NODEFILE:-}') is not a readable file: this PBS job has no node list" >&2; exit 2; }
# DISTLA_ARGS is split as a shell would (quotes keep 'a path with spaces' one argument)
SPLIT='import os, shlex, sys
sys.stdout.write("".join(a + "\0" for a in shlex.split(os.environ.get("DISTLA_ARGS", ""))))'
python3 -c "$SPLIT" >/dev/null 2>&1 || {
    echo "pbs.sh: DISTLA_ARGS is not a valid command line (unbalanced quotes?)" >&2; exit 2; }
mapfile -d '' -t CMD < <(python3 -c "$SPLIT")
((${#CMD[@]})) || { echo "pbs.sh: set DISTLA_ARGS to the command to run (qsub -v DISTLA_ARGS=...)" >&2; exit 2; }
if [[ ${CMD[0]} == distla ]] && ! command -v distla >/dev/null 2>&1; then
    CMD=(python -m distla "${CMD[@]:1}")
elif [[ ${CMD[0]} == *.py ]]; then
    CMD=(python "${CMD[@]}")
fi

NODEFILE=$PBS_NODEFILE
NRANKS=$(wc -l <"$NODEFILE")   # one line per mpiproc
((NRANKS > 0)) || NRANKS=1
NNODES=$(sort -u "$NODEFILE" | wc -l)
((NNODES > 0)) || NNODES=1
PPN=$((NRANKS / NNODES))
CORES=${NCPUS:-$(nproc)}
T=$((CORES / (PPN > 0 ? PPN : 1))); ((T >= 1)) || T=1
# PBS Pro sets OMP_NUM_THREADS to the chunk's ncpus: that value (or none) means T per rank;
# another value is the user's choice and is kept
if [[ -z ${OMP_NUM_THREADS:-} || ${OMP_NUM_THREADS} == "${NCPUS:-}" ]]; then
    export OMP_NUM_THREADS=$T
fi
if [[ -n ${DISTLA_CPU:-} ]]; then
    export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-$OMP_NUM_THREADS}
    export MKL_NUM_THREADS=${MKL_NUM_THREADS:-$OMP_NUM_THREADS}
else
    export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
    export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
fi

MPIEXEC=${MPIEXEC:-mpiexec}
EXTRA=()
if "$MPIEXEC" --version 2>&1 | grep -qi "open mpi\|openrte"; then
    # Open MPI: the PBS allocation is picked up through its tm support; map ranks by slot and
    # bind each to a set of cores near it.
    EXTRA=(--map-by "ppr:${PPN}:node:PE=${T}" --bind-to core -x OMP_NUM_THREADS
           -x OPENBLAS_NUM_THREADS -x NCCL_NVLS_ENABLE -x PATH -x LD_LIBRARY_PATH)
    [[ -n ${MKL_NUM_THREADS:-} ]] && EXTRA+=(-x MKL_NUM_THREADS)
    [[ -n ${VIRTUAL_ENV:-} ]] && EXTRA+=(-x VIRTUAL_ENV)
else
    # MPICH / Cray / Intel MPI (Hydra): ranks per node from the node file.
    EXTRA=(-f "$NODEFILE" -ppn "$PPN" -genvall)
fi

echo "distla on $NNODES node(s), $NRANKS rank(s): ${CMD[*]}"
"$MPIEXEC" -n "$NRANKS" "${EXTRA[@]}" "${CMD[@]}"
