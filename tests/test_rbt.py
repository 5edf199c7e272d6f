"""Tests of the RBT solver (distla.linalg.rbt) and its butterflies (distla.linalg._butterfly).

Transform: the distributed U^T A V equals the elementwise quarter formula of docs/rbt.md and
the dense product, on every grid shape and order, for n not a multiple of 2^d or of nb and a
nonzero source process. Solve: LAPACK componentwise backward error comparable to SciPy's GEPP
on random, ill-conditioned, triangular, diagonal and near-underflow/overflow matrices; GENP
breakdown without butterflies; fallback and its errors on every rank; mixed precision.
"""
from __future__ import annotations

import warnings
import zlib

import numpy as np
import pytest
import scipy.linalg as sla

from distla.linalg._butterfly import Butterfly, padded_size, random_butterflies

EPS = np.finfo(np.float64).eps


# ---------------------------------------------------------------------------------------
# references (NumPy, global)
# ---------------------------------------------------------------------------------------
def quarter_formula(A, u, v, depth):
    """U^T A V by the elementary product of docs/rbt.md on the quarters, deepest level first."""
    n = A.shape[0]
    A = np.array(A, dtype=np.float64)
    for k in reversed(range(depth)):
        N = n >> k
        h = N // 2
        for bi in range(1 << k):
            for bj in range(1 << k):
                r0, c0 = bi * N, bj * N
                uu, vv = u[k, r0:r0 + N], v[k, c0:c0 + N]
                Q = A[r0:r0 + N, c0:c0 + N]
                a00, a01 = Q[:h, :h].copy(), Q[:h, h:].copy()
                a10, a11 = Q[h:, :h].copy(), Q[h:, h:].copy()
                b1, b2, b3, b4 = a00 + a01, a10 + a11, a00 - a01, a10 - a11
                Q[:h, :h] = uu[:h, None] * vv[None, :h] * (b1 + b2)
                Q[:h, h:] = uu[:h, None] * vv[None, h:] * (b3 + b4)
                Q[h:, :h] = uu[h:, None] * vv[None, :h] * (b1 - b2)
                Q[h:, h:] = uu[h:, None] * vv[None, h:] * (b3 - b4)
    return A


def berr_np(a, x, b):
    """LAPACK componentwise backward error max |b - a x| / (|a||x| + |b|) (NumPy)."""
    r = np.abs(b - a @ x)
    d = np.abs(a) @ np.abs(x) + np.abs(b)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(r == 0, 0.0, r / d)
    return float(np.nan_to_num(q, nan=np.inf).max())


def gepp_berr(a, b):
    x = sla.lu_solve(sla.lu_factor(a, check_finite=False), b, check_finite=False)
    return berr_np(a, x, b)


def make_matrix(kind, n, seed):
    rng = np.random.default_rng(seed)
    if kind == "random":
        return rng.standard_normal((n, n))
    if kind.startswith("cond"):  # Q1 diag(logspace) Q2^T, 2-norm condition number 10^k
        k = float(kind[4:])
        q1, _ = np.linalg.qr(rng.standard_normal((n, n)))
        q2, _ = np.linalg.qr(rng.standard_normal((n, n)))
        return (q1 * np.logspace(0, -k, n)) @ q2.T
    if kind == "upper":  # triangular with a moderate condition number
        return np.triu(rng.uniform(-1, 1, (n, n))) + np.diag(rng.uniform(1, 2, n) * 2)
    if kind == "lower":
        return np.tril(rng.uniform(-1, 1, (n, n))) + np.diag(rng.uniform(1, 2, n) * 2)
    if kind == "diagonal":
        return np.diag(rng.uniform(0.5, 2, n) * rng.choice([-1, 1], n))
    if kind == "underflow":
        return rng.standard_normal((n, n)) * 1e-300
    if kind == "overflow":
        return rng.standard_normal((n, n)) * 1e300
    raise ValueError(kind)


# ---------------------------------------------------------------------------------------
# serial: butterfly math
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("n,depth", [(8, 1), (16, 2), (13, 2), (33, 3), (5, 0)])
def test_dense_butterfly_matches_quarter_formula(n, depth):
    U, V = random_butterflies(n, depth, seed=3)
    npad = padded_size(n, depth)
    assert U.coef.shape == (depth, npad) and npad % (1 << depth) == 0 and npad - n < 1 << depth
    a = np.random.default_rng(0).standard_normal((npad, npad))
    np.testing.assert_allclose(U.matrix().T @ a @ V.matrix(),
                               quarter_formula(a, U.coef, V.coef, depth), rtol=0, atol=1e-12)


