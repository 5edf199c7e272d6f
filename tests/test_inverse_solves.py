"""Triangular solves by inverted diagonal blocks (``pblas.inverted_diagonal_solves``): the
backend kernels against SciPy on CPU and GPU, the one-process ``triangular_solve`` inside the
context (forced on CPU ranks, where the policy is off), and the condition estimates and
mixed-precision solves that open the context."""

import numpy as np
import pytest
import scipy.linalg as sla
from mpi4py import MPI

from distla import DistMatrix, ProcessGrid
from distla.device import get_backend
from distla.device.base import Backend
from distla.pblas import inverted_diagonal_solves, triangular_solve

DEVICES = ["cpu", pytest.param("gpu", marks=pytest.mark.gpu)]


def _triangular(n, lower, dtype, seed=0):
    rng = np.random.default_rng(seed)
    t = rng.standard_normal((n, n)) * (0.5 / np.sqrt(n))
    if np.dtype(dtype).kind == "c":
        t = t + 1j * rng.standard_normal((n, n)) * (0.5 / np.sqrt(n))
    t = (np.tril(t) if lower else np.triu(t)) + np.eye(n) * (1 + rng.random(n))
    t[np.triu_indices(n, 1) if lower else np.tril_indices(n, -1)] = 7.0   # never read
    return np.asfortranarray(t.astype(dtype))


def _tol(dtype):
    return 1e-4 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-11


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128])
@pytest.mark.parametrize("n,nb,leaf", [(37, 8, 64), (37, 8, 2), (64, 16, 4), (5, 8, 64),
                                       (130, 64, 64), (250, 100, 64), (300, 128, 64),
                                       (90, 24, 4)])
