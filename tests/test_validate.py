"""Input checks, argument agreement, condition estimates and the abort-on-exception hook."""
import subprocess
import sys
import warnings

import numpy as np
import pytest
import scipy.linalg as sla

from distla import DistMatrix, LinAlgWarning, ProcessGrid
from distla.linalg import cho_factor, cholesky, lu_factor, rcond, solve, solve_cholesky, solve_lu
from distla.testing import corner, grid_shapes


@pytest.fixture
def grids(comm):
    return [ProcessGrid(p, q, comm) for p, q in grid_shapes(comm.size)]


def _spd(n, cond, seed=0):
    r = np.random.default_rng(seed)
    q, _ = np.linalg.qr(r.standard_normal((n, n)))
    return (q * np.logspace(0, -np.log10(cond), n)) @ q.T


# ---- check_finite ------------------------------------------------------------------------
@pytest.mark.mpi
@pytest.mark.parametrize("method", ["cholesky", "gepp", "calu", "genp", "rbt"])
@pytest.mark.parametrize("where", ["A", "B"])
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nonfinite_input_raises_before_work(grids, method, where, bad):
    n = 13
    a, b = _spd(n, 10) + n * np.eye(n), np.ones((n, 2))
    (a if where == "A" else b)[9, 1] = bad
    for g in grids:
        A = DistMatrix.from_global(g, a, block=4, src=(0, g.npcol - 1))
        B = DistMatrix.from_global(g, b, block=4, src=(0, g.npcol - 1))
        with pytest.raises(ValueError, match=rf"{where} contains a non-finite value "
                           rf"\({bad}\) at global index \(9, 1\)") as ei:
            solve(A, B, method=method)
        texts = g.comm.allgather(str(ei.value))
        assert len(set(texts)) == 1, texts          # the same message on every rank


@pytest.mark.mpi
@pytest.mark.parametrize("dtype", [np.float32, np.complex128, np.complex64])
@pytest.mark.parametrize("bad", [complex(np.nan, 0), complex(0, np.nan), complex(0, np.inf),
                                 complex(-np.inf, 1)])
def test_check_finite_finds_each_kind_of_nonfinite(grids, dtype, bad):
    """Real and imaginary parts, NaN and either infinity, located by global index."""
    from distla.validate import check_finite
    a = np.ones((11, 7), dtype=dtype)
    if np.dtype(dtype).kind == "f":
        if bad.imag != 0:
            return
        bad = bad.real
    a[6, 5] = bad
    for g in grids:
        A = DistMatrix.from_global(g, a, block=(3, 2), src=corner(g))
        with pytest.raises(ValueError, match=r"A contains a non-finite value .* at global "
                                             r"index \(6, 5\)"):
            check_finite(("A", A))
        check_finite(("A", DistMatrix.from_global(g, np.ones((11, 7), dtype), block=3)))
        big = np.full((11, 7), np.finfo(dtype).max / 2, dtype=dtype)   # the sum overflows
        check_finite(("A", DistMatrix.from_global(g, big, block=3)))


@pytest.mark.mpi
def test_check_finite_false_skips_the_scan(grids):
    n = 9
    a = _spd(n, 10) + n * np.eye(n)
    a[0, 8] = np.nan                                   # upper triangle: never read
    for g in grids:
        A = DistMatrix.from_global(g, a, block=4)
        L = cholesky(A, check_finite=False, check_symmetric=False)
        np.testing.assert_allclose(L.to_global(None), np.linalg.cholesky(np.tril(a) +
                                   np.tril(a, -1).T), atol=1e-12)