def test_butterfly_entries_and_reproducibility():
    U, V = random_butterflies(100, 2, seed=11)
    U2, V2 = random_butterflies(100, 2, seed=11)
    assert np.array_equal(U.coef, U2.coef) and np.array_equal(V.coef, V2.coef)
    W, _ = random_butterflies(100, 2, seed=12)
    assert not np.array_equal(U.coef, W.coef)
    for c in (U.coef, V.coef):  # exp(r/10), r in [-1/2, 1/2]
        assert c.min() >= np.exp(-0.05) and c.max() <= np.exp(0.05)
    # level-0 butterfly is [R S; R -S] with R, S the two halves of packed row 0
    B = random_butterflies(8, 1, seed=1)[0]
    r, s = B.coef[0, :4], B.coef[0, 4:]
    expect = np.block([[np.diag(r), np.diag(s)], [np.diag(r), -np.diag(s)]])
    np.testing.assert_array_equal(B.matrix(), expect)
    # the depth-2 W is W_1 W_0, W_1 = diag of two half-size butterflies from packed row 1
    B2 = random_butterflies(8, 2, seed=2)[0]
    w = B2.coef

    def bfly(c):
        h = c.size // 2
        return np.block([[np.diag(c[:h]), np.diag(c[h:])], [np.diag(c[:h]), -np.diag(c[h:])]])
    W1 = sla.block_diag(bfly(w[1, :4]), bfly(w[1, 4:]))
    np.testing.assert_allclose(B2.matrix(), W1 @ bfly(w[0]), rtol=0, atol=1e-15)


def test_butterfly_rejects_bad_coefficients():
    with pytest.raises(ValueError):
        Butterfly(np.ones((2, 10)), 10)  # 10 is not a multiple of 4
    with pytest.raises(ValueError):
        Butterfly(np.ones(8), 8)


# ---------------------------------------------------------------------------------------
# MPI helpers
# ---------------------------------------------------------------------------------------
def _grids():
    from mpi4py import MPI

    from distla import ProcessGrid
    from distla.testing import grid_shapes
    for p, q in grid_shapes(MPI.COMM_WORLD.size):
        for order in ("row", "col"):
            yield ProcessGrid(p, q, order=order)


def _dist(grid, a, nb, src=(0, 0)):
    from distla import DistMatrix
    return DistMatrix.from_global(grid, a if grid.comm.rank == 0 else None, block=nb, src=src)


def _same_everywhere(comm, value):
    vals = comm.allgather(value)
    assert all(v == vals[0] for v in vals), vals


# ---------------------------------------------------------------------------------------
# MPI: transform
# ---------------------------------------------------------------------------------------
@pytest.mark.mpi
@pytest.mark.parametrize("n,nb,depth", [(30, 4, 2), (37, 5, 3), (13, 16, 1), (64, 8, 2),
                                        (3, 2, 2), (95, 4, 2)])
def test_transform_matches_dense(n, nb, depth):
    from distla.linalg import rbt_transform
    rng = np.random.default_rng(n)
    a = rng.standard_normal((n, n))
    b = rng.standard_normal((n, 3))
    npad = padded_size(n, depth)
    ap = np.zeros((npad, npad))
    ap[:n, :n] = a
    ap[np.arange(n, npad), np.arange(n, npad)] = np.abs(a).max()  # scaled identity padding
    for grid in _grids():
        P, Q = grid.shape
        for seed, src in ((1, (P - 1, Q - 1)), (2, (0, Q - 1)), (5, (P - 1, 0))):
            A = _dist(grid, a, nb, src)
            Ar, U, V = rbt_transform(A, depth, seed)
            assert Ar.shape == (npad, npad) and Ar.block == A.block and Ar.src == A.src
            ar = Ar.to_global(None)
            np.testing.assert_allclose(ar, quarter_formula(ap, U.coef, V.coef, depth),
                                       rtol=0, atol=1e-12)
            np.testing.assert_allclose(ar, U.matrix().T @ ap @ V.matrix(), rtol=0, atol=1e-12)
            np.testing.assert_array_equal(A.to_global(None), a)  # A untouched
            # right-hand side in another layout: U^T [b; 0]; and V y trimmed to n rows
            B = _dist(grid, b, (3, 2), (0, Q - 1))
            C = U.apply_transpose(B)
            assert C.shape == (npad, 3) and C.block == B.block and C.src == B.src
            bp = np.zeros((npad, 3))
            bp[:n] = b
            np.testing.assert_allclose(C.to_global(None), U.matrix().T @ bp, atol=1e-12,
                                       rtol=0)
            Y = _dist(grid, np.arange(npad * 2.0).reshape(npad, 2), (nb, 1), (P - 1, 0))
            X = V.apply(Y)
            full = V.matrix() @ np.arange(npad * 2.0).reshape(npad, 2)
            tol = 1e-14 * np.abs(full).max()
            np.testing.assert_allclose(X.to_global(None), full[:n], rtol=0, atol=tol)
            np.testing.assert_allclose(V.apply(Y, trim=False).to_global(None), full,
                                       rtol=0, atol=tol)


