# GPU call H (session 2): 3xTF32 after the coalesced split: GEMM rates, the GPU tests of the
# TF32 path, GENP float32 with 3xTF32 updates (profile), RBT mixed vs double at n=65536, 2x1.
. tests/gpu/device_env.sh
O=${OUT:-/tmp/out}; mkdir -p $O
timeout 60 python3 tests/gpu/tf32_gemm_rate.py 2>&1 | tail -2
timeout 90 $M -n 2 python3 -m pytest --with-mpi -m mpi -q --color=no -p no:cacheprovider -k "tf32 or gemm_option" tests/test_lu.py 2>&1 | tail -1
L="python3 -m distla.bench lu --device gpu --json $O/lu.jsonl --no-ref --no-check --profile"
timeout 120 $M -n 2 $L --grid 2x1 --n 65536 --nb 1024 --reps 1 --pivoting none --dtype float32 --gemm tf32x3 2>&1 | tee $O/lu32.txt | tail -1 | cut -c1-600
R="python3 -m distla.bench rbt --device gpu --json $O/rbt.jsonl --no-ref --no-gepp"
timeout 200 $M -n 2 $R --grid 2x1 --n 65536 --nb 1024 --reps 1 --precision both 2>&1 | tee $O/rbt2.txt | grep "^rbt n="
