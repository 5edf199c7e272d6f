"""Gaussian-process pieces: cross-covariances, the TLR triangular solve with many right-hand
sides, the profile likelihood, the MLE (TLR against dense, and against the true parameters)
and kriging (TLR and distla dense against the textbook formulas)."""
from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.linalg as sla

from distla import covariance as cov

BETA, SIGMA2, TAU = 0.1, 2.0, 1e-2
DEVICES = ["cpu", pytest.param("gpu", marks=pytest.mark.gpu)]


def _dense(pts, kernel):
    n = len(pts)
    return cov.entry_function(pts, kernel)(np.arange(n)[:, None], np.arange(n)[None, :])


def _data(n, m=0, seed=0):
    """``n + m`` jittered points, observations of covariance sigma^2 (R + tau I), the first
    ``n`` (Morton order) for training, ``m`` random others held out. Same on every rank."""
    pts = cov.points(n + m, kind="jittered", seed=seed)
    k = cov.SquaredExponential(sigma=math.sqrt(SIGMA2), beta=BETA, nugget=SIGMA2 * TAU)
    y = np.linalg.cholesky(_dense(pts, k)) @ np.random.default_rng(seed + 1).standard_normal(
        n + m)
    held = np.zeros(n + m, bool)
    held[np.random.default_rng(seed + 2).choice(n + m, m, replace=False)] = True
    return pts[~held], y[~held], pts[held], y[held]


@pytest.mark.parametrize("kernel", [cov.SquaredExponential(sigma=1.3, beta=0.2, nugget=0.5),
                                    cov.Exponential(beta=0.1),
                                    cov.Matern(beta=0.1, nu=1.5), cov.Matern(beta=0.1, nu=2.5),
                                    cov.Matern(beta=0.1, nu=0.8)])