@pytest.mark.mpi
@pytest.mark.parametrize("mode", ["gather", "panels", "mix"])
def test_transform_copy_paths(mode, monkeypatch):
    """The one-gather copy path (many runs) and the panel loop (huge local matrices)."""
    import distla.linalg._butterfly as bf
    from distla.linalg import rbt_transform
    n, nb, depth = 27, 3, 2
    if mode == "gather":
        monkeypatch.setattr(bf, "_MAX_RUNS", 0)
    elif mode == "panels":
        monkeypatch.setattr(bf, "_PANEL_ELEMS", 37)  # panels of a few columns / rows
    else:  # an aligned layout (no communication), forced through the general mixing
        n, nb, depth = 95, 2, 3
        monkeypatch.setattr(bf, "_aligned", lambda X, d: False)
    npad = padded_size(n, depth)
    a = np.random.default_rng(3).standard_normal((n, n))
    ap = np.zeros((npad, npad))
    ap[:n, :n] = a
    ap[np.arange(n, npad), np.arange(n, npad)] = np.abs(a).max()
    for grid in _grids():
        A = _dist(grid, a, nb, (grid.nprow - 1, grid.npcol - 1))
        Ar, U, V = rbt_transform(A, depth, 8)
        np.testing.assert_allclose(Ar.to_global(None), U.matrix().T @ ap @ V.matrix(),
                                   rtol=0, atol=1e-12)


@pytest.mark.mpi
def test_transform_same_on_every_grid_and_seed_none():
    from mpi4py import MPI

    from distla.linalg import rbt_transform
    comm = MPI.COMM_WORLD
    a = np.random.default_rng(1).standard_normal((21, 21))
    ref = None
    for grid in _grids():
        Ar, U, V = rbt_transform(_dist(grid, a, 4, (grid.nprow - 1, 0)), 2, seed=42)
        g = Ar.to_global(None)
        ref = g if ref is None else ref
        np.testing.assert_array_equal(g, ref)  # bitwise the same whatever the grid
        U0, V0 = random_butterflies(21, 2, 42)
        assert np.array_equal(U.coef, U0.coef) and np.array_equal(V.coef, V0.coef)
        _, U1, V1 = rbt_transform(_dist(grid, a, 4), 2, seed=None)  # drawn on rank 0
        _same_everywhere(comm, (U1.seed, zlib.crc32(U1.coef.tobytes()),
                                zlib.crc32(V1.coef.tobytes())))


@pytest.mark.mpi
def test_padding_keeps_tiny_matrices():
    """A matrix scaled near underflow keeps its digits through padding and mixing."""
    from distla.linalg import rbt_transform
    a = np.random.default_rng(2).standard_normal((7, 7)) * 1e-305
    for grid in _grids():
        Ar, U, V = rbt_transform(_dist(grid, a, 2), 2, seed=3)
        ap = np.zeros((8, 8))
        ap[:7, :7] = a
        ap[7, 7] = np.abs(a).max()
        ar = Ar.to_global(None)
        ref = U.matrix().T @ ap @ V.matrix()
        assert np.abs(ar - ref).max() <= 1e-13 * np.abs(ref).max()


@pytest.mark.mpi
def test_residual_gemv_matches_dense():
    from distla.linalg.rbt import _replicate, _residual
    rng = np.random.default_rng(4)
    n, k = 23, 3
    a, x = rng.standard_normal((n, n)), rng.standard_normal((n, k))
    b = rng.standard_normal((n, k))
    for grid in _grids():
        P, Q = grid.shape
        A = _dist(grid, a, 3, (P - 1, Q - 1))
        X = _dist(grid, x, (4, 2), (0, Q - 1))  # any layout
        B = _dist(grid, b, (3, 1), (P - 1, 0))  # rows blocked like A's
        np.testing.assert_array_equal(A.backend.to_host(_replicate(X)), x)
        R = _residual(A, X, B)
        assert R.same_layout(B)
        np.testing.assert_allclose(R.to_global(None), b - a @ x, rtol=0, atol=1e-13)


