"""The ``distla`` command line, run for real under mpiexec (subprocesses of a serial test).

Checks a real solve (residuals printed, solution written), generate/info/bench, and that every
error case ends with exactly one ``distla: error:`` line and the same nonzero exit code.
"""
from __future__ import annotations

import json
import os
import re
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


def _env():
    env = launcher_free_env()   # not the pytest job's launcher state
    env.update(PYTHONPATH=str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""),
               OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
               MPIR_CVAR_POLLS_BEFORE_YIELD="1", PYTHONDONTWRITEBYTECODE="1",
               DISTLA_ABORT_TIMEOUT="60")
    return env


def run(args, n=2, cwd=None, timeout=180, module="distla"):
    """``mpiexec -n N python -m distla ARGS``; returns the CompletedProcess (text output)."""
    cmd = [MPIEXEC, "-n", str(n), sys.executable, "-m", module, *map(str, args)]
    return subprocess.run(cmd, cwd=cwd, env=_env(), capture_output=True, text=True,
                          timeout=timeout)


def errors(p) -> list[str]:
    return [ln for ln in (p.stdout + p.stderr).splitlines() if "error:" in ln]


def assert_fails(p, code, *needles):
    out = p.stdout + p.stderr
    assert p.returncode == code, f"exit {p.returncode}, expected {code}\n{out}"
    errs = errors(p)
    assert len(errs) == 1, f"expected one error line, got {len(errs)}:\n{out}"
    assert "Traceback" not in out, out
    for s in needles:
        assert s.lower() in errs[0].lower(), f"{s!r} not in {errs[0]!r}"


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """An SPD system written by ``distla generate`` on 3 ranks, plus odd files."""
    d = tmp_path_factory.mktemp("cli")
    p = run(["generate", "--kind", "spd", "--n", 96, "--out", d / "A.npy",
             "--rhs-out", d / "b.npy", "--nb", 10], n=3)
    assert p.returncode == 0, p.stdout + p.stderr
    rng = np.random.default_rng(1)
    np.save(d / "rect.npy", rng.standard_normal((8, 5)))
    np.save(d / "cube.npy", np.zeros((2, 2, 2)))
    (d / "bad.npy").write_bytes(b"\x93NUMPY garbage, not a header")
    (d / "text.dat").write_text("1 2 3\n")
    m = rng.standard_normal((40, 40))
    np.save(d / "notspd.npy", -np.eye(40) + 0.01 * (m + m.T))
    return d


# ---------------------------------------------------------------------------------------
# working runs
# ---------------------------------------------------------------------------------------
def test_generate_writes_spd_and_rhs(files):
    A = np.load(files / "A.npy")
    b = np.load(files / "b.npy")
    assert A.shape == (96, 96) and b.shape == (96,)
    np.testing.assert_array_equal(A, A.T)
    assert np.linalg.eigvalsh(A).min() > 0
    np.testing.assert_allclose(b, A.sum(axis=1), rtol=1e-13)


def test_generate_is_grid_independent(tmp_path):
    for n in (1, 4):
        p = run(["generate", "--kind", "covariance", "--n", 50, "--out",
                 tmp_path / f"C{n}.npy", "--nb", 7, "-q"], n=n)
        assert p.returncode == 0 and p.stdout == "", p.stdout + p.stderr
    C1, C4 = np.load(tmp_path / "C1.npy"), np.load(tmp_path / "C4.npy")
    np.testing.assert_array_equal(C1, C4)
    np.testing.assert_allclose(C1, C1.T)
    assert np.linalg.eigvalsh(C1).min() > 0


def _resid(out: str) -> float:
    m = re.search(r"scaled residual.*=\s*(\S+)", out)
    assert m, out
    return float(m.group(1))


def test_solve_four_ranks(files, tmp_path):
    out = tmp_path / "x.npy"
    p = run(["solve", "--matrix", files / "A.npy", "--grid", "2x2", "--nb", 8, "--out", out,
             "--json", tmp_path / "r.jsonl"], n=4)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count("scaled residual") == 1  # rank 0 only
    assert _resid(p.stdout) < 3.0
    assert "backward error" in p.stdout and "forward error" in p.stdout
    for phase in ("read matrix", "solve", "residual", "write", "total"):
        assert phase in p.stdout
    x = np.load(out)
    assert x.shape == (96,)
    np.testing.assert_allclose(x, 1.0, rtol=1e-12)
    rec = json.loads((tmp_path / "r.jsonl").read_text().splitlines()[-1])
    assert rec["ranks"] == 4 and rec["grid"] == "2x2" and rec["sresid"] < 3.0


