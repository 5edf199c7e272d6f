"""Bad and nasty inputs, one table: every case must raise a clear exception (the same on every
rank) or warn; none may return silently. Runs on any number of ranks (every grid shape)."""
import warnings

import numpy as np
import pytest

from distla import (
    DistMatrix,
    LinAlgWarning,
    NotPositiveDefiniteError,
    ProcessGrid,
    SingularMatrixError,
)
from distla.linalg import solve
from distla.testing import grid_shapes

N = 24
_R = np.random.default_rng(11)
_G = _R.standard_normal((N, N))


def _spd():
    return _G @ _G.T + N * np.eye(N)


def _nonsym():
    return _G + N * np.eye(N)


def _with(a, i, j, v):
    a = a.copy()
    a[i, j] = v
    return a


def _singular():
    a = _G.copy()
    a[:, 3] = a[:, 9]
    return a


def _near_singular():
    return _G @ np.diag(np.r_[np.ones(N - 1), 1e-20]) @ _G.T


def _cond_spd(cond):
    """SPD with 2-norm condition number ``cond`` (orthogonal eigenvectors)."""
    q, _ = np.linalg.qr(_G)
    return (q * np.logspace(0, -np.log10(cond), N)) @ q.T


ONES = np.ones((N, 1))
# (name, A, B, method, kwargs, expected exception or warning class, message regex)
CASES = [
    (f"nan in A, {m}", _with(_spd(), 5, 2, np.nan), ONES, m, {}, ValueError,
     r"A contains a non-finite value \(nan\) at global index \(5, 2\)")
    for m in ("cholesky", "gepp", "calu", "genp", "rbt")
] + [
    (f"inf in B, {m}", _spd(), _with(ONES, 7, 0, np.inf), m, {}, ValueError,
     r"B contains a non-finite value \(inf\) at global index \(7, 0\)")
    for m in ("cholesky", "gepp", "rbt")
] + [
    ("cholesky of a nonsymmetric matrix", _with(_spd(), 1, 20, 5.0), ONES, "cholesky", {},
     ValueError, "not symmetric"),
    ("cholesky of an indefinite matrix", _spd() - 2 * N * np.eye(N) * 10, ONES, "cholesky",
     {}, NotPositiveDefiniteError, "not positive definite"),
    ("genp with a zero leading pivot", _with(_G, 0, 0, 0.0), ONES, "genp", {},
     SingularMatrixError, "needs pivoting"),
    ("genp with a tiny leading pivot", _with(_G, 0, 0, 1e-14), ONES, "genp", {},
     SingularMatrixError, r"tiny pivot at column 0 .*needs pivoting"),
    ("gepp of an exactly singular matrix", np.zeros((N, N)), ONES, "gepp", {},
     SingularMatrixError, "singular"),
    ("gepp of a numerically singular matrix", _near_singular(), ONES, "gepp", {},
     LinAlgWarning, "ill-conditioned"),
    ("calu of a numerically singular matrix", _near_singular(), ONES, "calu", {},
     LinAlgWarning, "ill-conditioned"),
    ("rbt of an exactly singular matrix", _singular(), _R.standard_normal((N, 1)), "rbt", {},
     LinAlgWarning, "ill-conditioned"),
    ("pivoting keyword", _G, ONES, "gepp", {"pivoting": "none"}, ValueError,
     "chooses the pivoting"),
    ("unknown method", _G, ONES, "qr", {}, ValueError, "unknown method"),
    ("tlr of a nonsymmetric matrix", _with(_spd(), 1, 20, 5.0), ONES, "tlr", {}, ValueError,
     "not symmetric"),
    ("nan in A, tlr", _with(_spd(), 5, 2, np.nan), ONES, "tlr", {}, ValueError,
     r"A contains a non-finite value \(nan\) at global index \(5, 2\)"),
    ("inf in B, tlr", _spd(), _with(ONES, 7, 0, np.inf), "tlr", {}, ValueError,
     r"B contains a non-finite value \(inf\) at global index \(7, 0\)"),
    ("tlr beyond what its tolerance resolves", _cond_spd(1e11), ONES, "tlr", {"tol": 1e-8},
     LinAlgWarning, r"rcond=.* < tol=1e-08"),
    ("tlr with mixed precision", _spd(), ONES, "tlr", {"precision": "mixed"}, ValueError,
     "no mixed precision"),
    ("tlr with a tol that is not a number", _spd(), ONES, "tlr", {"tol": "abc"}, ValueError,
     "tol must be a number"),
    ("pivot_threshold with partial pivoting", _G, ONES, "gepp", {"pivot_threshold": 1e-3},
     ValueError, "applies to LU without pivoting"),
    ("method given as a non-string", _G, ONES, 3, {}, ValueError, "method must be a string"),
    ("wrong B rows", _G, np.ones((N - 1, 1)), "gepp", {}, ValueError, "rows"),
]