# ---- symmetry ----------------------------------------------------------------------------
@pytest.mark.mpi
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_cholesky_refuses_nonsymmetric(grids, dtype):
    n = 17
    a = (_spd(n, 100) + n * np.eye(n)).astype(dtype)
    bad = a.copy()
    eps = np.finfo(dtype).eps   # asymmetry 100x the tolerance (sqrt(eps) ||A||_F)
    bad[12, 3] += 100 * np.sqrt(eps) * np.linalg.norm(a.astype(np.float64))
    for g in grids:
        L = cholesky(DistMatrix.from_global(g, a, block=5))     # symmetric: accepted
        Lg = L.to_global(None).astype(np.float64)
        assert np.allclose(Lg @ Lg.T, a, rtol=1e-4)
        B = DistMatrix.from_global(g, bad, block=5)
        with pytest.raises(ValueError, match="not (symmetric|Hermitian)"):
            cho_factor(B)
        cholesky(B, check_symmetric=False)                      # the lower triangle is SPD


@pytest.mark.mpi
@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_symmetry_probe_gives_the_norm_and_the_finite_check(grids, dtype):
    """check_symmetric returns ||A||_inf (what the Cholesky solve's condition estimate uses)
    from the same pass; with finite=True a NaN/Inf in A raises check_finite's error (naming
    the entry), not 'not symmetric'; without it the non-finite probe says not symmetric."""
    from distla.validate import check_symmetric
    n = 19
    a = _spd(n, 100) + n * np.eye(n)
    if dtype == np.complex128:
        h = np.triu(np.random.default_rng(3).standard_normal((n, n)), 1) * 1j
        a = a + h + h.conj().T
    for g in grids:
        A = DistMatrix.from_global(g, a, block=4, src=(0, g.npcol - 1))
        got = check_symmetric(A, finite=True)
        assert got == pytest.approx(np.abs(a).sum(axis=1).max(), rel=1e-13)
        assert len(set(g.comm.allgather(got))) == 1
        for bad in (np.nan, np.inf):
            c = a.copy()
            c[13, 2] = bad
            C = DistMatrix.from_global(g, c, block=4)
            with pytest.raises(ValueError, match=r"A contains a non-finite value .* at global "
                                                 r"index \(13, 2\)"):
                check_symmetric(C, finite=True)
            with pytest.raises(ValueError, match="NaN or Inf"):   # (named as such, not
                check_symmetric(C)                                  # as asymmetry)


def test_symmetry_probe_at_extreme_scales(grids):
    """The probe's norm does not under- or overflow: a symmetric matrix scaled by 1e-300 or
    1e+300 passes, a nonsymmetric one at those scales is refused."""
    from distla.validate import check_symmetric
    n = 14
    r = np.random.default_rng(3)
    g0 = r.standard_normal((n, n))
    s = g0 + g0.T
    for scale in (1e-300, 1e300):
        for g in grids:
            A = DistMatrix.from_global(g, s * scale, block=3)
            assert check_symmetric(A, finite=True) == pytest.approx(
                np.abs(s * scale).sum(axis=1).max(), rel=1e-12)
            bad = s.copy()
            bad[2, 9] += 1.0
            with pytest.raises(ValueError, match="not symmetric"):
                check_symmetric(DistMatrix.from_global(g, bad * scale, block=3))


# ---- arguments that differ between ranks -------------------------------------------------
@pytest.mark.mpi(min_size=2)
def test_ranks_calling_differently_raise_instead_of_hanging(comm):
    g = ProcessGrid(comm=comm)
    n = 12
    A = DistMatrix.from_function(g, (n, n), (4, 4), lambda I, J: (I == J) * 4.0 + 1.0 / (1 + I + J))
    B = DistMatrix.from_function(g, (n, 1), (4, 4), lambda I, J: 1.0 + 0 * I)
    method = "cholesky" if comm.rank == 0 else "gepp"
    with pytest.raises(ValueError, match="different arguments"):
        solve(A, B, method=method)
    with pytest.raises(ValueError, match="different arguments"):
        lu_factor(A, lookahead=comm.rank % 2)
    # the PBLAS and redistribution agree on their arguments too
    from distla.pblas import matmul, triangular_solve
    with pytest.raises(ValueError, match="different arguments"):
        matmul(A, A, transa=comm.rank == 0)
    with pytest.raises(ValueError, match="different arguments"):
        triangular_solve(A, B, lower=comm.rank == 0)
    with pytest.raises(ValueError, match="different arguments"):
        A.redistribute(block=(4, 4) if comm.rank == 0 else (3, 3))
    assert np.allclose(matmul(A, B).to_global(root=None), A.to_global(root=None) @ np.ones((n, 1)))
    # options that decide which collectives run: each once differing between ranks
    from distla.linalg import cho_factor, cho_solve, cholesky, lu_solve
    odd = comm.rank % 2 == 1
    for call in (lambda: cholesky(A, lower=not odd), lambda: cho_factor(A, lower=odd),
                 lambda: cholesky(A, check_symmetric=odd),
                 lambda: lu_factor(A, check_finite=odd),
                 lambda: lu_solve(lu_factor(A), B, check_finite=odd),
                 lambda: cho_solve(cho_factor(A), B, check_finite=odd),
                 lambda: A.to_global(root=None if odd else 0),
                 lambda: A.norm("fro" if odd else 1),
                 lambda: triangular_solve(A, B, trans="T" if odd else "C")):
        with pytest.raises(ValueError, match="different arguments"):
            call()


