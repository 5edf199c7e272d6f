"""distla.linalg.cholesky / cho_solve / solve_cholesky / logdet.

ScaLAPACK tester (pdllt) checks on every grid shape of the communicator, in both rank orders:
factor residual ||A - L L^T||_inf / (||A||_inf eps n) and solve residual
SRESID = ||A x - b||_inf / (||A||_inf ||x||_inf eps n), both <= 3.0 (LLT.dat) and not NaN,
with eps the unit roundoff of the dtype; sizes that the block size does not divide, nonzero
source processes, float64 and float32, condition numbers 1e0..1e8 (float32: ..1e4), several
right-hand sides, every lookahead depth. Non-SPD matrices raise NotPositiveDefiniteError with
LAPACK's index on every rank. Bad input raises before any work, on every rank.
"""

import numpy as np
import pytest
import scipy.linalg

from distla import DistMatrix, NotPositiveDefiniteError, ProcessGrid
from distla.checks import factor_residual_cholesky, passes, solve_residual
from distla.linalg import cho_factor, cho_solve, cholesky, logdet, lu_factor, solve_cholesky
from distla.testing import grid_shapes
from distla.trace import Tracer

THRESH = 3.0  # LLT.dat


# --------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------
def spd(n, cond, seed=0, dtype=np.float64):
    """Q diag(logspace(0, -log10 cond)) Q^T (the same on every rank), symmetric exactly."""
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    d = np.logspace(0, -np.log10(cond), n) if n > 1 else np.ones(1)
    a = (q * d) @ q.T
    a = (a + a.T) / 2
    return a.astype(dtype)


def rhs(n, nrhs, seed=1, dtype=np.float64):
    return np.random.default_rng(seed).standard_normal((n, nrhs)).astype(dtype)


def lapack_info(a):
    """0-based first failing column according to LAPACK's potrf on the whole matrix."""
    _, info = scipy.linalg.lapack.dpotrf(np.asarray(a, np.float64), lower=1)
    return info - 1 if info > 0 else None


def upper_is_zero(L):
    full = L.to_global(root=None)
    return not np.triu(full, 1).any()


@pytest.fixture(scope="module")
def grids(comm):
    return [ProcessGrid(p, q, comm, order=o) for p, q in grid_shapes(comm.size)
            for o in ("row", "col")]


# (n, nb, src corner?, dtype, cond, nrhs, lookahead)
CASES = [
    (50, 8, False, np.float64, 1e2, 3, 1),
    (61, 8, True, np.float64, 1e8, 2, 1),
    (45, 4, True, np.float64, 1e5, 1, 2),
    (37, 16, False, np.float64, 1e3, 4, 0),
    (40, 5, True, np.float32, 1e2, 2, 1),
    (33, 8, False, np.float32, 1e4, 1, 3),
    (7, 16, True, np.float64, 10.0, 1, 1),    # one partial block
]


# --------------------------------------------------------------------------------------
# correctness (mpi)
# --------------------------------------------------------------------------------------
@pytest.mark.mpi
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("la", [0, 1])
def test_panel_by_inverse_and_gemm(comm, grids, monkeypatch, dtype, la):
    """The panel as L11^-1 (a trsm on the identity) and one GEMM -- what GPU ranks do in the
    tensor-core update modes -- on CPU ranks: the same factor to working precision, on
    every grid, blocks that do not divide n, a corner source."""
    from distla.device.cpu import CpuBackend
    monkeypatch.setattr(CpuBackend, "inverse_panel", lambda self, compute, driver: True)
    n, nb = 37, 5
    a = spd(n, 1e3, seed=3).astype(dtype)
    for g in grids:
        src = (g.nprow - 1, g.npcol - 1)
        A = DistMatrix.from_global(g, a, block=nb, src=src)
        L = cholesky(A, lookahead=la)
        assert upper_is_zero(L)
        assert passes(factor_residual_cholesky(A, L), THRESH), g


