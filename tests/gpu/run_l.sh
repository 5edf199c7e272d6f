# GPU call L (session 3): row swaps walking columns (take_rows/put_rows); LU 2x1 profile and timings.
. tests/gpu/device_env.sh
O=${OUT:-/tmp/out}; mkdir -p $O
timeout 100 python3 -m pytest -q -p no:cacheprovider tests/test_lu.py -k "take_and_put" 2>&1 | tail -2; timeout 100 python3 tests/gpu/bench_swaps.py
L="python3 -m distla.bench lu --device gpu --json $O/lu.jsonl --no-ref --no-check --n 65536 --nb 1024 --reps 1"
timeout 150 $M -n 2 $L --grid 2x1 --pivoting partial tournament --profile 2>&1 | tee $O/lu2x1_prof.txt | tail -3 | cut -c1-600
timeout 100 $M -n 2 $L --grid 1x2 --pivoting partial 2>&1 | tee $O/lu1x2.txt | tail -2