@pytest.mark.mpi
@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_input(comm, case):
    name, a, b, method, kw, expect, pattern = case
    for p, q in grid_shapes(comm.size):
        g = ProcessGrid(p, q, comm=comm)
        A = DistMatrix.from_global(g, a, block=5, src=(p - 1, 0))
        B = DistMatrix.from_global(g, b, block=5, src=(p - 1, 0))
        if issubclass(expect, Warning):
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                solve(A, B, method=method, **kw)
            hits = [str(x.message) for x in w if issubclass(x.category, expect)]
            assert any(__import__("re").search(pattern, h) for h in hits), (name, hits)
        else:
            with pytest.raises(expect, match=pattern) as ei:
                solve(A, B, method=method, **kw)
            texts = comm.allgather(str(ei.value))
            assert len(set(texts)) == 1, texts


@pytest.mark.mpi
def test_method_none_is_the_default_partial_pivoting(comm):
    """method=None means 'gepp' (it once meant the alias 'none': LU without pivoting, whose
    forward error on this matrix is 1e-6); a tiny leading pivot costs no accuracy."""
    a = _with(_G, 0, 0, 1e-9)
    g = ProcessGrid(comm=comm)
    A = DistMatrix.from_global(g, a, block=5)
    B = DistMatrix.from_global(g, a @ np.ones((N, 1)), block=5)
    X = solve(A, B, method=None).to_global(None)
    np.testing.assert_array_equal(X, solve(A, B, method="gepp").to_global(None))
    assert np.abs(X - 1).max() < 1e-12


@pytest.mark.mpi
def test_rcond_of_singular_matrices_is_zero(comm):
    from distla.linalg import rcond
    g = ProcessGrid(comm=comm)
    assert rcond(DistMatrix.zeros(g, (N, N), (5, 5))) == 0.0
    assert rcond(DistMatrix.from_global(g, _with(_G, slice(None), 3, 0.0), block=5)) == 0.0


@pytest.mark.mpi
def test_empty_matrix_solves_to_an_empty_x(comm):
    """As scipy.linalg.solve (and solve_lu/solve_cholesky): a 0 x 0 system has the 0 x k
    solution (solve() refused it while the drivers accepted it; the CLI refuses an empty
    matrix file: see below)."""
    g = ProcessGrid(comm=comm)
    A = DistMatrix.zeros(g, (0, 0), (4, 4))
    B = DistMatrix.zeros(g, (0, 1), (4, 4))
    assert solve(A, B).shape == (0, 1)


@pytest.mark.mpi
@pytest.mark.parametrize("method", ["cholesky", "gepp", "calu", "genp", "rbt"])
def test_zero_column_rhs_still_factors_and_checks(comm, method):
    """B with no columns: every method still factors (and checks) A, so a singular A raises
    for each alike (rbt returned an empty X without looking at A); a good A gives n x 0."""
    g = ProcessGrid(comm=comm)
    B = DistMatrix.zeros(g, (N, 0), (5, 5), src=(g.nprow - 1, 0))
    bad = DistMatrix.from_global(g, np.ones((N, N)), block=5)
    with pytest.raises((SingularMatrixError, NotPositiveDefiniteError)):
        solve(bad, B, method=method)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        X = solve(DistMatrix.from_global(g, _spd(), block=5), B, method=method)
    assert X.shape == (N, 0) and X.same_layout(B)


# ---- the same sweep through the command line ---------------------------------------------
# Each row: (name, ranks, arguments after ``distla``, exit code (distla.runtime.EXIT_*), regex
# the one ``distla: error:`` line (or, for exit 0, stderr) must match, extra check or None).
# Ranks calling with different block sizes cannot happen through the command line (every rank
# parses the same argv); that row of the sweep is API-only: tests/test_validate.py.
import os  # noqa: E402
import re  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

