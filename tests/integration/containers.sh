#!/usr/bin/env bash
# The container images built and run (an integration test, outside the unit suite; .ci/run runs
# it as its own step).
#
#   bash tests/integration/containers.sh
#
# With no registry for base images, the base is made offline from Debian's packages and
# imported, then the Dockerfile's targets are built on it and run, exactly as the README's
# "Containers" section shows:
#
#   mmdebstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
#       --customize-hook='upload /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt' \
#       bookworm base.tar
#   podman import base.tar localhost/distla-base:bookworm
#   podman build --build-arg CPU_IMAGE=localhost/distla-base:bookworm --target cpu -t distla:cpu .
#   launch/container.sh --cpu distla generate --kind spd --n 2000 --out A.npy
#   launch/container.sh --cpu mpiexec -n 2 distla solve --matrix A.npy        # SRESID checked
#   podman build --build-arg CPU_IMAGE=localhost/distla-base:bookworm --target test -t distla:test .
#   podman run --rm -e DISTLA_TEST_RANKS="1 2" -e PYTEST_ADDOPTS="$SUBSET" distla:test  # see below
#   podman build --build-arg CUDA_IMAGE=localhost/distla-base:bookworm --target gpu -t distla:gpu .
#   podman run --rm distla:gpu mpiexec -n 2 distla info   # no GPU here: CPU ranks, CuPy imported
#
# The base also gets the host's CA bundle (a TLS proxy's root, if any), so pip inside the builds
# trusts what the host trusts. It is kept between runs (CONTAINER_TEST_FRESH_BASE=1 remakes it);
# the images built here (and their intermediate layers) are removed at exit (CONTAINER_TEST_KEEP=1
# keeps them).
#
# Podman is tried as configured first; where that cannot run a container (e.g. inside a
# sandbox: no cgroup v2, rlimits that cannot be raised) the script writes a containers.conf
# (cgroupfs, file events, runc, host network, the current rlimits) and exports
# CONTAINERS_CONF, which launch/container.sh's podman then reads too. It prints the settings used.
#
# Needs root, podman and mmdebstrap (installed with apt-get when missing). Where that is
# impossible it prints "SKIPPED: <reason>" and exits 0; any other failure exits 1.
# CONTAINER_TEST_GPU=0 skips the gpu target (a few minutes: it compiles mpi4py).
set -euo pipefail
trap 'exit 143' TERM INT   # so that the EXIT trap below cleans up on a timeout

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
ROOT=$(pwd)
T0=$SECONDS
say() { echo "container-test [$((SECONDS - T0))s]: $*"; }
skip() { echo "container-test: SKIPPED: $*"; exit 0; }
die() { echo "container-test: FAILED: $*" >&2; exit 1; }

[[ $(id -u) == 0 ]] || skip "needs root (mmdebstrap, rootful podman)"

# ---- packages -----------------------------------------------------------------------------------
PKGS=(podman mmdebstrap runc uidmap ca-certificates)
if ! command -v podman >/dev/null 2>&1 || ! command -v mmdebstrap >/dev/null 2>&1 || ! command -v runc >/dev/null 2>&1; then
    command -v apt-get >/dev/null 2>&1 || skip "podman/mmdebstrap missing and there is no apt-get"
    say "installing ${PKGS[*]}"
    export DEBIAN_FRONTEND=noninteractive
    if ! timeout 600 apt-get install -y -q --no-install-recommends "${PKGS[@]}" >/tmp/distla-containers-apt.log 2>&1; then
        timeout 300 apt-get update -q >>/tmp/distla-containers-apt.log 2>&1 || true
        timeout 600 apt-get install -y -q --no-install-recommends "${PKGS[@]}" >>/tmp/distla-containers-apt.log 2>&1 ||
            { tail -5 /tmp/distla-containers-apt.log; skip "cannot install ${PKGS[*]} (no package access?)"; }
    fi
fi

