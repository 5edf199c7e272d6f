# After the recursive panel's closure fix: LU in place at n = 65536 on one GPU with the default
# panel (recursive for panels of >= 24576 rows) and with one getrf per panel; the device peak
# (device_peak_ratio, CuPy pool high-water over the local matrix) must match.
. benchmarks/gpu/device_env.sh
for leaf in 32 0; do
  CUDA_VISIBLE_DEVICES=0 timeout 150 python3 -c "
import sys
from distla.linalg import _lu_loop
from distla.bench import main_argv
_lu_loop.PANEL_LEAF['gpu'] = $leaf
sys.exit(main_argv(sys.argv[1:]))
" lu --device gpu --n 65536 --nb 1024 --inplace --reps 1 --no-ref --json $OUT/memory.jsonl 2>&1 | grep -E "distla|Error"  | cut -c1-200
done