def test_solve_rhs_file_mtx_and_lu(files, tmp_path):
    import scipy.io
    A = np.load(files / "A.npy")
    scipy.io.mmwrite(tmp_path / "A.mtx", A)
    b = np.load(files / "b.npy")
    B = np.stack([b, 2 * b], axis=1)
    np.save(tmp_path / "B.npy", B)
    p = run(["solve", "--matrix", tmp_path / "A.mtx", "--rhs", tmp_path / "B.npy",
             "--method", "gepp", "--grid", "1x3", "--nb", 16, "--out", tmp_path / "X.mtx"],
            n=3)
    assert p.returncode == 0, p.stdout + p.stderr
    assert _resid(p.stdout) < 1.0
    X = np.asarray(scipy.io.mmread(tmp_path / "X.mtx"))
    np.testing.assert_allclose(X, np.ones((96, 1)) * [1.0, 2.0], rtol=1e-12)


def test_solve_complex_matrix_with_dtype_stays_complex(tmp_path):
    """--dtype names a precision: a complex matrix solved with --dtype float32 is solved in
    complex64 (its imaginary parts kept), not truncated to a real matrix."""
    rng = np.random.default_rng(4)
    n = 40
    a = rng.standard_normal((n, n)) + 1j * rng.standard_normal((n, n)) + n * np.eye(n)
    np.save(tmp_path / "Ac.npy", a)
    p = run(["solve", "--matrix", tmp_path / "Ac.npy", "--method", "gepp", "--dtype",
             "float32", "--nb", 8, "--out", tmp_path / "x.npy"], n=2)
    assert p.returncode == 0, p.stdout + p.stderr
    x = np.load(tmp_path / "x.npy")
    assert x.dtype == np.complex64
    np.testing.assert_allclose(x.reshape(-1), np.ones(n), atol=1e-4)


def test_quiet_prints_nothing(files):
    p = run(["solve", "--matrix", files / "A.npy", "--quiet", "--nb", 32], n=2)
    assert p.returncode == 0, p.stderr
    assert p.stdout == ""


def test_thresh_exceeded_exit_3(files):
    p = run(["solve", "--matrix", files / "A.npy", "--thresh", "0", "--rhs-kind", "random",
             "--nb", 32], n=2)
    assert_fails(p, 3, "exceeds the threshold 0 (FAIL")
    assert "FAIL (threshold 0)" in p.stdout, p.stdout


def test_info(files):
    p = run(["info", "--json"], n=2)
    assert p.returncode == 0, p.stderr
    info = json.loads(p.stdout)
    assert info["ranks"] == 2 and info["grid"] == "1x2" and info["mpi_library"]
    assert len(info["per_rank"]) == 2 and info["blas"]
    p = run(["info"], n=1)
    assert p.returncode == 0 and "mpi_library" in p.stdout


def test_bench_matmul_json(tmp_path):
    j = tmp_path / "m.jsonl"
    p = run(["bench", "matmul", "--n", 64, "--nb", 16, "--reps", 1, "--check",
             "--json", j], n=2)
    assert p.returncode == 0, p.stdout + p.stderr
    recs = [json.loads(ln) for ln in j.read_text().splitlines()]
    assert {r["impl"] for r in recs} == {"distla", "numpy"}
    dist = [r for r in recs if r["impl"] == "distla"][0]
    assert dist["relerr"] < 1e-12 and dist["tflops"] > 0 and "speedup" in dist
    assert p.stdout.count("distla ") >= 1 and "numpy" in p.stdout


def test_bench_mixed_streams_each_record_once(tmp_path):
    """The mixed sweep writes each record to --json as it is measured (a sweep stopped by a
    time limit keeps them) and the framework does not write them a second time."""
    j = tmp_path / "m.jsonl"
    p = run(["bench", "mixed", "--device", "cpu", "--n", 96, "--nb", 16, "--reps", 1,
             "--cond", "1e2", "1e12", "--method", "cholesky", "--json", j], n=2)
    assert p.returncode == 0, p.stdout + p.stderr
    recs = [json.loads(ln) for ln in j.read_text().splitlines()]
    impls = [(r["impl"], r["cond"]) for r in recs]
    assert len(impls) == len(set(impls)) == 5, impls       # 2 x (double, fp32) + reference
    assert all("_streamed" not in r for r in recs)
    mixed = {r["cond"]: r for r in recs if r["impl"] == "distla-mixed-fp32"}
    assert not mixed[1e2]["fallback"] and mixed[1e12]["fallback"]
    assert not any(r.get("check_rcond") for r in recs)


