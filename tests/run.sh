#!/usr/bin/env bash
# The whole distla test suite, in one command:
#
#   bash tests/run.sh [extra pytest args, e.g. -k expr]
#
# Stages: the serial tests (python -m pytest, tests not marked mpi), then the
# mpi-marked tests under mpiexec with 1, 2, 3 and 4 ranks.  Extra arguments go
# to every pytest invocation.  Ends with a line "N passed, M failed, K skipped"
# (totals over the stages; an MPI test counts once per stage, failed if it
# failed on any rank) and exits nonzero if any stage failed.
#
# Environment:
#   MPIEXEC                 launcher (default: the mpiexec next to the active python)
#   DISTLA_TEST_RANKS       rank counts for the MPI stages (default "1 2 3 4")
#   DISTLA_STAGE_TIMEOUT    seconds per stage (default 1200)
#   DISTLA_TEST_BUDGET      seconds for the whole run (default 4800); stages
#                           are cut short so the run never exceeds it
#   PYTHON                  python to use (default: python, else python3)
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

PYTHON=${PYTHON:-$(command -v python || command -v python3)}
PYDIR=$(dirname "$("$PYTHON" -c 'import sys; print(sys.executable)')")
MPIEXEC=${MPIEXEC:-$PYDIR/mpiexec}
RANKS=${DISTLA_TEST_RANKS:-1 2 3 4}
STAGE_TIMEOUT=${DISTLA_STAGE_TIMEOUT:-1200}
BUDGET=${DISTLA_TEST_BUDGET:-4800}

# One BLAS/OpenMP thread per rank; ranks yield the CPU while polling, which
# matters when there are more ranks than cores.
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
export MPIR_CVAR_POLLS_BEFORE_YIELD=1
export DISTLA_TEST_RUNNER=1
export PYTHONDONTWRITEBYTECODE=1

WORK=$(mktemp -d "${TMPDIR:-/tmp}/distla-tests.XXXXXX")
START=$SECONDS
STAGES=()
CODES=()

remaining() { echo $((BUDGET - (SECONDS - START))); }

# run_stage NAME CMD...   (exit code 5 = no tests collected counts as success)
run_stage() {
    local name=$1; shift
    local left limit rc
    left=$(remaining)
    limit=$((left < STAGE_TIMEOUT ? left : STAGE_TIMEOUT))
    STAGES+=("$name")
    if ((limit <= 0)); then
        echo "!!! $name: skipped, test budget of ${BUDGET}s used up" >&2
        CODES+=(124)
        return
    fi
    echo
    echo "===== $name: $* ====="
    mkdir -p "$WORK/$name"
    local t0=$SECONDS
    DISTLA_TEST_RESULTS="$WORK/$name.tsv" DISTLA_TEST_TMPDIR="$WORK/$name" \
        timeout -k 30 "$limit" "$@" </dev/null
    rc=$?
    ((rc == 5)) && rc=0
    if ((rc == 124 || rc == 137)); then
        echo "!!! $name: killed after ${limit}s (timeout)" >&2
    fi
    if ((rc != 0)); then
        # Show what the silenced ranks had to say.
        local log
        for log in "$WORK/$name"/rank*.log; do
            [[ -s $log ]] || continue
            echo "----- tail of $(basename "$log") -----" >&2
            tail -n 40 "$log" >&2
        done
    fi
    echo "===== $name: exit $rc, $((SECONDS - t0))s ====="
    CODES+=("$rc")
}

run_stage serial "$PYTHON" -m pytest -q -m "not mpi" "$@"

if [[ ! -x $MPIEXEC ]]; then
    echo "!!! no mpiexec at $MPIEXEC (install the test extra: pip install -e '.[test]', or set MPIEXEC)" >&2
    STAGES+=(mpi); CODES+=(127)
else
    for n in $RANKS; do
        run_stage "mpi-$n" "$MPIEXEC" -n "$n" "$PYTHON" -m pytest --with-mpi -m mpi -q \
            -p no:cacheprovider "$@"
    done
fi

echo
for c in "${CODES[@]}"; do
    if ((c != 0)); then echo "(per-rank logs and tmp dirs kept in $WORK)"; KEEP=1; break; fi
done
echo "===== summary ($((SECONDS - START))s) ====="
"$PYTHON" - "$WORK" "${#STAGES[@]}" "${STAGES[@]}" "${CODES[@]}" <<'EOF'
import sys
from pathlib import Path

work = Path(sys.argv[1])
n = int(sys.argv[2])
stages, codes = sys.argv[3:3 + n], [int(c) for c in sys.argv[3 + n:3 + 2 * n]]
tot = {"passed": 0, "failed": 0, "skipped": 0}
bad = False
for stage, code in zip(stages, codes):
    per_test = {}
    f = work / f"{stage}.tsv"
    if f.exists():
        for line in f.read_text(encoding="utf-8", errors="replace").splitlines():
            parts = line.split("\t", 2)
            if len(parts) != 3:
                continue
            _, outcome, nodeid = parts
            outcome = "failed" if outcome in ("failed", "error") else outcome
            prev = per_test.get(nodeid)
            rank_of = {"failed": 2, "passed": 1, "skipped": 0}
            if prev is None or rank_of.get(outcome, 0) > rank_of.get(prev, 0):
                per_test[nodeid] = outcome
    c = {k: sum(1 for o in per_test.values() if o == k) for k in tot}
    note = ""
    if code != 0 and c["failed"] == 0:
        # crashed, timed out or aborted before any failure was recorded
        c["failed"] = 1
        note = "  (stage error: no failing test recorded)"
    bad |= code != 0
    for k in tot:
        tot[k] += c[k]
    fails = sorted(t for t, o in per_test.items() if o == "failed")
    status = "ok" if code == 0 else f"FAILED (exit {code})"
    print(f"{stage:>8}: {status:<18} {c['passed']} passed, {c['failed']} failed, "
          f"{c['skipped']} skipped{note}")
    for t in fails:
        print(f"{'':>10}FAILED {t}")
print(f"{tot['passed']} passed, {tot['failed']} failed, {tot['skipped']} skipped")
sys.exit(1 if bad else 0)
EOF
status=$?
[[ -n ${KEEP:-} ]] || rm -rf "$WORK"
exit $status
