# GPU call I (session 2, last): every GPU test on 2 GPUs after the session's changes, and RBT
# mixed at n=65536 with the early hand-over to float64 GENP.
. tests/gpu/device_env.sh
O=${OUT:-/tmp/out}; mkdir -p $O
# (as run in session 2 this line selected the whole suite and hit its 300 s limit before the end;
#  per-module GPU runs are in run_f/g/h.sh and the session-2 note; run modules separately)
timeout 300 $M -n 2 python3 -m pytest --with-mpi -m mpi -q --color=no -p no:cacheprovider -k "gpu or cuda or tf32" tests/ 2>&1 | tail -3
timeout 60 python3 -m pytest -q --color=no -p no:cacheprovider -k "gpu or cuda" tests/ 2>&1 | tail -2
R="python3 -m distla.bench rbt --device gpu --json $O/rbt.jsonl --no-ref --no-gepp"
timeout 150 $M -n 2 $R --grid 2x1 --n 65536 --nb 1024 --reps 1 --precision mixed 2>&1 | tee $O/rbt2.txt | grep "^rbt n="