def test_bench_mixed_rbt_and_the_reference_ratio(tmp_path):
    """bench mixed --method rbt ran into RBTInfo's missing 'replicated' (exit 2, no table);
    bench cholesky's reference row says vs_distla = reference seconds / distla seconds
    (> 1: distla faster; it was the inverse); NaN would be written as null."""
    j = tmp_path / "m.jsonl"
    p = run(["bench", "mixed", "--device", "cpu", "--n", 64, "--nb", 16, "--reps", 1,
             "--cond", "1e2", "--method", "rbt", "--json", j, "--no-ref"], n=2)
    assert p.returncode == 0, p.stdout + p.stderr
    recs = [json.loads(ln) for ln in j.read_text().splitlines()]
    assert {r["impl"] for r in recs} >= {"distla-double", "distla-mixed-fp32"}, recs
    assert all(r.get("replicated") is False for r in recs if "mixed" in r["impl"])
    j = tmp_path / "c.jsonl"
    p = run(["bench", "cholesky", "--device", "cpu", "--n", 96, "--nb", 16, "--reps", 1,
             "--ref-threads", 1, "--json", j], n=2)
    assert p.returncode == 0, p.stdout + p.stderr
    recs = [json.loads(ln) for ln in j.read_text().splitlines()]
    mine = next(r for r in recs if r["impl"] == "distla")
    ref = next(r for r in recs if r["impl"] != "distla")
    assert ref["vs_distla"] == pytest.approx(ref["seconds"] / mine["seconds"])


def test_bench_records_say_when_the_local_library_ran(tmp_path):
    """On a 1 x 1 grid the whole factorization is one LAPACK call (nb, lookahead unused):
    the record says so (local_library), not with --force-loop; with one process row
    tournament pivoting is partial pivoting, and the record says that too."""
    def recs(argv, n):
        j = tmp_path / f"r{len(list(tmp_path.iterdir()))}.jsonl"
        p = run(["bench", *argv, "--device", "cpu", "--n", 64, "--nb", 16, "--reps", 1,
                 "--no-ref", "--json", j], n=n)
        assert p.returncode == 0, p.stdout + p.stderr
        return [json.loads(ln) for ln in j.read_text().splitlines()]
    assert recs(["cholesky"], 1)[0].get("local_library") is True
    assert "local_library" not in recs(["cholesky", "--force-loop"], 1)[0]
    assert recs(["lu"], 1)[0].get("local_library") is True
    two = recs(["lu", "--pivoting", "partial", "tournament"], 2)
    assert [r.get("tournament_is_partial") for r in two] == [None, True], two
    assert not any("local_library" in r for r in two)


def test_json_lines_are_standard_json():
    """Records go out as standard JSON: NaN and infinities as null, NumPy scalars as
    numbers (bools as bools, ints as ints)."""
    from distla.bench.common import json_line
    line = json_line({"a": float("nan"), "b": np.inf, "c": np.float32(1.5), "d": np.int64(3),
                      "e": np.bool_(True), "f": [np.nan, 2], "g": "x"})
    assert json.loads(line, parse_constant=lambda c: pytest.fail(c)) == \
        {"a": None, "b": None, "c": 1.5, "d": 3, "e": True, "f": [None, 2], "g": "x"}


def test_complex_flops_count_four_real_ones():
    from distla.bench.common import flops
    for op in ("cholesky", "lu", "solve", "gemm", "lu_solve"):
        assert flops(op, 100, 2, dtype=np.complex128) == 4 * flops(op, 100, 2)
        assert flops(op, 100, 2, dtype=np.float32) == flops(op, 100, 2)


def test_bench_mixed_check_rcond_solves_as_the_defaults(tmp_path):
    """--check-rcond: the float64 solve with its estimate and the mixed one with its
    certificate (recorded); at cond 1e12 the certificate refuses the float32 factors at the
    hand-over to GMRES-IR, so the mixed solve falls back saying so."""
    j = tmp_path / "m.jsonl"
    p = run(["bench", "mixed", "--device", "cpu", "--n", 96, "--nb", 16, "--reps", 1,
             "--cond", "1e2", "1e12", "--method", "gepp", "--no-ref", "--check-rcond",
             "--json", j], n=2)
    assert p.returncode == 0, p.stdout + p.stderr
    recs = [json.loads(ln) for ln in j.read_text().splitlines()]
    assert len(recs) == 4 and all(r["check_rcond"] for r in recs), recs
    mixed = {r["cond"]: r for r in recs if r["impl"] == "distla-mixed-fp32"}
    assert not mixed[1e2]["fallback"] and mixed[1e12]["fallback"]
    assert mixed[1e12]["gmres_it"] == 0, mixed[1e12]


