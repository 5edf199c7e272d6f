# GPU call G (session 2): mixed-precision RBT with 3xTF32 float32 GENP updates vs double RBT,
# n=65536 on 2 GPUs (2x1), plus the GPU tests of the TF32 path and an LU profile of GENP in
# float32 with native (FP32 SIMT) updates, to explain session 1's slow float32 GENP.
. tests/gpu/device_env.sh
O=${OUT:-/tmp/out}; mkdir -p $O
timeout 90 $M -n 2 python3 -m pytest --with-mpi -m mpi -q --color=no -p no:cacheprovider -k "tf32 or gemm_option" tests/test_lu.py 2>&1 | tail -2
timeout 90 $M -n 2 python3 -m pytest --with-mpi -m mpi -q --color=no -p no:cacheprovider -k gpu tests/test_rbt.py 2>&1 | tail -2
R="python3 -m distla.bench rbt --device gpu --json $O/rbt.jsonl --no-ref --no-gepp"
timeout 200 $M -n 2 $R --grid 2x1 --n 65536 --nb 1024 --reps 1 --precision both 2>&1 | tee $O/rbt2.txt | grep "^rbt n="
L="python3 -m distla.bench lu --device gpu --json $O/lu.jsonl --no-ref --no-check --profile"
timeout 120 $M -n 2 $L --grid 2x1 --n 65536 --nb 1024 --reps 1 --pivoting none --dtype float32 2>&1 | tee $O/lu32.txt | tail -3 | cut -c1-600
