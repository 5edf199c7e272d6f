# GPU call K (session 3): LU on 2 GPUs with the panel/communication streams at high priority,
# A/B against all-default priorities (DISTLA_STREAM_PRIORITY=0), and the panel's phase split.
. tests/gpu/device_env.sh
O=${OUT:-/tmp/out}; mkdir -p $O
which nsys ncu 2>&1 | head -2
L="python3 -m distla.bench lu --device gpu --json $O/lu.jsonl --no-ref --no-check --n 65536 --nb 1024 --reps 1"
timeout 150 $M -n 2 $L --grid 2x1 --pivoting partial tournament --profile 2>&1 | tee $O/lu2x1_prof.txt | tail -3 | cut -c1-600
timeout 100 $M -n 2 -x DISTLA_STREAM_PRIORITY=0 $L --grid 2x1 --pivoting partial tournament 2>&1 | tee $O/lu2x1_noprio.txt | tail -3
timeout 100 $M -n 2 $L --grid 1x2 --pivoting partial 2>&1 | tee $O/lu1x2.txt | tail -2
timeout 100 $M -n 2 -x DISTLA_STREAM_PRIORITY=0 $L --grid 1x2 --pivoting partial 2>&1 | tee $O/lu1x2_noprio.txt | tail -2