# ---------------------------------------------------------------------------------------
# errors: one line on rank 0, nonzero exit everywhere
# ---------------------------------------------------------------------------------------
def test_missing_file(files):
    assert_fails(run(["solve", "--matrix", files / "nope.npy"], n=2), 2, "no such file")


def test_malformed_npy(files):
    assert_fails(run(["solve", "--matrix", files / "bad.npy"], n=2), 2, "not a valid .npy")


def test_unknown_format(files):
    assert_fails(run(["solve", "--matrix", files / "text.dat"], n=2), 2, "unrecognized")


def test_malformed_mtx(files, tmp_path):
    f = tmp_path / "bad.mtx"
    f.write_text("%%MatrixMarket matrix array real general\n3 3\n1.0\n2.0\n")
    assert_fails(run(["solve", "--matrix", f], n=2), 2, "bad.mtx")


def test_not_square(files):
    assert_fails(run(["solve", "--matrix", files / "rect.npy"], n=2), 2, "square")


def test_not_a_matrix(files):
    assert_fails(run(["solve", "--matrix", files / "cube.npy"], n=2), 2, "3-d")


def test_rhs_rows_mismatch(files):
    assert_fails(run(["solve", "--matrix", files / "A.npy", "--rhs", files / "rect.npy"], n=2),
                 2, "rows")


def test_grid_does_not_fit_ranks(files):
    assert_fails(run(["solve", "--matrix", files / "A.npy", "--grid", "2x2"], n=3), 2,
                 "needs 4 mpi ranks")


def test_malformed_grid(files):
    assert_fails(run(["solve", "--matrix", files / "A.npy", "--grid", "two"], n=2), 2, "PxQ")


def test_gpu_without_gpu(files):
    from distla.device import gpu_available
    if gpu_available():
        pytest.skip("a GPU is visible here")
    assert_fails(run(["solve", "--matrix", files / "A.npy", "--device", "gpu"], n=2), 2,
                 "no usable GPU")


def test_bad_method(files):
    assert_fails(run(["solve", "--matrix", files / "A.npy", "--method", "qr"], n=2), 2,
                 "invalid choice")


def test_not_positive_definite_exit_1(files):
    p = run(["solve", "--matrix", files / "notspd.npy", "--nb", 8], n=2)
    assert_fails(p, 1, "not positive definite")
    assert "use --method gepp" in p.stderr, p.stderr


def test_general_matrix_with_the_default_method_says_what_to_do(tmp_path):
    """The default method is cholesky: a nonsymmetric A is refused (exit 2) with the
    command's remedy (--method gepp, or -O check_symmetric=false), not the Python
    keyword's; gepp then solves it."""
    a = np.random.default_rng(5).standard_normal((24, 24)) + 24 * np.eye(24)
    np.save(tmp_path / "G.npy", a)
    p = run(["solve", "--matrix", tmp_path / "G.npy", "--nb", 5], n=2)
    assert_fails(p, 2, "not symmetric")
    assert "use --method gepp" in p.stderr and "check_symmetric=False" not in p.stderr, \
        p.stderr
    p = run(["solve", "--matrix", tmp_path / "G.npy", "--nb", 5, "--method", "gepp"], n=2)
    assert p.returncode == 0, p.stderr


def test_non_finite_solution_from_finite_input_exit_1(tmp_path):
    """A matrix of subnormal entries: BLAS's triangular solves multiply by the diagonal's
    reciprocals (inf), so X is NaN. The command runs the library's own solve and its checks:
    the same error and exit code 1 on every rank, no --out file, even with --check none
    (which once wrote the NaNs with exit 0), and the gradual-underflow warning."""
    a, b = 1e-310 * np.eye(20), 1e-310 * np.ones((20, 2))
    np.save(tmp_path / "A.npy", a)
    np.save(tmp_path / "b.npy", b)
    for check in ("residual", "none"):
        out = tmp_path / f"x_{check}.npy"
        p = run(["solve", "--matrix", tmp_path / "A.npy", "--rhs", tmp_path / "b.npy",
                 "--method", "gepp", "--nb", 4, "--check", check, "--out", out], n=2)
        assert_fails(p, 1, "non-finite value")
        assert "gradual underflow" in p.stderr, p.stderr
        assert not out.exists()


