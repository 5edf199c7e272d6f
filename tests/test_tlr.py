"""Tests of distla.tlr: batched kernels (serial) and the distributed TLR matrix, Cholesky,
log-determinant and solves (mpi), against SciPy/NumPy on the gathered matrix."""
import math
import os
import re

import numpy as np
import pytest

from distla import covariance as cov
from distla.tlr import batched

rng0 = np.random.default_rng(0)


def _lowrank(t, m, n, k, rng, decay=0.5):
    U = np.linalg.qr(rng.standard_normal((t, m, k)))[0]
    V = np.linalg.qr(rng.standard_normal((t, n, k)))[0] * (decay ** np.arange(k))
    return U, V


# ---- batched kernels (serial) -------------------------------------------------------------

def test_truncation_rank_rule():
    s = np.array([[4.0, 3.0, 2.0, 1.0], [1.0, 0.0, 0.0, 0.0]])
    k, _ = batched.truncation_ranks(s, math.sqrt(5.0) + 1e-12)
    np.testing.assert_array_equal(k, [2, 0])       # drop tail [2, 1]: ||.|| = sqrt(5)
    k, _ = batched.truncation_ranks(s, math.sqrt(5.0) - 1e-9)
    np.testing.assert_array_equal(k, [3, 0])
    k, kfree = batched.truncation_ranks(s, 0.5, max_rank=2)
    np.testing.assert_array_equal(k, [2, 1])
    np.testing.assert_array_equal(kfree, [4, 1])


def test_recompress_is_canonical_and_meets_delta():
    rng = np.random.default_rng(1)
    Cu, Cv = _lowrank(5, 40, 30, 12, rng)
    Cu = np.concatenate([Cu, np.zeros((5, 40, 3))], axis=2)        # zero padding
    Cv = np.concatenate([Cv, np.zeros((5, 30, 3))], axis=2)
    C = Cu @ Cv.swapaxes(1, 2)
    delta = 1e-3
    U, V, k, capped = batched.recompress(Cu, Cv, delta)
    assert capped == 0 and U.shape[2] == k.max()
    for t in range(5):
        s = np.linalg.svd(C[t], compute_uv=False)
        kopt = int(np.sum(np.sqrt(np.cumsum((s ** 2)[::-1]))[::-1] > delta))
        assert k[t] == kopt
        assert np.linalg.norm(C[t] - U[t] @ V[t].T) <= delta
        Ut = U[t, :, :k[t]]
        np.testing.assert_allclose(Ut.T @ Ut, np.eye(k[t]), atol=1e-12)
        np.testing.assert_array_equal(U[t, :, k[t]:], 0)
        np.testing.assert_allclose(np.linalg.norm(V[t], axis=0)[:k[t]], s[:k[t]], rtol=1e-10)
    U, V, k, capped = batched.recompress(Cu, Cv, delta, max_rank=4)
    assert k.max() == 4 and capped == 5


def _cupy_or_skip():
    cp = pytest.importorskip("cupy")
    from distla.device import gpu_available
    if not gpu_available():
        pytest.skip("needs a GPU")
    return cp


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shape", [(5, 7, 3), (3, 10, 10), (6, 40, 12), (3, 1024, 64),
                                   (2, 300, 33), (3, 1024, 48), (2, 2048, 40), (2, 4096, 24),
                                   (2, 1024, 128), (4, 256, 100)])
def test_cuda_qr_matches_lapack(shape, dtype):
    """The batched Householder QR kernel: Q R = A, Q orthonormal, R upper triangular, |R| as
    LAPACK's, also for rank-deficient, zero and badly scaled tiles."""
    cp = _cupy_or_skip()
    from distla.tlr import _cuda
    rng = np.random.default_rng(11)
    t, m, w = shape
    A = rng.standard_normal(shape)
    A[:, :, w // 2 + 1:] = 0.0                   # zero padding: rank-deficient tiles
    A[0, :, 1] = 2.0 * A[0, :, 0]                # dependent columns
    A[1] = 0.0                                   # an all-zero tile
    A[-1] *= 1e-300 if dtype == np.float64 else 1e-30   # near underflow
    A = A.astype(dtype)
    Ad = cp.asarray(A)
    Q, R = (x.get() for x in _cuda.qr(Ad))
    tol = 50 * m * np.finfo(dtype).eps
    np.testing.assert_array_equal(Ad.get(), A)   # input untouched
    for b in range(t):                           # backward error relative to each tile
        assert np.abs(Q[b] @ R[b] - A[b]).max() <= tol * np.abs(A[b]).max()
    np.testing.assert_allclose(Q.swapaxes(1, 2) @ Q, np.broadcast_to(np.eye(w), (t, w, w)),
                               atol=tol)
    np.testing.assert_array_equal(np.tril(R, -1), 0.0)
    np.testing.assert_allclose(_cuda.qr(Ad, want_q=False)[1].get(), R, rtol=0,
                               atol=tol * np.abs(A).max())
    B = rng.standard_normal(shape).astype(dtype)   # full rank: R unique up to row signs
    np.testing.assert_allclose(np.abs(_cuda.qr(cp.asarray(B))[1].get()),
                               np.abs(np.linalg.qr(B.astype(np.float64))[1]),
                               atol=tol * np.abs(B).max())


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shape", [(4, 5, 5), (3, 7, 7), (6, 40, 40), (5, 64, 64),
                                   (2, 128, 128)])
def test_cuda_svd_matches_lapack(shape, dtype):
    """The batched one-sided Jacobi kernel: singular values as LAPACK's (graded, zero and
    rank-deficient cores), orthonormal singular vectors, X diag(s) Yt = M."""
    cp = _cupy_or_skip()
    from distla.tlr import _cuda
    rng = np.random.default_rng(12)
    low = -12 if dtype == np.float64 else -5
    M = rng.standard_normal(shape) * np.logspace(0, low, shape[2])   # graded columns
    M[0] = 0.0                                                      # a zero core
    M[1, :, 2] = M[1, :, 1]                                         # rank-deficient core
    M = M.astype(dtype)
    X, s, Yt = (x.get() for x in _cuda.svd(cp.asarray(M)))
    eps = np.finfo(dtype).eps
    s_ref = np.linalg.svd(M.astype(np.float64), compute_uv=False)
    np.testing.assert_allclose(s, s_ref, rtol=0, atol=20 * shape[1] * eps * s_ref.max())
    assert np.all(np.diff(s, axis=1) <= 0)
    np.testing.assert_allclose((X * s[:, None, :]) @ Yt, M, atol=20 * shape[1] * eps)
    w = shape[2]
    for t in range(1, shape[0]):   # left vectors: accurate to ~eps s_max / s_i
        k = int(np.sum(s[t] > 1e-3 * s[t, 0]))
        np.testing.assert_allclose(X[t, :, :k].T @ X[t, :, :k], np.eye(k), atol=1e4 * eps)
        np.testing.assert_allclose(Yt[t] @ Yt[t].T, np.eye(w), atol=5 * w * eps)


