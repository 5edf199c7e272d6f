"""``distla bench job`` on CPU ranks (1 and 2, small n), run for real under mpiexec: the
records are well formed, every phase and its floor is there, the file is generated once and
reused, and the x it writes solves the system."""
from __future__ import annotations

import json

import numpy as np
import pytest
from test_cli import MPIEXEC, run

PHASES = {"read", "rhs", "solve", "residual", "write", "total"}


def _records(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _check_records(recs, ranks, n):
    for r in recs:
        for key in ("bench", "impl", "n", "ranks", "device", "seconds", "tflops", "phase",
                    "command"):
            assert key in r, f"record without {key!r}: {r}"
        assert r["bench"] == "job" and r["impl"] in ("distla", "floor", "numpy")
        assert r["n"] == n and r["ranks"] == ranks and r["device"] == "cpu"
        assert r["seconds"] > 0
        assert r["tflops"] is None or r["tflops"] > 0
        assert r["command"].startswith("distla bench job")


@pytest.mark.skipif(not __import__("os").path.exists(MPIEXEC), reason="no mpiexec")
@pytest.mark.parametrize("ranks, fmt, method", [(1, "npy", "cholesky"), (2, "npy", "gepp"),
                                                (2, "h5", "cholesky")])
def test_bench_job(tmp_path, ranks, fmt, method):
    if fmt == "h5":
        pytest.importorskip("h5py")
    n = 150
    out = tmp_path / "r.jsonl"
    args = ["bench", "job", "--n", n, "--nb", 16, "--device", "cpu", "--dir", tmp_path,
            "--format", fmt, "--method", method, "--repeat", 2, "--json", out]
    p = run(args, n=ranks)
    assert p.returncode == 0, p.stdout + p.stderr
    recs = _records(out)
    _check_records(recs, ranks, n)
    mine = [r for r in recs if r["impl"] == "distla"]
    floors = {r["phase"] for r in recs if r["impl"] == "floor"}
    assert {r["phase"] for r in mine} == PHASES | {"generate"}
    assert floors == PHASES | {"generate"}
    # np.load beside the read floor, for .npy files only
    assert {r["phase"] for r in recs if r["impl"] == "numpy"} == ({"read"} if fmt == "npy"
                                                                   else set())
    assert [r["cache"] for r in mine if r["phase"] == "total"] == ["first", "warm"]
    for r in mine:
        if r["phase"] == "total":
            parts = [q["seconds"] for q in mine if q.get("rep") == r["rep"]
                     and q["phase"] in PHASES - {"total"}]
            assert r["seconds"] == pytest.approx(sum(parts))
    res = [r for r in mine if r["phase"] == "residual"]
    assert all(r["sresid"] < 3 and r["berr"] < 1e-12 for r in res)
    assert all(r["check"] == "PASS" and r["check_thresh"] == (3 if method == "cholesky" else 1)
               for r in res)
    # the written x solves the system in the file
    kind = "spd" if method == "cholesky" else "general"
    stem = tmp_path / f"distla-bench-job-{kind}-n{n}-float64"
    if fmt == "h5":
        import h5py
        with h5py.File(f"{stem}.h5") as h:
            a = h["A"][...]
        with h5py.File(f"{stem}-x.h5") as h:
            x = h["x"][...]
    else:
        a = np.load(f"{stem}.npy")
        x = np.load(f"{stem}-x.npy")
    np.testing.assert_allclose(a @ x, a.sum(axis=1), rtol=1e-10)
    # a second run reuses the file: no generate phase
    out2 = tmp_path / "r2.jsonl"
    p = run([*args[:-1], out2, "--repeat", 1, "--no-floors"], n=ranks)
    assert p.returncode == 0, p.stdout + p.stderr
    recs = _records(out2)
    assert "generate" not in {r["phase"] for r in recs}
    assert {r["impl"] for r in recs} == {"distla"}
    # another --seed makes (and names) its own matrix: it never reuses seed 0's
    out3 = tmp_path / "r3.jsonl"
    p = run([*args[:-1], out3, "--repeat", 1, "--no-floors", "--seed", 7], n=ranks)
    assert p.returncode == 0, p.stdout + p.stderr
    recs = _records(out3)
    assert "generate" in {r["phase"] for r in recs} and {r["seed"] for r in recs} == {7}
    ext = ".h5" if fmt == "h5" else ".npy"
    assert (tmp_path / f"distla-bench-job-{kind}-n{n}-float64-s7{ext}").exists()


@pytest.mark.skipif(not __import__("os").path.exists(MPIEXEC), reason="no mpiexec")
def test_bench_job_tlr_is_judged_by_the_solve_command_threshold(tmp_path):
    """bench job --method tlr judges SRESID against distla solve's bound from A and X, not
    the loosest one (3 max(1, tol / eps))."""
    from distla.bench.common import default_threshold
    out = tmp_path / "r.jsonl"
    p = run(["bench", "job", "--n", 96, "--nb", 16, "--device", "cpu", "--dir", tmp_path,
             "--method", "tlr", "--repeat", 1, "--no-floors", "--json", out], n=2)
    assert p.returncode == 0, p.stdout + p.stderr
    res = next(r for r in _records(out) if r["phase"] == "residual")
    assert res["check"] == "PASS"
    assert res["check_thresh"] < default_threshold("tlr", {}, np.float64)


@pytest.mark.skipif(not __import__("os").path.exists(MPIEXEC), reason="no mpiexec")
def test_bench_job_cold_runs_a_fresh_process(tmp_path):
    out = tmp_path / "r.jsonl"
    p = run(["bench", "job", "--n", 64, "--nb", 16, "--device", "cpu", "--dir", tmp_path,
             "--cold", "--repeat", 1, "--no-floors", "--json", out], n=2)
    assert p.returncode == 0, p.stdout + p.stderr
    recs = _records(out)
    _check_records(recs, 2, 64)
    cold = [r for r in recs if r.get("cache") == "cold"]
    assert {r["phase"] for r in cold} == PHASES | {"process"}
    proc = next(r for r in cold if r["phase"] == "process")
    total = next(r for r in cold if r["phase"] == "total")
    assert proc["seconds"] > total["seconds"]     # the whole command includes the job


def test_bench_job_cold_with_a_missing_launcher_is_a_warning(tmp_path):
    """DISTLA_MPIEXEC naming no program made `bench job --cold` exit 2 with a bare
    FileNotFoundError, though a failed fresh job is documented as a warning."""
    import subprocess
    import sys

    from test_cli import _env
    env = _env()
    env["DISTLA_MPIEXEC"] = str(tmp_path / "no-such-mpiexec")
    p = subprocess.run([sys.executable, "-m", "distla", "bench", "job", "--n", "32", "--nb",
                        "16", "--device", "cpu", "--dir", str(tmp_path), "--cold", "--repeat",
                        "1", "--no-floors", "-q"], env=env, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    assert "warning: --cold: the fresh job failed" in p.stderr and "DISTLA_MPIEXEC" in p.stderr


@pytest.mark.skipif(not __import__("os").path.exists(MPIEXEC), reason="no mpiexec")
def test_bench_job_dir_that_is_a_file_fails_on_every_rank(tmp_path):
    """--dir naming a regular file: one clear error and exit 2 on every rank (it hung on 2
    ranks: rank 0 failed to create the directory while the others waited at a barrier)."""
    from test_cli import assert_fails
    f = tmp_path / "afile"
    f.write_text("mine")
    for ranks in (1, 2):
        p = run(["bench", "job", "--n", 32, "--nb", 8, "--device", "cpu", "--dir", f,
                 "--repeat", 1, "--no-floors"], n=ranks, timeout=120)
        assert_fails(p, 2, f"--dir {f}: exists and is not a directory")
    assert f.read_text() == "mine"


@pytest.mark.skipif(not __import__("os").path.exists(MPIEXEC), reason="no mpiexec")
@pytest.mark.parametrize("fmt", ["npy", "h5"])
def test_bench_job_never_overwrites_a_file_it_did_not_write(tmp_path, fmt):
    """A user's file under the benchmark's solution (or matrix) name is refused before any
    work and left as it was; the benchmark's own files (listed in its manifest) are reused
    and rewritten; a user's x.npy beside them is never touched."""
    from test_cli import assert_fails
    if fmt == "h5":
        pytest.importorskip("h5py")
    n, stem = 32, tmp_path / "distla-bench-job-spd-n32-float64"
    user = np.arange(1000.0).reshape(100, 10)
    np.save(tmp_path / "x.npy", user)               # the name the benchmark used to write
    args = ["bench", "job", "--n", n, "--nb", 8, "--device", "cpu", "--dir", tmp_path,
            "--format", fmt, "--repeat", 1, "--no-floors"]
    p = run(args, n=2)
    assert p.returncode == 0, p.stdout + p.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "x.npy"), user)
    xfile = f"{stem}-x.{fmt}"
    assert __import__("os").path.exists(xfile)
    p = run(args, n=2)                              # its own files: reused / rewritten
    assert p.returncode == 0, p.stdout + p.stderr
    # a file of the benchmark's names that it did not write is refused, left unchanged (an
    # n x n matrix under the matrix's name is only read, so it is reused)
    (tmp_path / ".distla-bench-job.json").unlink()
    before = open(xfile, "rb").read()
    p = run(args, n=2)
    assert_fails(p, 2, f"{__import__('os').path.basename(xfile)} exists and was not "
                       f"written by distla bench job")
    assert open(xfile, "rb").read() == before
    __import__("os").unlink(xfile)
    p = run(args, n=2)                              # the n x n matrix is reused
    assert p.returncode == 0, p.stdout + p.stderr
    (tmp_path / ".distla-bench-job.json").unlink()
    if fmt == "npy":                                # not n x n: it would be regenerated
        np.save(f"{stem}.npy", user)
        p = run(args, n=2)
        assert_fails(p, 2, f"{stem.name}.npy exists and was not written by distla bench job")
        np.testing.assert_array_equal(np.load(f"{stem}.npy"), user)