def test_mixed_solve_reports_what_it_did(files, tmp_path):
    """-O precision=mixed: the command says which precision produced X (and whether it fell
    back), with the certificate's condition estimate, and records them in --json (rbt's
    were missing: its info has no 'requested' field)."""
    import json
    rec = tmp_path / "r.json"
    for method in ("cholesky", "gepp", "rbt"):
        p = run(["solve", "--matrix", files / "A.npy", "--method", method, "--nb", 16,
                 "-O", "precision=mixed", "--json", rec], n=2)
        assert p.returncode == 0, p.stdout + p.stderr
        assert "precision: mixed, float32 factors with fp32 updates" in p.stdout, p.stdout
        assert "1 / rcond" in p.stdout, p.stdout
        r = json.loads(rec.read_text().splitlines()[-1])
        assert (r["precision"], r["fallback"]) == ("mixed", False) and r["iterations"] >= 1
        assert 0 < r["rcond"] <= 1


def test_unwritable_output(files):
    assert_fails(run(["solve", "--matrix", files / "A.npy", "--out",
                      files / "no" / "such" / "dir" / "x.npy"], n=2), 2, "--out")


def test_bench_unknown_and_bad_grid():
    assert_fails(run(["bench", "nosuch"], n=2), 2, "invalid choice")
    assert_fails(run(["bench", "matmul", "--n", 32, "--grid", "3x1"], n=2), 2, "needs 3")
    assert_fails(run(["matmul", "--n", 32, "--nb", 0], n=2, module="distla.bench"), 2,
                 "--nb")


def test_plot_without_matplotlib(tmp_path):
    try:
        import matplotlib  # noqa: F401
        pytest.skip("matplotlib is installed")
    except ImportError:
        pass
    assert_fails(run(["bench", "matmul", "--n", 32, "--plot", tmp_path / "p.png"], n=2), 2,
                 "matplotlib")


def test_serial_usage_error_without_mpiexec():
    p = subprocess.run([sys.executable, "-m", "distla", "solve"], env=_env(),
                       capture_output=True, text=True, timeout=60)
    assert_fails(p, 2, "--matrix")


# ---------------------------------------------------------------------------------------
# launchers (no cluster or container engine here: syntax, dry runs, and a real local run)
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("script", ["local.sh", "slurm.sbatch", "pbs.sh", "container.sh"])
def test_launcher_syntax(script):
    p = subprocess.run(["bash", "-n", str(ROOT / "launch" / script)], capture_output=True,
                       text=True, timeout=30)
    assert p.returncode == 0, p.stderr