@pytest.mark.mpi
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"n{c[0]}nb{c[1]}{np.dtype(c[3]).char}"
                         f"c{c[4]:.0e}la{c[6]}")
def test_factor_and_solve_residuals(comm, grids, case):
    n, nb, corner, dtype, cond, nrhs, la = case
    a = spd(n, cond, seed=n, dtype=dtype)
    b = rhs(n, nrhs, dtype=dtype)
    for g in grids:
        src = (g.nprow - 1, g.npcol - 1) if corner else (0, 0)
        A = DistMatrix.from_global(g, a if comm.rank == 0 else None, block=nb, src=src)
        B = DistMatrix.from_global(g, b if comm.rank == 0 else None, block=nb, src=src)
        L = cholesky(A, lookahead=la)
        assert L.same_layout(A) and L.dtype == A.dtype
        assert upper_is_zero(L)
        fres = factor_residual_cholesky(A, L)
        assert passes(fres, THRESH), (g, src, fres)
        X = cho_solve(L, B)
        assert X.same_layout(B)
        sres = solve_residual(A, X, B)
        assert passes(sres, THRESH), (g, src, sres)
        # A was not touched
        np.testing.assert_array_equal(A.to_global(root=None), a)


@pytest.mark.mpi
def test_upper_factor_and_solve(comm, grids):
    n, nb = 43, 8
    a = spd(n, 1e4, seed=5)
    b = rhs(n, 2)
    for g in grids:
        src = (g.nprow - 1, 0)
        # only the upper triangle may be read: garbage below the diagonal
        au = np.triu(a) + np.tril(np.full_like(a, np.nan), -1)
        A = DistMatrix.from_global(g, au, block=nb, src=src)
        with pytest.raises(ValueError, match="non-finite"):
            cho_factor(A, lower=False)              # NaN anywhere: refused by default
        U, lower = cho_factor(A, lower=False, check_finite=False, check_symmetric=False)
        assert not lower
        Ug = U.to_global(root=None)
        assert not np.tril(Ug, -1).any()
        Afull = DistMatrix.from_global(g, a, block=nb, src=src)
        fres = factor_residual_cholesky(Afull, U, lower=False)
        assert passes(fres, THRESH), fres
        B = DistMatrix.from_global(g, b, block=nb, src=src)
        X = cho_solve((U, False), B)
        assert passes(solve_residual(Afull, X, B), THRESH)


@pytest.mark.mpi
def test_lower_reads_only_lower_triangle_and_overwrite(comm, grids):
    n, nb = 30, 4
    a = spd(n, 1e3, seed=2)
    al = np.tril(a) + np.triu(np.full_like(a, np.nan), 1)
    ref = np.linalg.cholesky(a)
    for g in grids:
        A = DistMatrix.from_global(g, al, block=nb, src=(0, g.npcol - 1))
        L = cholesky(A, overwrite_a=True, check_finite=False, check_symmetric=False)
        assert L is A
        np.testing.assert_allclose(L.to_global(root=None), ref, atol=1e-12)


@pytest.mark.mpi
def test_lookahead_depths_agree(comm, grids):
    n, nb = 41, 4
    a = spd(n, 1e2, seed=3)
    for g in grids:
        A = DistMatrix.from_global(g, a, block=nb, src=(g.nprow - 1, 0))
        ref = cholesky(A, lookahead=0).to_global(root=None)
        for la in (1, 2, 5, 20):
            np.testing.assert_allclose(cholesky(A, lookahead=la).to_global(root=None), ref,
                                       rtol=0, atol=1e-13)