# ---- condition estimates -----------------------------------------------------------------
def _test_matrices(n):
    r = np.random.default_rng(7)
    u, _ = np.linalg.qr(r.standard_normal((n, n)))
    v, _ = np.linalg.qr(r.standard_normal((n, n)))
    out = {}
    for mode, s in {"geometric": np.logspace(0, -8, n),
                    "one small": np.r_[np.ones(n - 1), 1e-9],
                    "one large": np.r_[1.0, np.full(n - 1, 1e-6)],
                    "arithmetic": np.linspace(1, 1e-7, n)}.items():
        out[mode] = (u * s) @ v.T
    out["random"] = r.standard_normal((n, n))
    out["triangular"] = np.triu(r.standard_normal((n, n))) + 2 * np.eye(n)
    out["badly scaled rows"] = np.diag(np.logspace(0, 10, n)) @ r.standard_normal((n, n))
    return out


@pytest.mark.mpi
@pytest.mark.parametrize("t", [1, 2])     # 1: GPU ranks' single-vector estimator (dlacn2)
def test_rcond_within_factor_10_of_true(grids, t, monkeypatch):
    from distla.device.base import Backend
    monkeypatch.setattr(Backend, "rcond_vectors", t)
    n = 40
    for name, a in _test_matrices(n).items():
        true = 1 / np.linalg.cond(a, 1)
        for g in grids:
            A = DistMatrix.from_global(g, a, block=6, src=(g.nprow - 1, 0))
            rc = rcond(A)
            assert true / 10 <= rc <= true * 10 * (1 + 1e-8), (name, rc, true)
            assert len(set(g.comm.allgather(rc))) == 1
            F = lu_factor(A, pivoting="tournament")
            assert true / 10 <= rcond(A, F) <= true * 10 * (1 + 1e-8), name


@pytest.mark.mpi
@pytest.mark.parametrize("t", [1, 2])
def test_rcond_from_cholesky_factor(grids, t, monkeypatch):
    from distla.device.base import Backend
    monkeypatch.setattr(Backend, "rcond_vectors", t)
    n = 33
    for cond in (1e1, 1e6, 1e12):
        a = _spd(n, cond, seed=2)
        true = 1 / np.linalg.cond(a, 1)
        for g in grids:
            A = DistMatrix.from_global(g, a, block=5)
            L = cholesky(A, check_symmetric=False)
            assert true / 10 <= rcond(A, L) <= true * 10 * (1 + 1e-8)
            assert true / 10 <= rcond(A, cho_factor(A, check_symmetric=False)) <= true * 10.01