@pytest.mark.parametrize("device", DEVICES)
def test_cross_covariance_is_the_off_diagonal_block(kernel, device):
    from distla.device import get_backend
    a, b = cov.points(37, seed=1), cov.points(23, dim=2, seed=2)
    K = cov.cross_covariance(a, b, kernel, get_backend(device).xp)
    K = K.get() if device == "gpu" else K
    full = _dense(np.vstack([a, b]), kernel.replace(nugget=0.0))
    assert K.shape == (37, 23)
    np.testing.assert_allclose(K, full[:37, 37:], rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(cov.cross_covariance(a, a, kernel), full[:37, :37], rtol=1e-12,
                               atol=1e-15)   # no nugget, even on coinciding points


@pytest.mark.mpi
def test_likelihood_rejects_non_finite_points(comm):
    from distla import ProcessGrid, gp
    g = ProcessGrid(comm=comm)
    pts = np.random.default_rng(1).random((20, 2))
    pts[7, 1] = np.nan
    for cls, kw in ((gp.DenseLikelihood, {}), (gp.TLRLikelihood, {})):
        with pytest.raises(ValueError, match=r"points hold a non-finite value \(nan\) at "
                                             r"index \(7, 1\)"):
            cls(g, pts, np.ones(20), cov.SquaredExponential(), 8, **kw)


@pytest.mark.mpi
def test_likelihood_rejects_coinciding_points_without_a_nugget(comm):
    from distla import ProcessGrid, gp
    g = ProcessGrid(comm=comm)
    pts = np.random.default_rng(2).random((30, 2))
    pts[21] = pts[4]
    y = np.ones(30)
    for cls in (gp.DenseLikelihood, gp.TLRLikelihood):
        with pytest.raises(ValueError, match=r"points 4 and 21 coincide .* nugget is 0"):
            cls(g, pts, y, cov.Exponential(beta=0.1), 8)
        lik = cls(g, pts, y, cov.Exponential(beta=0.1, nugget=1e-2), 8)   # a nugget: fine
        assert np.isfinite(lik(0.1).loglik)
    pts[21, 1] += 1e-9                              # near, not equal: accepted
    gp.DenseLikelihood(g, pts, y, cov.Exponential(beta=0.1), 8)


def test_cross_covariance_rejects_bad_input():
    k = cov.SquaredExponential()
    with pytest.raises(ValueError, match="m x d and n x d"):
        cov.cross_covariance(np.zeros((3, 2)), np.zeros((3, 3)), k)
    with pytest.raises(TypeError, match="Kernel"):
        cov.cross_covariance(np.zeros((3, 2)), np.zeros((3, 2)), lambda r: r)


def test_profile_loglik_is_the_maximum_over_sigma2():
    from scipy.stats import multivariate_normal

    from distla.gp import profile_loglik
    pts, y, _, _ = _data(120)
    C = _dense(pts, cov.SquaredExponential(beta=BETA, nugget=TAU))
    ld, quad = np.linalg.slogdet(C)[1], float(y @ np.linalg.solve(C, y))
    lp, s2 = profile_loglik(ld, quad, len(y))
    full = [multivariate_normal(cov=s * C).logpdf(y) for s in (s2, 0.9 * s2, 1.1 * s2)]
    assert lp == pytest.approx(full[0], rel=1e-12)
    assert full[0] > max(full[1:])


@pytest.mark.mpi
def test_solve_triangular_many_rhs(grids):
    from distla import tlr
    x = cov.points(230, seed=5)
    k = cov.SquaredExponential(beta=0.1, nugget=1e-2)
    B = np.random.default_rng(0).standard_normal((230, 7))
    for g in grids:
        src = (g.nprow - 1, g.npcol - 1)
        L = tlr.cholesky(tlr.from_kernel(g, x, k, 24, tol=1e-10, src=src))   # 230 = 9*24 + 14
        Ld = L.to_dense().to_global(root=None)
        for trans in (False, True):
            ref = sla.solve_triangular(Ld, B, lower=True, trans=1 if trans else 0)
            np.testing.assert_allclose(L.solve_triangular(B, trans=trans), ref, rtol=1e-10,
                                       atol=1e-10 * np.abs(ref).max())
        w = L.solve_triangular(B[:, 0])
        assert w.shape == (230,)
        np.testing.assert_allclose(w, sla.solve_triangular(Ld, B[:, 0], lower=True),
                                   rtol=1e-10, atol=1e-10)
        X = L.solve_triangular(L.solve_triangular(B), trans=True)
        np.testing.assert_allclose(X, L.solve(B), rtol=1e-12, atol=1e-12 * np.abs(X).max())
        # a DistMatrix B, as L.solve takes: the answer in B's layout
        from distla import DistMatrix
        Bd = DistMatrix.from_global(g, B, block=(16, 3), src=src)
        Wd = L.solve_triangular(Bd, trans=True)
        assert Wd.same_layout(Bd)
        np.testing.assert_array_equal(Wd.to_global(None), L.solve_triangular(B, trans=True))
        with pytest.raises(ValueError, match="rows"):
            L.solve_triangular(DistMatrix.from_global(g, B[:-1], block=(16, 3)))
        with pytest.raises(ValueError, match="230 rows"):
            L.solve_triangular(B[:100])


@pytest.mark.mpi
@pytest.mark.parametrize("device", DEVICES)
def test_mle_recovers_the_parameters_and_matches_dense(comm, device):
    from distla import gp
    from distla.grid import ProcessGrid
    g = ProcessGrid(comm=comm)
    pts, y, _, _ = _data(600, seed=3)
    corr = cov.SquaredExponential(beta=0.3, nugget=TAU)       # beta is fitted
    tl = gp.TLRLikelihood(g, pts, y, corr, 64, tol=1e-8, device=device)   # 600 = 9*64 + 24
    ft = gp.fit(tl, bounds=(0.02, 0.5))
    fd = gp.fit(gp.DenseLikelihood(g, pts, y, corr, 64, device=device), bounds=(0.02, 0.5))
    assert abs(ft.beta - fd.beta) <= 1e-3 * fd.beta
    assert abs(ft.sigma2 - fd.sigma2) <= 1e-3 * fd.sigma2
    # sampling spread at n = 600 (12 seeds): ~2% on beta, ~5% on sigma^2; 5 sd here
    assert abs(fd.beta / BETA - 1) < 0.1 and abs(fd.sigma2 / SIGMA2 - 1) < 0.25
    assert ft.nevals == len(tl.history) and ft.seconds > 0
    assert ft.loglik == max(e.loglik for e in tl.history)
    ev = tl.history[0]
    assert min(ev.build_s, ev.factor_s, ev.solve_s) > 0 and ev.rank_mean > 0
    vals = comm.allgather((ft.beta, ft.sigma2, ft.nevals))
    assert all(v == vals[0] for v in vals)                    # one optimizer path everywhere


@pytest.mark.mpi
@pytest.mark.parametrize("device", DEVICES)
def test_kriging_matches_the_dense_formulas(comm, device):
    from distla import gp
    from distla.grid import ProcessGrid
    pts, y, new, ynew = _data(500, 60, seed=4)
    corr = cov.SquaredExponential(beta=BETA, nugget=TAU)
    # the textbook formulas, NumPy/SciPy on the whole matrix
    C = _dense(pts, corr)
    cf = sla.cho_factor(C, lower=True)
    s2 = float(y @ sla.cho_solve(cf, y)) / len(y)
    Ks = cov.cross_covariance(new, pts, corr)
    mean = Ks @ sla.cho_solve(cf, y)
    var = s2 * (1.0 - np.einsum("ij,ji->i", Ks, sla.cho_solve(cf, Ks.T)))
    for g in [ProcessGrid(comm=comm), ProcessGrid(1, comm.size, comm)]:
        for lik, rtol in ((gp.TLRLikelihood(g, pts, y, corr, 48, tol=1e-10, device=device),
                           1e-6),
                          (gp.DenseLikelihood(g, pts, y, corr, 48, device=device), 1e-10)):
            m, v, ev = gp.predict(lik, BETA, new, slab=25)        # 3 slabs, the last short
            assert ev.sigma2 == pytest.approx(s2, rel=rtol)
            assert np.linalg.norm(m - mean) <= rtol * np.linalg.norm(mean)
            assert np.linalg.norm(v - var) <= rtol * np.linalg.norm(var)
            assert np.all(v > 0) and np.all(v < s2)
    # the held-out values scatter as the predicted variances say (60 points: loose bounds)
    z2 = (ynew - mean) ** 2 / (var + s2 * TAU)
    assert 0.4 < z2.mean() < 2.0


@pytest.mark.mpi
def test_not_positive_definite_evaluation_is_minus_infinity(comm):
    from distla import gp
    from distla.grid import ProcessGrid
    g = ProcessGrid(comm=comm)
    pts, y, _, _ = _data(300)
    lik = gp.DenseLikelihood(g, pts, y, cov.SquaredExponential(beta=0.1), 32)   # no nugget
    ev = lik(0.5)                       # numerically singular: Cholesky fails on every rank
    assert ev.loglik == -math.inf and len(lik.history) == 1
    with pytest.raises(ValueError, match="not positive definite"):
        gp.predict(lik, 0.5, pts[:3])
    with pytest.raises(ValueError, match="bounds"):
        gp.fit(lik, bounds=(0.3, 0.1))
    with pytest.raises(ValueError, match="n x d"):
        gp.TLRLikelihood(g, pts, y[:-1], cov.SquaredExponential(), 32)
