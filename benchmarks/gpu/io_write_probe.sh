#!/usr/bin/env bash
# The GPU machine's CPU cores, repository root, carry .whl: where a multi-rank .npy write's
# time goes (benchmarks/io_write_probe.py, n = 16384, nb 256): on 8 and 16 ranks, a 1 x R
# grid (whole columns per rank: no regrouping) beside the default grid (write, regrouping
# alone, 16 MiB slabs), writer thread and DISTLA_IO_WRITE=sync; np.save of the same matrix
# in each run. JSON lines: $OUT/io-write-probe.jsonl.
. benchmarks/gpu/device_env.sh
O=${OUT:-/tmp/out}; mkdir -p "$O"
for r in 16 8; do
  for mode in thread sync; do
    DISTLA_IO_WRITE=$mode timeout 200 $M -n $r --oversubscribe -x OPENBLAS_NUM_THREADS=1 \
        -x DISTLA_IO_WRITE python3 benchmarks/io_write_probe.py --n 16384 --nb 256 --reps 3 \
        --slab-mib 16 --json "$O/io-write-probe.jsonl" | sed "s/^/$mode $r: /"
  done
done
echo "${SECONDS} s"
