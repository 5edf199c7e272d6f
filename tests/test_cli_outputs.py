"""The command line's outputs and options: two outputs (or an output and an input) naming one
file are refused before any work, an all-zero right-hand side passes its check, options out of
range or that do not apply are refused with a clear message, and the benchmarks judge their
own checks (PASS/FAIL, exit 3). Run for real under mpiexec (subprocesses of a serial test),
plus the residual helper in-process on every rank count."""
from __future__ import annotations

import os

import numpy as np
import pytest
from test_cli import MPIEXEC, assert_fails, run

from distla.runtime import EXIT_THRESH, EXIT_USAGE

needs_mpiexec = pytest.mark.skipif(not os.path.exists(MPIEXEC), reason="no mpiexec")


@pytest.fixture(scope="module")
def spd(tmp_path_factory):
    d = tmp_path_factory.mktemp("outputs")
    m = np.random.default_rng(0).standard_normal((20, 20))
    np.save(d / "A.npy", m @ m.T + 20 * np.eye(20))
    return d


# ---- two outputs, or an output and an input, naming one target ----------------------------
@needs_mpiexec
@pytest.mark.parametrize("out, rhs_out", [("same.npy", "same.npy"), ("same.npy", "./same.npy"),
                                          ("same.h5:/A", "same.h5:/A"),
                                          ("same.h5:/A", "same.h5:A")])
def test_generate_refuses_the_same_output_twice(tmp_path, out, rhs_out):
    if ".h5" in out:
        pytest.importorskip("h5py")
    p = run(["generate", "--n", 12, "--out", out, "--rhs-out", rhs_out], n=2, cwd=tmp_path)
    assert_fails(p, EXIT_USAGE, "--rhs-out and --out name the same")
    assert os.listdir(tmp_path) == []           # before any work: nothing written


