# Source on the GPU machine: environment for distla runs (Open MPI as root, NCCL without NVLS).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0 \
       NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 PYTHONUNBUFFERED=1
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site .whl/*.whl >/dev/null 2>&1
fi
export PYTHONPATH=$PWD:/tmp/site
M="mpirun --bind-to none -x NCCL_NVLS_ENABLE -x NVSHMEM_DISABLE_NVLS -x PYTHONPATH -x PYTHONUNBUFFERED -x OMPI_ALLOW_RUN_AS_ROOT -x OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"
