"""The block 1-norm estimator's host side (distla.linalg.condition), serial."""
import numpy as np

from distla.linalg.condition import _largest_first, norm1_estimate


def test_largest_first_is_the_stable_sort_prefix():
    """The k largest entries, largest first and ties by index: what the estimator's stable
    sort of -h gave, without sorting all of h (NaN entries come last)."""
    rng = np.random.default_rng(3)
    for _ in range(2000):
        n = int(rng.integers(1, 40))
        k = int(rng.integers(1, n + 3))
        h = rng.integers(0, 4, n).astype(float) if rng.random() < 0.5 else \
            rng.standard_normal(n)
        ref = np.argsort(-h, kind="stable")[:k].tolist()
        assert _largest_first(h, k) == ref
        h[int(rng.integers(0, n))] = np.nan
        got, ref = _largest_first(h, k), np.argsort(-h, kind="stable").tolist()
        finite = [i for i in ref if not np.isnan(h[i])]
        assert got[:len(finite)] == finite[:len(got)]


def test_norm1_estimate_is_a_close_lower_bound():
    """For explicit matrices M (the products given as M @ X): est <= ||M||_1, within a factor
    of 3 (Higham-Tisseur's estimate is exact far more often than not)."""
    rng = np.random.default_rng(4)
    for n in (1, 2, 5, 40, 300):
        for t in (1, 2):
            for _ in range(5):
                M = rng.standard_normal((n, n)) * rng.uniform(0, 10, n)[None, :]
                est = norm1_estimate(n, np.float64, lambda X: M @ X, lambda X: M.T @ X, t=t)
                true = np.abs(M).sum(axis=0).max()
                assert true / 3 <= est <= true * (1 + 1e-12), (n, t, est, true)