@pytest.mark.mpi
def test_solve_cholesky_and_logdet(comm, grids):
    n, nb = 52, 8
    a = spd(n, 1e6, seed=4) * 3.0
    b = rhs(n, 5, seed=9)
    sign, expect = np.linalg.slogdet(a)
    assert sign > 0
    for g in grids:
        A = DistMatrix.from_global(g, a, block=nb, src=(0, 0))
        B = DistMatrix.from_global(g, b, block=(nb, 2), src=(0, 0))   # other column blocking
        X = solve_cholesky(A, B)
        assert passes(solve_residual(A, X, B), THRESH)
        L = cholesky(A)
        got = logdet(L)
        assert isinstance(got, float)
        assert abs(got - expect) <= 1e-10 * max(1.0, abs(expect))
        assert comm.allgather(got) == [got] * comm.size
        U = cholesky(A, lower=False)
        assert abs(logdet(U) - expect) <= 1e-10 * max(1.0, abs(expect))


@pytest.mark.mpi
@pytest.mark.parametrize("where", ["first", "block_start", "mid_block", "last_full", "last"])
def test_not_positive_definite_index_on_every_rank(comm, grids, where):
    n, nb = 38, 8            # blocks 0-7, ..., 32-37 (partial)
    i = {"first": 0, "block_start": 16, "mid_block": 13, "last_full": 31, "last": 37}[where]
    a = spd(n, 1e2, seed=6) + np.eye(n)
    a[i, i] = 0.0            # leading minors < i stay positive, the one of order i+1 fails
    assert lapack_info(a) == i
    for g in grids:
        for la in (0, 1):
            A = DistMatrix.from_global(g, a, block=nb, src=(g.nprow - 1, g.npcol - 1))
            with pytest.raises(NotPositiveDefiniteError) as ei:
                cholesky(A, lookahead=la)
            assert ei.value.index == i
            assert isinstance(ei.value, np.linalg.LinAlgError)
            assert "positive definite" in str(ei.value)
            # the grid is still usable afterwards (nothing left in flight)
            assert comm.allreduce(1) == comm.size


