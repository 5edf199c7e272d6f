# GPU call J (prepared in session 2, NOT run yet): CALU vs partial pivoting where tournament
# pivoting can win -- 4 process rows. Needs kind nvidia-h200-x4 and carry [".whl", ".peers"]
# (.peers = ../shared/peers plus the nvidia-cusolvermp-cu13 wheel in .peers/whl, see its README).
# Per panel, partial pivoting does a redundant GEPP of all m active rows (m b^2 flops); CALU does
# 2 m b^2 / P: equal at P = 2, half at P = 4.
. tests/gpu/device_env.sh
O=${OUT:-/tmp/out}; mkdir -p $O
if [ -d .peers/whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .peers/whl/*.whl >/dev/null 2>&1
  export CUSOLVERMP_LIB=/tmp/site/nvidia/cu13/lib/libcusolverMp.so.0
  timeout 150 $M -x CUSOLVERMP_LIB -n 4 python3 .peers/cusolvermp_bench.py --n 65536 --nb 1024 --grid 4x1,2x2 --ops getrf --reps 2 2>&1 | grep RESULT | tee $O/peers.txt
fi
L="python3 -m distla.bench lu --device gpu --json $O/lu.jsonl --no-ref --no-check --profile"
timeout 200 $M -n 4 $L --grid 4x1 --n 65536 --nb 1024 --reps 1 --pivoting partial tournament 2>&1 | tee $O/lu4x1.txt | tail -3 | cut -c1-400
timeout 200 $M -n 4 $L --grid 2x2 --n 65536 --nb 1024 --reps 1 --pivoting partial tournament 2>&1 | tee $O/lu2x2.txt | tail -3 | cut -c1-400