@pytest.mark.mpi
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_genp_solve_few_matches_lu_solve(dtype):
    from distla.linalg.lu import lu_factor, lu_solve
    from distla.linalg.rbt import _genp_solve_few
    rng = np.random.default_rng(6)
    n, k = 29, 3
    a = rng.standard_normal((n, n)) + n * np.eye(n)  # no pivoting needed
    c = rng.standard_normal((n, k))
    for grid in _grids():
        P, Q = grid.shape
        A = _dist(grid, a.astype(dtype), 4, (P - 1, Q - 1))
        C = _dist(grid, c.astype(dtype), (4, 2), (P - 1, Q - 1))
        F = lu_factor(A, pivoting="none")
        X = _genp_solve_few(F, C)
        assert X.same_layout(C) and X.dtype == dtype
        ref = lu_solve(F, C).to_global(None)
        tol = 1e-13 if dtype == np.float64 else 1e-5
        np.testing.assert_allclose(X.to_global(None), ref, rtol=0, atol=tol)
        np.testing.assert_allclose(X.to_global(None), np.linalg.solve(a, c), rtol=0, atol=tol)


# ---------------------------------------------------------------------------------------
# MPI: solve accuracy
# ---------------------------------------------------------------------------------------
KINDS = ["random", "cond8", "cond14", "upper", "lower", "diagonal", "underflow", "overflow"]


@pytest.mark.mpi
@pytest.mark.parametrize("kind", KINDS)
def test_solve_backward_error_like_gepp(kind):
    from distla.linalg import rbt_solve
    n, nrhs = 45, 2
    for i, grid in enumerate(_grids()):
        seed = 100 + i
        a = make_matrix(kind, n, seed)
        b = np.random.default_rng(seed + 1).standard_normal((n, nrhs)) * np.abs(a).max()
        ref = gepp_berr(a, b)
        A, B = _dist(grid, a, 4, (grid.nprow - 1, 0)), _dist(grid, b, (4, 1))
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no fallback expected on any of these
            X, info = rbt_solve(A, B, seed=seed, return_info=True)
        x = X.to_global(None)
        assert X.same_layout(B)
        berr = berr_np(a, x, b)
        assert not info.fallback and info.converged and info.iterations <= 3, info
        assert info.factor_dtype == "float64"
        assert berr <= max(20 * ref, 4 * n * EPS), (kind, berr, ref, info)
        if kind != "underflow":  # (distla.checks guards tiny denominators as LAPACK does)
            assert info.backward_error <= max(20 * ref, 4 * n * EPS), info
            assert info.residual <= 1.0, info  # ScaLAPACK's SRESID threshold (LU.dat)
        _same_everywhere(grid.comm, (info.iterations, info.backward_error, info.seed))


@pytest.mark.mpi
@pytest.mark.parametrize("depth", [1, 3])
def test_solve_other_depths_many_rhs_float32(depth):
    from distla import DistMatrix
    from distla.linalg import rbt_solve
    n = 29
    a = make_matrix("random", n, 7)
    b = np.random.default_rng(8).standard_normal((n, 4))
    for grid in _grids():
        A, B = _dist(grid, a, 3), _dist(grid, b, (5, 3), (grid.nprow - 1, grid.npcol - 1))
        X = rbt_solve(A, B, depth=depth, seed=depth)
        assert X.same_layout(B)
        assert berr_np(a, X.to_global(None), b) <= max(20 * gepp_berr(a, b), 4 * n * EPS)
        A32 = DistMatrix.from_global(grid, a.astype(np.float32), block=3)
        B32 = DistMatrix.from_global(grid, b.astype(np.float32), block=(3, 4))
        X32, info = rbt_solve(A32, B32, depth=depth, seed=1, return_info=True)
        assert X32.dtype == np.float32 and not info.fallback
        a32, b32 = a.astype(np.float32), b.astype(np.float32)
        assert berr_np(a32.astype(np.float64), X32.to_global(None).astype(np.float64),
                       b32.astype(np.float64)) <= 4 * n * np.finfo(np.float32).eps


