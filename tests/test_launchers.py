"""launch/container.sh and launch/slurm.sbatch against fake engines and a fake srun (the real
ones run in tests/integration/, outside the unit suite)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="bash scripts")


def fake_bin(tmp_path, **scripts):
    """A directory of executables NAME whose body is the given bash text; returns it."""
    d = tmp_path / "bin"
    d.mkdir(exist_ok=True)
    for name, body in scripts.items():
        f = d / name
        f.write_text("#!/usr/bin/env bash\n" + body + "\n")
        f.chmod(0o755)
    return d


def env_with(bindir, **extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM_", "SRUN_", "CONTAINER_ENGINE", "DISTLA_"))}
    env["PATH"] = f"{bindir}{os.pathsep}{os.path.dirname(sys.executable)}{os.pathsep}/usr/bin:/bin"
    env.update(extra)
    return env


def container(tmp_path, *args, **env):
    bindir = env.pop("bindir")
    return subprocess.run(["bash", str(ROOT / "launch" / "container.sh"), "--dry-run", *args],
                          env=env_with(bindir, **env), capture_output=True, text=True,
                          timeout=60, cwd=tmp_path)


def test_container_engine_must_answer(tmp_path):
    # docker is installed but its daemon is down; podman answers: podman is chosen.
    b = fake_bin(tmp_path, docker="exit 1", podman="exit 0", apptainer="exit 0")
    p = container(tmp_path, "--cpu", "distla", "info", bindir=b)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("podman run") and "distla:cpu distla info" in p.stdout
    # nothing answers: a clear error, no run
    b = fake_bin(tmp_path, docker="exit 1", podman="exit 1", apptainer="exit 1",
                 singularity="exit 1")
    p = container(tmp_path, "distla", "info", bindir=b)
    assert p.returncode == 2 and "no container engine answers" in p.stderr
    assert "docker" in p.stderr and "podman" in p.stderr


@pytest.mark.parametrize("engine", ["docker", "podman"])
def test_container_flags(tmp_path, engine):
    b = fake_bin(tmp_path, **{engine: "exit 0"})
    gpu = container(tmp_path, "mpiexec", "-n", "2", "distla", "info", bindir=b).stdout
    assert "--ipc=host" in gpu and "--shm-size" not in gpu  # podman refuses both together
    assert ("--gpus all" if engine == "docker" else "--device nvidia.com/gpu=all") in gpu
    assert "--ulimit memlock=-1" in gpu and f"{tmp_path}:/work" in gpu
    cpu = container(tmp_path, "--cpu", "--shm", "4g", "distla", "info", bindir=b).stdout
    assert "--shm-size=4g" in cpu and "--ipc=host" not in cpu
    assert "gpu" not in cpu.replace("distla:cpu", "") and "memlock" not in cpu


SRUN = """
if [[ $1 == --mpi=list ]]; then
    printf 'MPI plugin types are...\\n\\tpmix\\n\\tnone\\n\\tpmi2\\n'; exit 0