from distla.runtime import EXIT_NUMERIC, EXIT_THRESH, EXIT_USAGE, launcher_free_env  # noqa: E402

_ROOT = Path(__file__).resolve().parents[1]
_MPIEXEC = os.path.join(os.path.dirname(sys.executable), "mpiexec")


def _cli(args, ranks, cwd):
    """``python -m distla ARGS`` (one rank) or ``mpiexec -n RANKS python -m distla ARGS``."""
    env = launcher_free_env()   # not the pytest job's launcher state
    env.update(PYTHONPATH=str(_ROOT) + os.pathsep + env.get("PYTHONPATH", ""),
               OPENBLAS_NUM_THREADS="1", MPIR_CVAR_POLLS_BEFORE_YIELD="1",
               DISTLA_ABORT_TIMEOUT="30", PYTHONDONTWRITEBYTECODE="1")
    cmd = [sys.executable, "-m", "distla", *map(str, args)]
    if ranks > 1:
        if not os.path.exists(_MPIEXEC):
            pytest.skip("no mpiexec beside the python in use")
        cmd = [_MPIEXEC, "-n", str(ranks), *cmd]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=90)


@pytest.fixture(scope="module")
def cli_dir(tmp_path_factory):
    """Small input files for the command-line rows (n = N, written once)."""
    d = tmp_path_factory.mktemp("bad_cli")
    np.save(d / "spd.npy", _spd())
    np.save(d / "nonsym.npy", _nonsym())
    np.save(d / "nan.npy", _with(_spd(), 5, 3, np.nan))    # block column 1 of nb=2: rank 1
    np.save(d / "inf_b.npy", _with(ONES, 7, 0, np.inf))
    np.save(d / "empty.npy", np.zeros((0, 0)))
    np.save(d / "zero_pivot.npy", _with(_nonsym(), 0, 0, 0.0))
    np.save(d / "singular.npy", _with(_G, slice(None), 3, 0.0))    # an exactly zero pivot
    np.save(d / "near_singular.npy", _near_singular())
    np.save(d / "indefinite.npy", _spd() - 20 * N * np.eye(N))
    np.save(d / "b_complex.npy", _R.standard_normal(N) + 1j * _R.standard_normal(N))
    return d


def _no_new_files(before):
    def check(d, p):
        assert sorted(os.listdir(d)) == before, sorted(os.listdir(d))
    return check


def _wrote_exactly(name):
    def check(d, p):
        assert f"solution written to {name}\n" in p.stdout, p.stdout
        assert (d / name).is_file()
        assert not [f for f in os.listdir(d) if f.startswith(name) and f != name]
        x = np.load(d / name) if name.lower().endswith(".npy") else None
        if x is not None:
            np.testing.assert_allclose(_spd() @ x.ravel(), _spd() @ np.ones(N), rtol=1e-10)
    return check


def _complex_solution(d, p):
    x = np.load(d / "xc.npy")
    b = np.load(d / "b_complex.npy")
    assert np.iscomplexobj(x) and np.abs(x.imag).max() > 0
    np.testing.assert_allclose(_nonsym() @ x, b, atol=1e-10)


def _complex_spd_solution(d, p):
    x = np.load(d / "xh.npy")
    b = np.load(d / "b_complex.npy")
    assert np.iscomplexobj(x) and np.abs(x.imag).max() > 0
    np.testing.assert_allclose(np.load(d / "spd.npy") @ x, b, atol=1e-10)


def _solves(name, a):
    """Check: the solution file ``name`` holds x with a x = a @ ones (the default rhs)."""
    def check(d, p):
        x = np.load(d / name).ravel()
        np.testing.assert_allclose(a @ x, a @ np.ones(N), rtol=1e-12, atol=1e-12)
    return check


