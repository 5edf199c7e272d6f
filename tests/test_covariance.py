"""Tests of distla.covariance: point sets, Morton order, kernels, covariance matrices."""
import math
import re

import numpy as np
import pytest
from scipy.special import gamma, kv

from distla import covariance as cov

# ---- points --------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["random", "grid", "jittered"])
@pytest.mark.parametrize("dim", [2, 3])
def test_points_shape_range_and_seed(kind, dim):
    x = cov.points(100, dim=dim, kind=kind, seed=3)
    assert x.shape == (100, dim) and x.dtype == np.float64
    assert np.all(x >= 0) and np.all(x < 1)
    np.testing.assert_array_equal(x, cov.points(100, dim=dim, kind=kind, seed=3))
    if kind != "grid":
        assert not np.array_equal(x, cov.points(100, dim=dim, kind=kind, seed=4))
    assert len(np.unique(x, axis=0)) == 100


def test_jittered_points_stay_in_their_cells():
    side = 9
    x = cov.points(side * side, kind="jittered", seed=1, morton=False)
    cells = np.stack(np.unravel_index(np.arange(side * side), (side, side)), axis=1)
    frac = x * side - cells          # position inside the cell, must be in [0.1, 0.9]
    assert frac.min() >= 0.1 - 1e-12 and frac.max() <= 0.9 + 1e-12
    assert frac.std() > 0.1          # really jittered


def test_grid_points_are_cell_centres_and_partial_grids_take_first_cells():
    x = cov.points(16, kind="grid", morton=False)
    np.testing.assert_allclose(np.unique(x[:, 0]), [0.125, 0.375, 0.625, 0.875])
    y = cov.points(10, kind="grid", morton=False)        # side 4, first 10 cells
    np.testing.assert_allclose(y, x[:10])
    z = cov.points(27, dim=3, kind="grid", morton=False)
    assert len(np.unique(z[:, 2])) == 3


def test_morton_codes_interleave_bits():
    x = np.array([[0.25, 0.25], [0.75, 0.25], [0.25, 0.75], [0.75, 0.75]])
    np.testing.assert_array_equal(cov.morton_codes(x, bits=1), [0, 1, 2, 3])
    # bits=2: q = (3, 1) -> x bits 1,1 at positions 0,2; y bits 1,0 at positions 1,3
    np.testing.assert_array_equal(cov.morton_codes(np.array([[0.8, 0.3]]), bits=2), [7])
    x3 = np.array([[0.75, 0.25, 0.25], [0.25, 0.25, 0.75]])
    np.testing.assert_array_equal(cov.morton_codes(x3, bits=1), [1, 4])


