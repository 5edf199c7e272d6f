# GPU call D: LU and RBT at n=65536 on 2 GPUs with full-size warm-up, cuSOLVERMp getrf beside.
. tests/gpu/device_env.sh
O=${OUT:-/tmp/out}; mkdir -p $O
if [ -d .peers/whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .peers/whl/*.whl >/dev/null 2>&1
  export CUSOLVERMP_LIB=/tmp/site/nvidia/cu13/lib/libcusolverMp.so.0
  timeout 90 $M -x CUSOLVERMP_LIB -n 2 python3 .peers/cusolvermp_bench.py --n 65536 --nb 1024 --grid 1x2,2x1 --ops getrf --reps 2 2>&1 | grep RESULT | tee $O/peers.txt
fi
L="python3 -m distla.bench lu --device gpu --json $O/lu.jsonl --no-ref --no-check"
timeout 120 $M -n 2 $L --grid 2x1 --n 65536 --nb 1024 --reps 1 --pivoting partial tournament 2>&1 | tee $O/lu2.txt | tail -4
timeout 80 $M -n 2 $L --grid 1x2 --n 65536 --nb 1024 --reps 1 --pivoting partial 2>&1 | tee $O/lu2b.txt | tail -3
R="python3 -m distla.bench rbt --device gpu --json $O/rbt.jsonl --no-ref"
timeout 200 $M -n 2 $R --grid 2x1 --n 65536 --nb 1024 --reps 1 --precision both 2>&1 | tee $O/rbt2.txt | tail -12
