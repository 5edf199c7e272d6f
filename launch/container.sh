#!/usr/bin/env bash
# Run a command in the distla container image with this host's GPUs and working directory.
#
#   launch/container.sh [--image IMG] [--engine docker|podman|apptainer] [--cpu] [--shm SIZE]
#                       [--dry-run] [COMMAND [ARGS...]]
#
# Examples (one node; build the image first, see Dockerfile):
#   launch/container.sh distla info
#   launch/container.sh mpiexec -n 2 distla bench matmul --device gpu --n 16384
#   launch/container.sh launch/local.sh --gpu distla solve --matrix A.npy --device gpu
#   launch/container.sh --image distla:cpu --cpu mpiexec -n 2 distla solve --matrix A.npy
#   launch/container.sh --engine apptainer --image distla.sif distla info
#
# The current directory is mounted at /work (the container's working directory), so relative
# paths to matrices and outputs work as outside. Docker/Podman share the host's IPC namespace
# and /dev/shm (--ipc=host: NCCL and MPI shared-memory transports need room there; --shm SIZE
# gives a private /dev/shm of that size instead) and run as your user (rootless Podman: as you,
# through --userns=keep-id) so output files are yours. GPU runs (no --cpu) get the host's GPUs
# (Docker: --gpus all; Podman: the CDI device nvidia.com/gpu=all) and unlimited locked memory.
# Apptainer gets --nv (host driver) and --bind. Variables NCCL_*, OMPI_*, MPIR_*, UCX_*,
# CUDA_VISIBLE_DEVICES, *_NUM_THREADS and DISTLA_* set in your shell are passed in.
#
# Several nodes: start the container on every node from the host's launcher, one rank per GPU,
# with the MPI inside the image ABI-compatible with the host's (or bind-mount the host MPI):
#   srun --gpus-per-task=1 apptainer exec --nv distla.sif distla solve ...
#
# Environment: DISTLA_IMAGE (default image: distla:gpu, or distla:cpu with --cpu),
# CONTAINER_ENGINE (default: the first of docker, podman, apptainer, singularity that answers:
# `docker info` / `podman info` succeed, apptainer runs; an installed docker without a running
# daemon is passed over).
set -euo pipefail

usage() { sed -n '2,31p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }

IMAGE=${DISTLA_IMAGE:-}
ENGINE=${CONTAINER_ENGINE:-}
CPU=""
SHM=""
DRY=""
while (($#)); do
    case $1 in
        --image|--engine|--shm)
            if (($# < 2)) || [[ -z $2 ]]; then
                echo "container.sh: $1 needs a value" >&2; usage 2
            fi
            case $1 in --image) IMAGE=$2 ;; --engine) ENGINE=$2 ;; --shm) SHM=$2 ;; esac
            shift 2 ;;
        --cpu) CPU=1; shift ;;
        --dry-run) DRY=1; shift ;;
        -h|--help) usage 0 ;;
        --) shift; break ;;
        -*) echo "container.sh: unknown option $1" >&2; usage 2 ;;
        *) break ;;
    esac
done
(($#)) || set -- distla info
[[ -n $IMAGE ]] || IMAGE=$([[ -n $CPU ]] && echo distla:cpu || echo distla:gpu)

# An engine that answers: a docker client without a daemon, or a podman that cannot reach its
# storage, is passed over.
answers() {
    case $(basename "$1") in
        docker|podman) timeout 60 "$1" info >/dev/null 2>&1 ;;
        *) timeout 60 "$1" --version >/dev/null 2>&1 ;;
    esac
}
if [[ -z $ENGINE ]]; then
    TRIED=()
    for e in docker podman apptainer singularity; do
        command -v "$e" >/dev/null 2>&1 || continue
        if answers "$e"; then ENGINE=$e; break; fi
        TRIED+=("$e")
    done
    if [[ -z $ENGINE ]]; then
        echo "container.sh: no container engine answers (found but not answering: ${TRIED[*]:-none}; is the docker daemon running?); set CONTAINER_ENGINE" >&2
        exit 2
    fi
fi

# Environment passed into the container: whatever of these the caller has set.
PASS=()
while IFS='=' read -r name _; do
    case $name in
        NCCL_*|OMPI_*|MPIR_*|UCX_*|CUDA_VISIBLE_DEVICES|OMP_NUM_THREADS|OPENBLAS_NUM_THREADS|MKL_NUM_THREADS|DISTLA_*)
            PASS+=("$name") ;;
    esac
done < <(env)

HERE=$(pwd)
if [[ $HERE == *[:,]* ]]; then   # the engines' mount specs split at ':' (and apptainer at ',')
    echo "container.sh: the working directory '$HERE' contains ':' or ',', which the" \
         "container engines' mount options cannot carry; run from another directory" >&2
    exit 2
fi
case $(basename "$ENGINE") in
    docker|podman)
        CMD=("$ENGINE" run --rm -i)
        [[ -t 0 && -t 1 ]] && CMD+=(-t)
        if [[ -z $CPU ]]; then
            if [[ $(basename "$ENGINE") == podman ]]; then CMD+=(--device nvidia.com/gpu=all)
            else CMD+=(--gpus all); fi
            CMD+=(--ulimit memlock=-1 --ulimit stack=67108864)
        fi
        # --ipc=host already shares the host's /dev/shm (Podman refuses --shm-size with it).
        if [[ -n $SHM ]]; then CMD+=(--shm-size="$SHM"); else CMD+=(--ipc=host); fi
        if [[ $(basename "$ENGINE") == podman && $(id -u) != 0 ]]; then
            CMD+=(--userns=keep-id)
        else
            CMD+=(--user "$(id -u):$(id -g)")
        fi
        CMD+=(-e HOME=/tmp -v "$HERE:/work" -w /work)
        for v in "${PASS[@]}"; do CMD+=(-e "$v"); done
        CMD+=("$IMAGE" "$@")
        ;;
    apptainer|singularity)
        # variables go in as APPTAINERENV_<NAME> (SINGULARITYENV_): --env splits its value at
        # commas, which would cut DISTLA_IO_HINTS or CUDA_VISIBLE_DEVICES=0,1 short
        PFX=APPTAINERENV_
        [[ $(basename "$ENGINE") == singularity ]] && PFX=SINGULARITYENV_
        CMD=(env)
        for v in "${PASS[@]}"; do CMD+=("$PFX$v=${!v}"); done
        CMD+=("$ENGINE" exec --cleanenv --bind "$HERE:/work" --pwd /work)
        [[ -n $CPU ]] || CMD+=(--nv)
        CMD+=("$IMAGE" "$@")
        ;;
    *)
        echo "container.sh: unknown engine '$ENGINE' (docker, podman, apptainer, singularity)" >&2
        exit 2 ;;
esac

if [[ -n $DRY ]]; then
    printf '%q ' "${CMD[@]}"; echo
    exit 0
fi
exec "${CMD[@]}"
