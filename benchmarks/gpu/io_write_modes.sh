#!/usr/bin/env bash
# The GPU machine's CPU cores (16), repository root, carry .whl and .base (a worktree of the
# commit before): .npy write rates (benchmarks/io_rate.py --no-read, n = 16384, nb 256) on 8
# and 16 CPU ranks, the tree before (its library, this tree's script) and this tree with each
# DISTLA_IO_WRITE mode and two slab sizes. JSON lines: $OUT/io-write.jsonl. Each io_rate run
# takes ~23 s there (making the matrix and gathering it for np.save): PASSES=1 fits one call;
# VARIANTS picks among 'before thread sync thread-16MiB' (all by default).
# Record 2026-11-27-h200machine-io-write-modes.jsonl came from this script when it also
# tried nonblocking MPI_File_iwrite_at (variants iwrite*, since dropped from distla.io).
. benchmarks/gpu/device_env.sh
O=${OUT:-/tmp/out}; mkdir -p "$O"
one() {   # variant, library tree, extra io_rate arguments...
  local v=$1 tree=$2; shift 2
  mode=${v%%-*}; [ "$mode" = before ] && mode=thread
  PYTHONPATH=$PWD/$tree:/tmp/site DISTLA_IO_WRITE=$mode timeout 120 $M -n $r --oversubscribe \
      -x OPENBLAS_NUM_THREADS=1 -x DISTLA_IO_WRITE python3 benchmarks/io_rate.py --n 16384 \
      --nb 256 --reps 3 --no-read --dir /tmp --variant "$v" --json "$O/io-write.jsonl" "$@" \
      | sed "s/^/$v $r: /"
}
for pass in $(seq ${PASSES:-1}); do
  for r in 8 16; do
    for v in ${VARIANTS:-before thread sync thread-16MiB}; do
      case $v in
        before) one before .base ;;
        *-16MiB) one $v . --write-slab-mib 16 ;;
        *) one $v . ;;
      esac
    done
  done
done
echo "${SECONDS} s"
