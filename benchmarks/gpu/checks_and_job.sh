#!/usr/bin/env bash
# On one GPU machine, from the repository root, with the previous release's tree in .base/
# (git archive <commit> --prefix=.base/ | tar x) and .whl/ holding pytest-mpi:
#   bash benchmarks/gpu/checks_and_job.sh
# 1. the GPU tests of the solvers, pblas, validation and I/O;
# 2. Cholesky and LU n=32768 nb=1024 on one GPU, old tree and new tree in the same call,
#    cuSOLVER beside (the benchmarks' own reference row);
# 3. the whole job: generate n=32768 (8 CPU ranks) and 'distla solve --device gpu' twice
#    (cold: empty kernel cache; warm), old and new tree.
. benchmarks/gpu/device_env.sh
O=${OUT:-/tmp/out}; mkdir -p "$O"
NEW=$PWD:/tmp/site; OLD=$PWD/.base:/tmp/site
echo "== tests"
timeout 300 $M -n 1 python3 -m pytest --with-mpi -m mpi -q --color=no -p no:cacheprovider \
    --timeout 150 -k "gpu or tf32" tests/test_lu.py tests/test_cholesky.py tests/test_rbt.py \
    tests/test_pblas.py tests/test_validate.py tests/test_io.py > "$O/tests.log" 2>&1
echo "tests rc=$?"; tail -2 "$O/tests.log"
cat > /tmp/gpu_validate.py <<'PY'
import numpy as np, warnings
from distla import DistMatrix, ProcessGrid, LinAlgWarning
from distla.linalg import solve, rcond, lu_factor, cholesky
g = ProcessGrid(1, 1)
n = 3000
r = np.random.default_rng(0)
a = r.standard_normal((n, n)); a[7, 3] = np.nan
A = DistMatrix.from_global(g, a, block=256, device="gpu")
B = DistMatrix.from_global(g, np.ones((n, 1)), block=256, device="gpu")
try:
    solve(A, B); print("NaN: NOT caught")
except ValueError as e:
    print("NaN caught:", e)
s = r.standard_normal((n, n)); s = s @ s.T + n * np.eye(n)
S = DistMatrix.from_global(g, s, block=256, device="gpu")
X = solve(S, B, method="cholesky")
print("chol residual", float(np.abs(s @ X.to_global(0) - 1).max()))
print("rcond chol", rcond(S, cholesky(S)), "true", 1 / np.linalg.cond(s, 1))
ns = s.copy(); ns[5, 9] += 1.0
try:
    cholesky(DistMatrix.from_global(g, ns, block=256, device="gpu")); print("asym NOT caught")
except ValueError as e:
    print("asym caught:", str(e)[:80])
gm = r.standard_normal((n, n))
G = DistMatrix.from_global(g, gm, block=256, device="gpu")
print("rcond lu", rcond(G, lu_factor(G)), "true", 1 / np.linalg.cond(gm, 1))
PY
timeout 120 $M -n 1 python3 /tmp/gpu_validate.py 2>&1 | tail -6
echo "== factorizations, old tree then new tree (same call)"
for T in OLD NEW; do
  P=${!T}
  for K in cholesky lu; do
    timeout 150 $M -n 1 env PYTHONPATH=$P python3 -m distla.bench $K --device gpu \
        --n 32768 --nb 1024 --reps 3 --no-check --json "$O/fact_$T.jsonl" 2>&1 | grep -E "distla|cusolver|cupy" | tail -3
  done
done
echo "== whole job"
now() { date +%s.%N; }
cd /tmp
t0=$(now)
timeout 150 $M -n 8 env PYTHONPATH=$NEW python3 -m distla generate --kind spd --n 32768 \
    --out /tmp/A.npy 2>&1 | tail -2
echo "generate n=32768 on 8 ranks: $(python3 -c "print(round($(now) - $t0, 2))") s"
t0=$(now); python3 -c "import numpy as np; np.load('/tmp/A.npy')"
echo "np.load of the same file (one process): $(python3 -c "print(round($(now) - $t0, 2))") s"
for T in OLD NEW; do
  P=${!T}
  C=/tmp/cupy_cache_$T; rm -rf $C
  for run in cold warm; do
    t0=$(now)
    timeout 200 $M -n 1 env PYTHONPATH=$P CUPY_CACHE_DIR=$C \
        python3 -m distla solve --matrix /tmp/A.npy --method cholesky --device gpu --nb 1024 \
        --json "$O/job_$T.jsonl" 2>&1 | grep -E "^(read|make|solve|residual|total|scaled|condition)"
    echo "$T $run: whole command $(python3 -c "print(round($(now) - $t0, 2))") s"
  done
done
