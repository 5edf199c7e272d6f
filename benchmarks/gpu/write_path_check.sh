#!/usr/bin/env bash
# One GPU machine, repository root, carry .whl and .base (a worktree of the commit before):
#  1. GPU tests: the serial gpu suite, the mpi+gpu suite on one rank;
#  2. the .npy and HDF5 tests on 4 CPU ranks under this machine's Open MPI (the writer
#     thread needs MPI_THREAD_MULTIPLE there);
#  3. 'distla generate --kind spd --n 32768' on 8 CPU ranks, before / after alternating twice,
#     beside one np.save of the same size;
#  4. write rates on 8 and 16 ranks, before / writer thread (io_write_modes.sh, one pass).
# Records: $OUT/generate.jsonl, $OUT/io-write.jsonl.
. benchmarks/gpu/device_env.sh
O=${OUT:-/tmp/out}; mkdir -p "$O"
bash benchmarks/gpu/gpu_tests.sh 1
timeout 200 $M -n 4 --oversubscribe -x OPENBLAS_NUM_THREADS=1 python3 -m pytest --with-mpi \
    -q --color=no -p no:cacheprovider -m mpi --timeout 150 tests/test_io.py tests/test_h5io.py \
    > "$O/tests-io-4.log" 2>&1
echo "io tests (4 CPU ranks, Open MPI) rc=$?"; tail -n 1 "$O/tests-io-4.log"
python3 -c "from mpi4py import MPI; print('thread level', MPI.Query_thread(), 'of', MPI.THREAD_MULTIPLE)"
D=/tmp/distla-gen; mkdir -p $D
for pass in 1 2; do
  for tree in .base .; do
    name=$([ $tree = . ] && echo after || echo before)
    rm -f $D/A.npy; t0=$(date +%s.%N)
    PYTHONPATH=$PWD/$tree:/tmp/site timeout 150 $M -n 8 -x OPENBLAS_NUM_THREADS=1 python3 -m \
        distla generate --kind spd --n 32768 --out $D/A.npy > "$O/generate-$name.log" 2>&1
    rc=$?; t=$(python3 -c "print(round($(date +%s.%N) - $t0, 3))")
    echo "generate $name rc=$rc $t s"
    echo "{\"bench\": \"generate\", \"impl\": \"distla $name\", \"n\": 32768, \"ranks\": 8, \"device\": \"cpu (GPU machine)\", \"seconds\": $t, \"tflops\": null, \"command\": \"mpirun -n 8 python3 -m distla generate --kind spd --n 32768 --out A.npy (whole command, wall; tree $name)\"}" >> "$O/generate.jsonl"
  done
done
rm -f $D/A.npy
ts=$(python3 -c "
import numpy as np, time
a = np.full((32768, 32768), 1.0)
t = time.perf_counter()
with open('/tmp/G2.npy', 'wb') as f:
    np.save(f, a)
print(round(time.perf_counter() - t, 3))")
rm -f /tmp/G2.npy; echo "np.save of the same size, one process: $ts s"
echo "{\"bench\": \"generate\", \"impl\": \"floor\", \"n\": 32768, \"ranks\": 1, \"device\": \"cpu (GPU machine)\", \"seconds\": $ts, \"tflops\": null, \"command\": \"np.save of a 32768 x 32768 float64 array, one process\"}" >> "$O/generate.jsonl"
VARIANTS="before thread" PASSES=1 bash benchmarks/gpu/io_write_modes.sh
echo "${SECONDS} s"
