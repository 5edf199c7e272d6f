#!/usr/bin/env bash
# One GPU machine, repository root: the whole solve job with an empty kernel cache, after
# 'distla warmup' filled it, and warm; plus the I/O floor (np.load, one process) and the
# MPI-IO read with the library's default hints.
. benchmarks/gpu/device_env.sh
O=${OUT:-/tmp/out}; mkdir -p "$O"
T() { python3 -c "import time; print(f'{time.time():.3f}')"; }
D() { python3 -c "print(f'{$(T) - $1:.2f}')"; }
cd /tmp
t0=$(T); timeout 150 $M -n 8 python3 -m distla generate --kind spd --n 32768 --out /tmp/A.npy -q
echo "generate n=32768 on 8 CPU ranks: $(D $t0) s"
t0=$(T); python3 -c "import numpy as np; np.load('/tmp/A.npy')"; echo "np.load (one process): $(D $t0) s"
for h in "" "romio_cb_read=enable,romio_ds_read=enable"; do
  t0=$(T); timeout 120 $M -n 1 env DISTLA_IO_HINTS=$h python3 -c "
from distla import ProcessGrid, io; io.read_matrix('/tmp/A.npy', ProcessGrid(), (1024, 1024))"
  echo "read_matrix cpu 1 rank hints='$h': $(D $t0) s"
done
t0=$(T); timeout 120 $M -n 8 python3 -c "
from distla import ProcessGrid, io; io.read_matrix('/tmp/A.npy', ProcessGrid(), (1024, 1024))"
echo "read_matrix cpu 8 ranks: $(D $t0) s"
export CUPY_CACHE_DIR=/tmp/cupy_cache_fresh; rm -rf $CUPY_CACHE_DIR
S="python3 -m distla solve --matrix /tmp/A.npy --method cholesky --device gpu --nb 1024 --json $O/job.jsonl"
t0=$(T); timeout 200 $M -n 1 -x CUPY_CACHE_DIR $S | grep -E "^(read|make|solve|residual|total) "; echo "cold: $(D $t0) s"
rm -rf $CUPY_CACHE_DIR
t0=$(T); timeout 200 $M -n 1 -x CUPY_CACHE_DIR python3 -m distla warmup -v | tail -3; echo "warmup: $(D $t0) s"
for run in after-warmup warm; do
  t0=$(T); timeout 200 $M -n 1 -x CUPY_CACHE_DIR $S | grep -E "^(read|make|solve|residual|total) "; echo "$run: $(D $t0) s"
done
timeout 120 $M -n 1 python3 -m distla.bench cholesky --device gpu --n 32768 --nb 1024 --reps 2 --no-check --no-reference | grep distla
