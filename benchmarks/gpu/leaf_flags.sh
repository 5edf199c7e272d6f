# The flag-polling leaf kernel (_panel_cuda.KERNEL = 'flags') against the grid-barrier one:
# the recursive-panel GPU tests with both, the panel probe (one leaf, whole panels, cuSOLVER
# beside), then LU's step loop on one GPU with recursive panels at every height, cuSOLVER's
# getrf in the same run (distla bench lu's reference).
. benchmarks/gpu/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 300 python3 -m pytest -q -x --color=no -p no:cacheprovider -m gpu --require-gpu \
    --timeout 100 tests/test_gpu_core.py -k "recursive_panel_kernel" 2>&1 | tail -4
timeout 150 python3 benchmarks/gpu/panel_kernel_probe.py --kernels grid flags --leaf 32 64 \
    --shapes 4096x512 8192x512 16384x1024 32768x1024 65536x1024 --reps 3 \
    --json $OUT/probe.jsonl 2>&1 | grep -v "^ *$" | cut -c1-150
run() {  # kernel, min rows, then the bench arguments
  kernel=$1; minrows=$2; shift 2
  timeout 120 python3 -c "
import sys
from distla.bench import main_argv
from distla.device import _panel_cuda
from distla.linalg import _lu_loop
_panel_cuda.KERNEL = '$kernel'
_lu_loop.PANEL_MIN_ROWS['gpu'] = $minrows
sys.exit(main_argv(sys.argv[1:]))
" "$@" --json $OUT/lu.jsonl 2>&1 | grep -E "distla|cusolver|Error|error" | cut -c1-150
  echo "   ($kernel, panels from $minrows rows, $*)"
}
for n in 4096 8192 16384; do
  run flags 0 lu --device gpu --n $n --nb 512 --force-loop --panel-leaf 32
  run flags 0 lu --device gpu --n $n --nb 512 --force-loop --panel-leaf 64 --no-ref
  run grid 24576 lu --device gpu --n $n --nb 512 --force-loop --no-ref
done
run flags 0 lu --device gpu --n 32768 --nb 1024 --force-loop --panel-leaf 64
run grid 24576 lu --device gpu --n 32768 --nb 1024 --force-loop --no-ref
