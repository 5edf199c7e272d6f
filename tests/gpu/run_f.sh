# GPU call F (session 2): TLR left-looking Cholesky with the batched CUDA QR / Jacobi kernels:
# kernel unit tests, the GPU end-to-end TLR test, n=65536 on one GPU vs dense Cholesky
# (the target), and n=262144 on 2 GPUs (dense cannot fit).
. tests/gpu/device_env.sh
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
timeout 120 python3 -m pytest -q --color=no -p no:cacheprovider -k cuda tests/test_tlr.py 2>&1 | grep -v "^  " | tail -8
timeout 60 python3 tests/gpu/profile_tlr_kernels.py 2>&1 | tail -5
timeout 60 $M -n 2 python3 -m pytest --with-mpi -m mpi -q --color=no -p no:cacheprovider -k gpu tests/test_tlr.py 2>&1 | tail -2
T="python3 -m distla.bench tlr --device gpu --tol 1e-8 --json $O/tlr.jsonl"
timeout 150 $M -n 1 $T --n 65536 --tile 1024 --profile 2>&1 | tee $O/tlr1.txt | tail -3 | cut -c1-700
timeout 200 $M -n 2 $T --n 262144 --tile 2048 --grid 2x1 --no-dense 2>&1 | tee $O/tlr2.txt | tail -3 | cut -c1-700