fi
{ printf '%q ' srun "$@"; echo; } >> "$SRUN_LOG"
exit "${FAKE_SRUN_RC:-0}"
"""


def sbatch(tmp_path, *cmd, **env):
    b = fake_bin(tmp_path, srun=SRUN)
    log = tmp_path / "srun.log"
    log.unlink(missing_ok=True)
    base = dict(SRUN_LOG=str(log), SLURM_JOB_ID="7", SLURM_NTASKS="2",
                SLURM_CPUS_PER_TASK="1", SLURM_JOB_NUM_NODES="1")
    base.update(env)
    p = subprocess.run(["bash", str(ROOT / "launch" / "slurm.sbatch"), *cmd],
                       env=env_with(b, **base), capture_output=True, text=True, timeout=120,
                       cwd=tmp_path)
    calls = log.read_text().splitlines() if log.exists() else []
    return p, calls


def test_slurm_cpu_job_picks_pmi_of_the_mpi(tmp_path):
    from mpi4py import MPI
    lib = MPI.Get_library_version()
    want = "pmix" if "Open MPI" in lib else "pmi2" if "MPICH" in lib else None
    p, calls = sbatch(tmp_path, "distla", "info")
    assert p.returncode == 0, p.stderr
    assert len(calls) == 2, calls  # the one-MPI-job check, then the command
    assert all("--gpus" not in c and "--gpu-bind" not in c for c in calls)  # none asked for
    if want:
        assert all(f"--mpi={want}" in c for c in calls), calls
    assert calls[1].rstrip().endswith("distla info")
    assert "CPU ranks" in p.stdout


def test_slurm_gpu_job_and_override(tmp_path):
    p, calls = sbatch(tmp_path, "distla", "info", SLURM_GPUS_PER_TASK="1", SRUN_MPI="pmix",
                      SRUN_CHECK="0")
    assert p.returncode == 0, p.stderr
    assert len(calls) == 1 and "--mpi=pmix" in calls[0]
    assert "--gpus-per-task=1 --gpu-bind=closest" in calls[0] and "GPU ranks" in p.stdout


def test_slurm_gpus_per_node(tmp_path):
    p, calls = sbatch(tmp_path, "distla", "info", SLURM_GPUS_ON_NODE="4")
    assert p.returncode == 0, p.stderr
    assert "GPU ranks" in p.stdout and "--gpus-per-task" not in calls[-1]


def test_slurm_refuses_tasks_that_are_not_one_job(tmp_path):
    p, calls = sbatch(tmp_path, "distla", "info", SRUN_MPI="none", FAKE_SRUN_RC="3")
    assert p.returncode == 3 and len(calls) == 1
    assert "did not start as one MPI job under srun --mpi=none" in p.stderr
    assert "SRUN_MPI=" in p.stderr


def _commands(text):
    """Shell lines of text: continuations joined, comments and leading '#   ' dropped."""
    lines, buf = [], ""
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("#"):
            line = line[1:].strip()
        if line.endswith("\\"):
            buf += line[:-1].strip() + " "
            continue
        line = re.split(r"\s{2,}#", buf + line)[0].strip()
        buf = ""
        if line:
            lines.append(" ".join(line.split()))
    return lines


@pytest.mark.parametrize("script, section", [("slurm.sh", "## Launching on a cluster"),
                                             ("containers.sh", "## Containers")])
def test_readme_shows_the_ci_commands(script, section):
    """The README's CI code block in each section is the integration script's own list."""
    src = (ROOT / "tests" / "integration" / script).read_text()
    readme = (ROOT / "README.md").read_text()
    body = readme[readme.index(section):]
    body = body[:body.find("\n## ", 4)] if "\n## " in body[4:] else body
    subset = src.split('SUBSET="', 1)[1].split('"', 1)[0] if 'SUBSET="' in src else ""
    header = src.split("set -euo pipefail", 1)[0].replace("$SUBSET", subset)
    blocks = [b.split("```", 1)[0] for b in body.split("```bash\n")[1:]]
    ci = max(blocks, key=lambda b: sum(c in _commands(header) for c in _commands(b)))
    cmds = _commands(ci)
    assert len(cmds) >= 3
    missing = [c for c in cmds if c not in _commands(header)]
    assert not missing, f"README commands not run by tests/integration/{script}: {missing}"
    for c in cmds:   # and the script runs them (the head word of each appears in its body)
        assert c.split()[0] in src.split("set -euo pipefail", 1)[1], c


def test_slurm_script_outside_an_allocation_says_so(tmp_path):
    """Run by hand (no sbatch), the script died on 'SLURM_NTASKS: unbound variable'."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    p = subprocess.run(["bash", str(ROOT / "launch" / "slurm.sbatch"), "distla", "info"],
                       env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert p.returncode == 2 and "not inside a SLURM job allocation" in p.stderr, p.stderr