@pytest.mark.mpi
def test_genp_breaks_down_without_butterflies_but_rbt_succeeds():
    """A zero or tiny leading entry: GENP alone fails (depth=0 means no butterflies)."""
    from distla import ConvergenceError, SingularMatrixError
    from distla.linalg import RBTFallbackWarning, rbt_solve
    n = 34
    rng = np.random.default_rng(5)
    b = rng.standard_normal((n, 1))
    for lead in (0.0, 1e-20):
        a = rng.standard_normal((n, n))
        a[0, 0] = lead
        ref = gepp_berr(a, b)
        for grid in _grids():
            A, B = _dist(grid, a, 4), _dist(grid, b, (4, 1))
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                X, info = rbt_solve(A, B, depth=2, seed=9, return_info=True)
            assert not info.fallback and info.converged
            assert berr_np(a, X.to_global(None), b) <= max(20 * ref, 4 * n * EPS)
            # no butterflies: zero pivot (exact zero), or a tiny pivot whose growth (1e20)
            # ruins refinement or cancels a later pivot to exactly zero
            exc = SingularMatrixError if lead == 0 else (ConvergenceError, SingularMatrixError)
            with pytest.raises(exc) as ei:
                rbt_solve(A, B, depth=0, fallback=False)
            assert "fallback=True" in str(ei.value)
            _same_everywhere(grid.comm, str(ei.value))
            with pytest.warns(RBTFallbackWarning, match="partial-pivoting"):
                X0, info0 = rbt_solve(A, B, depth=0, return_info=True)
            assert info0.fallback and info0.iterations == -1 and info0.reason
            assert lead != 0 or "zero pivot at column 0" in info0.reason
            assert berr_np(a, X0.to_global(None), b) <= max(20 * ref, 4 * n * EPS)


@pytest.mark.mpi
def test_singular_matrix_fallback_and_errors_on_every_rank():
    from distla import SingularMatrixError
    from distla.linalg import RBTFallbackWarning, rbt_solve
    n = 10
    for grid in _grids():
        A, B = _dist(grid, np.zeros((n, n)), 3), _dist(grid, np.ones((n, 1)), 3)
        with pytest.raises(SingularMatrixError) as ei:
            rbt_solve(A, B, fallback=False)
        _same_everywhere(grid.comm, str(ei.value))
        # fallback: warns, then partial pivoting meets the exact zero pivot too
        with pytest.warns(RBTFallbackWarning), pytest.raises(SingularMatrixError):
            rbt_solve(A, B)


@pytest.mark.mpi
def test_mixed_precision_reaches_double_accuracy():
    from distla.linalg import rbt_solve
    n = 60
    a = make_matrix("cond4", n, 3)
    b = np.random.default_rng(4).standard_normal((n, 2))
    ref = gepp_berr(a, b)
    for grid in _grids():
        A, B = _dist(grid, a, 8, (0, grid.npcol - 1)), _dist(grid, b, (8, 1))
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            X, info = rbt_solve(A, B, precision="mixed", seed=2, return_info=True)
        assert info.factor_dtype == "float32" and info.converged and not info.fallback
        assert 1 <= info.iterations <= 10, info
        assert X.dtype == np.float64
        berr = berr_np(a, X.to_global(None), b)
        assert berr <= max(20 * ref, 4 * n * EPS), (berr, ref)
        assert info.history[-1] <= 1.0 < info.history[0]


@pytest.mark.mpi
def test_mixed_precision_gmres_ir_beyond_float32():
    """cond 1e12 is far beyond what plain refinement with float32 factors resolves; GMRES-IR
    (GMRES on the correction equation, preconditioned by the float32 factors applied in
    float64) still reaches double accuracy from the float32 factorization."""
    from distla.linalg import rbt_solve
    n = 40
    a = make_matrix("cond12", n, 6)
    b = np.random.default_rng(1).standard_normal((n, 1)) * np.abs(a).max()
    for grid in _grids():
        A, B = _dist(grid, a, 5), _dist(grid, b, 5)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            # check_rcond=False: refinement cannot certify A's condition at cond 1e12 with
            # float32 factors (the default then solves in float64: the next test)
            X, info = rbt_solve(A, B, precision="mixed", seed=4, return_info=True,
                                check_rcond=False)
        assert info.factor_dtype == "float32" and info.converged and not info.fallback, info
        assert len(info.gmres_iterations) == info.iterations >= 1
        assert all(1 <= m <= 30 for m in info.gmres_iterations)
        assert berr_np(a, X.to_global(None), b) <= max(20 * gepp_berr(a, b), 4 * n * EPS)


