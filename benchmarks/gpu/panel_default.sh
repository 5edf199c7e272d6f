# The recursive panel as LU's default for tall panels on GPU ranks: its GPU tests, then LU at
# n = 65536 (in place) and mixed-precision GEPP at n = 32768 with the default against one
# cuSOLVER getrf per panel (PANEL_LEAF 0), alternating, in one call.
. benchmarks/gpu/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 150 python3 -m pytest -q --color=no -p no:cacheprovider -m gpu --require-gpu --timeout 100 \
    tests/test_gpu_core.py -k "recursive_panel" 2>&1 | tail -3
timeout 100 $M -n 1 python3 -m pytest --with-mpi -q --color=no -p no:cacheprovider -m "mpi and gpu" \
    --require-gpu --timeout 90 tests/test_gpu_core.py -k "recursive_panel" 2>&1 | tail -2
run() {  # leaf, then the bench arguments
  leaf=$1; shift
  timeout 150 python3 -c "
import sys
from distla.linalg import _lu_loop
from distla.bench import main_argv
_lu_loop.PANEL_LEAF['gpu'] = $leaf
sys.exit(main_argv(sys.argv[1:]))
" "$@" --json $OUT/records.jsonl 2>&1 | grep -E "distla|cusolver|mixed|Error|error" | cut -c1-150
}
for leaf in 32 0 32 0; do run $leaf lu --device gpu --n 65536 --nb 1024 --inplace --reps 1 --no-ref; done
for leaf in 32 0; do run $leaf mixed --device gpu --n 32768 --nb 1024 --method gepp --cond 1e2 --factor-dtype fp16 tf32 --no-ref; done
