# GPU call E: RBT transform after the coalescing fix; TLR at n=65536 on one GPU vs dense.
. tests/gpu/device_env.sh
O=${OUT:-/tmp/out}; mkdir -p $O
timeout 60 $M -n 2 python3 -m pytest --with-mpi -m mpi -q --color=no -p no:cacheprovider -k gpu tests/test_rbt.py 2>&1 | tail -2
timeout 80 $M -n 2 python3 -m distla.bench rbt --device gpu --no-ref --no-gepp --grid 2x1 --n 65536 --nb 1024 --reps 1 --json $O/rbt.jsonl 2>&1 | tee $O/rbt2.txt | grep "^rbt n="
T="python3 -m distla.bench tlr --device gpu --tol 1e-8 --n 65536 --tile 1024 --json $O/tlr.jsonl"
timeout 150 $M -n 1 $T --profile 2>&1 | tee $O/tlr1.txt | tail -4 | cut -c1-400
timeout 90 $M -n 1 $T --no-dense --qr lapack 2>&1 | tee $O/tlr1b.txt | tail -3 | cut -c1-400