def _solves_tlr(name):
    """Check: PASS printed against TLR's threshold (its residual bound tol ||A||_F ||x||_2
    in SRESID's units, below the loose 3 tol/eps = 2.7e8 at the default tol 1e-8), and x
    solves the spd system to that tol."""
    def check(d, p):
        m = re.search(r"PASS \(threshold ([0-9.e+]+)\)", p.stdout)
        assert m and 3 < float(m.group(1)) <= 2.71e8, p.stdout
        x = np.load(d / name).ravel()
        np.testing.assert_allclose(_spd() @ x, _spd() @ np.ones(N), rtol=1e-6)
    return check


def _fail(text):
    raise AssertionError(text)


def _printed(*lines):
    def check(d, p):
        for line in lines:
            assert line in p.stdout, (line, p.stdout)
    return check


def _no_solve_ran(d, p):
    assert "scaled residual" not in p.stdout and "solve:" not in p.stdout, p.stdout


_S = ["solve", "--nb", 2]
CLI_CASES = [
    ("nan in the matrix file", 2, _S + ["--matrix", "nan.npy", "--method", "gepp"],
     EXIT_USAGE, r"non-finite value \(nan\) at global index \(5, 3\)", None),
    ("inf in the rhs file", 2, _S + ["--matrix", "spd.npy", "--rhs", "inf_b.npy"],
     EXIT_USAGE, r"B contains a non-finite value \(inf\) at global index \(7, 0\)", None),
    ("cholesky of a nonsymmetric matrix", 2,
     _S + ["--matrix", "nonsym.npy", "--method", "cholesky"], EXIT_USAGE, "not symmetric",
     None),
    ("0 x 0 matrix", 2, _S + ["--matrix", "empty.npy"], EXIT_USAGE,
     r"--matrix: .*empty\.npy is empty \(0 x 0\)", _no_solve_ran),
    ("-O pivoting=none", 1, _S + ["--matrix", "nonsym.npy", "--method", "gepp", "-O",
                                  "pivoting=none"], EXIT_USAGE, "chooses the pivoting", None),
    ("--out in a missing directory fails before the solve", 2,
     _S + ["--matrix", "spd.npy", "--out", "no/such/dir/x.npy"], EXIT_USAGE,
     r"^distla: error: --out: .*no/such/dir", _no_solve_ran),
    ("--json in a missing directory fails before the solve", 1,
     _S + ["--matrix", "spd.npy", "--json", "no/such/dir/r.json"], EXIT_USAGE,
     r"^distla: error: --json: .*no/such/dir", _no_solve_ran),
    ("--out with an unknown extension writes nothing", 1,
     _S + ["--matrix", "spd.npy", "--out", "x.txt"], EXIT_USAGE,
     r"--out: x\.txt: unknown extension", None),
    ("--out x.NPY writes exactly x.NPY", 2, _S + ["--matrix", "spd.npy", "--out", "x.NPY"],
     0, "", _wrote_exactly("x.NPY")),
    ("--out x.mtx writes exactly x.mtx", 1, _S + ["--matrix", "spd.npy", "--out", "x.mtx"],
     0, "", _wrote_exactly("x.mtx")),
    ("generate --rhs-out errors name --rhs-out", 1,
     ["generate", "--kind", "spd", "--n", 8, "--out", "g.npy", "--rhs-out",
      "no/such/dir/b.npy"], EXIT_USAGE, r"^distla: error: --rhs-out: ", None),
    ("generate --rhs-out with an unknown extension", 1,
     ["generate", "--kind", "spd", "--n", 8, "--out", "g.npy", "--rhs-out", "b.txt"],
     EXIT_USAGE, r"^distla: error: --rhs-out: b\.txt: unknown extension", None),
    ("complex rhs with a real matrix, gepp: promoted", 2,
     _S + ["--matrix", "nonsym.npy", "--rhs", "b_complex.npy", "--method", "gepp", "--out",
           "xc.npy"], 0, "", _complex_solution),
    ("complex rhs with a real matrix, cholesky: promoted (Hermitian)", 1,
     _S + ["--matrix", "spd.npy", "--rhs", "b_complex.npy", "--method", "cholesky",
           "--out", "xh.npy"], 0, "", _complex_spd_solution),
    ("complex rhs with a real matrix, rbt: promoted (it was refused, falsely: 'rbt solves "
     "real systems only')", 1,
     _S + ["--matrix", "nonsym.npy", "--rhs", "b_complex.npy", "--method", "rbt", "--out",
           "xc.npy"], 0, "", _complex_solution),
    ("complex rhs with a real matrix, tlr: refused (real only)", 1,
     _S + ["--matrix", "spd.npy", "--rhs", "b_complex.npy", "--method", "tlr"],
     EXIT_USAGE, "--method tlr on cpu ranks solves real systems only", None),
    ("genp with a zero leading pivot", 2,
     _S + ["--matrix", "zero_pivot.npy", "--method", "genp"], EXIT_NUMERIC, "needs pivoting",
     None),
    ("gepp of an exactly singular matrix", 2,
     _S + ["--matrix", "singular.npy", "--method", "gepp"], EXIT_NUMERIC, "singular", None),
    ("cholesky of an indefinite matrix", 2, _S + ["--matrix", "indefinite.npy"], EXIT_NUMERIC,
     "not positive definite", None),
    ("-O overwrite_a is refused before reading", 1,
     _S + ["--matrix", "spd.npy", "-O", "overwrite_a=true"], EXIT_USAGE,
     r"^distla: error: -O overwrite_a: not settable in distla solve \(A must stay",
     _no_solve_ran),
    ("-O trans is refused", 1, _S + ["--matrix", "nonsym.npy", "--method", "gepp", "-O",
                                     "trans=1"], EXIT_USAGE, r"-O trans: not settable",
     _no_solve_ran),
    ("-O with an unknown option names the method's options", 1,
     _S + ["--matrix", "spd.npy", "-O", "bogus=1"], EXIT_USAGE,
     r"-O bogus: not an option of --method cholesky \(its options: .*check_finite", _no_solve_ran),
    ("-O precision=mixed with gepp", 2,
     _S + ["--matrix", "nonsym.npy", "--method", "gepp", "-O", "precision=mixed", "--out",
           "xm.npy"], 0, "", _solves("xm.npy", _nonsym())),
    ("-O precision=mixed with cholesky", 2,
     _S + ["--matrix", "spd.npy", "-O", "precision=mixed", "--out", "xs.npy"], 0, "",
     _solves("xs.npy", _spd())),
    ("tlr of a nonsymmetric matrix", 2,
     ["solve", "--nb", 6, "--matrix", "nonsym.npy", "--method", "tlr"], EXIT_USAGE,
     "not symmetric", None),
    ("-O check_rcond=false with gepp", 1,
     _S + ["--matrix", "nonsym.npy", "--method", "gepp", "-O", "check_rcond=false", "--out",
           "xr.npy"], 0, "", _solves("xr.npy", _nonsym())),
    ("-O check_rcond=false with cholesky", 1,
     _S + ["--matrix", "spd.npy", "-O", "check_rcond=false", "--out", "xq.npy"], 0, "",
     _solves("xq.npy", _spd())),
    ("-O lower=false with cholesky", 1,
     _S + ["--matrix", "spd.npy", "-O", "lower=false", "--out", "xu.npy"], 0, "",
     _solves("xu.npy", _spd())),
    ("-O lower with a solve-only option", 1,
     _S + ["--matrix", "spd.npy", "-O", "lower=false", "-O", "precision=mixed"], EXIT_USAGE,
     "-O lower cannot be combined with -O precision", _no_solve_ran),
    ("tlr passes at its default tol (threshold from tol ||A||_F ||x||_2)", 2,
     _S + ["--matrix", "spd.npy", "--method", "tlr", "--out", "xt.npy"], 0, "",
     _solves_tlr("xt.npy")),
    ("tlr at a fixed rank of 1 fails the residual check: exit 3, no file", 2,
     _S + ["--matrix", "spd.npy", "--method", "tlr", "-O", "tol=none", "-O", "max_rank=1",
           "--out", "x1.npy"], EXIT_THRESH, r"scaled residual .* exceeds the threshold 3 \(FAIL",
     _printed("FAIL (threshold 3)", "solution NOT written to x1.npy")),
    ("tlr whose ranks max_rank caps below tol fails the check: exit 3, no file", 2,
     _S + ["--matrix", "spd.npy", "--method", "tlr", "-O", "tol=1e-3", "-O", "max_rank=0",
           "--out", "x0.npy"], EXIT_THRESH, r"scaled residual .* exceeds the threshold",
     lambda d, p: ("capped the ranks" in p.stderr or _fail(p.stderr)) and
     _printed("solution NOT written to x0.npy")(d, p)),
    ("gepp of a numerically singular matrix warns", 2,
     _S + ["--matrix", "near_singular.npy", "--method", "gepp"], 0,
     r"distla: warning: .*ill-conditioned matrix \(rcond=", None),
]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", CLI_CASES, ids=[c[0] for c in CLI_CASES])
def test_bad_input_cli(cli_dir, case):
    name, ranks, args, code, pattern, extra = case
    before = sorted(os.listdir(cli_dir))
    p = _cli(args, ranks, cli_dir)
    out = p.stdout + p.stderr
    assert p.returncode == code, f"{name}: exit {p.returncode}, expected {code}\n{out}"
    assert "Traceback" not in out, out
    errs = [ln for ln in out.splitlines() if ln.startswith("distla: error:")]
    if code:
        assert len(errs) == 1, f"{name}: expected one error line (rank 0):\n{out}"
        assert re.search(pattern, errs[0]), (pattern, errs[0])
        _no_new_files(before)(cli_dir, p)     # a failed run leaves no file behind
    else:
        assert not errs, out
        assert re.search(pattern, p.stderr), (pattern, p.stderr)
    if pattern.startswith("distla: warning"):
        assert p.stderr.count("ill-conditioned") == 1, p.stderr    # rank 0 only
    if extra is not None:
        extra(cli_dir, p)
    for f in set(os.listdir(cli_dir)) - set(before):    # keep the rows independent
        os.remove(cli_dir / f)