@pytest.mark.mpi
def test_mixed_precision_beyond_what_float32_certifies_ends_in_double():
    """By default (check_rcond) float32 factors must certify A's condition in float64
    (condition.refined_rcond); at cond 1e12 they cannot, so the float64 GENP solves it:
    never an uncertified answer, and still double accuracy."""
    from distla.linalg import rbt_solve
    n = 40
    a = make_matrix("cond12", n, 6)
    b = np.random.default_rng(1).standard_normal((n, 1)) * np.abs(a).max()
    for grid in _grids():
        A, B = _dist(grid, a, 5), _dist(grid, b, 5)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            X, info = rbt_solve(A, B, precision="mixed", seed=4, return_info=True)
        assert info.factor_dtype == "float64" and info.precision == "double", info
        assert info.converged and not info.fallback and "certify" in info.reason, info
        assert berr_np(a, X.to_global(None), b) <= max(20 * gepp_berr(a, b), 4 * n * EPS)


@pytest.mark.mpi
def test_mixed_precision_retries_in_double():
    """float32 cannot hold entries near underflow: mixed falls back to a float64 GENP, which
    refines to double accuracy without the partial-pivoting fallback."""
    from distla.linalg import rbt_solve
    n = 40
    for kind, max_iter in (("underflow", 30),):
        a = make_matrix(kind, n, 6)
        b = np.random.default_rng(1).standard_normal((n, 1)) * np.abs(a).max()
        for grid in _grids():
            A, B = _dist(grid, a, 5), _dist(grid, b, 5)
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                X, info = rbt_solve(A, B, precision="mixed", max_iter=max_iter, seed=4,
                                    return_info=True)
            assert info.factor_dtype == "float64" and not info.fallback, info
            assert info.reason and "float32" in info.reason
            assert berr_np(a, X.to_global(None), b) <= max(20 * gepp_berr(a, b),
                                                           4 * n * EPS)


@pytest.mark.mpi
def test_no_refinement_falls_back_or_is_accurate():
    """refine=False / max_iter=0 never returns an unchecked answer: either the first GENP
    solution meets the criterion or the fallback runs (with a warning)."""
    from distla.linalg import RBTFallbackWarning, rbt_solve
    n = 40
    a = make_matrix("cond12", n, 9)
    b = np.random.default_rng(2).standard_normal((n, 1))
    for grid in _grids():
        A, B = _dist(grid, a, 4), _dist(grid, b, 4)
        for kw in (dict(refine=False), dict(max_iter=0, precision="mixed")):
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                X, info = rbt_solve(A, B, seed=1, return_info=True, **kw)
            assert info.iterations in (0, -1) and info.factor_dtype == "float64"
            assert info.fallback == any(issubclass(x.category, RBTFallbackWarning) for x in w)
            assert info.fallback or info.history[0] <= 1.0
            if info.fallback:        # says refinement was off, not that it failed to converge
                assert "refinement is off" in info.reason and "converge" not in info.reason
            assert berr_np(a, X.to_global(None), b) <= max(20 * gepp_berr(a, b), 4 * n * EPS)
        # a float32 factorization never meets the float64 criterion without refinement
        assert "float32 GENP" in info.reason
        # and with a GENP that cannot work (no butterflies, zero leading entry) it must fall back
        a0 = a.copy()
        a0[0, 0] = 0.0
        with pytest.warns(RBTFallbackWarning):
            X, info = rbt_solve(_dist(grid, a0, 4), B, depth=0, max_iter=0, return_info=True)
        assert info.fallback and info.iterations == -1
        assert berr_np(a0, X.to_global(None), b) <= max(20 * gepp_berr(a0, b), 4 * n * EPS)


@pytest.mark.mpi
def test_bad_input_raises_on_every_rank():
    from distla import DistMatrix
    from distla.linalg import rbt_solve, rbt_transform
    for grid in _grids():
        A = DistMatrix.random(grid, (8, 8), 2)
        B = DistMatrix.random(grid, (8, 1), 2)
        cases = [
            (lambda: rbt_solve(A, DistMatrix.random(grid, (7, 1), 2)), ValueError),
            (lambda: rbt_solve(DistMatrix.random(grid, (8, 6), 2), B), ValueError),
            (lambda: rbt_solve(A, B, depth=-1), ValueError),
            (lambda: rbt_solve(A, B, depth=5), ValueError),
            (lambda: rbt_solve(A, B, precision="half"), ValueError),
            (lambda: rbt_solve(A, B, max_iter=-1), ValueError),
            (lambda: rbt_solve(A, B, seed=-3), ValueError),
            (lambda: rbt_solve(A.astype(np.float32), B.astype(np.float32),
                               precision="mixed"), TypeError),
            (lambda: rbt_solve(A, B.astype(np.float32)), TypeError),
            (lambda: rbt_transform(DistMatrix.random(grid, (8, 6), 2)), ValueError),
        ]
        for fn, exc in cases:
            with pytest.raises(exc) as ei:
                fn()
            _same_everywhere(grid.comm, str(ei.value))


