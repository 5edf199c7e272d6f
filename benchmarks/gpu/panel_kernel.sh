# The recursive LU panel with distla's leaf kernel against one cuSOLVER getrf per panel, on one
# GPU: the leaf's parts (leaf_variants_probe.py), the panel alone (panel_kernel_probe.py), and
# LU's step loop at n = 16384 and 32768 with the recursive panel for panels of at least
# PANEL_MIN_ROWS rows (same call, alternating).
. benchmarks/gpu/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 100 python3 benchmarks/gpu/leaf_variants_probe.py 2>&1 | tail -20
timeout 200 python3 benchmarks/gpu/panel_kernel_probe.py --leaf 32 --json $OUT/probe.jsonl 2>&1 | grep -v "one leaf"
run() {  # leaf, n, min rows, extra
  timeout 150 python3 -c "
import sys
from distla.linalg import _lu_loop
from distla.bench import main_argv
_lu_loop.PANEL_MIN_ROWS['gpu'] = $3
sys.exit(main_argv(['lu', '--device', 'gpu', '--n', '$2', '--nb', '1024', '--force-loop', '--inplace',
                    '--panel-leaf', '$1', '--reps', '2', '--json', '$OUT/lu.jsonl'] + '$4'.split()))
" 2>&1 | grep -E "distla|cusolver|Error|error" | cut -c1-140
}
run 0 16384 0 ""; run 32 16384 8192 "--no-ref"; run 32 16384 16384 "--no-ref"
run 0 32768 0 ""; run 32 32768 8192 "--no-ref"; run 32 32768 16384 "--no-ref"
