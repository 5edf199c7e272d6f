#!/usr/bin/env bash
# The GPU machine's CPU cores, repository root, carry .whl: .npy write rates
# (benchmarks/io_rate.py --no-read) with the regrouping of multi-row grids through MPI
# datatypes over the local arrays (variant 'typed', the default) against packed buffers
# (DISTLA_REMAP=buffers), alternating: 4 ranks pinned to 2 cores (taskset: the development
# machine's shape, n = 8192, nb 128), then 8 and 16 ranks on all cores (n = 16384, nb 256).
# JSON lines: $OUT/io-write-typed.jsonl. Each n = 16384 run takes ~23 s there.
. benchmarks/gpu/device_env.sh
O=${OUT:-/tmp/out}; mkdir -p "$O"
one() {   # variant, ranks, cpu list ('' for all), n, nb
  local v=$1 r=$2 cpus=$3 n=$4 nb=$5 pin=()
  [ -n "$cpus" ] && pin=(taskset -c "$cpus")
  remap=typed; [ "$v" = buffers ] && remap=buffers
  DISTLA_REMAP=$remap timeout 150 "${pin[@]}" $M -n "$r" --oversubscribe \
      -x OPENBLAS_NUM_THREADS=1 -x DISTLA_REMAP python3 benchmarks/io_rate.py --n "$n" \
      --nb "$nb" --reps 3 --no-read --dir /tmp --variant "$v${cpus:+ cpus $cpus}" \
      --json "$O/io-write-typed.jsonl" | sed "s/^/$v $r${cpus:+ (cpus $cpus)}: /"
}
for pass in 1 2; do
  for v in typed buffers; do one $v 4 0,1 8192 128; done
done
for r in 8 16; do
  for v in typed buffers; do one $v $r '' 16384 256; done
done
echo "${SECONDS} s"
