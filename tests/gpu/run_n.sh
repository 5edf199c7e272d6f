# GPU call N (session 3): regression + measurements after the stream-priority and row-swap
# changes. GPU tests of LU/Cholesky/RBT on 2 GPUs; Cholesky and LU on 1 GPU against cuSOLVER
# (A/B: DISTLA_STREAM_PRIORITY=0); LU 2x1/1x2 and RBT on 2 GPUs with cuSOLVERMp beside.
. tests/gpu/device_env.sh
O=${OUT:-/tmp/out}; mkdir -p $O
timeout 200 $M -n 2 python3 -m pytest --with-mpi -m mpi -q --color=no -p no:cacheprovider --timeout 100 \
    -k "gpu or tf32" tests/test_lu.py tests/test_cholesky.py tests/test_rbt.py > $O/tests.log 2>&1; echo "tests rc=$?"
tail -2 $O/tests.log
C="python3 -m distla.bench cholesky --device gpu --json $O/chol.jsonl --n 32768 --nb 1024 --reps 3 --no-check"
timeout 100 $M -n 1 $C 2>&1 | tee $O/chol1.txt | tail -3
timeout 100 $M -n 1 -x DISTLA_STREAM_PRIORITY=0 $C --no-reference 2>&1 | tee $O/chol1_noprio.txt | tail -2
timeout 100 $M -n 1 python3 -m distla.bench lu --device gpu --json $O/lu1.jsonl --n 32768 --nb 1024 --reps 3 --no-check 2>&1 | tee $O/lu1.txt | tail -3
if [ -d .peers/whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .peers/whl/*.whl >/dev/null 2>&1
  export CUSOLVERMP_LIB=/tmp/site/nvidia/cu13/lib/libcusolverMp.so.0
  timeout 100 $M -x CUSOLVERMP_LIB -n 2 python3 .peers/cusolvermp_bench.py --n 65536 --nb 1024 --grid 1x2,2x1 --ops getrf --reps 2 2>&1 | grep RESULT | tee $O/peers.txt
fi
L="python3 -m distla.bench lu --device gpu --json $O/lu.jsonl --no-ref --n 65536 --nb 1024 --reps 2"
timeout 150 $M -n 2 $L --grid 2x1 --pivoting partial tournament 2>&1 | tee $O/lu2x1.txt | tail -3
timeout 120 $M -n 2 $L --grid 1x2 --pivoting partial tournament 2>&1 | tee $O/lu1x2.txt | tail -3
timeout 150 $M -n 2 python3 -m distla.bench rbt --device gpu --json $O/rbt.jsonl --no-ref --grid 2x1 --n 65536 --nb 1024 --reps 1 2>&1 | tee $O/rbt2.txt | tail -4
