# GPU call M (session 3): LU with the trailing update (swaps, U12, broadcast, GEMM) on the side
# stream with its own NCCL communicators, beside the lookahead column and the next panel.
. tests/gpu/device_env.sh
O=${OUT:-/tmp/out}; mkdir -p $O
timeout 200 $M -n 2 python3 -m pytest -q -p no:cacheprovider --with-mpi -m mpi -x -k "gpu or tf32" tests/test_lu.py 2>&1 | tail -2
L="python3 -m distla.bench lu --device gpu --json $O/lu.jsonl --no-ref --n 65536 --nb 1024 --reps 1"
timeout 150 $M -n 2 $L --grid 2x1 --pivoting partial tournament 2>&1 | tee $O/lu2x1.txt | tail -3
timeout 100 $M -n 2 $L --grid 1x2 --pivoting partial 2>&1 | tee $O/lu1x2.txt | tail -2
timeout 150 $M -n 2 $L --grid 2x1 --pivoting partial tournament --profile --no-check 2>&1 | tee $O/lu2x1_prof.txt | tail -3 | cut -c1-600
