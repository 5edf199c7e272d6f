# GPU call C: TLR targets (1 GPU vs dense at n=65536; 2 GPUs at n=262144) and an RBT profile.
. tests/gpu/device_env.sh
O=${OUT:-/tmp/out}; mkdir -p $O
timeout 100 $M -n 2 python3 tests/gpu/profile_rbt.py --n 65536 > $O/rbt_profile.txt 2>&1; echo "rbt profile rc=$?"
head -60 $O/rbt_profile.txt | cut -c1-150
T="python3 -m distla.bench tlr --device gpu --tol 1e-8 --json $O/tlr.jsonl"
timeout 200 $M -n 1 $T --n 65536 --tile 1024 --profile 2>&1 | tee $O/tlr1.txt | tail -12
timeout 230 $M -n 2 $T --n 262144 --tile 2048 --no-dense 2>&1 | tee $O/tlr2.txt | tail -12