@pytest.mark.parametrize("method", ["svd", "rsvd", "aca"])
def test_compress_tiles_methods(method):
    x, k = cov.default_problem(400, seed=4)
    fn = cov.entry_function(x, k)
    nb = 40
    keys = [(1, 0), (3, 0), (6, 2), (9, 1), (9, 8)]
    A = np.stack([fn(np.arange(i * nb, i * nb + nb)[:, None],
                     np.arange(j * nb, j * nb + nb)[None, :]) for i, j in keys])
    delta = 1e-6
    U, V, r, _ = batched.compress_tiles(A, delta, None, method)
    for t in range(len(keys)):
        err = np.linalg.norm(A[t] - U[t] @ V[t].T)
        assert err <= (1.0 if method != "aca" else 2.0) * delta
        s = np.linalg.svd(A[t], compute_uv=False)
        kopt = int(np.sum(np.sqrt(np.cumsum((s ** 2)[::-1]))[::-1] > delta))
        assert kopt <= r[t] <= kopt + (0 if method == "svd" else 2)
    with pytest.raises(ValueError):
        batched.compress_tiles(A, delta, None, "qr")


# ---- distributed ---------------------------------------------------------------------------

def _grids():
    from mpi4py import MPI

    from distla.grid import ProcessGrid
    from distla.testing import grid_shapes
    comm = MPI.COMM_WORLD
    for p, q in grid_shapes(comm.size):
        for order in ("row", "col"):
            yield ProcessGrid(p, q, comm=comm, order=order)


def _problem(n=230, seed=0):
    return cov.default_problem(n, seed=seed)


def _rel2(E, A):
    return np.linalg.norm(E, 2) / np.linalg.norm(A, 2)


@pytest.mark.mpi
def test_compress_accuracy_ranks_and_memory():
    from distla import tlr
    x, k = _problem()
    nb = 24                                               # 230 = 9 * 24 + 14
    for g in _grids():
        src = (g.nprow - 1, g.npcol - 1)
        A = cov.covariance_matrix(g, x, k, block=nb, src=src)
        Ad = A.to_global(root=None)
        F = np.linalg.norm(Ad)
        for tol in (1e-4, 1e-8):
            T = tlr.compress(A, tol=tol)
            assert T.norm_fro == pytest.approx(F, rel=1e-12)
            assert T.delta == pytest.approx(tol * F / T.nt)
            Td = T.to_dense().to_global(root=None)
            np.testing.assert_array_equal(Td, Td.T)
            assert np.linalg.norm(Ad - Td) <= tol * F
            r = T.ranks
            assert 0 <= r.min <= r.mean <= r.max and r.count == T.nt * (T.nt - 1) // 2
            assert T.nbytes < T.nbytes_dense
            assert T.info["compress_time"] > 0
            T2 = tlr.from_kernel(g, x, k, nb, tol=tol, src=src)       # rsvd, never dense
            T2d = T2.to_dense().to_global(root=None)
            assert np.linalg.norm(Ad - T2d) <= tol * F
            assert T2.norm_fro == pytest.approx(F, rel=1e-12)
            assert abs(T2.ranks.mean - r.mean) <= 1.0


@pytest.mark.mpi
def test_from_kernel_methods_and_fixed_rank():
    from mpi4py import MPI

    from distla import tlr
    from distla.grid import ProcessGrid
    g = ProcessGrid(comm=MPI.COMM_WORLD)
    x, k = _problem(200, seed=3)
    Ad = cov.entry_function(x, k)(np.arange(200)[:, None], np.arange(200)[None, :])
    F = np.linalg.norm(Ad)
    for method, slack in (("svd", 1.0), ("rsvd", 1.0), ("aca", 2.0)):
        T = tlr.from_kernel(g, x, k, 30, tol=1e-6, method=method)
        assert np.linalg.norm(Ad - T.to_dense().to_global(root=None)) <= slack * 1e-6 * F
    T = tlr.from_kernel(g, x, k, 30, tol=None, max_rank=3)
    assert T.ranks.max <= 3 and T.info["capped"] > 0
    T = tlr.from_kernel(g, x, k, 30, tol=None, max_rank=16)      # fixed rank
    L = tlr.cholesky(T)
    assert L.ranks.max <= 16 and T.ranks.max == 16
    Ld = L.to_dense().to_global(root=None)
    assert _rel2(Ad - Ld @ Ld.T, Ad) < 1e-3


def _check_factor(A, L, tol, c_fact=2.0):
    Ad = A.to_global(root=None)
    Ld = L.to_dense().to_global(root=None)
    np.testing.assert_array_equal(np.triu(Ld, 1), 0)
    fact = _rel2(Ad - Ld @ Ld.T, Ad)
    ref = 2 * np.sum(np.log(np.diag(np.linalg.cholesky(Ad))))
    ld = L.logdet()
    ld_err = abs(ld - ref) / abs(ref)
    assert fact <= c_fact * tol, (tol, fact)
    assert ld_err <= tol, (tol, ld_err)
    return fact, ld_err