@pytest.mark.mpi
def test_negative_eigenvalue_and_solve_raise(comm, grids):
    n, nb = 29, 4
    rng = np.random.default_rng(11)
    q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    d = np.linspace(1.0, 2.0, n)
    d[n // 2] = -1.0
    a = (q * d) @ q.T
    a = (a + a.T) / 2
    expect = lapack_info(a)
    assert expect is not None
    b = rhs(n, 1)
    for g in grids:
        A = DistMatrix.from_global(g, a, block=nb)
        with pytest.raises(NotPositiveDefiniteError) as ei:
            cholesky(A)
        assert ei.value.index == expect
        B = DistMatrix.from_global(g, b, block=nb)
        with pytest.raises(NotPositiveDefiniteError):
            solve_cholesky(A, B)
        with pytest.raises(NotPositiveDefiniteError):
            cholesky(DistMatrix.from_global(g, -np.eye(n), block=nb), lower=False)


@pytest.mark.mpi
def test_bad_input_raises_on_every_rank(comm, grids):
    g = grids[-1]
    A = DistMatrix.from_global(g, spd(12, 10.0), block=4)
    with pytest.raises(ValueError, match="square matrix"):
        cholesky(DistMatrix.zeros(g, (12, 8), block=4))
    with pytest.raises(ValueError, match="square blocks"):
        cholesky(DistMatrix.zeros(g, (12, 12), block=(4, 3)))
    with pytest.raises(ValueError, match="lookahead"):
        cholesky(A, lookahead=-1)
    with pytest.raises(TypeError):
        cholesky(np.eye(3))
    L = cholesky(A)
    with pytest.raises(TypeError, match="dtypes differ"):
        cho_solve(L, DistMatrix.zeros(g, (12, 1), block=4, dtype=np.float32))
    with pytest.raises(ValueError, match="rows"):
        cho_solve(L, DistMatrix.zeros(g, (10, 1), block=4))
    with pytest.raises(TypeError):
        cho_solve(L, np.ones((12, 1)))
    with pytest.raises(ValueError, match="square"):
        solve_cholesky(DistMatrix.zeros(g, (12, 8), block=4), DistMatrix.zeros(g, (12, 1)))
    with pytest.raises(ValueError):
        logdet(DistMatrix.zeros(g, (12, 8), block=4))
    if comm.size > 1:  # a matrix on another grid of the same communicator
        other = ProcessGrid(comm.size, 1, comm)
        with pytest.raises(ValueError, match="different grid"):
            cho_solve(L, DistMatrix.zeros(other, (12, 1), block=4))


# --------------------------------------------------------------------------------------
# serial
# --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def grid1():
    from mpi4py import MPI
    return ProcessGrid(1, 1, MPI.COMM_SELF)


def test_matches_numpy_serial(grid1):
    for n, nb in [(1, 1), (5, 8), (64, 16), (70, 9)]:
        a = spd(n, 1e3, seed=n)
        A = DistMatrix.from_global(grid1, a, block=nb)
        np.testing.assert_allclose(cholesky(A).to_global(), np.linalg.cholesky(a), atol=1e-12)
        np.testing.assert_allclose(cholesky(A, lower=False).to_global(),
                                   np.linalg.cholesky(a).T, atol=1e-12)


def test_empty_matrix(grid1):
    A = DistMatrix.zeros(grid1, (0, 0), block=4)
    L = cholesky(A)
    assert L.shape == (0, 0)
    assert logdet(L) == 0.0


@pytest.fixture
def loop_on_one_rank(monkeypatch):
    """Make a 1 x 1 grid run distla's own step loop instead of the local library."""
    from distla.linalg import _local
    monkeypatch.setattr(_local, "LOCAL_UP_TO", {k: 0 for k in _local.LOCAL_UP_TO})


def test_one_rank_local_library_and_loop_agree(grid1, monkeypatch):
    """1 x 1: the local library (potrf) and the step loop give the same factor, and the same
    NotPositiveDefiniteError index."""
    from distla.linalg import _local
    a = spd(70, 10.0)
    bad = a.copy()
    bad[40, 40] = -1.0
    out = {}
    for mode, limit in (("local", 1 << 40), ("loop", 0)):
        monkeypatch.setattr(_local, "LOCAL_UP_TO", {k: limit for k in _local.LOCAL_UP_TO})
        with Tracer() as tr:
            out[mode] = cholesky(DistMatrix.from_global(grid1, a, block=8)).to_global(root=None)
        assert ("potrf" in tr.counts()) == (mode == "local")
        assert ("update" in tr.counts()) == (mode == "loop")
        with pytest.raises(NotPositiveDefiniteError) as e:
            cholesky(DistMatrix.from_global(grid1, bad, block=8), check_symmetric=False)
        assert e.value.index == 40
    assert np.allclose(out["local"], out["loop"], rtol=1e-12, atol=1e-12)
    assert np.allclose(out["local"], np.linalg.cholesky(a))


def test_profile_accumulates_phases(grid1, loop_on_one_rank):
    a = spd(64, 10.0)
    A = DistMatrix.from_global(grid1, a, block=8)
    with Tracer() as tr:
        cholesky(A)
    sec = tr.seconds()
    assert set(sec) >= {"panel", "update"}
    assert all(v >= 0 for v in sec.values())
    assert tr.counts()["panel"] >= 8


def test_benchmark_runs_serial(loop_on_one_rank):
    import argparse

    from distla.bench import cholesky as bench
    p = argparse.ArgumentParser()
    bench.add_arguments(p)
    args = p.parse_args(["--n", "96", "--nb", "16", "--device", "cpu", "--reps", "1",
                         "--profile", "--grid", "1x1"])
    rows = bench.run(args)
    mine = [r for r in rows if r["impl"] == "distla"]
    assert len(mine) == 1 and mine[0]["n"] == 96
    assert passes(mine[0]["fresid"], THRESH) and passes(mine[0]["sresid"], THRESH)
    assert mine[0]["t_update"] > 0
    assert any(r["impl"] == "scipy" for r in rows)


@pytest.mark.mpi
@pytest.mark.gpu
def test_gpu_every_grid(comm, grids):
    """GPU ranks (NCCL broadcasts, side stream): residuals, lookahead depths, non-SPD index."""
    n, nb = 301, 32
    a = spd(n, 1e6, seed=12)
    b = rhs(n, 3)
    bad = a + np.eye(n)
    bad[150, 150] = 0.0
    for g in grids:
        src = (g.nprow - 1, g.npcol - 1)
        A = DistMatrix.from_global(g, a, block=nb, src=src, device="gpu")
        B = DistMatrix.from_global(g, b, block=nb, src=src, device="gpu")
        ref = None
        for la in (0, 1, 3):
            L = cholesky(A, lookahead=la)
            assert L.device == "gpu"
            assert passes(factor_residual_cholesky(A, L), THRESH)
            Lg = L.to_global(root=None)
            ref = Lg if ref is None else ref
            np.testing.assert_allclose(Lg, ref, atol=1e-10)
        assert passes(solve_residual(A, cho_solve(L, B), B), THRESH)
        with pytest.raises(NotPositiveDefiniteError) as ei:
            cholesky(DistMatrix.from_global(g, bad, block=nb, src=src, device="gpu"))
        assert ei.value.index == 150


@pytest.mark.gpu
def test_gpu_matches_cpu(grid1):
    a = spd(300, 1e6, seed=8)
    b = rhs(300, 3)
    Ac = DistMatrix.from_global(grid1, a, block=64)
    Ag = Ac.to("gpu")
    for la in (0, 1, 2):
        Lg = cholesky(Ag, lookahead=la)
        assert Lg.device == "gpu"
        np.testing.assert_allclose(Lg.to_global(), cholesky(Ac).to_global(), atol=1e-10)
        assert passes(factor_residual_cholesky(Ag, Lg), THRESH)
    Bg = DistMatrix.from_global(grid1, b, block=64, device="gpu")
    assert passes(solve_residual(Ag, solve_cholesky(Ag, Bg), Bg), THRESH)
    bad = a.copy()
    bad[100, 100] = -1.0
    with pytest.raises(NotPositiveDefiniteError) as ei:
        cholesky(DistMatrix.from_global(grid1, bad, block=64, device="gpu"))
    assert ei.value.index == lapack_info(bad)


@pytest.mark.mpi
def test_upper_factor_alone_is_refused_not_read_as_lower(comm):
    """cholesky(lower=False) returns U; cho_solve(U, B) and rcond(A, U) once took it for L
    (errors of 0.04 and a wrong rcond): now they ask for (U, False), which works."""
    from distla.linalg import rcond
    g = ProcessGrid(comm=comm)
    m = np.random.default_rng(4).standard_normal((12, 12))
    a = m @ m.T + 12 * np.eye(12)
    A = DistMatrix.from_global(g, a, block=3)
    B = DistMatrix.from_global(g, np.ones((12, 1)), block=3)
    U = cholesky(A, lower=False)
    with pytest.raises(ValueError, match=r"upper factor .*pass \(U, False\)"):
        cho_solve(U, B)
    with pytest.raises(ValueError, match=r"pass \(U, False\)"):
        rcond(A, U)
    x = cho_solve((U, False), B).to_global(None)
    np.testing.assert_allclose(a @ x, np.ones((12, 1)), atol=1e-12)
    with pytest.raises(TypeError, match="'lower' flag must be True or False"):
        cho_solve((U, "yes"), B)
    A5 = DistMatrix.from_global(g, a[:5, :5].copy(), block=3)
    for f in (cho_factor(A5), cholesky(A5), lu_factor(A5)):
        with pytest.raises(ValueError, match=r"factor is 5 x 5, A 12 x 12"):
            rcond(A, f)


# ---- complex Hermitian (pzpotrf) ------------------------------------------------------
def _hpd(n, dtype, seed=0):
    r = np.random.default_rng(seed)
    a = r.standard_normal((n, n)) + 1j * r.standard_normal((n, n))
    return (a @ a.conj().T + n * np.eye(n)).astype(dtype)


@pytest.mark.mpi
@pytest.mark.parametrize("dtype", [np.complex128, np.complex64])
def test_complex_hermitian_cholesky_matches_lapack(grids, dtype):
    """A = L L^H (and U^H U) for Hermitian positive definite complex A on every grid, sizes
    the blocks do not divide, nonzero source: the factor is LAPACK's (zpotrf), and
    cho_solve / solve / logdet / rcond agree with NumPy (the update subtracts L21 L21^H, the
    panel solves with Lkk^H: a transpose instead would pass for real matrices only)."""
    from distla.linalg import rcond, solve
    eps = np.finfo(dtype).eps
    for n, nb in ((1, 2), (23, 4), (40, 7)):
        a = _hpd(n, dtype, seed=n)
        b = (np.random.default_rng(1).standard_normal((n, 3)) * (1 - 2j)).astype(dtype)
        a128 = a.astype(np.complex128)
        for g in grids:
            src = (g.nprow - 1, g.npcol - 1)
            A = DistMatrix.from_global(g, a, block=nb, src=src)
            B = DistMatrix.from_global(g, b, block=nb, src=src)
            for lower in (True, False):
                C = cholesky(A, lower=lower)
                ref = np.linalg.cholesky(a128)
                ref = ref if lower else ref.conj().T
                np.testing.assert_allclose(C.to_global(None), ref, rtol=0,
                                           atol=200 * n * eps * np.abs(ref).max())
                x = cho_solve((C, lower), B).to_global(None)
                assert np.abs(a128 @ x - b).max() <= \
                    10 * n * eps * np.abs(a).max() * np.abs(x).max()
            x = solve(A, B, method="cholesky").to_global(None)
            assert np.abs(a128 @ x - b).max() <= 10 * n * eps * np.abs(a).max() * np.abs(x).max()
            L = cholesky(A)
            assert np.isclose(logdet(L), np.linalg.slogdet(a128)[1], rtol=100 * n * eps)
            true = 1 / np.linalg.cond(a128, 1)
            # an estimate of ||A^-1||_1 is a lower bound: rcond at or above the true one
            assert true * (1 - 1e-4) <= rcond(A, L) <= 3 * true


@pytest.mark.mpi
def test_complex_cholesky_step_loop_mixed_and_refusals(comm):
    """The step loop on one process too (forced), both lookaheads; mixed precision with
    complex64 factors refined to complex128; a non-Hermitian or indefinite A refused."""
    from distla.bench import common
    from distla.linalg import solve
    g = ProcessGrid(comm=comm)
    n = 30
    a = _hpd(n, np.complex128, seed=5)
    b = np.random.default_rng(2).standard_normal((n, 2)) * (1 + 1j)
    A, B = DistMatrix.from_global(g, a, block=4), DistMatrix.from_global(g, b, block=4)
    with common.step_loop(True):
        for lookahead in (0, 1):
            np.testing.assert_allclose(cholesky(A, lookahead=lookahead).to_global(None),
                                       np.linalg.cholesky(a), atol=1e-12 * n)
    X, info = solve(A, B, method="cholesky", precision="mixed", return_info=True)
    assert info.precision == "mixed" and info.factor_dtype == "complex64", info
    x = X.to_global(None)
    assert np.abs(a @ x - b).max() <= 10 * n * np.finfo(float).eps * np.abs(a).max() * \
        np.abs(x).max()
    with pytest.raises(ValueError, match="not Hermitian"):
        cholesky(DistMatrix.from_global(g, a + 1j * np.triu(np.ones((n, n)), 1), block=4))
    with pytest.raises(NotPositiveDefiniteError):
        cholesky(DistMatrix.from_global(g, -a, block=4))