@pytest.mark.mpi
@pytest.mark.gpu
def test_gpu_solve_matches_cpu():
    from distla.device import gpu_available
    if not gpu_available():
        pytest.skip("no GPU")
    from distla.linalg import rbt_solve, rbt_transform
    n = 70
    a = make_matrix("random", n, 1)
    b = np.random.default_rng(2).standard_normal((n, 1))
    for grid in _grids():
        A, B = _dist(grid, a, 8), _dist(grid, b, 8)
        Ag, Bg = A.to("gpu"), B.to("gpu")
        for prec in ("double", "mixed"):
            Xg, info = rbt_solve(Ag, Bg, seed=3, precision=prec, return_info=True)
            assert Xg.device == "gpu" and not info.fallback
            assert berr_np(a, Xg.to_global(None), b) <= max(20 * gepp_berr(a, b), 4 * n * EPS)
        ap = np.pad(a, ((0, 2), (0, 2))) + np.diag([0.0] * n + [np.abs(a).max()] * 2)
        for nb in (8, 9):  # both the aligned (fused quad kernel) and the general path
            Ar, U, V = rbt_transform(_dist(grid, a, nb).to("gpu"), 2, seed=5)
            assert Ar.device == "gpu"
            np.testing.assert_allclose(Ar.to_global(None), quarter_formula(ap, U.coef, V.coef, 2),
                                       atol=1e-12, rtol=0)


@pytest.mark.mpi
def test_empty_system():
    from distla import DistMatrix
    from distla.linalg import rbt_solve
    for grid in _grids():
        X, info = rbt_solve(DistMatrix.zeros(grid, (0, 0), 2), DistMatrix.zeros(grid, (0, 2), 2),
                            return_info=True)
        assert X.shape == (0, 2) and info.converged and not info.fallback
        A = DistMatrix.random(grid, (5, 5), 2)
        X = rbt_solve(A, DistMatrix.zeros(grid, (5, 0), 2))
        assert X.shape == (5, 0)


@pytest.mark.mpi
def test_nan_input_is_never_reported_converged():
    from distla import ConvergenceError, SingularMatrixError
    from distla.linalg import rbt_solve
    n = 12
    a = np.random.default_rng(1).standard_normal((n, n))
    a[7, 3] = np.nan
    for grid in _grids():
        A, B = _dist(grid, a, 3), _dist(grid, np.ones((n, 1)), 3)
        with pytest.raises(ValueError, match=r"non-finite value \(nan\) at global index "
                           r"\(7, 3\)") as ei:
            rbt_solve(A, B)                      # refused before any work by default
        _same_everywhere(grid.comm, str(ei.value))
        with pytest.raises((ConvergenceError, SingularMatrixError)) as ei:
            rbt_solve(A, B, fallback=False, check_finite=False)
        _same_everywhere(grid.comm, str(ei.value))


@pytest.mark.mpi
def test_mixed_precision_large_genp_growth_converges_in_few_corrections():
    """Random matrices have GENP growth that makes plain refinement with float32 factors
    contract slowly (or stall, from n ~ 8192); GMRES-IR needs a few corrections at most."""
    from distla.bench import common
    from distla.linalg import rbt_solve
    from distla.matrix import DistMatrix
    n, nb = 1024, 64
    for grid in list(_grids())[:3]:
        A = common.general_matrix(grid, n, nb, seed=1)
        B = DistMatrix.random(grid, (n, 2), (nb, nb), seed=2)
        # check_rcond=False: GENP's growth leaves refinement with these float32 factors to
        # GMRES-IR, beyond the range where it can certify A's condition (by default the
        # float64 GENP then solves it)
        X, info = rbt_solve(A, B, precision="mixed", seed=3, return_info=True,
                            check_rcond=False)
        assert info.factor_dtype == "float32" and info.converged and not info.fallback, info
        assert info.iterations <= 3, info
        from distla.checks import backward_error
        assert backward_error(A, X, B) <= 4 * n * EPS