# ---- dtype and layout mismatches: one exception class per kind, for every method ----------
_METHODS = ("cholesky", "gepp", "calu", "genp", "rbt", "tlr")


@pytest.mark.mpi
@pytest.mark.parametrize("method", _METHODS)
def test_mismatches_raise_the_same_class_for_every_method(comm, method):
    g = ProcessGrid(comm=comm)
    A = DistMatrix.from_global(g, _spd(), block=5)
    other = ProcessGrid(comm=comm.Dup())
    cases = [(DistMatrix.from_global(g, ONES.astype(np.float32), block=5), TypeError,
              "dtypes differ"),
             (DistMatrix.from_global(g, ONES + 1j, block=5), TypeError, "dtypes differ"),
             (DistMatrix.from_global(other, ONES, block=5), ValueError, "grid"),
             (DistMatrix.from_global(g, np.ones((N + 1, 1)), block=5), ValueError, "rows"),
             (ONES, TypeError, "DistMatrix")]
    for B, expect, pattern in cases:
        with pytest.raises(expect, match=pattern) as ei:
            solve(A, B, method=method)
        assert len(set(comm.allgather(str(ei.value)))) == 1


@pytest.mark.mpi
def test_tlr_refuses_a_complex_replicated_rhs(comm):
    from distla import tlr
    g = ProcessGrid(comm=comm)
    L = tlr.cholesky(tlr.compress(DistMatrix.from_global(g, _spd(), block=6), tol=1e-12))
    with pytest.raises(TypeError, match="truncated"):
        L.solve(np.ones(N) + 1j)
    np.testing.assert_allclose(_spd() @ L.solve(np.ones(N, dtype=np.float32)), np.ones(N),
                               atol=1e-8)


@pytest.mark.mpi
@pytest.mark.parametrize("scale", [1e300, 1e-300])
def test_tlr_solve_of_a_badly_scaled_matrix(comm, scale):
    """The compression squares entries and singular values: without rescaling, a covariance
    matrix times 1e+300 (or 1e-300) came back with a forward error of 1.6 and no error."""
    from distla import covariance as cov
    from distla import tlr
    g = ProcessGrid(comm=comm)
    x, k = cov.default_problem(60, seed=1)
    a = cov.covariance_matrix(g, x, k, block=10).to_global(None)
    want = np.linalg.solve(a, np.ones(60))
    S = DistMatrix.from_global(g, a * scale, block=10)
    with warnings.catch_warnings():
        warnings.simplefilter("error")       # no overflow / underflow RuntimeWarning either
        X = tlr.solve(S, np.ones(60) * scale, tol=1e-10)
    assert np.abs(X - want).max() <= 1e-6 * np.abs(want).max()