@needs_mpiexec
def test_generate_two_datasets_of_one_file_is_fine(tmp_path):
    h5py = pytest.importorskip("h5py")
    p = run(["generate", "--n", 12, "--out", "g.h5:/A", "--rhs-out", "g.h5:/b"], n=2,
            cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    with h5py.File(tmp_path / "g.h5") as f:
        assert f["A"].shape == (12, 12) and f["b"].shape == (12,)


@needs_mpiexec
def test_solve_refuses_an_output_naming_an_input(spd, tmp_path):
    a = tmp_path / "A.npy"
    a.write_bytes((spd / "A.npy").read_bytes())
    os.symlink(a, tmp_path / "link.npy")
    before = a.read_bytes()
    for args, other in ((["--out", "A.npy"], "--matrix"), (["--out", "link.npy"], "--matrix"),
                        (["--rhs", "b.npy", "--out", "b.npy"], "--rhs"),
                        (["--json", "A.npy"], None)):
        if "b.npy" in args:
            np.save(tmp_path / "b.npy", np.zeros(20))
        p = run(["solve", "-A", "A.npy", *args, "-q"], n=2, cwd=tmp_path)
        if other is None:    # (refused first as a file that does not hold JSON lines)
            assert_fails(p, EXIT_USAGE, "--json", "is not a JSON-lines file")
        else:
            assert_fails(p, EXIT_USAGE, f"and {other} name the same file", "destroy the input")
    assert a.read_bytes() == before


# ---- an all-zero right-hand side: x = 0 is exact -------------------------------------------
@needs_mpiexec
@pytest.mark.parametrize("method", ["cholesky", "gepp"])
def test_solve_zero_rhs_passes_and_writes_x(spd, tmp_path, method):
    np.save(tmp_path / "b0.npy", np.zeros(20))
    p = run(["solve", "-A", spd / "A.npy", "--rhs", tmp_path / "b0.npy", "--method", method,
             "--out", tmp_path / "x.npy", "--json", tmp_path / "r.jsonl"], n=2)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "= 0  PASS" in p.stdout and "backward error" in p.stdout, p.stdout
    assert "= nan" not in p.stdout
    np.testing.assert_array_equal(np.load(tmp_path / "x.npy"), np.zeros(20))
    rec = __import__("json").loads((tmp_path / "r.jsonl").read_text())
    assert rec["sresid"] == 0 and rec["berr"] == 0 and rec["check"] == "PASS"


@pytest.mark.mpi
def test_solve_checks_with_zero_columns(comm):
    """A column with x_j = 0 and b_j = 0 has residual 0 (scaled residual and backward error
    0, not nan and 1); rows with |A||x| + |b| = 0 are skipped in the backward error (LAPACK's
    la_lin_berr); the other columns are checked as usual, by both implementations (few
    right-hand sides and SUMMA); NaN in x still gives NaN."""
    from distla import DistMatrix, ProcessGrid
    from distla.checks import backward_error, solve_checks, solve_residual
    g = ProcessGrid(comm=comm)
    n = 13
    rng = np.random.default_rng(3)
    a = rng.standard_normal((n, n)) + n * np.eye(n)
    x = rng.standard_normal((n, 3))
    x[:, 1] = 0.0
    b = a @ x
    A = DistMatrix.from_global(g, a, block=(4, 4))

    def dm(v):
        return DistMatrix.from_global(g, np.asarray(v).reshape(n, -1), block=(4, 4))
    zero = solve_checks(A, dm(np.zeros(n)), dm(np.zeros(n)), berr=True)
    assert zero["sresid"] == 0 and zero["berr"] == 0
    both = solve_checks(A, dm(x), dm(b), berr=True)     # (residuals at rounding level)
    assert both["sresid"] < 1 and both["berr"] < 1e-14
    wide = np.zeros((n, 20))                    # > 16 columns: the SUMMA implementations
    wide[:, :3] = x
    assert solve_residual(A, dm(wide), dm(a @ wide)) < 1
    assert backward_error(A, dm(wide), dm(a @ wide)) < 1e-14
    d = np.diag(np.arange(1.0, n + 1))          # x_i = b_i = 0 in one row of a diagonal A
    xd = np.ones(n)
    xd[4] = 0.0
    res = solve_checks(DistMatrix.from_global(g, d, block=(4, 4)), dm(xd), dm(d @ xd),
                       berr=True)
    assert res["berr"] < 1e-15
    xn = np.zeros(n)
    xn[5] = np.nan
    bad = solve_checks(A, dm(xn), dm(np.zeros(n)), berr=True)
    assert np.isnan(bad["sresid"])


# ---- options: out of range, or not applying to the run -------------------------------------
SOLVE_OPTIONS = [
    (["--thresh", "nan"], "--thresh must be a number >= 0, not nan"),
    (["--thresh", "-1"], "--thresh must be a number >= 0"),
    (["--progress", "-1"], "--progress must be a finite number of seconds in [0, "),
    (["--seed", "5"], "--seed does not apply here"),
    (["--rhs", "A.npy", "--nrhs", "2"], "--nrhs does not apply with --rhs"),
    (["--rhs", "A.npy", "--rhs-kind", "random"], "--rhs-kind does not apply with --rhs"),
    (["--rhs", "A.npy", "--seed", "1"], "--seed does not apply here"),
    (["--check", "none", "--thresh", "5"], "--thresh does not apply with --check none"),
    (["-O", "max_iter=0"], "-O max_iter applies with -O precision=mixed only"),
    (["-m", "gepp", "-O", "fallback=false"], "-O fallback applies with -O precision=mixed"),
    (["-m", "tlr", "-O", "max_rank=10.0"], "-O max_rank=10.0: max_rank must be"),
    (["-m", "tlr", "-O", "compression=bogus"], "-O compression must be one of svd, rsvd"),
    (["-O", "lookahead=abc", "-O", "lookahead=1"], "-O lookahead given twice"),
    (["--rhs-kind", "random", "--seed", "-1"], "int below 2^64, not -1"),
    (["-m", "gepp", "-O", "precision=mixed", "-O", "fallback=0"],
     "-O fallback must be true or false, not 0"),
]


@needs_mpiexec
@pytest.mark.parametrize("args, message", SOLVE_OPTIONS, ids=[" ".join(a) for a, _ in
                                                             SOLVE_OPTIONS])
def test_solve_refuses_bad_or_ignored_options(spd, args, message):
    p = run(["solve", "-A", "A.npy", *args, "-q"], n=1, cwd=spd, timeout=60)
    assert_fails(p, EXIT_USAGE, message)
    assert "distla solve:" not in p.stdout      # before any work


@needs_mpiexec
def test_solve_block_size_beyond_the_matrix_is_one_block(spd):
    p = run(["solve", "-A", "A.npy", "--nb", 99999999999, "--rhs-kind", "random", "--seed",
             3], n=2, cwd=spd)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "nb 20," in p.stdout and "PASS" in p.stdout


@needs_mpiexec
@pytest.mark.parametrize("args, message", [
    (["--kind", "spd", "--length", "3"], "--length applies to --kind covariance only"),
    (["--kind", "general", "--nugget", "5"], "--nugget applies to --kind covariance only"),
    (["--kind", "spd", "--kernel", "exp"], "--kernel applies to --kind covariance only"),
    (["--kind", "covariance", "--length", "0"], "--length must be a number in"),
    (["--kind", "covariance", "--length", "1e-320"], "--length must be a number in"),
    (["--kind", "covariance", "--length", "1e300"], "--length must be a number in"),
    (["--kind", "covariance", "--nugget", "-1"], "--nugget must be a finite number >= 0"),
    (["--kind", "general", "--seed", "-1"], "int below 2^64, not -1"),
    (["--n", "3037000500"], "beyond any file's size")])      # (MPI-IO's OverflowError)
def test_generate_refuses_bad_or_ignored_options(tmp_path, args, message):
    p = run(["generate", "--n", 8, "--out", "g.npy", *args], n=1, cwd=tmp_path, timeout=60)
    assert_fails(p, EXIT_USAGE, message)
    assert os.listdir(tmp_path) == []


BENCH_OPTIONS = [
    (["matmul", "--n", 32, "--reps", 0], "--reps must be positive, not 0"),
    (["matmul", "--n", 32, "--warmup", -1], "--warmup must be non-negative, not -1"),
    (["matmul", "--n", 32, "--ref-threads", 0], "--ref-threads must be positive"),
    (["lu", "--n", 64, "--lookahead", 3], "--lookahead must be 0 or 1, not 3"),
    (["lu", "--n", 64, "--panel-leaf", -1], "--panel-leaf must be non-negative"),
    (["cholesky", "--n", 64, "--update-group", 0], "--update-group must be positive"),
    (["tlr", "--n", 64, "--tile", 0], "--tile must be positive, not 0"),
    (["tlr", "--n", 64, "--workspace", -5], "--workspace must be positive"),
    (["tlr", "--n", 64, "--tol", "nan"], "--tol must be in (0, 1)"),
    (["tlr", "--n", 64, "--tol", 0], "--tol must be in (0, 1)"),
    (["lu", "--n", 64, "--tree", "flat"], "--tree flat applies to --pivoting tournament"),
    (["matmul", "--n", 0], "--n: a size must be a positive integer, not '0'"),
    (["matmul", "--n", 32, "--json", ""], "--json needs a file name"),
    (["lu", "--n", 64, "--dtype", "float32", "--gemm", "bf16"],
     "--gemm bf16: CPU ranks have no bf16 arithmetic"),
    (["mixed", "--n", 32, "--cond", 0], "--cond must be at least 1"),
    (["mixed", "--n", 32, "--cond", "1e30"], "below 5e+15 (float64 cannot hold"),
    (["lu", "--n", 32, "--seed", -3], "int below 2^64, not -3"),
    (["job", "--n", 32, "--seed", -3], "int below 2^64, not -3"),
    (["job", "--n", 32, "--repeat", 0], "--repeat must be positive"),
]


@needs_mpiexec
@pytest.mark.parametrize("args, message", BENCH_OPTIONS,
                         ids=[" ".join(map(str, a)) for a, _ in BENCH_OPTIONS])
def test_bench_refuses_bad_options(args, message):
    p = run(["bench", *args, "--device", "cpu", "-q"], n=1, timeout=60)
    assert_fails(p, EXIT_USAGE, message)
    assert "RuntimeWarning" not in p.stderr


# ---- benchmarks judge their checks ---------------------------------------------------------
@needs_mpiexec
def test_bench_tlr_fails_when_max_rank_breaks_tol(tmp_path):
    out = tmp_path / "r.jsonl"
    p = run(["bench", "tlr", "--n", 128, "--tile", 32, "--max-rank", 0, "--device", "cpu",
             "--json", out], n=2)
    assert_fails(p, EXIT_THRESH, "FAILED the residual check", "distla-tlr n=128")
    rec = [__import__("json").loads(ln) for ln in out.read_text().splitlines()]
    tlr = next(r for r in rec if r["impl"] == "distla-tlr")
    assert tlr["check"] == "FAIL" and tlr["err_comp"] > tlr["check_thresh"]
    assert "check_thresh" in p.stdout                      # the table states the threshold


@needs_mpiexec
@pytest.mark.parametrize("args", [["tlr", "--n", 128, "--tile", 32],
                                  ["cholesky", "--n", 64, "--nb", 16, "--reps", 1],
                                  ["lu", "--n", 64, "--nb", 16, "--reps", 1],
                                  ["rbt", "--n", 64, "--nb", 16, "--reps", 1],
                                  ["matmul", "--n", 64, "--nb", 16, "--reps", 1, "--check"],
                                  ["mixed", "--n", 64, "--nb", 16, "--reps", 1, "--cond",
                                   1e4, "--method", "cholesky"]],
                         ids=lambda a: a[0])
def test_bench_checks_pass(tmp_path, args):
    out = tmp_path / "r.jsonl"
    p = run(["bench", *args, "--device", "cpu", "--json", out], n=2)
    assert p.returncode == 0, p.stdout + p.stderr
    recs = [__import__("json").loads(ln) for ln in out.read_text().splitlines()]
    judged = [r for r in recs if "check" in r]
    assert judged and all(r["check"] == "PASS" and r["check_thresh"] > 0 for r in judged)


@needs_mpiexec
def test_json_never_appends_to_a_file_that_is_not_json_lines(tmp_path):
    """`--json B.npy` (a matrix named by mistake) appended a JSON line to it: the matrix was
    corrupted ('oversized .npy file'). An existing file must hold JSON lines already; an
    existing JSON-lines file keeps getting records appended."""
    a, other = tmp_path / "A.npy", tmp_path / "B.npy"
    np.save(a, np.eye(6) * 4 + 1)
    np.save(other, np.arange(4.0))
    before = other.read_bytes()
    for args in (["solve", "--matrix", a, "--json", other],
                 ["bench", "matmul", "--n", 16, "--json", other],
                 ["model", "--n", 4096, "--json", other]):
        p = run(args, n=1 if args[0] == "model" else 2, cwd=tmp_path, timeout=120)
        assert_fails(p, EXIT_USAGE, "--json", "is not a JSON-lines file")
    assert other.read_bytes() == before
    log = tmp_path / "log.jsonl"
    for _ in range(2):
        p = run(["solve", "--matrix", a, "--json", log], n=2, cwd=tmp_path, timeout=120)
        assert p.returncode == 0, p.stderr
    assert len(log.read_text().splitlines()) == 2


@needs_mpiexec
def test_solve_refuses_a_low_precision_gemm_on_cpu(tmp_path):
    """`distla solve -O gemm=fp16` on CPU ranks computed in float32 while asking for fp16."""
    np.save(tmp_path / "A.npy", np.eye(6, dtype=np.float32) * 4 + 1)
    p = run(["solve", "--matrix", tmp_path / "A.npy", "-m", "gepp", "-O", "gemm=fp16"], n=1,
            timeout=60)
    assert_fails(p, EXIT_USAGE, "-O gemm=fp16: CPU ranks have no fp16 arithmetic")


@needs_mpiexec
@pytest.mark.parametrize("bench", ["cholesky", "tlr", "matmul"])
def test_bench_on_gpu_without_a_gpu_names_the_option(bench):
    """`bench cholesky|tlr|job --device gpu` without CuPy said only "No module named 'cupy'"."""
    from distla.device import gpu_available
    if gpu_available():
        pytest.skip("a GPU is here")
    p = run(["bench", bench, "--n", 64, "--device", "gpu", "-q"], n=1, timeout=60)
    assert_fails(p, EXIT_USAGE, "--device gpu: needs CuPy and a CUDA GPU")


@needs_mpiexec
def test_bench_warnings_are_printed_once():
    """`bench tlr --max-rank 1` printed Python's raw LinAlgWarning (with its source line) once
    per rank."""
    p = run(["bench", "tlr", "--n", 256, "--tile", 64, "--max-rank", 1, "--device", "cpu",
             "-q"], n=2, timeout=120)
    lines = [ln for ln in p.stderr.splitlines() if "capped the ranks" in ln]
    assert len(lines) == 1 and lines[0].startswith("distla bench: warning: "), p.stderr


@needs_mpiexec
def test_bench_plot_of_a_binary_file_names_it(tmp_path):
    """`bench plot A.npy` said only "'utf-8' codec can't decode byte 0x93"."""
    np.save(tmp_path / "A.npy", np.eye(3))
    p = run(["bench", "plot", tmp_path / "A.npy", "--plot", tmp_path / "p.png"], n=1,
            timeout=120)
    assert_fails(p, EXIT_USAGE, "A.npy: not a JSON-lines file of records")


def test_json_records_are_standard_json():
    """`--json` wrote bare NaN tokens (the FAIL of a NaN residual): not JSON for strict
    parsers. Non-finite numbers are now null."""
    import json

    from distla.bench.common import json_safe
    rec = json_safe({"sresid": float("nan"), "berr": np.float64(np.inf), "n": np.int64(3),
                      "ok": True, "phases": {"solve": np.float32(0.5)}, "grid": "1x2"})
    assert json.loads(json.dumps(rec, allow_nan=False)) == \
        {"sresid": None, "berr": None, "n": 3, "ok": True, "phases": {"solve": 0.5},
         "grid": "1x2"}


@needs_mpiexec
def test_unwritable_outputs_are_refused_before_any_work_on_every_rank(spd, tmp_path):
    """`--out /proc/x.npy` passed the check (os.access) and failed after the solve with a
    raw errno message; an existing --json file that cannot be appended to failed after the
    solve on rank 0 only (the other ranks exited 0). Both are refused before any work, the
    same code on every rank."""
    import shutil
    import subprocess
    import sys

    from test_cli import _env
    wrap = tmp_path / "wrap.sh"
    wrap.write_text('#!/bin/bash\n"$@"; rc=$?; echo "[exit $rc]" >&2; exit $rc\n')
    wrap.chmod(0o755)
    cases = []
    if os.path.isdir("/proc/self"):
        cases.append((["--out", "/proc/x.npy"], "--out: /proc/x.npy: cannot create a file"))
    ro = tmp_path / "ro.json"
    ro.write_text('{"a": 1}\n')
    chattr = shutil.which("chattr")
    if os.geteuid() != 0:
        ro.chmod(0o444)
        cases.append((["--json", ro], "--json: "))
    elif chattr and subprocess.run([chattr, "+i", ro], capture_output=True).returncode == 0:
        cases.append((["--json", ro], "--json: "))
    else:
        chattr = None
    try:
        for args, needle in cases:
            p = subprocess.run([MPIEXEC, "-n", "2", str(wrap), sys.executable, "-m", "distla",
                                "solve", "-A", str(spd / "A.npy"), "-q", *map(str, args)],
                               env=_env(), capture_output=True, text=True, timeout=120)
            assert p.returncode == 2, p.stderr
            assert p.stderr.count("[exit 2]") == 2, p.stderr
            assert needle in p.stderr and "solve:" not in p.stdout, p.stderr
    finally:
        if os.geteuid() == 0 and chattr:
            subprocess.run([chattr, "-i", ro], capture_output=True)
    assert ro.read_text() == '{"a": 1}\n'


def test_short_verbose_flag_prints_the_traceback(capsys):
    """`-v` is --verbose, whose help promises the traceback of an error: only the long
    spelling printed it."""
    from distla.runtime import run_main

    def fail(argv):
        raise ValueError("boom")
    for flags in (["-v"], ["--verbose"], []):
        assert run_main(fail, ["solve", *flags], prog="distla") == EXIT_USAGE
        err = capsys.readouterr().err
        assert err.rstrip().endswith("distla: error: boom")
        assert ("Traceback" in err) == bool(flags), err


# ---- sweep 28: MPMD launches and JSON-lines files --------------------------------------------
@needs_mpiexec
def test_ranks_with_different_command_lines_fail_together(tmp_path):
    """``mpiexec -n 1 distla ... : -n 1 distla ...`` with different options hung (each rank
    chose other collectives) or silently used rank 0's file: exit 2 on every rank now."""
    import subprocess
    import sys

    from test_cli import _env
    np.save(tmp_path / "A.npy", np.eye(20) * 3)
    base = [sys.executable, "-m", "distla", "solve", "-A", "A.npy", "-q"]
    for extra in (["--check", "none"], ["--out", "x.npy"], ["--nb", "4"]):
        cmd = [MPIEXEC, "-n", "1", *base, *extra, ":", "-n", "1", *base]
        p = subprocess.run(cmd, cwd=tmp_path, env=_env(), capture_output=True, text=True,
                           timeout=120)
        assert_fails(p, EXIT_USAGE, "the ranks got different command lines")
    assert not (tmp_path / "x.npy").exists()


@needs_mpiexec
def test_json_records_start_on_their_own_line(tmp_path):
    """A JSON-lines file without its last newline got the record glued to its last line (the
    file no longer parsed); a pretty-printed JSON file was appended to. Now a record starts
    on a new line, and a file whose first line is not one JSON object is refused."""
    import json
    np.save(tmp_path / "A.npy", np.eye(20) * 3)
    (tmp_path / "r.jsonl").write_text('{"a": 1}')
    p = run(["solve", "-A", "A.npy", "-q", "--json", "r.jsonl"], n=2, cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    lines = [json.loads(s) for s in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert lines[0] == {"a": 1} and lines[1]["n"] == 20
    (tmp_path / "pretty.json").write_text(json.dumps({"a": {"b": 1}}, indent=2))
    before = (tmp_path / "pretty.json").read_bytes()
    p = run(["solve", "-A", "A.npy", "-q", "--json", "pretty.json"], n=2, cwd=tmp_path)
    assert_fails(p, EXIT_USAGE, "--json", "is not a JSON-lines file")
    assert (tmp_path / "pretty.json").read_bytes() == before