def test_local_help_is_the_usage_only():
    p = subprocess.run(["bash", str(ROOT / "launch" / "local.sh"), "--help"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and "launch/local.sh [-n RANKS]" in p.stdout
    assert "set -euo" not in p.stdout


def pbs(tmp_path, **env):
    bindir = fake_bin(tmp_path, mpiexec='[[ $1 == --version ]] && exit 0; '
                                         'printf "%s\\n" "$@" > "$ARGS_OUT"')
    return subprocess.run(["bash", str(ROOT / "launch" / "pbs.sh")],
                          env=env_with(bindir, MPIEXEC=str(bindir / "mpiexec"),
                                       ARGS_OUT=str(tmp_path / "args"), **env),
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)


def test_pbs_launcher_outside_a_job_and_quoted_arguments(tmp_path):
    """pbs.sh outside a PBS job ran one rank locally without a word (slurm.sbatch refuses),
    a missing node file gave bash syntax errors, and DISTLA_ARGS was split at every space (a
    quoted path with spaces broke into pieces)."""
    p = pbs(tmp_path, DISTLA_ARGS="distla info")
    assert p.returncode == 2 and "not inside a PBS job" in p.stderr
    p = pbs(tmp_path, DISTLA_ARGS="distla info", PBS_JOBID="7", PBS_NODEFILE="/nonexistent")
    assert p.returncode == 2 and "PBS_NODEFILE" in p.stderr and "syntax error" not in p.stderr
    nodes = tmp_path / "nodes"
    nodes.write_text("n1\nn1\nn2\nn2\n")
    p = pbs(tmp_path, DISTLA_ARGS='distla.py solve --matrix "sp dir/A b.npy" -O tol=1e-3',
            PBS_JOBID="7", PBS_NODEFILE=str(nodes))
    assert p.returncode == 0, p.stderr
    args = (tmp_path / "args").read_text().splitlines()
    assert args[:2] == ["-n", "4"] and "sp dir/A b.npy" in args and args[-1] == "tol=1e-3"
    p = pbs(tmp_path, DISTLA_ARGS='distla solve --matrix "unbalanced', PBS_JOBID="7",
            PBS_NODEFILE=str(nodes))
    assert p.returncode == 2 and "not a valid command line" in p.stderr


def test_slurm_launcher_without_srun(tmp_path):
    """Inside an allocation with no srun on PATH the script blamed PMI plugins."""
    bindir = fake_bin(tmp_path, true="exit 0")
    env = env_with(bindir, SLURM_JOB_ID="5")
    env["PATH"] = f"{bindir}{os.pathsep}{os.path.dirname(sys.executable)}"
    if any(os.path.exists(os.path.join(d, "srun")) for d in env["PATH"].split(os.pathsep)):
        pytest.skip("srun found on the restricted PATH")
    import shutil
    p = subprocess.run([shutil.which("bash"), str(ROOT / "launch" / "slurm.sbatch"), "distla",
                        "info"], env=env, capture_output=True, text=True, timeout=60,
                       cwd=tmp_path)
    assert p.returncode == 2 and "srun is not on PATH" in p.stderr, p.stderr


def test_local_launcher_gpu_with_a_rank_count_but_no_gpu(tmp_path):
    """`local.sh -n 2 --gpu` on a machine without GPUs was not refused (`--gpu` alone was)."""
    env = env_with(fake_bin(tmp_path, mpiexec="exit 0"), CUDA_VISIBLE_DEVICES="")
    p = subprocess.run(["bash", str(ROOT / "launch" / "local.sh"), "-n", "2", "--gpu",
                        "--dry-run", "distla", "info"], env=env, capture_output=True,
                       text=True, timeout=60, cwd=tmp_path)
    assert p.returncode == 2 and "--gpu but no GPU is visible" in p.stderr, p.stderr


def test_local_launcher_usage_errors_and_default_mode(tmp_path):
    """`local.sh -n` without a number ended with bash's `${2:?}` message and exit 1 (its other
    usage errors: exit 2, 'local.sh: ...'); CUDA_VISIBLE_DEVICES=0,1 on a machine whose
    nvidia-smi lists no GPU chose gpu mode (the help: gpu when nvidia-smi lists GPUs)."""
    local = str(ROOT / "launch" / "local.sh")
    bindir = fake_bin(tmp_path, mpiexec="exit 0", **{"nvidia-smi": "exit 0"})
    env = env_with(bindir, MPIEXEC=str(bindir / "mpiexec"))
    env.pop("CUDA_VISIBLE_DEVICES", None)
    for flag in ("-n", "--ranks", "-np"):
        p = subprocess.run(["bash", local, flag], env=env, capture_output=True, text=True,
                           timeout=60)
        assert p.returncode == 2 and f"local.sh: {flag} needs a number" in p.stderr, p.stderr
    p = subprocess.run(["bash", local, "--dry-run", "distla", "info"],
                       env={**env, "CUDA_VISIBLE_DEVICES": "0,1"}, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0 and "cpu mode" in p.stderr, p.stderr
    smi = fake_bin(tmp_path, **{"nvidia-smi": 'echo "GPU 0: H100 (UUID: x)"'})
    p = subprocess.run(["bash", local, "--dry-run", "distla", "info"],
                       env={**env_with(smi, MPIEXEC=str(bindir / "mpiexec")),
                            "CUDA_VISIBLE_DEVICES": "0,1"},
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and "2 rank(s), gpu mode" in p.stderr, p.stderr


def test_launcher_thread_counts_gpu_count_and_option_values(tmp_path):
    """Sweep 28: pbs.sh kept PBS Pro's OMP_NUM_THREADS (the chunk's ncpus: 4x too many
    threads per rank with 4 ranks) and did not pass MKL_NUM_THREADS to Open MPI's ranks;
    local.sh counted a trailing comma of CUDA_VISIBLE_DEVICES as a GPU and let Open MPI bind
    each of 1-2 CPU ranks (and their BLAS threads) to one core; container.sh --image without
    a value ended with bash's message and exit 1."""
    nodes = tmp_path / "nodes"
    nodes.write_text("n1\n" * 4)
    ompi = 'if [[ $1 == --version ]]; then echo "mpiexec (Open MPI) 4.1.5"; exit 0; fi; ' \
           'env | grep -E "^(OMP|MKL|OPENBLAS)_NUM_THREADS=" > "$ENV_OUT"; ' \
           'printf "%s\\n" "$@" > "$ARGS_OUT"'
    bindir = fake_bin(tmp_path, mpiexec=ompi)
    for given, want in (("32", "8"), ("", "8"), ("3", "3")):     # NCPUS=32, 4 ranks
        env = env_with(bindir, MPIEXEC=str(bindir / "mpiexec"), ARGS_OUT=str(tmp_path / "a"),
                       ENV_OUT=str(tmp_path / "e"), DISTLA_ARGS="distla info", PBS_JOBID="7",
                       PBS_NODEFILE=str(nodes), NCPUS="32", DISTLA_CPU="1",
                       OMP_NUM_THREADS=given)
        for k in ("MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):   # (a user's value is kept:
            env.pop(k, None)                                    # the test runner sets 1)
        p = subprocess.run(["bash", str(ROOT / "launch" / "pbs.sh")], env=env,
                           capture_output=True, text=True, timeout=60, cwd=tmp_path)
        assert p.returncode == 0, p.stderr
        seen = dict(ln.split("=", 1) for ln in (tmp_path / "e").read_text().split())
        assert seen["OMP_NUM_THREADS"] == want and seen["MKL_NUM_THREADS"] == want, seen
        assert "MKL_NUM_THREADS" in (tmp_path / "a").read_text().split()
    local = str(ROOT / "launch" / "local.sh")
    smi = 'echo "GPU 0: H100 (UUID: a)"; echo "GPU 1: H100 (UUID: b)"; echo "GPU 2: H100 (UUID: c)"'
    bindir2 = fake_bin(tmp_path, **{"nvidia-smi": smi})
    p = subprocess.run(["bash", local, "--dry-run", "distla", "info"],
                       env=env_with(bindir2, MPIEXEC=str(bindir / "mpiexec"),
                                    CUDA_VISIBLE_DEVICES="1,2,"),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and "2 rank(s), gpu mode" in p.stderr, p.stderr
    p = subprocess.run(["bash", local, "-n", "2", "--cpu", "--dry-run", "distla", "info"],
                       env=env_with(bindir, MPIEXEC=str(bindir / "mpiexec")),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and "--bind-to none" in p.stdout + p.stderr, p.stdout + p.stderr
    for opt in ("--image", "--engine", "--shm"):
        p = subprocess.run(["bash", str(ROOT / "launch" / "container.sh"), opt],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 2 and f"{opt} needs a value" in p.stderr, p.stderr