def test_local_launcher_runs_info():
    env = _env()
    env["MPIEXEC"] = MPIEXEC
    env.pop("CUDA_VISIBLE_DEVICES", None)
    p = subprocess.run(["bash", str(ROOT / "launch" / "local.sh"), "--cpu", "-n", "2",
                        "distla", "info", "--json"], env=env, capture_output=True, text=True,
                       timeout=120, cwd=ROOT)
    assert p.returncode == 0, p.stdout + p.stderr
    info = json.loads(p.stdout)
    assert info["ranks"] == 2 and info["threads_env"].get("OPENBLAS_NUM_THREADS")
    bad = subprocess.run(["bash", str(ROOT / "launch" / "local.sh"), "-n", "zero", "x"],
                         env=env, capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2 and "positive number" in bad.stderr


def test_container_launcher_dry_run(tmp_path):
    env = _env()
    env["NCCL_DEBUG"] = "INFO"
    p = subprocess.run(["bash", str(ROOT / "launch" / "container.sh"), "--engine", "docker",
                        "--dry-run", "mpiexec", "-n", "2", "distla", "info"], env=env,
                       capture_output=True, text=True, timeout=30, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    for flag in ("--gpus all", "--ipc=host", f"{tmp_path}:/work", "-e NCCL_DEBUG",
                 "distla:gpu mpiexec -n 2 distla info"):
        assert flag in p.stdout, (flag, p.stdout)
    p = subprocess.run(["bash", str(ROOT / "launch" / "container.sh"), "--engine",
                        "apptainer", "--image", "d.sif", "--dry-run"], env=env,
                       capture_output=True, text=True, timeout=30, cwd=tmp_path)
    assert p.returncode == 0 and "--nv" in p.stdout and "d.sif distla info" in p.stdout


def _run_script_on_two_ranks(script):
    """``mpiexec -n 2 python script`` in the tests' environment, under a 60 s timeout (a
    hang fails the test)."""
    return subprocess.run([MPIEXEC, "-n", "2", sys.executable, str(script)], env=_env(),
                          capture_output=True, text=True, timeout=60)


def test_guarded_aborts_instead_of_hanging(tmp_path):
    """A rank that fails alone while the others are stuck elsewhere ends the job (Abort after
    the watchdog timeout) instead of hanging forever."""
    script = tmp_path / "hang.py"
    script.write_text(
        "from mpi4py import MPI\n"
        "from distla.cli import guarded\n"
        "comm = MPI.COMM_WORLD\n"
        "with guarded(comm, timeout=2):\n"
        "    if comm.rank == 1:\n"
        "        raise ValueError('rank 1 failed alone')\n"
        "    comm.recv(source=1, tag=99)  # never satisfied: rank 0 is stuck here\n")
    p = _run_script_on_two_ranks(script)
    assert p.returncode != 0
    assert "rank 1 failed alone" in p.stderr and "aborting" in p.stderr


def test_interrupt_on_one_rank_ends_the_job(tmp_path):
    """A SIGINT (KeyboardInterrupt) on one rank of the distla command: that rank exited with
    130 into MPI_Finalize while rank 0 waited in a collective for it, a hang that
    DISTLA_ABORT_TIMEOUT does not cover. It aborts the job with code 130 now."""
    script = tmp_path / "interrupt.py"
    script.write_text(
        "from mpi4py import MPI\n"
        "from distla import cli\n"
        "def body(argv):\n"
        "    if MPI.COMM_WORLD.rank == 1:\n"
        "        raise KeyboardInterrupt\n"
        "    MPI.COMM_WORLD.Barrier()   # rank 1 never comes\n"
        "cli._main = body\n"
        "cli.main(['info'])\n")
    p = _run_script_on_two_ranks(script)
    assert p.returncode == 130, (p.returncode, p.stderr[-500:])


def test_warmup_runs_every_path_on_cpu():
    p = subprocess.run([MPIEXEC, "-n", "2", sys.executable, "-m", "distla", "warmup",
                        "--device", "cpu", "--n", "48", "--n-large", "72", "-v"], env=_env(),
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    for kind in ("spd", "general", "covariance"):     # the small pass: everything
        assert f"warmup: {kind} float64:" in p.stdout and f"warmup: {kind} float32:" in p.stdout
    for kind in ("spd", "general"):     # the size-class pass: distla solve's default job
        assert f"warmup: {kind} float64 n=72:" in p.stdout
    assert "warmup done" in p.stdout


def test_warmup_large_size_reaches_the_size_keyed_kernels_on_every_rank():
    """Every rank's local matrix: over 2048 rows (CuPy's largest reduction blocks) and over
    2^31 bytes of float64 (64-bit indexing)."""
    from distla.warmup import large_size

    class G:
        nprow = npcol = 1
    for p, q in ((1, 1), (1, 2), (2, 1), (2, 2), (1, 3), (2, 4), (4, 2), (3, 3)):
        G.nprow, G.npcol = p, q
        n = large_size(G)
        assert n // p > 2048 and n // q > 2048
        assert (n // p) * (n // q) * 8 > 2 ** 31


def test_output_cut_short_by_the_reader_is_quiet():
    """`distla info | head -1` ended with 'distla: error: [Errno 32] Broken pipe' (when head
    had gone before distla wrote; `true` reads nothing and is gone at once)."""
    import shlex
    cmd = f"{shlex.quote(sys.executable)} -m distla info | true; echo ${{PIPESTATUS[0]}}"
    p = subprocess.run(["bash", "-c", cmd], env=_env(), capture_output=True, text=True,
                       timeout=120)
    assert p.stdout.strip() == "0", (p.stdout, p.stderr)
    assert "Broken pipe" not in p.stderr and "error" not in p.stderr, p.stderr


def test_fifo_matrix_is_refused_not_waited_on(tmp_path):
    """`distla solve -A ff.npy` (a FIFO nobody writes to) hung every rank until killed."""
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs")
    os.mkfifo(tmp_path / "ff.npy")
    p = run(["solve", "--matrix", tmp_path / "ff.npy"], n=2, timeout=60)
    assert_fails(p, 2, "--matrix", "is a pipe/FIFO, not a regular file")
