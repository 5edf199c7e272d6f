# distla container images (multi-stage). Build from the repository root with Docker, Podman or
# Buildah:
#
#   docker build --target cpu -t distla:cpu .     # CPU ranks: Python + MPICH (pip wheel)
#   docker build --target gpu -t distla:gpu .     # GPU ranks: CUDA runtime + Open MPI + CuPy
#   docker build --target test -t distla:test .   # the cpu image plus the test suite
#
# The base images are build arguments: CPU_IMAGE (any image with python3 and its venv module,
# default python:3.12-slim) and CUDA_IMAGE (a Debian/Ubuntu image, normally NVIDIA's CUDA
# runtime). tests/integration/containers.sh builds all three offline from a local Debian
# base, e.g. `podman build --build-arg CPU_IMAGE=localhost/debian-base --target cpu ...`.
#
# Run with launch/container.sh (mounts the working directory, passes the host's GPUs):
#
#   launch/container.sh --image distla:gpu mpiexec -n 2 distla bench matmul --device gpu
#
# Apptainer/Singularity: `apptainer build distla.sif docker-daemon://distla:gpu`.
# On a cluster prefer the site's MPI (build mpi4py against it) or a container MPI that is
# ABI-compatible with it; see README "Containers".

ARG CPU_IMAGE=python:3.12-slim
ARG CUDA_IMAGE=nvidia/cuda:12.6.3-runtime-ubuntu24.04

# ---- sources (shared by every target) ------------------------------------------------------
FROM scratch AS src
COPY pyproject.toml README.md /src/
COPY distla /src/distla
COPY launch /src/launch
COPY examples /src/examples

# ---- CPU target ----------------------------------------------------------------------------
FROM ${CPU_IMAGE} AS cpu
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH
COPY --from=src /src /opt/distla
# The `mpi` extra brings MPICH as a wheel (mpiexec lands in /opt/venv/bin), so no system MPI.
RUN python3 -m venv /opt/venv \
    && pip install "/opt/distla[mpi]" \
    && distla --version
# Waiting ranks yield the CPU (matters when ranks outnumber the container's cores). MPICH's
# cross-memory attach (process_vm_readv) is refused by Docker's default seccomp profile and a
# 2-rank job then hangs: keep it off (shared-memory copies instead).
ENV MPIR_CVAR_POLLS_BEFORE_YIELD=1 \
    MPIR_CVAR_CH4_CMA_ENABLE=0 \
    OPENBLAS_NUM_THREADS=1
WORKDIR /work
CMD ["distla", "info"]

# ---- GPU build stage: mpi4py compiled against the image's Open MPI --------------------------
FROM ${CUDA_IMAGE} AS gpu-build
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
    && apt-get install -y --no-install-recommends \
        python3 python3-dev python3-venv build-essential libopenmpi-dev openmpi-bin \
    && rm -rf /var/lib/apt/lists/*
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH
RUN python3 -m venv /opt/venv \
    && pip install --upgrade pip setuptools wheel \
    && env MPICC=/usr/bin/mpicc pip install --no-binary=mpi4py "mpi4py>=4"
COPY --from=src /src /opt/distla
# The `gpu` extra is cupy-cuda12x (NCCL comes from the CUDA image's libnccl2). No `mpi` extra:
# the image's Open MPI is the one mpi4py was built against.
RUN pip install "/opt/distla[gpu]" \
    && python -c "import mpi4py.MPI as M; print(M.Get_library_version().splitlines()[0])"

# ---- GPU target ------------------------------------------------------------------------------
FROM ${CUDA_IMAGE} AS gpu
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 openmpi-bin \
    && rm -rf /var/lib/apt/lists/*
COPY --from=gpu-build /opt/venv /opt/venv
COPY --from=src /src /opt/distla
ENV VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    OPENBLAS_NUM_THREADS=1 \
    NCCL_NVLS_ENABLE=0 \
    OMPI_ALLOW_RUN_AS_ROOT=1 \
    OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    OMPI_MCA_btl_vader_single_copy_mechanism=none
WORKDIR /work
CMD ["distla", "info"]

# ---- test target: the CPU image plus the repository (less .dockerignore) and the test suite ----
FROM cpu AS test
COPY . /opt/distla
RUN pip install "/opt/distla[test]"
WORKDIR /opt/distla
CMD ["bash", "tests/run.sh"]
