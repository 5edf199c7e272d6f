"""Edge cases of the covariance kernels and the Gaussian-process helpers: keyword-only kernel
parameters, fits where no likelihood is finite (a clear ValueError on every rank), a very
large or small y (scaled inside, no overflow warning), non-finite new points, and negative
kriging variances (set to 0, with a warning)."""
from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from distla import covariance as cov


@pytest.mark.parametrize("cls", [cov.SquaredExponential, cov.Exponential, cov.Matern])
def test_kernel_parameters_are_keyword_only(cls):
    with pytest.raises(TypeError):
        cls(1.5)          # was sigma=1.5 (for Matern(1.5): not nu)
    k = cls(sigma=2.0, beta=0.3, nugget=0.1)
    assert (k.sigma, k.beta, k.nugget) == (2.0, 0.3, 0.1)
    assert k.replace(beta=0.2).beta == 0.2


def test_matern_nu_by_keyword():
    k = cov.Matern(nu=1.5, beta=0.1)
    assert (k.nu, k.sigma) == (1.5, 1.0)
    x = 0.05 / 0.1
    np.testing.assert_allclose(k(np.array([0.05])), (1 + x) * math.exp(-x))


def _setup(comm, n=60, seed=2):
    from distla import ProcessGrid
    g = ProcessGrid(comm=comm)
    pts = cov.points(n, 2, seed=seed)
    y = np.random.default_rng(0).standard_normal(n)
    return g, pts, y


@pytest.mark.mpi
def test_fit_with_y_zero_is_a_clear_error(comm):
    from distla import gp
    g, pts, y = _setup(comm)
    lik = gp.DenseLikelihood(g, pts, np.zeros(len(y)), cov.SquaredExponential(nugget=1e-2), 16)
    with pytest.raises(ValueError, match="y is zero"):
        gp.fit(lik)
    with pytest.raises(ValueError, match=r"no finite likelihood at beta=0.1: y is zero"):
        gp.predict(lik, 0.1, pts[:2])


@pytest.mark.mpi
def test_fit_with_c_singular_everywhere_is_a_clear_error(comm):
    from distla import gp
    g, pts, y = _setup(comm)
    lik = gp.DenseLikelihood(g, pts, y, cov.SquaredExponential(nugget=0.0), 16)
    with pytest.raises(ValueError, match=r"no finite likelihood for beta in \[5, 50\].*not "
                                         r"positive definite.*add a nugget"):
        gp.fit(lik, bounds=(5.0, 50.0))


@pytest.mark.mpi
def test_fit_refuses_infinite_bounds(comm):
    from distla import gp
    g, pts, y = _setup(comm)
    lik = gp.DenseLikelihood(g, pts, y, cov.SquaredExponential(nugget=1e-2), 16)
    with pytest.raises(ValueError, match="bounds must be finite with 0 < lo < hi"):
        gp.fit(lik, bounds=(0.1, math.inf))


@pytest.mark.mpi
@pytest.mark.parametrize("scale", [3e153, 1e-150])   # 3e153: y^T C^-1 y = n sigma^2 overflows
def test_fit_of_a_scaled_y_scales_sigma2(comm, scale):
    """The estimate of beta does not depend on y's scale, sigma^2 scales by its square, and
    nothing overflows (no NumPy warning)."""
    from distla import gp
    g, pts, y = _setup(comm)
    k = cov.SquaredExponential(nugget=1e-2)
    ref = gp.fit(gp.DenseLikelihood(g, pts, y, k, 16))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        f = gp.fit(gp.DenseLikelihood(g, pts, y * scale, k, 16))
        m_ref, v_ref, _ = gp.predict(gp.DenseLikelihood(g, pts, y, k, 16), ref.beta, pts[:3] + .01)
        m, v, _ = gp.predict(gp.DenseLikelihood(g, pts, y * scale, k, 16), ref.beta,
                             pts[:3] + .01)
    assert f.beta == pytest.approx(ref.beta, rel=1e-8)
    assert f.sigma2 == pytest.approx(ref.sigma2 * scale ** 2, rel=1e-8)
    assert f.loglik == pytest.approx(ref.loglik - len(y) * math.log(scale), rel=1e-10)
    np.testing.assert_allclose(m, m_ref * scale, rtol=1e-8)
    np.testing.assert_allclose(v, v_ref * scale ** 2, rtol=1e-8)


@pytest.mark.mpi
def test_fit_of_a_y_whose_sigma2_overflows_is_refused(comm):
    from distla import gp
    g, pts, y = _setup(comm)
    lik = gp.DenseLikelihood(g, pts, y * 1e200, cov.SquaredExponential(nugget=1e-2), 16)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match=r"no finite likelihood .*sigma\^2 .* outside "
                                             r"float64's normal range"):
            gp.fit(lik)