@pytest.mark.mpi
def test_mixed_precision_complex_gmres_ir():
    """complex128 systems: complex64 GENP + GMRES-IR (conjugated inner products, complex
    Givens rotations) reaches double accuracy without a retry."""
    from distla.linalg import rbt_solve
    n = 96
    rng = np.random.default_rng(21)
    a = rng.standard_normal((n, n)) + 1j * rng.standard_normal((n, n))
    b = rng.standard_normal((n, 2)) + 1j * rng.standard_normal((n, 2))
    for grid in _grids():
        A, B = _dist(grid, a, 8), _dist(grid, b, 8)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            X, info = rbt_solve(A, B, precision="mixed", seed=5, return_info=True)
        assert info.factor_dtype == "complex64" and info.converged and not info.fallback, info
        assert info.gmres_iterations and info.reason is None
        x = X.to_global(None)
        assert berr_np(a, x, b) <= max(20 * gepp_berr(a, b), 4 * n * EPS)


@pytest.mark.mpi
def test_singular_matrix_never_returns_silently():
    """An exactly singular A with a random b: a small normwise residual is reachable, but
    the condition estimate makes RBT fall back (and GEPP warn) or raise."""
    import warnings

    from distla import ConvergenceError, LinAlgWarning
    from distla.linalg import rbt_solve
    from distla.linalg.rbt import RBTFallbackWarning
    n = 64
    r = np.random.default_rng(0)
    a = r.standard_normal((n, n))
    a[:, 5] = a[:, 7]
    b = r.standard_normal((n, 1))
    for grid in _grids():
        A, B = _dist(grid, a, 8), _dist(grid, b, 8)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            X, info = rbt_solve(A, B, return_info=True)
        kinds = {type(x.message) for x in w}
        assert RBTFallbackWarning in kinds and LinAlgWarning in kinds, kinds
        assert info.fallback and not info.converged and info.rcond < np.finfo(float).eps
        # which test stops it (stagnation, the backward error or the estimate) depends on
        # the rounding of the grid's sums; that it raises on every rank does not
        with pytest.raises(ConvergenceError,
                           match="numerically singular|backward error|stagnated") as ei:
            rbt_solve(A, B, fallback=False)
        _same_everywhere(grid.comm, str(ei.value))


@pytest.mark.mpi
def test_default_seed_gives_identical_answers_on_every_grid():
    from distla.linalg import rbt_solve
    n = 50
    r = np.random.default_rng(3)
    a, b = r.standard_normal((n, n)), r.standard_normal((n, 2))
    ref = None
    for grid in _grids():
        X, info = rbt_solve(_dist(grid, a, 8), _dist(grid, b, 8), return_info=True)
        x = X.to_global(None)
        if ref is None:
            ref, seed = x, info.seed
        assert info.seed == seed
        np.testing.assert_allclose(x, ref, rtol=1e-12, atol=1e-13)


@pytest.mark.mpi
def test_rbt_reports_the_transformed_matrix_condition_and_warns_as_gepp(grids):
    """info.rcond is the estimate of the transformed matrix's condition, as documented (it
    was that estimate over GENP's element growth: 1e4x low on a random n = 120 matrix, and
    the CLI printed that); the certificate still divides by the growth, and its failure says
    so. The partial-pivoting fallback warns as solve_lu does: a matrix scaled into gradual
    underflow got only 'ill-conditioned (rcond=0)' and a wrong answer."""
    from distla import DistMatrix, LinAlgWarning
    from distla.linalg import solve
    rng = np.random.default_rng(7)
    n = 120
    a = rng.standard_normal((n, n))
    true = 1 / np.linalg.cond(a, 1)
    small = 1e-310 * (np.eye(23) + 0.1 * rng.standard_normal((23, 23)))
    for g in grids:
        src = (g.nprow - 1, g.npcol - 1)
        A = DistMatrix.from_global(g, a, block=37, src=src)
        B = DistMatrix.from_global(g, a.sum(axis=1, keepdims=True), block=37, src=src)
        _, info = solve(A, B, method="rbt", return_info=True)
        assert not info.fallback and true / 10 <= info.rcond <= 10 * true, (info.rcond, true)
        S = DistMatrix.from_global(g, small, block=5, src=src)
        b = DistMatrix.from_global(g, small.sum(axis=1, keepdims=True), block=5, src=src)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            solve(S, b, method="rbt")
        assert any(issubclass(x.category, LinAlgWarning) and "gradual underflow" in
                   str(x.message) for x in w), [str(x.message) for x in w]
