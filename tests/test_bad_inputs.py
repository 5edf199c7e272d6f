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
def test_empty_matrix_is_a_clear_error(comm):
    g = ProcessGrid(comm=comm)
    A = DistMatrix.zeros(g, (0, 0), (4, 4))
    B = DistMatrix.zeros(g, (0, 1), (4, 4))
    with pytest.raises(ValueError, match="empty"):
        solve(A, B)