def test_block_inverses_and_solves_match_scipy(device, dtype, n, nb, leaf, monkeypatch):
    """``leaf``: the inversion's halving stops there (levels of batched GEMMs above it)."""
    if device == "gpu" and dtype == np.complex128:
        pytest.skip("GPU ranks solve real systems with the inverse blocks' cuBLAS path; "
                    "complex goes through the generic loop (tested on CPU)")
    monkeypatch.setattr(Backend, "INVERSE_LEAF", leaf)
    be = get_backend(device)
    for lower in (True, False):
        for unit in (False, True):
            t = _triangular(n, lower, dtype, seed=n + nb)
            ref_t = np.tril(t) if lower else np.triu(t)
            if unit:
                ref_t[np.diag_indices(n)] = 1
            td = be.asarray(t)
            Sd = be.triangular_block_inverses(td, nb, lower, unit)
            S = be.to_host(Sd)
            nblk = -(-n // nb)
            assert S.shape == (nblk, nb, nb)
            for k in range(nblk):
                k0, k1 = k * nb, min(n, k * nb + nb)
                inv = S[k].T[:k1 - k0, :k1 - k0]
                np.testing.assert_allclose(inv @ ref_t[k0:k1, k0:k1], np.eye(k1 - k0),
                                           atol=_tol(dtype) * 10)
            for trans in (False, True):
                for k in (1, 3):
                    b = np.asfortranarray(np.random.default_rng(k).standard_normal((n, k))
                                          .astype(dtype))
                    ref = sla.solve_triangular(ref_t, b, lower=lower, trans=int(trans))
                    x = be.to_host(be.trsm_inverse_blocks(td, Sd, nb, lower, trans,
                                                          be.asarray(b.copy())))
                    np.testing.assert_allclose(x, ref, rtol=_tol(dtype), atol=_tol(dtype),
                                               err_msg=f"{lower=} {unit=} {trans=} {k=}")


def _one_process():
    return ProcessGrid(1, 1, MPI.COMM_SELF)


@pytest.fixture
def forced(monkeypatch):
    """The CPU backend takes the inverse-block path inside the context; counts its calls."""
    calls = []
    orig = Backend.trsm_inverse_blocks

    def counting(self, *a, **kw):
        calls.append(1)
        return orig(self, *a, **kw)
    monkeypatch.setattr(Backend, "inverse_block_solves", True)
    monkeypatch.setattr(Backend, "trsm_inverse_blocks", counting)
    return calls


@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_triangular_solve_inside_the_context(forced, dtype):
    g = _one_process()
    n, nb = 45, 8
    for lower in (True, False):
        t = _triangular(n, lower, dtype, seed=3)
        A = DistMatrix.from_global(g, t, block=nb)
        B = DistMatrix.from_global(g, np.random.default_rng(1).standard_normal((n, 2))
                                   .astype(dtype), block=nb)
        for trans in (False, True, "C"):
            for unit in (False, True):
                for alpha in (1.0, -2.5):
                    outside = triangular_solve(A, B, lower=lower, trans=trans,
                                               unit_diagonal=unit, alpha=alpha)
                    assert not forced      # outside the context: the library's trsm
                    with inverted_diagonal_solves():
                        inside = triangular_solve(A, B, lower=lower, trans=trans,
                                                  unit_diagonal=unit, alpha=alpha)
                    assert len(forced) == 1
                    forced.clear()
                    np.testing.assert_allclose(inside.to_global(None),
                                               outside.to_global(None), rtol=1e-11,
                                               atol=1e-11)
        np.testing.assert_array_equal(A.to_global(None), t)    # the factor is not touched


def test_context_reuses_inverses_and_nests(forced, monkeypatch):
    g = _one_process()
    t = _triangular(40, True, np.float64)
    A = DistMatrix.from_global(g, t, block=8)
    B = DistMatrix.from_global(g, np.ones((40, 1)), block=8)
    made = []
    orig = Backend.triangular_block_inverses
    monkeypatch.setattr(Backend, "triangular_block_inverses",
                        lambda self, *a: made.append(a[2:]) or orig(self, *a))
    with inverted_diagonal_solves():
        triangular_solve(A, B)
        with inverted_diagonal_solves():
            triangular_solve(A, B, trans=True)     # the same inverses serve op = T
        triangular_solve(A, B, unit_diagonal=True)
    assert made == [(True, False), (True, True)]
    with inverted_diagonal_solves():
        triangular_solve(A, B)                     # a new context makes them again
    assert len(made) == 3


def test_context_checks_each_factors_diagonal_once(monkeypatch):
    """Inside the context (whose factors do not change) a factor's diagonal is read for the
    zero-pivot check once, not at every solve; a singular one raises at every solve; outside
    it every solve checks."""
    from distla import SingularMatrixError, pblas
    g = _one_process()
    t = _triangular(40, True, np.float64)
    A = DistMatrix.from_global(g, t, block=8)
    B = DistMatrix.from_global(g, np.ones((40, 1)), block=8)
    zero = t.copy()
    zero[7, 7] = 0.0
    Z = DistMatrix.from_global(g, zero, block=8)
    reads = []
    orig = pblas._diagonal_here
    monkeypatch.setattr(pblas, "_diagonal_here", lambda M: reads.append(M) or orig(M))
    with inverted_diagonal_solves():
        for trans in (False, True, False):
            triangular_solve(A, B, trans=trans)
        assert len(reads) == 1
        for _ in range(2):
            with pytest.raises(SingularMatrixError, match=r"A\[7, 7\]"):
                triangular_solve(Z, B)
        assert len(reads) == 3
    triangular_solve(A, B)
    triangular_solve(A, B)
    assert len(reads) == 5


@pytest.mark.parametrize("block, start", [(16, 0), (20, 0), (16, 1000)])
def test_inverse_blocks_wider_than_the_matrix_blocks(forced, monkeypatch, block, start):
    """Backend.inverse_block: from ``start`` on, the inverted diagonal blocks are a multiple
    of the matrix's block size at least ``block`` wide (on one process they need not follow
    the distribution); the solves stay right, in every op and triangle."""
    made = []
    orig = Backend.triangular_block_inverses
    monkeypatch.setattr(Backend, "triangular_block_inverses",
                        lambda self, t, nb, *a: made.append(nb) or orig(self, t, nb, *a))
    monkeypatch.setattr(Backend, "inverse_block", block)
    monkeypatch.setattr(Backend, "inverse_block_from", start)
    g = _one_process()
    for lower in (True, False):
        t = _triangular(45, lower, np.float64, seed=4)
        A = DistMatrix.from_global(g, t, block=8)
        b = np.random.default_rng(5).standard_normal((45, 2))
        B = DistMatrix.from_global(g, b, block=8)
        with inverted_diagonal_solves():
            for trans in (False, True):
                X = triangular_solve(A, B, lower=lower, trans=trans)
                ref = sla.solve_triangular(np.tril(t) if lower else np.triu(t), b,
                                           lower=lower, trans=int(trans))
                np.testing.assert_allclose(X.to_global(None), ref, rtol=1e-11, atol=1e-11)
    want = 8 if start > 45 else 8 * -(-block // 8)
    assert made == [want, want]


def test_many_columns_keep_the_library_solve(forced):
    g = _one_process()
    t = _triangular(40, True, np.float64)
    A = DistMatrix.from_global(g, t, block=8)
    B = DistMatrix.from_global(g, np.ones((40, 17)), block=8)
    with inverted_diagonal_solves():
        X = triangular_solve(A, B)
    assert not forced
    np.testing.assert_allclose(X.to_global(None), sla.solve_triangular(np.tril(t),
                                                                       np.ones((40, 17)),
                                                                       lower=True))


def test_rcond_and_mixed_solves_with_inverse_blocks(forced, monkeypatch):
    from distla.linalg import cho_factor, condition, lu_factor, rcond, solve
    # one CPU rank would take LAPACK's own estimate (condition.lapack_rcond): the
    # distributed estimator, whose solves this tests, as on a GPU rank
    monkeypatch.setattr(condition, "_on_one_cpu", lambda template: False)
    g = _one_process()
    rng = np.random.default_rng(5)
    n = 60
    q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    for cond in (1e2, 1e8):
        spd = (q * np.logspace(0, -np.log10(cond), n)) @ q.T
        spd = (spd + spd.T) / 2
        gen = q @ np.diag(np.logspace(0, -np.log10(cond), n)) @ \
            np.linalg.qr(rng.standard_normal((n, n)))[0]
        for a, factor in ((spd, cho_factor), (gen, lu_factor)):
            A = DistMatrix.from_global(g, a, block=8)
            true = 1 / np.linalg.cond(a, 1)
            rc = rcond(A, factor(A))
            assert true / 10 <= rc <= true * 10 * (1 + 1e-8), (cond, rc, true)
    assert forced                                  # the estimator opened the context
    forced.clear()
    a = (q * np.logspace(0, -2, n)) @ q.T
    a = (a + a.T) / 2
    A = DistMatrix.from_global(g, a, block=8)
    B = DistMatrix.from_global(g, a @ np.ones((n, 1)), block=8)
    for method in ("cholesky", "gepp"):
        X, info = solve(A, B, method=method, precision="mixed", return_info=True)
        assert not info.fallback and info.iterations >= 1, info
        np.testing.assert_allclose(X.to_global(None), np.ones((n, 1)), rtol=1e-10)
    assert forced                                  # the refinement's corrections used it