@pytest.mark.mpi
def test_predict_refuses_non_finite_new_points(comm):
    from distla import gp
    g, pts, y = _setup(comm)
    lik = gp.DenseLikelihood(g, pts, y, cov.SquaredExponential(nugget=1e-2), 16)
    with pytest.raises(ValueError, match=r"new points hold a non-finite value \(nan\) at "
                                         r"index \(1, 0\)"):
        gp.predict(lik, 0.1, np.array([[0.5, 0.5], [np.nan, 0.5]]))


@pytest.mark.mpi
@pytest.mark.parametrize("kind", ["dense", "tlr"])
def test_predict_variances_are_never_negative(comm, kind):
    """At the training points without a nugget the exact variance is 0: rounding (dense) or
    truncation (TLR) makes some negative; they are set to 0 with a RuntimeWarning."""
    from distla import gp
    g, pts, y = _setup(comm, n=120, seed=1)
    k = cov.SquaredExponential(nugget=0.0)
    lik = gp.DenseLikelihood(g, pts, y, k, 32) if kind == "dense" else \
        gp.TLRLikelihood(g, pts, y, k, 32, tol=1e-4)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        mean, var, ev = gp.predict(lik, 0.1, pts)
    assert var.min() >= 0
    neg = [x for x in w if issubclass(x.category, RuntimeWarning) and "negative" in
           str(x.message)]
    assert len(neg) == 1, [str(x.message) for x in w]
    assert "set to 0" in str(neg[0].message)


@pytest.mark.mpi
@pytest.mark.parametrize("slab, exc", [(-1, ValueError), (0, ValueError), (2.5, TypeError),
                                       (True, TypeError), ("2", TypeError)])
