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
