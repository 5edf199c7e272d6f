#!/usr/bin/env bash
# A real one-node SLURM cluster running launch/slurm.sbatch (an integration test, outside the
# unit suite; .ci/run runs it as its own step).
#
#   bash tests/integration/slurm.sh
#
# Starts munged, MariaDB + slurmdbd (so that sacct has records), slurmctld and slurmd, all
# private to a temporary directory (own sockets, own ports, own munge key; select/cons_tres,
# proctrack/linuxproc, no cgroups), then submits CPU jobs on 2 tasks exactly as the README's
# "Launching on a cluster" section shows:
#
#   distla generate --kind spd --n 2000 --out A.npy
#   sbatch --ntasks-per-node=2 --cpus-per-task=1 launch/slurm.sbatch distla solve --matrix A.npy
#   sbatch --ntasks-per-node=2 --cpus-per-task=1 launch/slurm.sbatch examples/spd_solve.py --n 1000
#
# and checks each job's scaled residual (printed, PASS), its exit code and its sacct state
# (COMPLETED 0:0). Two more jobs must be refused: SRUN_MPI=none (the tasks do not form one MPI
# job: the script's check stops it, exit 3) and the same with SRUN_CHECK=0 (distla's own check,
# exit 2). Everything started is stopped by its process id and the directory removed at exit.
#
# Needs root and the Debian packages slurm-wlm, munge, slurmdbd and mariadb-server (installed
# with apt-get when missing). Where that is impossible it prints "SKIPPED: <reason>" and exits
# 0; any other failure exits 1. The python environment with distla and mpi4py is $DISTLA_VENV,
# else the active $VIRTUAL_ENV, else the python on PATH.
#
# Environment: SLURM_TEST_PORT (first of four TCP ports on 127.0.0.1, default 16817),
# SLURM_TEST_KEEP=1 (keep the directory), SLURM_TEST_N (matrix order, default 2000).
set -euo pipefail
trap 'exit 143' TERM INT   # so that the EXIT trap below cleans up on a timeout

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
ROOT=$(pwd)
T0=$SECONDS
say() { echo "slurm-test [$((SECONDS - T0))s]: $*"; }
skip() { echo "slurm-test: SKIPPED: $*"; exit 0; }
die() { echo "slurm-test: FAILED: $*" >&2; exit 1; }

[[ $(id -u) == 0 ]] || skip "needs root (starts munged, slurmctld, slurmd, slurmdbd, mariadbd)"

VENV=${DISTLA_VENV:-${VIRTUAL_ENV:-}}
if [[ -n $VENV ]]; then PYTHON=$VENV/bin/python; else PYTHON=$(command -v python3 || command -v python); fi
"$PYTHON" -c "import distla, mpi4py" 2>/dev/null || die "no distla/mpi4py in $PYTHON (activate the venv or set DISTLA_VENV)"

# ---- packages -----------------------------------------------------------------------------------
PKGS=(slurm-wlm munge slurmdbd mariadb-server)
need_install() {
    local c
    for c in munged slurmctld slurmd slurmdbd sbatch sacct mariadbd mariadb-install-db; do
        command -v "$c" >/dev/null 2>&1 || return 0
    done
    return 1
}
if need_install; then
    command -v apt-get >/dev/null 2>&1 || skip "SLURM is not installed and there is no apt-get"
    say "installing ${PKGS[*]}"
    export DEBIAN_FRONTEND=noninteractive
    if ! timeout 600 apt-get install -y -q --no-install-recommends "${PKGS[@]}" >/tmp/distla-slurm-apt.log 2>&1; then
        timeout 300 apt-get update -q >>/tmp/distla-slurm-apt.log 2>&1 || true
        timeout 600 apt-get install -y -q --no-install-recommends "${PKGS[@]}" >>/tmp/distla-slurm-apt.log 2>&1 ||
            { tail -5 /tmp/distla-slurm-apt.log; skip "cannot install ${PKGS[*]} (no package access?)"; }
    fi
    need_install && die "packages installed but commands still missing"
fi

# ---- a private directory, ports, and cleanup --------------------------------------------------------
D=$(mktemp -d /tmp/distla-slurm.XXXXXX)
chmod 755 "$D"      # munged wants its socket's directory searchable by all
mkdir -p "$D"/{state,spool,log,db,work}
chmod 700 "$D"/state "$D"/spool
PIDS=()             # pid files of the daemons started here, in start order
OK=""

