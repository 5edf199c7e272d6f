"""Matrices and right-hand sides at the ends of float64's range (the seventh sweep's
findings): no NaN answer returned silently, no symmetric matrix refused because its sums
overflow, the gradual-underflow warning whatever checks are off, TLR on subnormal entries,
mixed precision with right-hand-side columns far outside float32's range."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from distla import DistlaError, DistMatrix, LinAlgWarning
from distla.linalg import solve

N, NB = 37, 8


def _dist(grid, a, src=(0, 0)):
    return DistMatrix.from_global(grid, a if grid.comm.rank == 0 else None, block=NB, src=src)


def _spd(n, seed=0):
    g = np.random.default_rng(seed).standard_normal((n, n))
    s = g @ g.T / n + np.eye(n)
    return (s + s.T) / 2


def _same_everywhere(comm, value):
    vals = comm.allgather(value)
    assert all(v == vals[0] for v in vals), vals


@pytest.mark.mpi
def test_genp_whose_solves_overflow_raises_everywhere(grids):
    """GENP of a random matrix scaled to max ~1e306: finite factors (growth ~90) whose
    triangular solves overflow. The solve returned an all-NaN X with no warning; now the
    overflow is a DistlaError on every rank. At 1e306 per entry the factors overflow
    themselves: lu_factor's overflow error, not a 'tiny pivot' blamed on the NaN. Partial
    pivoting solves both."""
    g = np.random.default_rng(0).standard_normal((N, N))
    x0 = np.random.default_rng(1).standard_normal((N, 2))
    for grid in grids[:4]:
        for scale, where in ((1e307 / N, "solve_lu"), (1e306, "lu_factor")):
            a = g * scale
            b = (a.astype(np.longdouble) @ x0).astype(np.float64)
            A, B = _dist(grid, a), _dist(grid, b)
            with pytest.raises(DistlaError, match="non-finite value") as e:
                solve(A, B, method="genp")
            assert where in str(e.value), str(e.value)
            _same_everywhere(grid.comm, type(e.value).__name__)
            x = solve(A, B, method="gepp").to_global(None)
            assert np.abs(x - x0).max() < 1e-10


@pytest.mark.mpi
def test_symmetric_matrix_whose_row_sums_overflow_is_accepted(grids):
    """An exactly symmetric SPD matrix with max entry 3e306 (cond_1 18): its row sums and the
    symmetry probe's products overflow, and the probe said 'not symmetric (nan)'. It now
    probes 2^-k A (exact) and solves, dense and TLR; the same matrix made asymmetric is still
    refused, with a finite relative asymmetry."""
    s = _spd(N)
    a = s * (3e306 / np.abs(s).max())
    x0 = np.random.default_rng(1).standard_normal((N, 2))
    b = (a.astype(np.longdouble) @ x0).astype(np.float64)
    bad = a.copy()
    bad[3, 20] *= 1.01
    for grid in grids[:4]:
        A, B = _dist(grid, a, (grid.nprow - 1, 0)), _dist(grid, b, (grid.nprow - 1, 0))
        for kw in (dict(method="cholesky"), dict(method="tlr", tol=1e-10)):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", LinAlgWarning)   # ||A|| overflows: rcond 0
                x = solve(A, B, **kw).to_global(None)
            assert np.abs(x - x0).max() < 1e-10, kw
        with pytest.raises(ValueError, match=r"not symmetric \(relative asymmetry about "
                                             r"[0-9]"):
            solve(_dist(grid, bad), B, method="cholesky")


@pytest.mark.mpi
def test_symmetric_matrix_of_subnormal_entries_is_symmetric(grids):
    """An exactly symmetric float32 SPD matrix scaled into the subnormal range (max entry
    1e-41) was refused as 'not symmetric (relative asymmetry about 2.3e-03)': the probe's
    products had lost their precision. It probes 2^-k A (scaled up, exactly) now: cholesky
    factors it as SciPy does, and the same matrix made asymmetric is still refused."""
    from distla.linalg import cholesky
    s = _spd(N)
    for scale in (1e-41, 1e-43):
        a = (s * scale).astype(np.float32)
        assert np.array_equal(a, a.T)
        bad = a.copy()
        bad[3, 20] *= 1.5
        for grid in grids[:4]:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", LinAlgWarning)     # subnormal entries
                L = cholesky(_dist(grid, a)).to_global(None)
            ref = np.linalg.cholesky(a.astype(np.float64))
            # (products of subnormal float32 entries keep a few bits: a few % is all that any
            # float32 Cholesky of this matrix gets)
            assert np.abs(np.tril(L) - ref).max() <= 0.1 * np.abs(ref).max()
            with pytest.raises(ValueError, match="not symmetric"):
                cholesky(_dist(grid, bad))


@pytest.mark.mpi
def test_subnormal_warning_whatever_checks_are_off(grids):
    """An SPD matrix scaled to 1e-315 factors in gradual underflow: the LinAlgWarning comes
    also with check_symmetric=False and check_rcond=False (its scale came from those
    checks' pass only), and from a mixed solve whose float64 fallback skips the symmetry
    check."""
    a = _spd(N) * 1e-315
    b = a @ np.random.default_rng(2).standard_normal((N, 1))     # x of O(1)
    for grid in grids[:2]:
        A, B = _dist(grid, a), _dist(grid, b)
        for kw in (dict(check_symmetric=False, check_rcond=False),
                   dict(precision="mixed", check_rcond=False)):
            with pytest.warns(LinAlgWarning, match="below float64's normal range"):
                solve(A, B, method="cholesky", **kw)


@pytest.mark.mpi
def test_tlr_on_subnormal_entries_warns_and_solves(grids):
    """TLR scales A by a power of two before compressing: 2^1039 for entries of 1e-313
    overflowed (NumPy's 'SVD did not converge'). Now the scaling is exact in steps, the
    answer finite and matching the dense solve's, with a warning that A's entries are
    subnormal (entries of 1e-300, normal, are scaled without loss and do not warn:
    test_bad_inputs)."""
    n = 40
    g = np.random.default_rng(0).standard_normal((n, n))
    a = (g @ g.T + n * np.eye(n)) * 1e-315
    b = np.random.default_rng(1).standard_normal((n, 2)) * 1e-313
    for grid in grids[:2]:
        A = DistMatrix.from_global(grid, a if grid.comm.rank == 0 else None, block=7)
        B = DistMatrix.from_global(grid, b if grid.comm.rank == 0 else None, block=7)
        for comp in ("svd", "rsvd"):
            with pytest.warns(LinAlgWarning, match="is subnormal"):
                x = solve(A, B, method="tlr", tol=1e-8, compression=comp).to_global(None)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", LinAlgWarning)
                xd = solve(A, B, method="cholesky").to_global(None)
            assert np.isfinite(x).all()
            assert np.abs(x - xd).max() <= 1e-6 * np.abs(xd).max(), comp


@pytest.mark.mpi
@pytest.mark.parametrize("method", ["gepp", "cholesky", "rbt"])
def test_mixed_with_rhs_columns_outside_float32_range(grids, method):
    """Right-hand-side columns of 1e300 and 1e-300 beside one of O(1): each residual column
    is scaled by a power of two before its float32 solve (and before GMRES), so the mixed
    solve converges in mixed precision, to float64 accuracy, without NumPy's overflow
    warnings (it leaked them and fell back after its time budget)."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal((N, N))
    if method == "cholesky":
        a = a @ a.T + N * np.eye(N)
    b = rng.standard_normal((N, 3)) * np.array([1e300, 1.0, 1e-300])
    xs = np.linalg.solve(a, b)
    for grid in grids[:2]:
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            X, info = solve(_dist(grid, a), _dist(grid, b), method=method, precision="mixed",
                            return_info=True)
        assert info.precision == "mixed" and not info.fallback, info.reason
        err = np.abs(X.to_global(None) - xs).max(axis=0) / np.abs(xs).max(axis=0)
        assert (err < 1e-12).all(), err


# ---- thirteenth sweep: structured hard matrices -------------------------------------------
def _small_pivot_ill_conditioned(n=50, cond=1e12, pivot=1e-6, seed=0):
    """An ill-conditioned A (cond_1 ~1e13) whose first pivot is ``pivot`` times the largest
    entry below it: LU without pivoting accepts it (its threshold is sqrt(eps)) and grows
    by ~6e4, enough to lose every digit at this condition number."""
    r = np.random.default_rng(seed)
    u, _ = np.linalg.qr(r.standard_normal((n, n)))
    v, _ = np.linalg.qr(r.standard_normal((n, n)))
    a = (u * np.logspace(0, -np.log10(cond), n)) @ v.T
    a[0, 0] = pivot * np.abs(a[1:, 0]).max()
    return a


@pytest.mark.mpi
def test_genp_warns_where_its_growth_leaves_no_digits(grids):
    """GENP returned forward errors of 0.5-2.5 with no warning: its factors' own condition
    estimate (of the matrix they hold, A plus growth x eps) stayed above eps. solve_lu now
    warns when rcond < growth x eps (mixed too: it ends in that solve); GEPP stays quiet on
    the same matrix, as LAPACK, with its answer right to ~cond eps."""
    a = _small_pivot_ill_conditioned()
    b = a @ np.ones((a.shape[0], 1))
    for g in grids:
        A, B = _dist(g, a), _dist(g, b)
        for precision in ("double", "mixed"):
            with pytest.warns(LinAlgWarning, match="ill-conditioned"):
                X = solve(A, B, method="genp", precision=precision)
            assert np.abs(X.to_global(None) - 1).max() > 1e-3      # (the warning is earned)
        with warnings.catch_warnings():
            warnings.simplefilter("error", LinAlgWarning)
            X = solve(A, B, method="gepp")
        assert np.abs(X.to_global(None) - 1).max() < 1e-3


@pytest.mark.mpi
def test_overflowing_solutions_raise_in_mixed_precision_and_rbt(grids):
    """A well-conditioned A of 1e-10 and B of 1e300: the solution overflows. The float64
    solves raised DistlaError; the mixed solves and RBT returned NaN/Inf (their fallbacks
    solve with check_finite=False). Now every method raises, with no NumPy warning."""
    r = np.random.default_rng(3)
    s = r.standard_normal((20, 20))
    a = 1e-10 * (s @ s.T + 20 * np.eye(20))
    b = 1e300 * r.standard_normal((20, 1))
    for g in grids:
        A, B = _dist(g, a), _dist(g, b)
        for method in ("gepp", "genp", "cholesky", "rbt"):
            for precision in ("double", "mixed"):
                with warnings.catch_warnings():
                    warnings.simplefilter("error", RuntimeWarning)
                    warnings.filterwarnings("ignore", message=".*falling back")   # RBT's
                    with pytest.raises(DistlaError, match="non-finite"):
                        solve(A, B, method=method, precision=precision)


@pytest.mark.mpi
def test_complex_mixed_solve_of_a_subnormal_rhs(grids):
    """complex128 mixed solves with B of 1e-310 fell back to complex128 and leaked NumPy's
    overflow: the column's subnormal scale 2^e overflowed complex division. The scale is now
    at least the smallest normal number; the mixed solve converges."""
    r = np.random.default_rng(4)
    a = r.standard_normal((33, 33)) + 1j * r.standard_normal((33, 33))
    b = (1e-310 * r.standard_normal((33, 1))).astype(complex)
    for g in grids:
        A, B = _dist(g, a), _dist(g, b)
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            X, info = solve(A, B, method="gepp", precision="mixed", return_info=True)
        assert info.precision == "mixed" and not info.fallback, info
        x = X.to_global(None)
        ref = np.linalg.solve(a, b)
        assert np.abs(x - ref).max() <= 1e-12 * np.abs(ref).max()


@pytest.mark.mpi
def test_entries_near_the_float_range_leak_no_numpy_warnings(grids):
    """A of entries ~1e307 (||A||_1 beyond float64): the norm is inf and RBT's butterflies
    overflow, as they may; only distla's own warnings say so (NumPy's 'overflow encountered'
    leaked from the norm and the butterflies), and every answer is right."""
    from distla.linalg.rbt import RBTFallbackWarning
    r = np.random.default_rng(6)
    a = r.standard_normal((20, 20)) * 1e307 + np.eye(20) * 1e308
    b = r.standard_normal((20, 1))
    for g in grids:
        A, B = _dist(g, a), _dist(g, b)
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            warnings.simplefilter("ignore", LinAlgWarning)       # (rcond 0: ||A|| is inf)
            warnings.simplefilter("ignore", RBTFallbackWarning)
            assert A.norm(1) == np.inf
            for method in ("gepp", "rbt"):
                x = solve(A, B, method=method).to_global(None)
                assert np.abs(a @ x - b).max() <= 1e-12 * np.abs(b).max()


@pytest.mark.mpi
def test_sresid_stays_a_check_when_the_norm_of_a_overflows(grids):
    """Entries near 1e307: ||A||_inf overflows to inf, and SRESID (residual over ||A||_inf
    ...) was 0 for any X, so the check passed whatever the answer. It now scales by max|a_ij|
    instead (at most n times the true ratio): the right X passes, a wrong one fails."""
    from distla.checks import solve_checks, solve_residual
    n = 23
    a = np.random.default_rng(7).standard_normal((n, n)) * 1e307      # cond_1 534
    x = np.ones((n, 1))
    b = a @ x
    assert np.isfinite(b).all() and not np.isfinite(np.abs(a).sum(axis=1).max())
    for g in grids:
        A = DistMatrix.from_global(g, a, block=5)
        B = DistMatrix.from_global(g, b, block=5)
        good = DistMatrix.from_global(g, x, block=5)
        bad = DistMatrix.from_global(g, 2 * x, block=5)
        assert solve_residual(A, good, B) <= 1
        assert solve_residual(A, bad, B) > 1e10
        assert solve_checks(A, bad, B)["sresid"] > 1e10
