# GPU call A: GPU tests of LU/RBT/TLR, cuSOLVERMp peers, distla Cholesky targets.
. tests/gpu/device_env.sh
O=${OUT:-/tmp/out}; mkdir -p $O
timeout 170 $M -n 2 python3 -m pytest --with-mpi -m mpi -q --color=no -p no:cacheprovider --timeout 80 \
    -k gpu tests/test_lu.py tests/test_rbt.py tests/test_tlr.py > $O/tests.log 2>&1; echo "tests rc=$?"
tail -3 $O/tests.log
if [ -d .peers/whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .peers/whl/*.whl >/dev/null 2>&1
  export CUSOLVERMP_LIB=/tmp/site/nvidia/cu13/lib/libcusolverMp.so.0
  timeout 100 $M -x CUSOLVERMP_LIB -n 2 python3 .peers/cusolvermp_bench.py --n 65536 --nb 1024 --grid 2x1 --ops potrf --reps 2 2>&1 | grep RESULT | tee $O/peers.txt
fi
B="python3 -m distla.bench cholesky --device gpu --json $O/chol.jsonl"
timeout 100 $M -n 1 $B --n 32768 --nb 1024 --reps 3 --profile 2>&1 | tee $O/chol1.txt | tail -12
timeout 100 $M -n 2 $B --grid 2x1 --n 65536 --nb 1024 --reps 2 --no-check --no-reference --profile 2>&1 | tee $O/chol2.txt | tail -12
timeout 80 $M -n 1 $B --n 65536 --nb 1024 --reps 1 --no-check --no-reference 2>&1 | tee $O/chol1b.txt | tail -6