@pytest.mark.mpi
def test_cholesky_accuracy_scales_with_tol():
    from distla import tlr
    x, k = _problem()
    nb = 24
    for g in _grids():
        A = cov.covariance_matrix(g, x, k, block=nb, src=(g.nprow // 2, g.npcol - 1))
        errs = []
        for tol in (1e-4, 1e-8):
            L = tlr.cholesky(tlr.compress(A, tol=tol))
            errs.append(_check_factor(A, L, tol))
            assert L.info["factor_time"] > 0 and L.ranks.count == L.nt * (L.nt - 1) // 2
        assert errs[1][0] < 1e-3 * errs[0][0]         # 10^4 tighter tol: >= 10^3 smaller
        assert errs[1][1] < 1e-2 * errs[0][1]


@pytest.mark.mpi
def test_cholesky_bigger_matrix_small_tiles():
    from mpi4py import MPI

    from distla import tlr
    from distla.grid import ProcessGrid
    comm = MPI.COMM_WORLD
    g = ProcessGrid(comm=comm)
    x, k = _problem(1000, seed=7)
    A = cov.covariance_matrix(g, x, k, block=48)        # 1000 = 20 * 48 + 40
    T = tlr.from_kernel(g, x, k, 48, tol=1e-8)
    L = tlr.cholesky(T)
    _check_factor(A, L, 1e-8)
    assert T.compression_ratio < 0.6


@pytest.mark.mpi
def test_solves_backward_error():
    from distla import DistMatrix, tlr
    x, k = _problem(150, seed=2)
    n = len(x)
    for g in _grids():
        A = cov.covariance_matrix(g, x, k, block=16)
        Ad = A.to_global(root=None)
        for tol in (1e-4, 1e-8):
            L = tlr.cholesky(tlr.compress(A, tol=tol))
            b = np.random.default_rng(1).standard_normal(n)
            xs = tlr.cho_solve(L, b)
            assert xs.shape == (n,)
            bw = np.linalg.norm(Ad @ xs - b) / (np.linalg.norm(Ad, 2) * np.linalg.norm(xs))
            assert bw <= tol
            B = DistMatrix.random(g, (n, 3), block=(11, 2), seed=5)
            X = L.solve(B)
            assert X.same_layout(B)
            Bd, Xd = B.to_global(root=None), X.to_global(root=None)
            bw = np.linalg.norm(Ad @ Xd - Bd, 2) / (np.linalg.norm(Ad, 2) * np.linalg.norm(Xd, 2))
            assert bw <= tol
            np.testing.assert_allclose(Xd, tlr.cho_solve(L, Bd), rtol=1e-12, atol=1e-12)
        X2 = tlr.solve(A, B, tol=1e-8).to_global(root=None)
        cond = np.linalg.cond(Ad)                     # forward error <~ cond * tol
        ref = np.linalg.solve(Ad, Bd)
        assert np.linalg.norm(X2 - ref) <= cond * 1e-8 * np.linalg.norm(ref)


@pytest.mark.mpi
def test_matvec_matches_dense():
    from distla import tlr
    x, k = _problem(100, seed=8)
    for g in _grids():
        A = cov.covariance_matrix(g, x, k, block=13)
        T = tlr.compress(A, tol=1e-6)
        L = tlr.cholesky(T)
        Td = T.to_dense().to_global(root=None)
        Ld = L.to_dense().to_global(root=None)
        v = np.random.default_rng(2).standard_normal((100, 2))
        np.testing.assert_allclose(T.matvec(v), Td @ v, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(L.matvec(v), Ld @ v, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(L.matvec(v[:, 0], trans=True), Ld.T @ v[:, 0], rtol=1e-12,
                                   atol=1e-12)


@pytest.mark.mpi
def test_logdet_matches_distla_dense_cholesky():
    from mpi4py import MPI

    from distla import tlr
    from distla.grid import ProcessGrid
    from distla.linalg.cholesky import cholesky, logdet
    g = ProcessGrid(comm=MPI.COMM_WORLD)
    x, k = _problem(300, seed=11)
    A = cov.covariance_matrix(g, x, k, block=32)
    ld_dense = logdet(cholesky(A))
    L = tlr.cholesky(tlr.compress(A, tol=1e-8), overwrite=True)
    assert abs(L.logdet() - ld_dense) <= 1e-8 * abs(ld_dense)


@pytest.mark.mpi
def test_not_positive_definite_raises_on_every_rank():
    from distla import NotPositiveDefiniteError, tlr
    x, k = _problem(120, seed=1)
    base = cov.entry_function(x, k)
    bad = 37

    def fn(I, J):
        return np.where((I == bad) & (J == bad), -1.0, base(I, J))

    for g in _grids():
        T = tlr.from_function(g, 120, 16, fn, tol=1e-8)
        with pytest.raises(NotPositiveDefiniteError) as ei:
            tlr.cholesky(T)
        assert ei.value.index == bad
        assert "tol" in str(ei.value) and "nugget" in str(ei.value)
        assert "Either the matrix itself is not positive definite" in str(ei.value)

    def fn0(I, J):   # indefinite inside the first (exact) diagonal tile
        return np.where((I == 5) & (J == 5), -1.0, base(I, J))

    for g in _grids():
        with pytest.raises(NotPositiveDefiniteError) as ei:
            tlr.cholesky(tlr.from_function(g, 120, 16, fn0, tol=1e-8))
        assert ei.value.index == 5
        assert "the matrix is not positive definite" in str(ei.value)
        assert "tighter tol" not in str(ei.value)
        # a too-loose tolerance without nugget: PD lost through compression
    x, k0 = _problem(200, seed=1)
    k0 = k0.replace(nugget=0.0, beta=0.3)
    g = next(_grids())
    T = tlr.from_kernel(g, x, k0, 20, tol=1e-2)
    with pytest.raises(NotPositiveDefiniteError):
        tlr.cholesky(T)


@pytest.mark.mpi
def test_bad_input_raises_everywhere():
    from mpi4py import MPI

    from distla import DistMatrix, tlr
    from distla.grid import ProcessGrid
    g = ProcessGrid(comm=MPI.COMM_WORLD)
    A = DistMatrix.zeros(g, (20, 20), block=(4, 5))
    with pytest.raises(ValueError, match="square"):
        tlr.compress(A)
    B = DistMatrix.eye(g, 20, block=(4, 4))
    with pytest.raises(ValueError, match="tol"):
        tlr.compress(B, tol=0)
    with pytest.raises(ValueError, match="method"):
        tlr.compress(B, method="qr")
    with pytest.raises(ValueError):
        tlr.compress(B, tol=None, max_rank=None)
    with pytest.raises(TypeError):
        tlr.compress(np.eye(3))
    L = tlr.cholesky(tlr.compress(B))
    np.testing.assert_allclose(L.to_dense().to_global(root=None), np.eye(20), atol=1e-14)
    assert L.logdet() == pytest.approx(0.0, abs=1e-13)
    with pytest.raises(TypeError):
        tlr.cholesky(L)
    with pytest.raises(ValueError, match="rows"):
        tlr.cho_solve(L, np.ones(7))
    with pytest.raises(TypeError):
        tlr.cho_solve(tlr.compress(B), np.ones(20))


@pytest.mark.mpi
@pytest.mark.gpu
def test_gpu_matches_cpu():
    from mpi4py import MPI

    from distla import tlr
    from distla.device import gpu_available
    from distla.grid import ProcessGrid
    ok = MPI.COMM_WORLD.allreduce(gpu_available(), op=MPI.LAND)
    if not ok:
        pytest.skip("needs a GPU on every rank")
    g = ProcessGrid(comm=MPI.COMM_WORLD)
    x, k = _problem(600, seed=6)
    A = cov.covariance_matrix(g, x, k, block=64, device="gpu")
    for method in ("svd", "rsvd", "aca"):
        T = tlr.from_kernel(g, x, k, 64, tol=1e-8, method=method, device="gpu")
        L = tlr.cholesky(T)
        _check_factor(A, L, 1e-8)
        b = np.random.default_rng(0).standard_normal(600)
        xs = tlr.cho_solve(L, b).get()
        Ad = A.to_global(root=None)
        assert np.linalg.norm(Ad @ xs - b) / (np.linalg.norm(Ad, 2) * np.linalg.norm(xs)) < 1e-8


@pytest.mark.mpi
def test_bench_tlr_small_run(monkeypatch):
    """The benchmark's dense comparison (chunked dense matrix, in-place dense Cholesky, probe
    accuracy checks), its --no-dense path and --inplace (TLR factor in the matrix's storage,
    checked against a rebuilt matrix) give consistent, accurate rows."""
    import argparse

    from distla.bench import tlr as bench
    from distla.tlr import batched
    for name in ("QR_METHOD", "SVD_METHOD"):        # run() sets them; restored afterwards
        monkeypatch.setattr(batched, name, getattr(batched, name))
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    backward = {}
    for extra in ([], ["--no-dense", "--qr", "lapack", "--svd", "lapack"],
                  ["--no-dense", "--qr", "lapack", "--svd", "lapack", "--inplace"]):
        args = parser.parse_args(["--n", "260", "--tile", "32", "--tol", "1e-8",
                                  "--device", "cpu", *extra])
        rows = bench.run(args)
        rec = rows[0]
        assert rec["impl"] == "distla-tlr" and rec["backward"] < 1e-8
        backward[len(extra)] = rec["backward"]
        if "--inplace" in extra:    # the same factor, checked against the rebuilt matrix
            assert rec["inplace"] and rec["err_fact_vs_tlr"] is None
            assert rec["backward"] == pytest.approx(backward[5], rel=1e-6)
        elif extra:
            assert len(rows) == 1 and rec["err_fact_vs_tlr"] < 1e-8
        else:
            assert rows[1]["impl"] == "distla-dense" and rows[1]["seconds"] > 0
            assert rec["err_fact"] < 1e-8 and rec["err_comp"] < 1e-8
            assert rec["err_logdet"] < 1e-8


@pytest.mark.mpi
def test_cholesky_chunked_panel_matches_and_is_traced():
    """A workspace of one tile row per chunk (many chunks, the same on every rank of a
    process row) gives the same factor as one chunk, and the tracer sees every phase."""
    from distla import tlr
    from distla.trace import Tracer
    x, k = _problem(190, seed=5)
    for g in _grids():
        T = tlr.from_kernel(g, x, k, 20, tol=1e-8, src=(0, g.npcol - 1))
        with Tracer() as tr:
            L1 = tlr.cholesky(T, workspace=1)
        L2 = tlr.cholesky(T, workspace=2 ** 30)
        np.testing.assert_allclose(L1.to_dense().to_global(root=None),
                                   L2.to_dense().to_global(root=None), rtol=0, atol=1e-12)
        calls = tr.counts()
        assert calls["header"] == 2 * T.nt - 1          # two agreements per step, one last
        assert calls.get("potrf", 0) == len(T.diag_keys)
        if T.keys:
            assert calls["compress"] >= len({j for _, j in T.keys})
        assert L1.info["mem_factor"] >= L1.nbytes_allocated / g.size
        assert L1.info["workspace"] == 1


# ---- build methods, memory -----------------------------------------------------------------

_KERNELS = {"sqexp": cov.SquaredExponential(beta=0.1, nugget=1e-2),
            "exp": cov.Exponential(beta=0.1, nugget=1e-2),
            "matern": cov.Matern(beta=0.1, nu=1.5, nugget=1e-2)}


def test_kernel_tiles_in_place_match_entries():
    """``entry_function(...).tiles`` fills stacks in place with the entries of ``fn``."""
    x = cov.points(200, seed=2)
    I = np.stack([np.arange(30), np.arange(50, 80), np.arange(0, 30)])
    J = np.stack([np.arange(30), np.arange(0, 30), np.arange(170, 200)])
    for k in [*_KERNELS.values(), cov.Matern(nu=2.5, nugget=0.3), cov.Matern(nu=0.7)]:
        fn = cov.entry_function(x, k)
        out = np.full((3, 30, 30), np.nan)
        fn.tiles(I, J, out)
        ref = np.stack([fn(I[a][:, None], J[a][None, :]) for a in range(3)])
        np.testing.assert_allclose(out, ref, rtol=1e-14, atol=1e-15)


@pytest.mark.parametrize("kernel", sorted(_KERNELS))
def test_aca_stack_matches_svd_ranks_and_delta(kernel):
    """ACA on stacks of covariance tiles: every tile within delta (its Frobenius target),
    ranks within a few of the optimal (SVD) ranks."""
    x = cov.points(1536, seed=3)
    fn = cov.entry_function(x, _KERNELS[kernel])
    nb = 96
    keys = [(i, j) for j in range(16) for i in range(j + 1, 16)][::3]
    A = np.stack([fn(np.arange(i * nb, (i + 1) * nb)[:, None],
                     np.arange(j * nb, (j + 1) * nb)[None, :]) for i, j in keys])
    for delta in (1e-4, 1e-9):
        U, V, r, capped = batched.compress_tiles(A, delta, None, "aca")
        _, _, rs, _ = batched.compress_tiles(A, delta, None, "svd")
        err = np.linalg.norm((A - U @ V.swapaxes(1, 2)).reshape(len(keys), -1), axis=1)
        assert err.max() <= delta and capped == 0
        assert np.all(r >= rs - 1) and np.all(r <= rs + 3) and r.mean() <= rs.mean() + 1
    U, V, r, capped = batched.compress_tiles(A, 1e-12, 4, "aca")
    assert r.max() <= 4 and capped > 0


@pytest.mark.mpi
@pytest.mark.parametrize("kernel", sorted(_KERNELS))
def test_build_methods_accuracy_every_grid(kernel):
    """'aca' and 'dense' builds against the dense matrix at the same tol, on every grid shape,
    n not divisible by the tile (padded last tile), nonzero source process: global
    ``||A - A_tlr||_F <= tol ||A||_F``, every tile within its delta, ranks as the dense
    build's, and the factorization as accurate."""
    from distla import tlr
    x = cov.points(230, seed=4)
    k = _KERNELS[kernel]
    nb, tol = 24, 1e-6
    Ad = cov.entry_function(x, k)(np.arange(230)[:, None], np.arange(230)[None, :])
    F = np.linalg.norm(Ad)
    for g in _grids():
        src = (g.nprow - 1, 0)
        Ts = {m: tlr.from_kernel(g, x, k, nb, tol=tol, method=m, src=src)
              for m in ("dense", "aca")}
        for m, T in Ts.items():
            assert T.norm_fro == pytest.approx(F, rel=1e-6 if m == "aca" else 1e-12)
            E = Ad - T.to_dense().to_global(root=None)
            assert np.linalg.norm(E) <= tol * F, m
            tiles = [np.linalg.norm(E[i * nb:(i + 1) * nb, j * nb:(j + 1) * nb])
                     for i in range(T.nt) for j in range(i)]
            assert max(tiles) <= T.delta * (1 + 1e-9), m
            assert T.info["method"] == ("rsvd" if m == "dense" else m)
            assert T.info["mem_build"] > 0
        assert abs(Ts["aca"].ranks.mean - Ts["dense"].ranks.mean) <= 1.5
        L = tlr.cholesky(Ts["aca"])
        Ld = L.to_dense().to_global(root=None)
        assert _rel2(Ad - Ld @ Ld.T, Ad) <= 2 * tol


@pytest.mark.mpi
def test_build_tiny_workspace_and_auto_method():
    """One tile per batch (workspace of one byte) builds the same matrix to tol; 'auto' is the
    dense build at every tile size (it picked ACA from tile 256 on CPU ranks, which can miss
    tol silently)."""
    from mpi4py import MPI

    from distla import tlr
    from distla.grid import ProcessGrid
    g = ProcessGrid(comm=MPI.COMM_WORLD)
    x, k = _problem(260, seed=9)
    Ad = cov.entry_function(x, k)(np.arange(260)[:, None], np.arange(260)[None, :])
    for m in ("dense", "aca"):
        T = tlr.from_kernel(g, x, k, 20, tol=1e-8, method=m, workspace=1)
        assert np.linalg.norm(Ad - T.to_dense().to_global(root=None)) <= 1e-8 * T.norm_fro
    assert tlr.from_kernel(g, x, k, 20, tol=1e-4).info["method"] == "rsvd"
    x2, k2 = _problem(256 + 37, seed=9)
    assert tlr.from_kernel(g, x2, k2, 256, tol=1e-4).info["method"] == "rsvd"
    assert tlr.from_kernel(g, x2, k2, 256, tol=1e-4, method="aca").info["method"] == "aca"


@pytest.mark.mpi
def test_default_build_meets_tol_for_short_length_scales(grids):
    """The default build met tol 1e-8 only to 4e-2 (sweep 16, r_aca.py): 'auto' was ACA on
    CPU ranks from tile 256, whose random-probe stopping test misses tiles with their mass in
    a few rows (short length scales). 'auto' is now the dense build, with its exact residual
    check, on every grid."""
    from distla import tlr
    n, tile, tol = 520, 256, 1e-8
    pts = cov.points(n, 2, kind="random", seed=3)
    ker = cov.SquaredExponential(beta=0.01, nugget=1e-2)
    A = cov.cross_covariance(pts, pts, ker) + ker.nugget * np.eye(n)
    F = np.linalg.norm(A)
    for g in grids:
        T = tlr.from_kernel(g, pts, ker, tile, tol=tol)
        assert T.info["method"] == "rsvd"
        assert np.linalg.norm(A - T.to_dense().to_global(root=None)) <= tol * F


@pytest.mark.mpi
def test_memory_errors_are_clear_and_agreed(monkeypatch):
    """When one rank has too little memory, every rank raises the same DistlaError naming the
    size that would fit; per-phase memory is reported."""
    from mpi4py import MPI

    from distla import DistlaError, tlr
    from distla.grid import ProcessGrid
    from distla.tlr import _memory
    comm = MPI.COMM_WORLD
    g = ProcessGrid(comm=comm)
    x, k = _problem(300, seed=1)
    T = tlr.from_kernel(g, x, k, 30, tol=1e-8)
    L = tlr.cholesky(T)
    L.solve(np.ones(300))
    assert T.info["mem_build"] > 0 and L.info["mem_factor"] >= L.info["workspace"] * 0
    assert L.info["mem_solve"] >= 2 * 300 * 8
    real = _memory.available
    monkeypatch.setattr(_memory, "available",
                        lambda dev: 1000 if comm.rank == 0 else real(dev))
    for call in (lambda: tlr.from_kernel(g, x, k, 30, tol=1e-8, workspace=2 ** 20),
                 lambda: tlr.cholesky(T)):
        with pytest.raises(DistlaError, match=r"n = 300 does not fit, n <= \d+ would"):
            call()
    monkeypatch.setattr(_memory, "available", real)
    tlr.cholesky(T, overwrite=True)      # in place needs no copy: fits


@pytest.mark.gpu
def test_gpu_fused_kernel_tiles_match_cpu():
    """The fused CUDA covariance kernel (one pass per stack) gives the CPU entries."""
    cp = _cupy_or_skip()
    x = cov.points(500, seed=5)
    I = np.stack([np.arange(100), np.arange(200, 300)])
    J = np.stack([np.arange(100), np.arange(0, 100)])
    for k in [*_KERNELS.values(), cov.Matern(nu=2.5, nugget=0.2)]:
        assert k.cuda_expr() is not None
        ref = np.empty((2, 100, 100))
        cov.entry_function(x, k).tiles(I, J, ref)
        out = cp.empty((2, 100, 100))
        cov.entry_function(x, k, cp).tiles(cp.asarray(I), cp.asarray(J), out)
        assert not cov._FUSED_FAILED
        np.testing.assert_allclose(out.get(), ref, rtol=1e-13, atol=1e-15)


@pytest.mark.mpi
def test_rank_cap_below_tol_warns():
    """max_rank capping ranks below what tol needs voids tol's accuracy: tlr.solve returned
    forward error 1 with no warning. The build now warns (LinAlgWarning, every rank) whenever
    a tol was asked for and tiles were capped; fixed-rank builds (tol=None) and uncapped
    ones stay quiet."""
    import warnings

    from mpi4py import MPI

    from distla import DistMatrix, LinAlgWarning, tlr
    from distla.grid import ProcessGrid
    g = ProcessGrid(comm=MPI.COMM_WORLD)
    x, k = _problem(150, seed=4)
    Ad = cov.entry_function(x, k)(np.arange(150)[:, None], np.arange(150)[None, :])
    A = DistMatrix.from_global(g, Ad, block=32)
    with pytest.warns(LinAlgWarning, match="capped the ranks"):
        tlr.from_kernel(g, x, k, 32, tol=1e-8, max_rank=2)
    with pytest.warns(LinAlgWarning, match="capped the ranks"):
        try:
            tlr.solve(A, np.ones(150), tol=1e-8, max_rank=2)
        except np.linalg.LinAlgError:    # a capped compression may also lose definiteness
            pass
    with warnings.catch_warnings():
        warnings.simplefilter("error", LinAlgWarning)
        tlr.from_kernel(g, x, k, 32, tol=None, max_rank=2)
        tlr.from_kernel(g, x, k, 32, tol=1e-8)


@pytest.mark.mpi
def test_replicated_rhs_checked_and_tol_floor_reported():
    """A NaN in a replicated (array) right-hand side raised nothing (X all NaN): now a
    ValueError on every rank from tlr.solve and tlr.cho_solve; a float32 build asked for
    tol 1e-10 truncates at its precision's floor and reports that as its tol."""
    from mpi4py import MPI

    from distla import DistMatrix, tlr
    from distla.grid import ProcessGrid
    from distla.tlr.matrix import _EPS_FLOOR
    g = ProcessGrid(comm=MPI.COMM_WORLD)
    x, k = _problem(90, seed=5)
    Ad = cov.entry_function(x, k)(np.arange(90)[:, None], np.arange(90)[None, :])
    b = np.ones(90)
    b[7] = np.nan
    L = tlr.cholesky(tlr.from_kernel(g, x, k, 16))
    with pytest.raises(ValueError, match=r"non-finite value at index \(7,\)"):
        tlr.cho_solve(L, b)
    with pytest.raises(ValueError, match="non-finite"):
        tlr.solve(DistMatrix.from_global(g, Ad, block=16), b)
    T = tlr.from_kernel(g, x, k, 16, tol=1e-10, dtype=np.float32)
    assert T.tol == pytest.approx(_EPS_FLOOR * float(np.finfo(np.float32).eps))
    assert tlr.from_kernel(g, x, k, 16, tol=1e-6).tol == 1e-6


@pytest.mark.mpi
def test_solve_names_the_compression_method_compression(tmp_path_factory):
    """tlr.solve's ``method`` (the compression) collided with solve(method='tlr'): the CLI
    advertised ``-O method=svd`` and then failed with 'got multiple values'. It is
    ``compression=`` through solve() and the CLI; other methods refuse it."""
    from mpi4py import MPI

    from distla import DistMatrix
    from distla.grid import ProcessGrid
    from distla.linalg import solve
    g = ProcessGrid(comm=MPI.COMM_WORLD)
    x, k = _problem(90, seed=2)
    a = cov.entry_function(x, k)(np.arange(90)[:, None], np.arange(90)[None, :])
    A = DistMatrix.from_global(g, a, block=16)
    B = DistMatrix.from_global(g, a @ np.ones((90, 1)), block=16)
    for c in ("svd", "aca"):
        X = solve(A, B, method="tlr", compression=c, tol=1e-10)
        np.testing.assert_allclose(X.to_global(None), np.ones((90, 1)), rtol=1e-5)
    with pytest.raises(ValueError, match="compression= is an option of method='tlr'"):
        solve(A, B, method="gepp", compression="svd")
    if MPI.COMM_WORLD.size == 1:
        from test_cli import MPIEXEC, run
        if not os.path.exists(MPIEXEC):
            pytest.skip("no mpiexec")
        d = tmp_path_factory.mktemp("tlrcli")
        np.save(d / "A.npy", a)
        p = run(["solve", "--matrix", d / "A.npy", "-m", "tlr", "-O", "compression=aca"], n=2)
        assert p.returncode == 0, p.stdout + p.stderr
        p = run(["solve", "--matrix", d / "A.npy", "-m", "tlr", "-O", "method=svd"], n=2)
        assert p.returncode == 2 and "compression" in p.stderr and "multiple" not in p.stderr


@pytest.mark.mpi
@pytest.mark.parametrize("seed, exc", [(-1, ValueError), (1.5, TypeError), (None, TypeError),
                                       (True, TypeError), (2 ** 32 - 10, None),
                                       (2 ** 70, None), (np.uint32(7), None)])
def test_seed_checked_alike_on_every_rank(comm, seed, exc):
    """``seed + 7919 * rank`` seeded each rank's RandomState: seed -1 raised on rank 0 only and
    2**32 - 10 on rank 1 only, and the other ranks hung (sweep 16). The seed is now checked
    up front on every rank alike, and each rank's stream comes from SeedSequence([seed,
    rank])."""
    from distla import gp, tlr
    from distla.grid import ProcessGrid
    g = ProcessGrid(comm=comm)
    x, k = _problem(60, seed=1)
    A = cov.covariance_matrix(g, x, k, block=16)
    T = tlr.from_kernel(g, x, k, 16, tol=1e-8)
    calls = [lambda: tlr.from_kernel(g, x, k, 16, tol=1e-8, seed=seed),
             lambda: tlr.from_function(g, 60, 16, cov.entry_function(x, k), seed=seed),
             lambda: tlr.compress(A, method="rsvd", seed=seed),
             lambda: tlr.cholesky(T, seed=seed),
             lambda: gp.TLRLikelihood(g, x, np.ones(60), k, 16, seed=seed)]
    for call in calls:
        if exc is None:
            call()
        else:
            with pytest.raises(exc, match="seed must be a non-negative int"):
                call()


@pytest.mark.mpi
def test_diagonal_tiles_that_do_not_fit_raise_distla_error_everywhere(comm, monkeypatch):
    """TLRMatrix allocated its dense diagonal tiles before the agreed memory check: a raw
    MemoryError on the ranks that ran out and a hang on the others (sweep 16, r_mem.py). The
    check and the allocation are now agreed: the same DistlaError on every rank."""
    from distla import DistlaError, tlr
    from distla.grid import ProcessGrid
    from distla.tlr import _memory
    from distla.tlr.matrix import TLRMatrix
    g = ProcessGrid(comm=comm)
    x, k = _problem(60, seed=1)
    A = cov.covariance_matrix(g, x, k, block=16)
    real = TLRMatrix.allocate_diagonal

    def fails_on_last_rank(self):
        if comm.rank == comm.size - 1:
            raise MemoryError("Unable to allocate 24.0 GiB (test)")
        real(self)

    monkeypatch.setattr(TLRMatrix, "allocate_diagonal", fails_on_last_rank)
    for call in (lambda: tlr.from_kernel(g, x, k, 16, tol=1e-8),
                 lambda: tlr.compress(A, tol=1e-8)):
        with pytest.raises(DistlaError, match="out of memory at n = 60"):
            call()
    monkeypatch.setattr(TLRMatrix, "allocate_diagonal", real)
    # every rank's allocation fails for real (~137 GiB of diagonal tiles a rank), the checks
    # being told there is room
    monkeypatch.setattr(_memory, "available", lambda dev: 2 ** 62)
    nb = 2 ** 17
    with pytest.raises(DistlaError, match="dense diagonal tiles"):
        tlr.from_function(g, comm.size * nb, nb, lambda I, J: 1.0 * (I == J), tol=1e-8)
    monkeypatch.undo()
    # a huge n is refused before the layout's loops over ~1e8 tiles
    with pytest.raises(DistlaError, match=r"n = 1000000000000 does not fit"):
        tlr.from_function(g, 10 ** 12, 4096, lambda I, J: 1.0 * (I == J), tol=1e-8)


@pytest.mark.mpi
def test_solve_checks_b_before_any_work(comm, monkeypatch):
    """tlr.solve checked B's length, dtype and grid only after compressing and factoring A
    (sweep 16, r_late.py). Now before: compress and cholesky are never reached."""
    import importlib

    from distla import DistMatrix, tlr
    from distla.grid import ProcessGrid
    tsolve = importlib.import_module("distla.tlr.solve")
    g = ProcessGrid(comm=comm)
    x, k = _problem(60, seed=1)
    A = cov.covariance_matrix(g, x, k, block=16)
    T = tlr.from_kernel(g, x, k, 16, tol=1e-8)

    def never(*a, **kw):
        raise AssertionError("compressed or factored before B was checked")

    monkeypatch.setattr(tsolve, "compress", never)
    monkeypatch.setattr(tsolve, "cholesky", never)
    monkeypatch.setattr(tsolve, "norm1_estimate", never)
    other = ProcessGrid(comm=comm.Dup())
    bad = [(np.ones(59), ValueError, "expected an array of 60 rows"),
           (np.ones((60, 2, 1)), ValueError, "expected an array of 60 rows"),
           (np.ones(60, complex), TypeError, "complex128 right-hand side"),
           (DistMatrix.zeros(g, (60, 1), (16, 16), dtype=np.float32), TypeError,
            "dtypes differ"),
           (DistMatrix.zeros(g, (61, 1), (16, 16)), ValueError, "B has 61 rows"),
           (DistMatrix.zeros(other, (60, 1), (16, 16)), ValueError, "process grid")]
    for M in (A, T):
        for B, exc, match in bad:
            with pytest.raises(exc, match=match):
                tlr.solve(M, B)
    nan = np.ones(60)
    nan[3] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        tlr.solve(T, nan)
    monkeypatch.undo()
    np.testing.assert_allclose(tlr.solve(T, T.matvec(np.ones(60))), np.ones(60), rtol=1e-6)


@pytest.mark.mpi
def test_non_finite_input_to_the_builders_is_named(comm):
    """NaN/Inf in the TLR builders' input gave 'SVD did not converge' (compress, the dense
    build, a NaN point), was dropped silently (ACA), or gave logdet = inf (Inf on A's
    diagonal) (sweep 16, r_nan.py). Now a ValueError naming the entry or point, on every
    rank."""
    from distla import DistMatrix, tlr
    from distla.grid import ProcessGrid
    g = ProcessGrid(comm=comm)
    n = 70

    def fn_with(val, at):
        def fn(I, J):
            v = np.exp(-np.abs(I - J) / 10.0) + 1.0 * (I == J)
            return np.where(((I == at[0]) & (J == at[1])) | ((I == at[1]) & (J == at[0])),
                            val, v)
        return fn

    for val, at in ((np.nan, (50, 3)), (np.inf, (20, 20)), (-np.inf, (69, 0))):
        fn = fn_with(val, at)
        A = DistMatrix.from_function(g, (n, n), (16, 16), fn)
        lo = f"\\({max(at)}, {min(at)}\\)"
        with pytest.raises(ValueError, match=f"compress: A holds a non-finite value .* {lo}"):
            tlr.compress(A, tol=1e-8)
        with pytest.raises(ValueError, match=f"non-finite value .* at entry {lo}"):
            tlr.from_function(g, n, 16, fn, tol=1e-8, method="dense")
        if at[0] == at[1]:             # diagonal tiles are evaluated whole by every method
            with pytest.raises(ValueError, match=f"non-finite value .* at entry {lo}"):
                tlr.from_function(g, n, 16, fn, tol=1e-8, method="aca")

    def nan_row(I, J):     # ACA reads whole rows and columns of a tile, not every entry
        off = ((I == 50) & (J < 48)) | ((J == 50) & (I < 48))     # off the diagonal tiles
        return np.where(off, np.nan, fn_with(0.0, (0, 0))(I, J))

    with pytest.raises(ValueError, match=r"non-finite value \(nan\) at entry \(50, "):
        tlr.from_function(g, n, 16, nan_row, tol=1e-8, method="aca")
    x, k = _problem(n, seed=1)
    x[17, 0] = np.nan
    with pytest.raises(ValueError, match=r"non-finite value \(nan\) at index \(17, 0\)"):
        tlr.from_kernel(g, x, k, 16)
    big = DistMatrix.from_function(g, (n, n), (16, 16), lambda I, J: 1e200 * (I == J))
    with pytest.raises(ValueError, match="magnitude .* scale the matrix") as ei:
        tlr.compress(big, tol=1e-8)   # squares beyond float range: finite entries, not named
    assert "non-finite" not in str(ei.value)    # as such, but refused (||A||_F = inf would
    #                                             truncate every off-diagonal tile to rank 0)


@pytest.mark.mpi
def test_bad_arguments_are_refused_clearly_on_every_rank(comm):
    """sweep 16, r_args.py: workspace '1GB' gave int()'s message and -1 was accepted, tile
    40.7 was truncated to 40, tol '1e-4' and max_rank True were accepted, complex points or
    entry values kept their real part with only a ComplexWarning."""
    import warnings

    from distla import tlr
    from distla.grid import ProcessGrid
    g = ProcessGrid(comm=comm)
    x, k = _problem(60, seed=1)
    A = cov.covariance_matrix(g, x, k, block=16)
    T = tlr.from_kernel(g, x, k, 16)
    bad = [(dict(workspace="1GB"), ValueError, "workspace must be a number of bytes"),
           (dict(workspace=-1), ValueError, "workspace must be a number of bytes"),
           (dict(workspace=1.5), ValueError, "workspace must be a number of bytes"),
           (dict(tol="1e-4"), TypeError, "tol must be a number in"),
           (dict(tol=True), TypeError, "tol must be a number in"),
           (dict(tol=1.5), ValueError, "tol must be in"),
           (dict(tol=None, max_rank=True), TypeError, "max_rank must be a non-negative"),
           (dict(max_rank=2.5), TypeError, "max_rank must be a non-negative"),
           (dict(max_rank=-1), ValueError, "max_rank must be a non-negative"),
           (dict(method=["svd"]), ValueError, "method must be one of")]
    fn = cov.entry_function(x, k)
    with warnings.catch_warnings():
        warnings.simplefilter("error")        # no ComplexWarning: an error instead
        for kw, exc, match in bad:
            for call in (lambda: tlr.from_kernel(g, x, k, 16, **kw),
                         lambda: tlr.from_function(g, 60, 16, fn, **kw),
                         lambda: tlr.compress(A, **kw)):
                with pytest.raises(exc, match=match):
                    call()
        for tile, exc in ((40.7, TypeError), ("16", TypeError), (True, TypeError),
                          (0, ValueError)):
            with pytest.raises(exc, match="tile must be an int >= 1"):
                tlr.from_kernel(g, x, k, tile)
        with pytest.raises(TypeError, match="n must be an int >= 0"):
            tlr.from_function(g, 60.0, 16, fn)
        for ws in ("1GB", -1):
            with pytest.raises(ValueError, match="workspace must be a number of bytes"):
                tlr.cholesky(T, workspace=ws)
        with pytest.raises(TypeError, match="points must be real numbers, not complex128"):
            tlr.from_kernel(g, x * (1 + 1j), k, 16)
        for f in (cov.cross_covariance, lambda a, b, kern: cov.covariance_matrix(g, a, kern)):
            with pytest.raises(TypeError, match="must be real numbers, not complex128"):
                f(x * (1 + 1j), x, k)
        for m in ("dense", "aca"):
            with pytest.raises(TypeError, match="returned complex128 values"):
                tlr.from_function(g, 60, 16, lambda I, J: (1 + 1j) * fn(I, J), method=m)
        T2 = tlr.from_kernel(g, x, k, np.int64(16), tol=np.float64(1e-6), max_rank=np.int64(40),
                             workspace=2 ** 20, seed=np.int64(3))
        assert T2.nb == 16 and T2.tol == 1e-6


@pytest.mark.mpi
def test_points_that_differ_between_ranks_are_refused(comm):
    """Point sets drawn per rank built a patchwork matrix silently (from_kernel) or gave -inf
    (TLRLikelihood) (sweep 16, r_diffpts.py): the points (and gp's y) are now part of the
    call signature every rank agrees on, by a CRC-32."""
    if comm.size == 1:
        pytest.skip("needs 2+ ranks")
    from distla import gp, tlr
    from distla.grid import ProcessGrid
    g = ProcessGrid(comm=comm)
    k = cov.SquaredExponential(beta=0.1, nugget=1e-2)
    same = cov.points(60, 2, seed=1)
    mine = same.copy()
    mine[-1, 1] += 1e-12 * (comm.rank == comm.size - 1)      # one bit on one rank
    y = np.ones(60)
    calls = [lambda p: tlr.from_kernel(g, p, k, 16),
             lambda p: cov.covariance_matrix(g, p, k, block=16),
             lambda p: gp.TLRLikelihood(g, p, y, k, 16),
             lambda p: gp.DenseLikelihood(g, p, y, k, 16)]
    for call in calls:
        with pytest.raises(ValueError, match="different arguments.*points="):
            call(mine)
        call(same)
    with pytest.raises(ValueError, match="different arguments.*y="):
        gp.DenseLikelihood(g, same, y + (comm.rank == 0), k, 16)


@pytest.mark.mpi
def test_factor_capped_by_max_rank_warns():
    """Off-diagonal tiles of rank 1 compress within tol at max_rank=1, but the factor's
    tiles need more: the factorization caps them and says so on every rank (a solve off by
    0.3 came back without a warning)."""
    import warnings

    from distla import DistMatrix, LinAlgWarning, tlr
    n, nb = 240, 40
    rng = np.random.default_rng(0)
    a = np.zeros((n, n))
    for i in range(n // nb):
        for j in range(i):
            a[i * nb:(i + 1) * nb, j * nb:(j + 1) * nb] = 0.3 * np.outer(
                rng.standard_normal(nb), rng.standard_normal(nb))
    a = a + a.T
    a += (1.0 - np.linalg.eigvalsh(a).min()) * np.eye(n)
    for g in _grids():
        A = DistMatrix.from_global(g, a, block=nb)
        with warnings.catch_warnings():
            warnings.simplefilter("error")             # the build itself caps nothing
            T = tlr.compress(A, tol=1e-8, max_rank=1)
        assert T.info["capped"] == 0
        with pytest.warns(LinAlgWarning, match="capped the ranks of .* tile.*of the factor"):
            L = tlr.cholesky(T)
        assert L.info["factor_capped"] > 0
        with warnings.catch_warnings():
            warnings.simplefilter("error")             # without a cap: no warning
            assert tlr.cholesky(tlr.compress(A, tol=1e-8)).info["factor_capped"] == 0


@pytest.mark.mpi
@pytest.mark.parametrize("scale", [2.0 ** 520, 2.0 ** -520, 2.0 ** -600, 2.0 ** -1000])
def test_build_refuses_magnitudes_beyond_the_float_range(scale):
    """Entries whose squares overflow (||A||_F = inf: every tile was truncated to rank 0) or
    whose truncation threshold underflows (the tails of the singular values lost) give the
    same clear ValueError on every rank, for the dense and the tile-by-tile builds; the same
    matrix scaled back into range builds fine. Below ~2^-540 the squares underflow to exactly
    0, which read as a zero matrix: every tile cut to rank 0, a log-determinant off by 9,
    silently."""
    from distla import tlr
    x, k = _problem(150, seed=2)
    ks = k.replace(sigma=k.sigma * math.sqrt(scale), nugget=k.nugget * scale)
    for g in _grids():
        with pytest.raises(ValueError, match="scale the matrix by a power of 2"):
            tlr.from_kernel(g, x, ks, 30, tol=1e-8)
        A = cov.covariance_matrix(g, x, ks, block=30)
        with pytest.raises(ValueError, match="scale the matrix by a power of 2") as ei:
            tlr.compress(A, tol=1e-8)
        # the message gives the window, not ||A||_F from squares that under/overflowed (it
        # said "||A||_F = 0" for a nonzero matrix); the true norm lies outside the window
        lo, hi = map(float, re.search(r"within about \[(\S+), (\S+)\]", str(ei.value)).groups())
        f = A.norm("fro")
        assert lo < hi and not lo <= f <= hi, (lo, f, hi)
        assert tlr.from_kernel(g, x, k, 30, tol=1e-8).norm_fro > 0


@pytest.mark.mpi
def test_half_precision_is_refused_by_type():
    """float16 passed the 'float kind' check and was then refused as a magnitude out of range
    ('scale the matrix'): it is a TypeError naming the supported types."""
    from distla import tlr
    x, k = _problem(60, seed=3)
    g = next(_grids())
    with pytest.raises(TypeError, match="float32/float64 matrices, not float16"):
        tlr.from_kernel(g, x, k, 20, tol=1e-6, dtype=np.float16)


@pytest.mark.mpi
def test_float32_tol_below_its_floor_warns():
    import warnings

    from distla import LinAlgWarning, tlr
    x, k = _problem(120, seed=3)
    g = next(_grids())
    with pytest.warns(LinAlgWarning, match="below what float32 reaches") as w:
        T = tlr.from_kernel(g, x, k, 30, tol=1e-8, dtype=np.float32)
    assert T.tol == pytest.approx(10 * np.finfo(np.float32).eps)
    assert "use float64 for a tighter one" in str(w[0].message)
    with pytest.warns(LinAlgWarning, match="below what float64 reaches") as w:   # no advice
        tlr.from_kernel(g, x, k, 30, tol=1e-20)                        # to use float64
    assert "use float64" not in str(w[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tlr.from_kernel(g, x, k, 30, tol=1e-5, dtype=np.float32)
        tlr.from_kernel(g, x, k, 30, tol=1e-8)


@pytest.mark.mpi
def test_a_max_rank_that_meets_tol_is_not_reported_as_capping():
    """from_function compresses first at a share of a lower bound of ||A||_F (stricter than
    the final one) and counted the tiles capped there: max_rank = the rank an uncapped build
    needs warned 'capped N tiles' although the error met tol. Caps are judged at the final
    threshold now; a max_rank below what tol needs still warns."""
    import warnings

    from distla import LinAlgWarning, tlr
    x = cov.points(300, seed=1)
    k = cov.SquaredExponential(beta=0.5, nugget=1e-2)
    for g in _grids():
        free = tlr.from_kernel(g, x, k, 50, tol=1e-6)
        r = int(free.ranks.max)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            T = tlr.from_kernel(g, x, k, 50, tol=1e-6, max_rank=r)
        assert T.info["capped"] == 0
        with pytest.warns(LinAlgWarning, match="capped the ranks"):
            T = tlr.from_kernel(g, x, k, 50, tol=1e-6, max_rank=max(1, r // 3))
        assert T.info["capped"] > 0