def test_predict_slab_must_be_a_positive_int(comm, slab, exc):
    """slab=-1 made range(0, m, -1) empty: the kriging mean and variance were np.empty's
    uninitialized memory."""
    from distla import gp
    g, pts, y = _setup(comm)
    lik = gp.DenseLikelihood(g, pts, y, cov.SquaredExponential(nugget=1e-2), 16)
    new = cov.points(5, 2, seed=7)
    with pytest.raises(exc, match=f"slab must be an int >= 1, not {slab!r}"):
        gp.predict(lik, 0.1, new, slab=slab)
    m0, v0, _ = gp.predict(lik, 0.1, new)
    for s in (1, 2, 5, 100):          # any slab: the same numbers
        m, v, _ = gp.predict(lik, 0.1, new, slab=s)
        np.testing.assert_allclose(m, m0, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(v, v0, rtol=1e-12, atol=1e-14)
    assert np.all(v0 > 0) and np.all(v0 <= lik(0.1).sigma2)


@pytest.mark.mpi
@pytest.mark.parametrize("kw, exc, match", [
    (dict(bounds=(0.1, 0.2, 0.3)), ValueError, r"bounds must be two numbers \(lo, hi\), not "
                                               r"\(0.1, 0.2, 0.3\)"),
    (dict(bounds=(0.1,)), ValueError, "bounds must be two numbers"),
    (dict(bounds="ab"), ValueError, "bounds must be two numbers"),
    (dict(bounds=(0.1, "0.5")), TypeError, r"bounds\[1\] must be a real number, not '0.5'"),
    (dict(bounds=(0.5, 0.02)), ValueError, "bounds must be finite with 0 < lo < hi"),
    (dict(bounds=(1e-170, 0.5)), ValueError, "bounds must lie in the kernel's range of beta"),
    (dict(bounds=(0.1, 1e300)), ValueError, "bounds must lie in the kernel's range of beta"),
    (dict(xatol=math.nan), ValueError, "xatol must be a finite number > 0, not nan"),
    (dict(xatol=0), ValueError, "xatol must be a finite number > 0, not 0"),
    (dict(xatol=-1), ValueError, "xatol must be a finite number > 0, not -1"),
    (dict(xatol=math.inf), ValueError, "xatol must be a finite number > 0, not inf"),
    (dict(xatol="1e-5"), TypeError, "xatol must be a real number"),
])
def test_fit_refuses_bad_bounds_and_tolerances_before_evaluating(comm, kw, exc, match):
    """xatol=nan stopped Brent after one evaluation with a wrong optimum; three bounds were
    'too many values to unpack'."""
    from distla import gp
    g, pts, y = _setup(comm)
    lik = gp.DenseLikelihood(g, pts, y, cov.SquaredExponential(nugget=1e-2), 16)
    with pytest.raises(exc, match=match):
        gp.fit(lik, **kw)
    assert lik.history == []                      # refused before any evaluation


@pytest.mark.mpi
@pytest.mark.parametrize("kind", ["dense", "tlr"])
def test_likelihood_refuses_complex_y_and_a_tile_that_is_not_a_positive_int(comm, kind):
    from distla import gp
    g, pts, y = _setup(comm)
    L = gp.DenseLikelihood if kind == "dense" else gp.TLRLikelihood
    k = cov.SquaredExponential(nugget=1e-2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")            # (was a ComplexWarning, then truncated)
        with pytest.raises(TypeError, match="y must be real numbers, not complex128 data"):
            L(g, pts, y + 1j, k, 16)
        with pytest.raises(TypeError, match="points must be real numbers"):
            L(g, pts + 0j, y, k, 16)
    for tile, exc in ((2.7, TypeError), (16.0, TypeError), ("16", TypeError),
                      (True, TypeError), (0, ValueError), (-8, ValueError)):
        with pytest.raises(exc, match=f"tile must be an int >= 1, not {tile!r}"):
            L(g, pts, y, k, tile)
    assert L(g, pts, y, k, np.int64(16)).tile == 16


@pytest.mark.mpi
@pytest.mark.parametrize("kw, match", [(dict(tol=math.nan), "tol must be a number in"),
                                       (dict(tol=0.0), "tol must be a number in"),
                                       (dict(method="qr"), "method must be one of"),
                                       (dict(seed=-1), "seed must be a non-negative int")])
def test_tlr_likelihood_checks_its_options_at_construction(comm, kw, match):
    from distla import gp
    g, pts, y = _setup(comm)
    with pytest.raises(ValueError, match=match):
        gp.TLRLikelihood(g, pts, y, cov.SquaredExponential(nugget=1e-2), 16, **kw)


@pytest.mark.mpi
@pytest.mark.parametrize("beta", [1e-160, 1e-170, 1e300, 0.0, math.nan])
def test_dense_and_tlr_likelihoods_refuse_an_unrepresentable_beta_alike(comm, beta):
    """beta = 1e-160: the dense likelihood raised a logdet error, TLR returned -inf with a
    NumPy warning; 1e-170 and 1e300 were ZeroDivisionError and OverflowError."""
    from distla import gp
    g, pts, y = _setup(comm)
    k = cov.SquaredExponential(nugget=1e-2)
    msgs = []
    for L in (gp.DenseLikelihood, gp.TLRLikelihood):
        lik = L(g, pts, y, k, 16)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with pytest.raises(ValueError, match="beta must be a finite number > 0 whose "
                                                 "square is a normal float64") as e:
                lik(beta)
        msgs.append(str(e.value))
        with pytest.raises(TypeError, match="beta must be a real number, not '0.1'"):
            lik("0.1")
        assert lik.history == []
    assert msgs[0] == msgs[1]


@pytest.mark.mpi
def test_numerically_singular_c_gives_minus_inf_on_both_back_ends(grids):
    """Two points 1e-9 apart and no nugget: C's Cholesky succeeded and DenseLikelihood returned
    log-likelihoods off by hundreds (and gp.fit an estimate) while TLRLikelihood said 'not
    positive definite' (sweep 16, r_gp_neardup.py). A C whose reciprocal condition estimate
    is below n eps now gives -inf with why on both back ends; well-separated points are
    unaffected."""
    from distla import gp
    pts = cov.points(20, 2, seed=2)
    pts[11] = pts[10] + 1e-9
    y = np.random.default_rng(0).standard_normal(20)
    k = cov.SquaredExponential(beta=0.1)
    for g in grids:
        for L in (gp.DenseLikelihood, gp.TLRLikelihood):
            lik = L(g, pts, y, k, 8)
            for beta in (0.05, 0.3):
                ev = lik(beta)
                assert ev.loglik == -math.inf, (L.kind, beta, ev.loglik)
                assert "numerically singular" in ev.why or "positive definite" in ev.why
            with pytest.raises(ValueError, match="no finite likelihood"):
                gp.fit(lik, bounds=(0.05, 0.3), xatol=1e-2)
        ok = gp.DenseLikelihood(g, cov.points(20, 2, seed=2), y, k, 8)(0.1)
        assert math.isfinite(ok.loglik) and ok.why == ""


@pytest.mark.mpi
def test_ranks_given_different_inputs_fail_together(comm):
    """A kernel, new points or a replicated right-hand side that differ between ranks (the
    docs require them identical) built a patchwork matrix, returned a different kriging mean
    on each rank, or mixed the ranks' solutions: the same ValueError on every rank now."""
    from distla import gp, tlr
    if comm.size < 2:
        pytest.skip("needs several ranks")
    g, pts, y = _setup(comm, n=80)
    k = cov.SquaredExponential(beta=0.1, nugget=1e-2)
    with pytest.raises(ValueError, match="different arguments"):
        tlr.from_kernel(g, pts, k.replace(beta=0.1 * (1 + comm.rank)), 20, tol=1e-8)
    L = tlr.cholesky(tlr.from_kernel(g, pts, k, 20, tol=1e-8))
    with pytest.raises(ValueError, match="different arguments"):
        L.solve(np.ones(80) * (1 + comm.rank))
    with pytest.raises(ValueError, match="different arguments"):
        L.solve_triangular(np.ones(80) * (1 + comm.rank))
    lik = gp.DenseLikelihood(g, pts, y, k, 16)
    with pytest.raises(ValueError, match="different arguments"):
        gp.predict(lik, 0.1, pts[:3] + 0.01 * comm.rank)
    np.testing.assert_allclose(L.solve(np.ones(80)), L.solve(np.ones(80)))   # still usable