@pytest.mark.mpi
def test_ill_conditioned_solves_warn_like_scipy(grids):
    n = 24
    a = _spd(n, 1e18, seed=4)          # numerically singular in float64
    a = (a + a.T) / 2 + 1e-30 * np.eye(n)
    g = np.random.default_rng(0).standard_normal((n, n))
    sing = g @ np.diag(np.r_[np.ones(n - 1), 1e-20]) @ g.T.copy()
    with pytest.warns(sla.LinAlgWarning):
        sla.solve(sing, np.ones(n))                    # the behaviour we match
    for gr in grids:
        A = DistMatrix.from_global(gr, sing, block=5)
        B = DistMatrix.from_global(gr, np.ones((n, 1)), block=5)
        with pytest.warns(LinAlgWarning, match="ill-conditioned"):
            solve_lu(A, B)
        with warnings.catch_warnings():
            warnings.simplefilter("error", LinAlgWarning)
            solve_lu(A, B, check_rcond=False)          # opted out: no warning
        W = DistMatrix.from_global(gr, _spd(n, 1e3, seed=5), block=5)
        with warnings.catch_warnings():
            warnings.simplefilter("error", LinAlgWarning)
            solve_cholesky(W, B, check_symmetric=False)   # well conditioned: no warning
    assert issubclass(LinAlgWarning, sla.LinAlgWarning)


