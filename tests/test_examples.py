"""The examples run under mpiexec on small problems and report a passing residual."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from distla.runtime import launcher_free_env

ROOT = Path(__file__).resolve().parents[1]
MPIEXEC = os.path.join(os.path.dirname(sys.executable), "mpiexec")

pytestmark = pytest.mark.skipif(not os.path.exists(MPIEXEC),
                                reason="no mpiexec next to the python (pip install 'distla[mpi]')")


def run(script, *args, n=4, cwd=None):
    env = launcher_free_env()   # not the pytest job's launcher state
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    p = subprocess.run([MPIEXEC, "-n", str(n), sys.executable, str(ROOT / "examples" / script),
                        *map(str, args)], env=env, cwd=cwd, capture_output=True, text=True,
                       timeout=240)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


def test_spd_solve():
    out = run("spd_solve.py", "--n", 300, "--nb", 32)
    assert "PASSED" in out and "grid 2x2" in out and out.count("scaled residual") == 1


def test_general_solve():
    out = run("general_solve.py", "--n", 120, "--nb", 16, n=3)
    for m in ("gepp", "calu", "rbt"):
        assert any(line.split()[:1] == [m] and line.endswith("PASSED")
                   for line in out.splitlines()), out


def test_solve_file(tmp_path):
    import scipy.io
    a = np.random.default_rng(0).standard_normal((60, 60)) + 60 * np.eye(60)
    scipy.io.mmwrite(tmp_path / "A.mtx", a)
    np.save(tmp_path / "b.npy", a @ np.arange(60.0))
    out = run("solve_file.py", "A.mtx", "b.npy", "--method", "gepp", "--nb", 8,
              "--out", "x.npy", n=2, cwd=tmp_path)
    assert "scaled residual" in out
    np.testing.assert_allclose(np.load(tmp_path / "x.npy"), np.arange(60.0), atol=1e-10)
    out = run("solve_file.py", "--nb", 32, n=2, cwd=tmp_path)  # the demo matrix
    assert (tmp_path / "distla_demo_A.npy").exists() and "max |x - 1|" in out


def test_scaling_study(tmp_path):
    out = run("scaling_study.py", "--n", 64, 96, "--reps", 1, "--json", "s.jsonl", "--",
              "--nb", 16, n=2, cwd=tmp_path)
    lines = out.splitlines()
    assert lines[0].startswith("matmul: 2 ranks") and len(lines) == 4
    assert len((tmp_path / "s.jsonl").read_text().splitlines()) == 4


def test_gaussian_process_mle(tmp_path):
    import json
    import re
    out = run("gaussian_process_mle.py", "--n", 500, "--tile", 64, "--predict", 40,
              "--tol", "1e-10", "--json", "gp.jsonl", n=3, cwd=tmp_path)
    lines = out.splitlines()
    evals = [ln for ln in lines if re.match(r"\s+TLR\s+\d+\s", ln)]
    assert len(evals) >= 5 and all(len(ln.split()) == 9 for ln in evals)   # time split each
    diff = next(ln for ln in lines if ln.startswith("TLR vs dense MLE"))
    rb, rs = map(float, re.findall(r"beta ([-+.e\d]+), sigma\^2 ([-+.e\d]+)", diff)[0])
    assert max(rb, rs) < 1e-3 and "agree" in diff
    krig = next(ln for ln in lines if ln.startswith("TLR vs dense kriging"))
    em, ev = map(float, re.findall(r"mean ([-+.e\d]+), variance ([-+.e\d]+)", krig)[0])
    assert max(em, ev) < 1e-6
    recs = [json.loads(ln) for ln in (tmp_path / "gp.jsonl").read_text().splitlines()]
    assert {(r["bench"], r["impl"]) for r in recs} == {
        ("gp_mle", "distla-tlr"), ("gp_mle", "distla-dense"), ("gp_krige", "distla-tlr")}
    assert all(r["seconds"] > 0 and r["n"] == 500 and r["ranks"] == 3 for r in recs)
    fit = next(r for r in recs if r["impl"] == "distla-tlr" and r["bench"] == "gp_mle")
    assert abs(fit["beta"] / fit["beta_true"] - 1) < 0.15    # sampling spread ~2-3% at n=500


@pytest.mark.parametrize("script, args, msg", [
    ("spd_solve.py", ["--nb", "0"], "argument --nb: must be an int >= 1, not 0"),
    ("spd_solve.py", ["--rho", "1"], "argument --rho: must be a number with |rho| < 1"),
    ("general_solve.py", ["--n", "-3"], "argument --n: must be an int >= 1, not -3"),
    ("solve_file.py", ["--nb", "0"], "argument --nb: must be an int >= 1, not 0"),
    ("scaling_study.py", ["--reps", "0"], "argument --reps: must be an int >= 1, not 0"),
    ("scaling_study.py", ["--n", "64", "--", "--nb", "0"],
     "matmul benchmark: --nb must be positive, not 0"),
    ("gaussian_process_mle.py", ["--n", "0"], "argument --n: must be an int >= 1, not 0"),
    ("gaussian_process_mle.py", ["--tile", "2.7"], "argument --tile: must be an int >= 1"),
    ("gaussian_process_mle.py", ["--xatol", "nan"], "argument --xatol: must be a finite"),
    ("gaussian_process_mle.py", ["--bounds", "0.5", "0.1"], "LO must be below HI"),
    ("spd_solve.py", ["--device", "gpu"], "--device gpu needs CuPy and a CUDA GPU"),
    ("general_solve.py", ["--device", "gpu"], "--device gpu needs CuPy and a CUDA GPU"),
    ("gaussian_process_mle.py", ["--device", "gpu"], "--device gpu needs CuPy and a CUDA GPU"),
])
def test_examples_refuse_bad_arguments_with_one_line(tmp_path, script, args, msg):
    if "--device" in args:
        from distla.device import gpu_available
        if gpu_available():
            pytest.skip("this host has a GPU")
    """A bad argument is a usage error (exit 2, one line from rank 0), not a traceback on
    every rank followed by MPI_Abort."""
    env = launcher_free_env()
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    p = subprocess.run([MPIEXEC, "-n", "2", sys.executable, str(ROOT / "examples" / script),
                        *args], env=env, cwd=tmp_path, capture_output=True, text=True,
                       timeout=120)
    err = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2, p.stdout + p.stderr
    assert err == [f"{script}: error: {msg}"] or (len(err) == 1 and msg in err[0]), p.stderr
    assert p.stdout == ""