cleanup() {
    set +e
    if [[ -n ${SLURM_CONF:-} ]] && [[ -f $D/slurmctld.pid ]]; then
        scancel --quiet -u root >/dev/null 2>&1
    fi
    local i f pid
    for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do
        f=${PIDS[i]}
        [[ -f $f ]] || continue
        pid=$(cat "$f" 2>/dev/null)
        [[ $pid =~ ^[0-9]+$ ]] && kill "$pid" 2>/dev/null
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
        kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null
    done
    if [[ -z $OK ]]; then
        for f in "$D"/log/*.log "$D"/work/*.out; do
            [[ -s $f ]] || continue
            echo "----- tail of $f -----" >&2
            tail -n 25 "$f" >&2
        done
    fi
    if [[ -n ${SLURM_TEST_KEEP:-} ]]; then echo "slurm-test: kept $D"; else rm -rf "$D"; fi
}
trap cleanup EXIT

port_free() { "$PYTHON" -c "import socket,sys; s=socket.socket(); s.bind(('127.0.0.1', int(sys.argv[1])))" "$1" 2>/dev/null; }
P=${SLURM_TEST_PORT:-16817}
for _ in 1 2 3 4 5 6 7 8; do
    if port_free "$P" && port_free $((P + 1)) && port_free $((P + 2)) && port_free $((P + 3)); then break; fi
    P=$((P + 10))
done
CTLD_PORT=$P SLURMD_PORT=$((P + 1)) DBD_PORT=$((P + 2)) DB_PORT=$((P + 3))
NODE=$(hostname -s)
CPUS=$(nproc)

wait_for() {   # wait_for SECONDS DESCRIPTION COMMAND...
    local limit=$1 what=$2 t=$SECONDS; shift 2
    until "$@" >/dev/null 2>&1; do
        ((SECONDS - t < limit)) || die "$what did not come up within ${limit}s"
        sleep 0.5
    done
}

# ---- munge ------------------------------------------------------------------------------------------
head -c 1024 /dev/urandom >"$D/munge.key"
chmod 600 "$D/munge.key"
munged --socket="$D/munge.sock" --key-file="$D/munge.key" --pid-file="$D/munged.pid" \
    --log-file="$D/log/munged.log" --seed-file="$D/munged.seed" --num-threads=4
PIDS+=("$D/munged.pid")
wait_for 20 munged bash -c "munge -S '$D/munge.sock' -n | unmunge -S '$D/munge.sock'"

# ---- MariaDB + slurmdbd (sacct) ----------------------------------------------------------------------
mariadb-install-db --no-defaults --datadir="$D/db" --user=root --auth-root-authentication-method=normal \
    --skip-test-db >"$D/log/mariadb-install.log" 2>&1 || die "mariadb-install-db failed"
mariadbd --no-defaults --datadir="$D/db" --user=root --socket="$D/mysql.sock" --port="$DB_PORT" \
    --bind-address=127.0.0.1 --pid-file="$D/mariadb.pid" --log-error="$D/log/mariadb.log" \
    --skip-name-resolve --innodb-buffer-pool-size=32M --innodb-log-file-size=16M \
    </dev/null >/dev/null 2>&1 &
PIDS+=("$D/mariadb.pid")
wait_for 60 mariadbd mariadb --no-defaults -S "$D/mysql.sock" -uroot -e "select 1"
DBPASS=$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
mariadb --no-defaults -S "$D/mysql.sock" -uroot -e "CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY '$DBPASS';
    GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"

export SLURM_CONF=$D/slurm.conf
cat >"$D/slurmdbd.conf" <<EOF
AuthType=auth/munge
AuthInfo=socket=$D/munge.sock
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$DBD_PORT
SlurmUser=root
LogFile=$D/log/slurmdbd.log
PidFile=$D/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=$DBPASS
StorageLoc=slurm_acct_db
EOF
chmod 600 "$D/slurmdbd.conf"

# ---- slurm.conf: one node, cons_tres, no cgroups ----------------------------------------------------
cat >"$SLURM_CONF" <<EOF
ClusterName=distlaci
SlurmctldHost=$NODE(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$D/munge.sock
CredType=cred/munge
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/spool
SlurmctldPidFile=$D/slurmctld.pid
SlurmdPidFile=$D/slurmd.pid
SlurmctldLogFile=$D/log/slurmctld.log
SlurmdLogFile=$D/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$DBD_PORT
AccountingStoragePass=$D/munge.sock
MpiDefault=none
ReturnToService=2
MinJobAge=600
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$CPUS State=UNKNOWN
PartitionName=ci Nodes=$NODE Default=YES MaxTime=30 State=UP
EOF

slurmdbd
PIDS+=("$D/slurmdbd.pid")
wait_for 60 slurmdbd sacctmgr -n list cluster
slurmctld
PIDS+=("$D/slurmctld.pid")
wait_for 60 slurmctld scontrol ping
slurmd -N "$NODE"
PIDS+=("$D/slurmd.pid")
wait_for 90 "node $NODE" bash -c "sinfo -h -n '$NODE' -o %t | grep -qx idle"
say "cluster up: $(sinfo -h -o '%P %a %D %t %N'), $(srun --version), ports $CTLD_PORT-$DB_PORT"

# ---- the jobs (the README's commands) ---------------------------------------------------------------
cd "$D/work"
ln -s "$ROOT/launch" launch      # so that the commands below are the README's, word for word
ln -s "$ROOT/examples" examples
N=${SLURM_TEST_N:-2000}
export PATH=$(dirname "$PYTHON"):$PATH DISTLA_VENV=${VENV:-} OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
command -v distla >/dev/null 2>&1 || distla() { "$PYTHON" -m distla "$@"; }
distla generate --kind spd --n "$N" --out A.npy -q
J_SOLVE=$(sbatch --parsable --ntasks-per-node=2 --cpus-per-task=1 launch/slurm.sbatch distla solve --matrix A.npy)
J_EXAMPLE=$(sbatch --parsable --ntasks-per-node=2 --cpus-per-task=1 launch/slurm.sbatch examples/spd_solve.py --n 1000)
J_NONE=$(SRUN_MPI=none sbatch --parsable --ntasks-per-node=2 --cpus-per-task=1 launch/slurm.sbatch distla solve --matrix A.npy)
J_NONE2=$(SRUN_MPI=none SRUN_CHECK=0 sbatch --parsable --ntasks-per-node=2 --cpus-per-task=1 launch/slurm.sbatch distla solve --matrix A.npy)
ALL=("$J_SOLVE" "$J_EXAMPLE" "$J_NONE" "$J_NONE2")
say "submitted jobs ${ALL[*]}"

t=$SECONDS
while [[ -n $(squeue -h -j "$(IFS=,; echo "${ALL[*]}")" -o %i 2>/dev/null) ]]; do
    ((SECONDS - t < 300)) || die "jobs still queued or running after 300s: $(squeue)"
    sleep 1
done

# sacct STATE|EXITCODE of the job allocation (slurmdbd receives it shortly after the end)
acct() {
    local j=$1 want=$2 got="" t=$SECONDS
    while ((SECONDS - t < 60)); do
        got=$(sacct -n -X -P -j "$j" -o State,ExitCode 2>/dev/null | head -n 1)
        [[ $got =~ ^($want)$ ]] && break
        sleep 1
    done
    echo "$got"
}
FAIL=0
check() {   # check JOB NAME SACCT_REGEX OUTPUT_REGEX...
    local j=$1 name=$2 want=$3 out got p; shift 3
    out=distla-$j.out   # the script's #SBATCH --output
    got=$(acct "$j" "$want")
    if ! [[ $got =~ ^($want)$ ]]; then
        echo "slurm-test: job $j ($name): sacct says '$got', expected '$want'" >&2; FAIL=1
    fi
    for p in "$@"; do
        if ! grep -qE -- "$p" "$out"; then
            echo "slurm-test: job $j ($name): no line matching '$p' in its output" >&2; FAIL=1
        fi
    done
    say "job $j $name: sacct $got; $(grep -m1 -E 'scaled residual|did not|launcher started' "$out" | cut -c1-160)"
}
RES='scaled residual .*= *[0-9.eE+-]+ +PASS'
check "$J_SOLVE" solve "COMPLETED\|0:0" "$RES" "grid 1x2 \(2 ranks\)" "srun --mpi=pmi2|srun --mpi=pmix"
check "$J_EXAMPLE" example "COMPLETED\|0:0" 'scaled residual .*= *[0-9.eE+-]+ +\(PASSED' "grid 1x2 \(2 ranks"
check "$J_NONE" pmi-none "FAILED\|3:0" "did not start as one MPI job under srun --mpi=none.*SRUN_MPI=pmi"
# (exit 2 from distla, or 15 when srun's --kill-on-bad-exit ended the other task first)
check "$J_NONE2" pmi-none-distla "FAILED\|(2|15):0" "launcher started 2 tasks \(SLURM_STEP_NUM_TASKS=2\).*--mpi=pmi"
sacct -j "$(IFS=,; echo "${ALL[*]}")" -o JobID%12,JobName%16,State,ExitCode,Elapsed

((FAIL == 0)) || die "see above"
OK=1
say "PASSED (2 jobs solved and checked their residual; 2 bad launches refused)"