# ---- uncaught exceptions end the job -----------------------------------------------------
def test_uncaught_exception_on_one_rank_aborts_the_job(tmp_path):
    import shutil
    mpiexec = shutil.which("mpiexec", path=str(__import__("pathlib").Path(sys.executable).parent))
    if mpiexec is None:
        pytest.skip("no mpiexec beside the python in use")
    script = tmp_path / "bug.py"
    script.write_text("import distla\nfrom mpi4py import MPI\ndistla.ProcessGrid()\n"
                      "c = MPI.COMM_WORLD\n"
                      "if c.rank == 1:\n    raise RuntimeError('user bug on rank 1')\n"
                      "c.Barrier()\nprint('all ranks passed the barrier')\n")
    p = subprocess.run([mpiexec, "-n", "2", sys.executable, str(script)], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode != 0
    assert "[rank 1] RuntimeError: user bug on rank 1" in p.stderr
    assert "all ranks passed the barrier" not in p.stdout


# ---- the command line --------------------------------------------------------------------
def _cli(args, n=2):
    import shutil
    from pathlib import Path
    mpiexec = shutil.which("mpiexec", path=str(Path(sys.executable).parent))
    if mpiexec is None:
        pytest.skip("no mpiexec beside the python in use")
    return subprocess.run([mpiexec, "-n", str(n), sys.executable, "-m", "distla", "solve",
                           *map(str, args)], capture_output=True, text=True, timeout=300)


def test_cli_warns_prints_rcond_and_verdict(tmp_path):
    n = 60
    g = np.random.default_rng(0).standard_normal((n, n))
    np.save(tmp_path / "s.npy", g @ np.diag(np.r_[np.ones(n - 1), 1e-20]) @ g.T)
    p = _cli(["--matrix", tmp_path / "s.npy", "--method", "gepp", "--nb", 16])
    assert p.returncode == 0, p.stderr
    assert "distla: warning: --method gepp: ill-conditioned matrix" in p.stderr
    assert p.stderr.count("ill-conditioned") == 1          # once, from rank 0
    assert "1 / rcond" in p.stdout and ("PASS" in p.stdout or "FAIL" in p.stdout)


def test_cli_refuses_nan_nonsymmetric_and_pivoting_option(tmp_path):
    n = 30
    a = np.random.default_rng(1).standard_normal((n, n)) + n * np.eye(n)
    np.save(tmp_path / "a.npy", a)
    p = _cli(["--matrix", tmp_path / "a.npy", "--method", "cholesky", "--nb", 8])
    assert p.returncode == 2 and "not symmetric" in p.stderr, p.stderr
    a[3, 4] = np.nan
    np.save(tmp_path / "n.npy", a)
    p = _cli(["--matrix", tmp_path / "n.npy", "--method", "gepp", "--nb", 8])
    assert p.returncode == 2 and "non-finite value (nan) at global index (3, 4)" in p.stderr
    p = _cli(["--matrix", tmp_path / "a.npy", "-O", "pivoting=none"])
    assert p.returncode == 2 and "chooses the pivoting" in p.stderr


def test_cli_complex_rhs_with_real_matrix_is_not_truncated(tmp_path):
    n = 25
    r = np.random.default_rng(2)
    a = r.standard_normal((n, n)) + n * np.eye(n)
    b = r.standard_normal(n) + 1j * r.standard_normal(n)
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    p = _cli(["--matrix", tmp_path / "a.npy", "--rhs", tmp_path / "b.npy", "--method", "gepp",
              "--nb", 8, "--out", tmp_path / "x.npy"])
    assert p.returncode == 0, p.stderr
    x = np.load(tmp_path / "x.npy")
    np.testing.assert_allclose(a @ x, b, atol=1e-10)
    p = _cli(["--matrix", tmp_path / "a.npy", "--rhs", tmp_path / "b.npy", "--method", "rbt",
              "--nb", 8, "--out", tmp_path / "x.npy"])
    assert p.returncode == 0, p.stderr
    np.testing.assert_allclose(a @ np.load(tmp_path / "x.npy"), b, atol=1e-10)
    p = _cli(["--matrix", tmp_path / "a.npy", "--rhs", tmp_path / "b.npy", "--method", "tlr"])
    assert p.returncode == 2 and "is complex but the matrix is real" in p.stderr


@pytest.mark.mpi
@pytest.mark.parametrize("method", ["cholesky", "gepp", "calu", "genp", "rbt"])
def test_every_method_accepts_b_in_another_layout(grids, method):
    n = 21
    a = _spd(n, 10, seed=6) + n * np.eye(n)
    b = np.random.default_rng(4).standard_normal((n, 3))
    for g in grids:
        A = DistMatrix.from_global(g, a, block=4, src=(0, 0))
        B = DistMatrix.from_global(g, b, block=(5, 2), src=(g.nprow - 1, g.npcol - 1))
        X = solve(A, B, method=method)
        assert X.same_layout(B)
        np.testing.assert_allclose(X.to_global(None), np.linalg.solve(a, b), atol=1e-10)


# ---- GENP: a tiny pivot means "needs pivoting" -------------------------------------------
def _needs_pivoting(n, j, tiny=1e-13, seed=3):
    """A row permutation (rows j, j+1) of a diagonally dominant matrix: well conditioned, but
    GENP meets the pivot ``tiny`` at column j, next to the entry n below it."""
    m = n * np.eye(n) + np.random.default_rng(seed).uniform(0, 1, (n, n))
    m[j:j + 2, :j] = 0           # earlier steps leave rows j, j+1 alone
    m[j + 1, j] = tiny
    m[[j, j + 1]] = m[[j + 1, j]]
    return m


@pytest.mark.mpi
def test_genp_tiny_pivot_needs_pivoting(grids):
    from distla import SingularMatrixError
    n, j = 23, 9
    a = _needs_pivoting(n, j)
    assert np.linalg.cond(a, 1) < 10
    for g in grids:
        A = DistMatrix.from_global(g, a, block=4, src=(g.nprow - 1, g.npcol - 1))
        with pytest.raises(SingularMatrixError, match="needs pivoting") as ei:
            lu_factor(A, pivoting="none")
        assert ei.value.index == j and f"tiny pivot at column {j}" in str(ei.value)
        assert len(set(g.comm.allgather(str(ei.value)))) == 1
        F = lu_factor(A, pivoting="none", pivot_threshold=0)     # accepted when asked
        assert F.growth_factor() > 1e10
        lu_factor(A, pivoting="none", pivot_threshold=1e-15)     # tiny = 1e-13 / 24 passes
        # a matrix that needs no pivoting passes the default threshold
        d = DistMatrix.from_global(g, n * np.eye(n) + np.ones((n, n)), block=4)
        lu_factor(d, pivoting="none")
        with pytest.raises(ValueError, match="pivot_threshold"):
            lu_factor(A, pivoting="none", pivot_threshold=-1)


@pytest.mark.mpi
def test_rbt_falls_back_on_a_tiny_genp_pivot(grids):
    from distla import SingularMatrixError
    from distla.linalg.rbt import RBTFallbackWarning, rbt_solve
    n, j = 20, 6
    a = _needs_pivoting(n, j)
    b = np.random.default_rng(1).standard_normal((n, 1))
    for g in grids:
        A = DistMatrix.from_global(g, a, block=4)
        B = DistMatrix.from_global(g, b, block=4)
        with pytest.warns(RBTFallbackWarning, match=f"tiny or zero pivot at column {j}"):
            X, info = rbt_solve(A, B, depth=0, return_info=True)   # no butterflies: GENP of A
        assert info.fallback
        np.testing.assert_allclose(a @ X.to_global(None), b, atol=1e-12)
        with pytest.raises(SingularMatrixError):
            rbt_solve(A, B, depth=0, fallback=False)


# ---- rcond from TLR factors ---------------------------------------------------------------
@pytest.mark.mpi
def test_rcond_from_tlr_factor(grids):
    from distla import covariance as cov
    from distla import tlr
    x, k = cov.default_problem(90, seed=3)
    for g in grids:
        A = cov.covariance_matrix(g, x, k, block=12, src=(g.nprow - 1, 0))
        a = A.to_global(None)
        true = 1 / np.linalg.cond(a, 1)
        T = tlr.compress(A, tol=1e-10)
        L = tlr.cholesky(T)
        for rc in (rcond(A, factor=L), rcond(T, factor=L), rcond(None, factor=L), rcond(T)):
            assert true / 10 <= rc <= true * 10, (rc, true)
            assert len(set(g.comm.allgather(rc))) == 1
        assert L.info["rcond"] > 0
        b = np.ones(a.shape[0])
        X, info = tlr.solve(A, b, tol=1e-10, return_info=True)
        assert true / 10 <= info["rcond"] <= true * 10
        np.testing.assert_allclose(a @ X, b, atol=1e-6 * np.abs(X).max())
        # nearly singular (one row and column scaled by 1e-10: rcond ~ 1e-20) -> warns
        s = np.ones(a.shape[0])
        s[-1] = 1e-10
        S = DistMatrix.from_global(g, s[:, None] * a * s[None, :], block=12)
        with pytest.warns(LinAlgWarning, match="tlr.solve: ill-conditioned"):
            tlr.solve(S, b, tol=1e-10)
        with warnings.catch_warnings():
            warnings.simplefilter("error", LinAlgWarning)
            tlr.solve(S, b, tol=1e-10, check_rcond=False)
            solve(A, DistMatrix.from_global(g, b[:, None], block=12), method="tlr",
                  tol=1e-10)                                      # well conditioned


def test_cli_prints_rcond_for_rbt_and_tlr(tmp_path):
    from mpi4py import MPI

    from distla import covariance as cov
    x, k = cov.default_problem(60, seed=1)
    g = ProcessGrid(comm=MPI.COMM_SELF)
    a = cov.covariance_matrix(g, x, k, block=20).to_global(None)
    np.save(tmp_path / "c.npy", a)
    true = np.linalg.cond(a, 1)
    for method in ("rbt", "tlr"):
        p = _cli(["--matrix", tmp_path / "c.npy", "--method", method, "--nb", 20])
        assert p.returncode == 0, p.stderr
        line = [ln for ln in p.stdout.splitlines() if "1 / rcond" in ln]
        assert line, p.stdout
        est = float(line[0].split("=")[-1])
        assert true / 10 <= est <= true * 10, (method, est, true)


# ---- the same on each device (gpu: run on the GPU machine, benchmarks/gpu/rcond_check.sh) --
DEVICES = ["cpu", pytest.param("gpu", marks=pytest.mark.gpu)]


@pytest.mark.mpi
@pytest.mark.parametrize("device", DEVICES)
def test_condition_and_tiny_pivots_on_each_device(grids, device):
    from distla import SingularMatrixError, tlr
    from distla import covariance as cov
    from distla.linalg import cho_solve
    n = 37
    a = _test_matrices(n)["geometric"]
    s = _spd(n, 1e6, seed=8)
    s = (s + s.T) / 2
    x, k = cov.default_problem(n, seed=4)
    b = np.random.default_rng(5).standard_normal((n, 3))
    for g in grids:
        def dist(m, blk=5):
            return DistMatrix.from_global(g, m, block=blk, src=(g.nprow - 1, g.npcol - 1),
                                          device=device)
        true = 1 / np.linalg.cond(a, 1)
        assert true / 10 <= rcond(dist(a), lu_factor(dist(a))) <= true * 10.01
        true = 1 / np.linalg.cond(s, 1)
        L = cholesky(dist(s), check_symmetric=False)
        assert true / 10 <= rcond(dist(s), L) <= true * 10.01
        X = cho_solve((L, True), dist(b, (5, 2)))          # few rhs: fan-in and fan-out sweeps
        np.testing.assert_allclose(X.to_global(None), np.linalg.solve(s, b), rtol=1e-6,
                                   atol=1e-6 * np.abs(np.linalg.solve(s, b)).max())
        C = cov.covariance_matrix(g, x, k, block=8, device=device)
        c = C.to_global(None)
        true = 1 / np.linalg.cond(c, 1)
        assert true / 10 <= rcond(C, tlr.cholesky(tlr.compress(C, tol=1e-10))) <= true * 10
        with pytest.raises(SingularMatrixError, match="needs pivoting") as ei:
            lu_factor(dist(_needs_pivoting(n, 11)), pivoting="none")
        assert ei.value.index == 11


def test_cli_progress_lines_under_mpiexec(tmp_path):
    """stderr is a pipe under mpiexec: plain lines (no redraw) at the interval asked for, from
    rank 0 only (one reporter: percentages never go back); --progress 0: none."""
    import re
    n = 500
    g = np.random.default_rng(3).standard_normal((n, n))
    np.save(tmp_path / "a.npy", g @ g.T + n * np.eye(n))
    p = _cli(["--matrix", tmp_path / "a.npy", "--nb", 16, "--progress", 0.01])
    assert p.returncode == 0, p.stderr
    assert "\r" not in p.stderr
    pct = [float(m.group(1)) for m in re.finditer(r"^cholesky: +([\d.]+)%", p.stderr, re.M)]
    assert pct and pct == sorted(pct), p.stderr
    p = _cli(["--matrix", tmp_path / "a.npy", "--nb", 16, "--progress", 0])
    assert p.returncode == 0 and "%" not in p.stderr, p.stderr


@pytest.mark.mpi
@pytest.mark.parametrize("nrhs", [1, 13, 14])     # fused with the solve up to 13 columns
@pytest.mark.parametrize("fuse", [True, False])   # False: as on GPU ranks (solve, then rcond)
def test_solvers_estimate_rides_along_with_the_solve(grids, nrhs, fuse, monkeypatch):
    import re

    from distla.device.base import Backend
    monkeypatch.setattr(Backend, "fuse_few_rhs", fuse)
    n = 29
    d = np.r_[np.ones(n - 1), 1e-10]            # S A S, A well conditioned: rcond ~ 1e-20
    sing = d[:, None] * _spd(n, 10, seed=6) * d[None, :]
    b = np.random.default_rng(7).standard_normal((n, nrhs))
    for gr in grids:
        A = DistMatrix.from_global(gr, sing, block=4)
        B = DistMatrix.from_global(gr, b, block=(3, 2), src=(gr.nprow - 1, gr.npcol - 1))
        for fn, ref in ((solve_lu, lambda: rcond(A)),
                        (lambda A, B: solve_cholesky(A, B, check_symmetric=False),
                         lambda: rcond(A, cholesky(A, check_symmetric=False)))):
            with pytest.warns(LinAlgWarning) as w:
                X = fn(A, B)
            assert X.same_layout(B)
            np.testing.assert_array_equal(B.to_global(None), b)    # B is not overwritten
            got = float(re.search(r"rcond=([-+.\de]+)", str(w[0].message)).group(1))
            want = ref()
            assert abs(got / want - 1) < 5e-3, (got, want)
            x = X.to_global(None)
            assert np.abs(sing @ x - b).max() <= 1e-12 * np.abs(sing).max() * np.abs(x).max()
