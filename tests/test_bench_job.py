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
    # the written x solves the system in the file
    kind = "spd" if method == "cholesky" else "general"
    if fmt == "h5":
        import h5py
        with h5py.File(tmp_path / f"job-{kind}-n{n}-float64.h5") as h:
            a = h["A"][...]
        with h5py.File(tmp_path / "x.h5") as h:
            x = h["x"][...]
    else:
        a = np.load(tmp_path / f"job-{kind}-n{n}-float64.npy")
        x = np.load(tmp_path / "x.npy")
    np.testing.assert_allclose(a @ x, a.sum(axis=1), rtol=1e-10)
    # a second run reuses the file: no generate phase
    out2 = tmp_path / "r2.jsonl"
    p = run([*args[:-1], out2, "--repeat", 1, "--no-floors"], n=ranks)
    assert p.returncode == 0, p.stdout + p.stderr
    recs = _records(out2)
    assert "generate" not in {r["phase"] for r in recs}
    assert {r["impl"] for r in recs} == {"distla"}


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