@pytest.mark.parametrize("dim,side", [(2, 8), (3, 4)])
def test_morton_order_fills_quadrants_recursively(dim, side):
    x = cov.points(side ** dim, dim=dim, kind="grid")
    codes = cov.morton_codes(x)
    assert np.all(np.diff(codes.astype(np.float64)) >= 0)
    # each consecutive group of (side/2)^dim points is one orthant, in Z order
    q = (side // 2) ** dim
    for g in range(2 ** dim):
        blk = x[g * q:(g + 1) * q]
        for c in range(dim):
            bit = (g >> c) & 1
            assert np.all((blk[:, c] >= 0.5) == bool(bit))
    # ... and recursively inside the first orthant
    q2 = q // 2 ** dim
    first = x[:q2]
    assert np.all(first < 0.25)


def test_points_validation():
    with pytest.raises(ValueError):
        cov.points(10, dim=4)
    with pytest.raises(ValueError):
        cov.points(10, kind="hex")
    with pytest.raises(ValueError):
        cov.points(-1)
    assert cov.points(0).shape == (0, 2)


# ---- kernels -------------------------------------------------------------------------------

def test_kernel_values():
    r = np.array([0.0, 0.1, 0.25, 1.0])
    se = cov.SquaredExponential(sigma=2.0, beta=0.1)
    np.testing.assert_allclose(se(r), 4 * np.exp(-r ** 2 / 0.02))
    assert se(np.array([0.1]))[0] == pytest.approx(4 * math.exp(-0.5))
    ex = cov.Exponential(sigma=1.5, beta=0.2)
    np.testing.assert_allclose(ex(r), 2.25 * np.exp(-r / 0.2))


def test_matern_half_is_exponential_and_closed_forms_match_kv():
    r = np.linspace(0, 2, 41)
    m = cov.Matern(sigma=1.3, beta=0.3, nu=0.5)
    np.testing.assert_allclose(m(r), cov.Exponential(sigma=1.3, beta=0.3)(r), rtol=1e-14)
    for nu in (0.5, 1.5, 2.5):
        k = cov.Matern(sigma=1.3, beta=0.3, nu=nu)
        x = r / 0.3
        closed = k(r)
        general = k._general(x, np)          # the scipy.special.kv path
        np.testing.assert_allclose(closed, general, rtol=1e-10, atol=1e-14)


def test_matern_general_nu_formula_and_zero_limit():
    k = cov.Matern(sigma=1.0, beta=0.2, nu=0.8)
    r = np.array([0.0, 1e-9, 0.05, 0.3])
    v = k(r)
    assert v[0] == 1.0 and v[1] == pytest.approx(1.0, abs=1e-6)
    x = r[2:] / 0.2
    ref = 2 ** (1 - 0.8) / gamma(0.8) * x ** 0.8 * kv(0.8, x)
    np.testing.assert_allclose(v[2:], ref, rtol=1e-12)
    assert np.all(np.diff(v) < 0)


def test_matern_large_nu_near_zero_distance_is_one():
    """For large nu, x^nu K_nu(x) at small x is 0 * inf in floating point: the kernel must
    still give its limit sigma^2 there (it gave 0), agree with kv where kv is finite, and
    decrease monotonically."""
    for nu in (20.0, 50.0, 120.0):
        k = cov.Matern(sigma=1.5, beta=0.1, nu=nu)
        r = np.array([0.0, 1e-9, 1e-7, 1e-4, 1e-2, 0.1, 1.0, 30.0])
        v = k(r)
        assert v[0] == 1.5 ** 2 and np.all(v[1:4] == pytest.approx(1.5 ** 2, rel=1e-6))
        assert np.all(np.diff(v) <= 1e-12) and v[-1] < 1e-50     # (rounding near 1)
        x = r[4:7] / 0.1
        with np.errstate(all="ignore"):
            ref = 1.5 ** 2 * 2 ** (1 - nu) / gamma(nu) * x ** nu * kv(nu, x)
        ok = np.isfinite(ref)                   # (0 * inf where the naive formula fails)
        assert ok.sum() >= 2
        np.testing.assert_allclose(v[4:7][ok], ref[ok], rtol=1e-10)


def test_kernel_parameters_must_be_finite():
    for kw in ({"beta": math.inf}, {"sigma": math.inf}, {"nugget": math.inf},
               {"sigma": math.nan}):
        with pytest.raises(ValueError, match="finite"):
            cov.SquaredExponential(**kw)
    with pytest.raises(ValueError, match="finite nu"):
        cov.Matern(nu=math.inf)


def test_kernel_validation():
    with pytest.raises(ValueError):
        cov.SquaredExponential(beta=0)
    with pytest.raises(ValueError):
        cov.Matern(nu=-1)
    with pytest.raises(ValueError):
        cov.Exponential(nugget=-1)
    assert cov.SquaredExponential().replace(beta=0.3).beta == 0.3


def test_entry_function_nugget_symmetry_and_values():
    x = cov.points(50, seed=2)
    k = cov.SquaredExponential(beta=0.2, nugget=0.5)
    fn = cov.entry_function(x, k)
    I, J = np.arange(50)[:, None], np.arange(50)[None, :]
    A = fn(I, J)
    d = np.sqrt(((x[:, None, :] - x[None, :, :]) ** 2).sum(-1))
    np.testing.assert_allclose(A, np.exp(-d ** 2 / 0.08) + 0.5 * np.eye(50), rtol=1e-14)
    np.testing.assert_array_equal(A, A.T)
    # any broadcastable index shapes (3-D stacks of tiles)
    T = fn(np.arange(50).reshape(5, 10, 1), np.arange(50).reshape(5, 1, 10))
    for b in range(5):
        np.testing.assert_array_equal(T[b], A[b * 10:(b + 1) * 10, b * 10:(b + 1) * 10])
    with pytest.raises(TypeError):
        cov.entry_function(x, lambda r: r)


def test_default_problem_is_st_2d_sqexp():
    x, k = cov.default_problem(64, seed=5)
    assert isinstance(k, cov.SquaredExponential)
    assert (k.sigma, k.beta, k.nugget) == (1.0, 0.1, 1e-2)
    np.testing.assert_array_equal(x, cov.points(64, kind="jittered", seed=5))
    A = cov.entry_function(x, k)(np.arange(64)[:, None], np.arange(64)[None, :])
    assert np.linalg.eigvalsh(A).min() >= 1e-2 - 1e-10


# ---- distributed ---------------------------------------------------------------------------

@pytest.mark.mpi
def test_covariance_matrix_on_every_grid():
    from mpi4py import MPI

    from distla.grid import ProcessGrid
    from distla.testing import grid_shapes
    comm = MPI.COMM_WORLD
    x = cov.points(61, seed=9)
    k = cov.Matern(beta=0.2, nu=1.5, nugget=1e-3)
    ref = cov.entry_function(x, k)(np.arange(61)[:, None], np.arange(61)[None, :])
    for p, q in grid_shapes(comm.size):
        for order in ("row", "col"):
            g = ProcessGrid(p, q, comm=comm, order=order)
            A = cov.covariance_matrix(g, x, k, block=(7, 7), src=(p - 1, q - 1))
            np.testing.assert_allclose(A.to_global(root=None), ref, rtol=1e-15)


@pytest.mark.parametrize("cls", [cov.SquaredExponential, cov.Exponential, cov.Matern])
@pytest.mark.parametrize("name", ["sigma", "beta"])
@pytest.mark.parametrize("value", [1e200, 1e300, 1e-160, 1e-170, 1e-200, 1e-320])
def test_kernel_scale_whose_square_is_not_a_normal_float_is_refused(cls, name, value):
    """sigma^2 and 1 / beta^2 are computed in float64: 1e300 overflowed (OverflowError
    'Numerical result out of range'), 1e-170 divided by zero, 1e-160 gave NaN entries."""
    with pytest.raises(ValueError, match=f"{cls.__name__}: {name} must be a finite number "
                                         f"> 0 whose square is a normal float64.*not "
                                         f"{re.escape(repr(value))}$"):
        cls(**{name: value})


@pytest.mark.parametrize("value", ["0.1", True, None, 1j])
def test_kernel_parameters_must_be_real_numbers(value):
    for name in ("sigma", "beta", "nugget"):
        with pytest.raises(TypeError, match=f"{name} must be a real number, not "
                                            f"{re.escape(repr(value))}"):
            cov.SquaredExponential(**{name: value})
    with pytest.raises(TypeError, match="nu must be a real number"):
        cov.Matern(nu=value)


def test_kernel_scales_at_the_ends_of_the_range_give_finite_values():
    lo, hi = cov.SCALE_RANGE
    r = np.array([0.0, 1e-300, 0.5, 1.0])
    for cls in (cov.SquaredExponential, cov.Exponential, cov.Matern):
        for kw in (dict(beta=lo), dict(beta=hi), dict(sigma=lo), dict(sigma=hi)):
            k = cls(**kw)
            v = k(r)
            assert np.all(np.isfinite(v)) and v[0] == pytest.approx(k.sigma ** 2), (cls, kw)
    k = cov.SquaredExponential(beta=np.float32(0.25), sigma=2)
    assert type(k.beta) is float and type(k.sigma) is float     # stored as plain floats


def test_points_refuses_non_integer_sizes_and_negative_seeds():
    with pytest.raises(TypeError, match="n must be an int, not 2.5"):
        cov.points(2.5)
    with pytest.raises(TypeError, match="dim must be an int"):
        cov.points(4, dim=2.0)
    with pytest.raises(ValueError, match="seed must be a non-negative int, not -1"):
        cov.points(4, seed=-1)
    assert cov.points(np.int64(4)).shape == (4, 2)