D=$(mktemp -d /tmp/distla-containers.XXXXXX)
BASE=localhost/distla-base:bookworm
IMAGES=(distla:cpu distla:test distla:gpu)
OK=""
BEFORE=$(podman images -a -q --no-trunc 2>/dev/null | sort -u || true)
cleanup() {
    set +e
    if [[ -z ${CONTAINER_TEST_KEEP:-} ]]; then
        # the images built here, and their intermediate layers; not the base, not older images
        podman rmi -f "${IMAGES[@]}" >/dev/null 2>&1
        local base new
        base=$(podman image inspect -f '{{.Id}}' "$BASE" 2>/dev/null)
        new=$(comm -13 <(echo "$BEFORE") <(podman images -a -q --no-trunc 2>/dev/null | sort -u) | grep -vx "sha256:${base:-none}")
        [[ -n $new ]] && podman rmi -f $new >/dev/null 2>&1
    fi
    [[ -n $OK ]] || { for f in "$D"/*.log; do [[ -s $f ]] && { echo "----- tail of $f -----" >&2; tail -n 30 "$f" >&2; }; done; }
    rm -rf "$D"
}
trap cleanup EXIT

# ---- the base image: Debian minbase + python3, made offline -----------------------------------------
if [[ -n ${CONTAINER_TEST_FRESH_BASE:-} ]] || ! podman image exists "$BASE" 2>/dev/null; then
    say "mmdebstrap (Debian bookworm minbase + python3) ..."
    timeout 900 mmdebstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
        --customize-hook='upload /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt' \
        bookworm "$D/base.tar" >"$D/mmdebstrap.log" 2>&1 || die "mmdebstrap failed"
    podman import "$D/base.tar" "$BASE" >"$D/import.log" 2>&1 || die "podman import failed"
    rm -f "$D/base.tar"
    say "base image $BASE made"
else
    say "reusing base image $BASE (CONTAINER_TEST_FRESH_BASE=1 remakes it)"
fi

# ---- podman settings that can run a container here ------------------------------------------------
runs() { timeout 120 podman run --rm "$BASE" python3 -c "print('ok')" >"$D/probe.log" 2>&1; }
if runs; then
    say "podman runs containers as configured"
else
    say "podman as configured cannot run a container ($(tail -n 1 "$D/probe.log")); trying sandbox settings"
    nofile_s=$(ulimit -Sn) nofile_h=$(ulimit -Hn) nproc=$(ulimit -Hu)
    [[ $nproc == unlimited || $nproc -gt 32768 ]] && nproc=32768
    [[ $nofile_s == unlimited ]] && nofile_s=1048576
    [[ $nofile_h == unlimited ]] && nofile_h=1048576
    runtime=""
    command -v runc >/dev/null 2>&1 && runtime='runtime = "runc"'
    cat >"$D/containers.conf" <<EOF
[containers]
netns = "host"
default_ulimits = ["nofile=$nofile_s:$nofile_h", "nproc=$nproc:$nproc"]
[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
$runtime
EOF
    export CONTAINERS_CONF=$D/containers.conf
    runs || die "podman cannot run a container with $CONTAINERS_CONF either: $(tail -n 3 "$D/probe.log")"
    say "podman runs containers with CONTAINERS_CONF=$CONTAINERS_CONF:"
    sed 's/^/    /' "$CONTAINERS_CONF"
fi
export CONTAINER_ENGINE=podman

# ---- cpu target: build, then a 2-rank solve through launch/container.sh --------------------------------
build() {   # build TARGET ARG=VALUE
    local t=$SECONDS
    podman build --build-arg "$2" --target "$1" -t "distla:$1" . >"$D/build-$1.log" 2>&1 ||
        die "building target $1 failed"
    say "built distla:$1 in $((SECONDS - t))s"
}
build cpu CPU_IMAGE=$BASE

mkdir -p "$D/work"
cd "$D/work"
"$ROOT/launch/container.sh" --cpu distla generate --kind spd --n 2000 --out A.npy >"$D/generate.log" 2>&1 ||
    die "distla generate in distla:cpu failed"
t=$SECONDS
timeout 300 "$ROOT/launch/container.sh" --cpu mpiexec -n 2 distla solve --matrix A.npy >"$D/solve.log" 2>&1 ||
    die "the 2-rank solve in distla:cpu failed (exit $?)"
grep -qE 'grid 1x2 \(2 ranks\)' "$D/solve.log" || die "the solve did not run on 2 ranks"
grep -qE 'scaled residual .*= *[0-9.eE+-]+ +PASS' "$D/solve.log" || die "no passing scaled residual in the solve's output"
say "2-rank solve in distla:cpu ($((SECONDS - t))s): $(grep -m1 'scaled residual' "$D/solve.log")"
cd "$ROOT"

# ---- test target: its default command on a quick subset --------------------------------------------
build test CPU_IMAGE=$BASE
SUBSET="tests/test_dockerfile.py tests/test_launch_check.py tests/test_launchers.py tests/test_grid.py tests/test_cholesky.py"
t=$SECONDS
timeout 900 podman run --rm -e DISTLA_TEST_RANKS="1 2" -e PYTEST_ADDOPTS="$SUBSET" distla:test \
    >"$D/test.log" 2>&1 || die "the test image's default command failed"
summary=$(tail -n 1 "$D/test.log")
[[ $summary =~ ^[1-9][0-9]*\ passed,\ 0\ failed ]] || die "unexpected test summary: $summary"
say "distla:test default command on $SUBSET ($((SECONDS - t))s): $summary"

# ---- gpu target: builds from a plain Debian base; imports work without a GPU -------------------------
if [[ ${CONTAINER_TEST_GPU:-1} == 0 ]]; then
    say "gpu target skipped (CONTAINER_TEST_GPU=0)"
else
    build gpu CUDA_IMAGE=$BASE
    # Open MPI and the mpi4py compiled against it, CuPy importable (no device: CPU ranks)
    out=$(timeout 300 podman run --rm distla:gpu mpiexec -n 2 distla info 2>&1) ||
        die "mpiexec -n 2 distla info in distla:gpu failed: $out"
    grep -qE '^cupy +[0-9]' <<<"$out" || die "no CuPy in distla:gpu: $out"
    [[ $(grep -cE '^ +[01] +[^ ]+ +[01] +\(0,[01]\)' <<<"$out") == 2 ]] || die "distla info did not list 2 ranks: $out"
    say "distla:gpu: mpiexec -n 2 distla info ran 2 ranks (Open MPI, $(grep -m1 -E '^cupy' <<<"$out" | tr -s ' '))"
fi

OK=1
say "PASSED"
