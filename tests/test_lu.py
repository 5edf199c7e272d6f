"""Tests for distla.linalg.lu: LU with partial pivoting, CALU (tournament pivoting), GENP.

Checks, as ScaLAPACK's xdlu tester and LAPACK measure them (eps = unit roundoff, as PDLAMCH):
  SRESID = ||A x - b||_inf / (||A||_inf ||x||_inf eps n)  <= 1.0  (LU.dat THRESH), not NaN;
  FRESID = ||P A - L U||_inf / (||A||_inf eps max(m, n))  <= 1.0 (LU.dat THRESH; ScaLAPACK's
           tester compares FRESID with the same THRESH);
  BERR   = max_i |b - A x|_i / (|A||x| + |b|)_i  <= max(100 x SciPy's BERR on the same matrix,
           1000 eps): comparable to LAPACK's GEPP.
Partial pivoting must reproduce SciPy's (LAPACK's) pivots on generic matrices. Exactly singular
matrices must raise SingularMatrixError with the right column on every rank.

Multi-rank tests loop over every grid shape of the communicator, both rank orders, and source
processes (0, 0) and (P-1, Q-1); sizes are not multiples of the block size.
"""
from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg as sl

SEED = 1234
_GRIDS: dict = {}


# ---------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------
def _eps(dtype):
    return float(np.finfo(np.dtype(dtype)).eps) / 2.0


def _grids(srcs=True):
    """(grid, src) pairs: every shape, both orders, src (0, 0) and (P-1, Q-1). Collective."""
    from mpi4py import MPI

    from distla import ProcessGrid
    from distla.testing import grid_shapes
    out = []
    for P, Q in grid_shapes(MPI.COMM_WORLD.size):
        for order in ("row", "col"):
            key = (P, Q, order)
            if key not in _GRIDS:
                _GRIDS[key] = ProcessGrid(P, Q, order=order)
            g = _GRIDS[key]
            out.append((g, (0, 0)))
            if srcs and (P, Q) != (1, 1):
                out.append((g, (P - 1, Q - 1)))
    return out


def _dist(g, a, nb, src=(0, 0), rb=None):
    from distla import DistMatrix
    a = np.asarray(a)
    if a.ndim == 1:
        a = a.reshape(-1, 1)
    return DistMatrix.from_global(g, a, block=(nb, nb if rb is None else rb), src=src)


def _rng(*key):
    return np.random.default_rng([SEED, *key])


def _random(n, m=None, key=0, dtype=np.float64):
    return _rng(1, key).standard_normal((n if m is None else m, n)).astype(dtype)


def _conditioned(n, cond, key=0):
    r = _rng(2, key)
    U, _ = np.linalg.qr(r.standard_normal((n, n)))
    V, _ = np.linalg.qr(r.standard_normal((n, n)))
    s = np.logspace(0, -np.log10(cond), n)
    return (U * s) @ V.T


def _berr_np(a, x, b):
    """LAPACK's componentwise backward error (xGERFS guard), NumPy, one process."""
    r = np.abs(b - a @ x)
    den = np.abs(a) @ np.abs(x) + np.abs(b)
    real = np.finfo(a.dtype).dtype
    safe1 = (a.shape[0] + 1) * float(np.finfo(real).tiny)
    safe2 = safe1 / _eps(real)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(den > safe2, r / den, (r + safe1) / (den + safe1))
    return float(q.max())


def _same_everywhere(comm, arr):
    return len(set(comm.allgather(np.asarray(arr).tobytes()))) == 1


def _check_solve(A, F, a, B, b, *, trans=False, sres_max=1.0, berr_factor=100.0):
    """SRESID and BERR (vs SciPy GEPP on the same matrix) of lu_solve(F, B)."""
    from distla.checks import backward_error, passes, solve_residual
    from distla.linalg import lu_solve
    X = lu_solve(F, B, trans=trans)
    At = A.transpose() if trans else A
    sres = solve_residual(At, X, B)
    assert passes(sres, sres_max), f"SRESID {sres} > {sres_max} (trans={trans})"
    berr = backward_error(At, X, B)
    at = a.T if trans else a
    xs = sl.lu_solve(sl.lu_factor(a), b, trans=1 if trans else 0)
    berr_ref = _berr_np(at, xs, b)
    bound = max(berr_factor * berr_ref, 1000 * _eps(a.dtype))
    assert passes(berr, bound), f"BERR {berr} > {bound} (SciPy {berr_ref}, trans={trans})"
    assert not np.isnan(X.to_global(root=None)).any()
    return X


def _check_factor(A, F, fres_max=1.0):
    from distla.checks import factor_residual_lu, passes
    fres = factor_residual_lu(A, F)
    assert passes(fres, fres_max), f"FRESID {fres} > {fres_max}"
    return fres


# ---------------------------------------------------------------------------------------
# serial: pivot bookkeeping and local kernels
# ---------------------------------------------------------------------------------------
def _brute_swaps(piv, start, m):
    order = np.arange(m)
    for i, p in enumerate(piv):
        order[start + i], order[p] = order[p], order[start + i]
    return order


def test_swaps_to_moves_matches_sequential_swaps():
    from distla.linalg._pivoting import swaps_to_moves
    r = _rng(3)
    for _trial in range(200):
        m = int(r.integers(1, 40))
        start = int(r.integers(0, m))
        k = int(r.integers(0, m - start + 1))
        piv = [int(r.integers(start + i, m)) for i in range(k)]
        order = _brute_swaps(piv, start, m)
        dest, src = swaps_to_moves(np.array(piv, dtype=np.int64), start)
        expect = np.flatnonzero(order != np.arange(m))
        assert np.array_equal(dest, expect)
        assert np.array_equal(src, order[expect])
        assert len(dest) <= 2 * k


def test_suffix_moves_compose_later_steps():
    from distla.linalg._pivoting import suffix_moves
    r = _rng(7)
    for m, kmax, nb in ((30, 30, 4), (41, 23, 5), (17, 17, 17), (25, 25, 1)):
        piv = np.array([int(r.integers(i, m)) for i in range(kmax)], dtype=np.int64)
        seen = []
        for k, dest, src in suffix_moves(piv, nb, m):
            start = (k + 1) * nb
            order = _brute_swaps(piv[start:], start, m) if start < kmax else np.arange(m)
            expect = np.flatnonzero(order != np.arange(m))
            assert np.array_equal(dest, expect) and np.array_equal(src, order[expect])
            seen.append(k)
        assert seen == list(range(-(-kmax // nb) - 1, -1, -1))


def test_winners_to_ipiv_brings_winners_on_top():
    from distla.linalg._pivoting import winners_to_ipiv
    r = _rng(4)
    for _trial in range(200):
        m = int(r.integers(1, 50))
        start = int(r.integers(0, m))
        k = int(r.integers(0, m - start + 1))
        winners = r.choice(np.arange(start, m), size=k, replace=False)
        piv = winners_to_ipiv(winners, start)
        assert all(piv[i] >= start + i for i in range(k))
        order = _brute_swaps(piv, start, m)
        assert np.array_equal(order[start:start + k], winners)
        assert np.array_equal(order[:start], np.arange(start))


def test_ipiv_to_perm_matches_scipy():
    from distla.linalg._pivoting import ipiv_to_perm
    a = _random(30, key=5)
    lu, piv = sl.lu_factor(a)
    perm = ipiv_to_perm(piv, 30)
    L = np.tril(lu, -1) + np.eye(30)
    U = np.triu(lu)
    assert np.allclose(a[perm], L @ U)


@pytest.mark.parametrize("n", [0, 1, 2, 7, 300])
def test_apply_swaps_replays_the_interchanges(n):
    """apply_swaps (one dlaswp over the indices) equals the interchanges replayed one by one,
    for pivot vectors shorter than n, of full length, with and without repeats."""
    from distla.linalg._pivoting import apply_swaps
    r = _rng(11)
    for k in sorted({0, 1, n // 2, n} - {n + 1}):
        for _ in range(5):
            piv = np.array([r.integers(i, n) for i in range(min(k, n))], dtype=np.int64)
            assert np.array_equal(apply_swaps(piv, n), _brute_swaps(piv, 0, n))


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128])
def test_laswp_and_genp_local_kernels(dtype):
    from distla.device import get_backend
    from distla.device.base import Backend
    from distla.linalg._pivoting import apply_swaps
    be = get_backend("cpu")
    r = _rng(6)
    a = np.asfortranarray(r.standard_normal((20, 9)).astype(dtype))
    piv = np.array([3, 7, 5, 19, 4], dtype=np.int64)
    ref = a[_brute_swaps(piv, 2, 20)]
    b = a.copy(order="F")
    be.laswp(b[:, 1:8], piv, 2)  # a strided column-major view (LAPACK laswp)
    assert np.array_equal(b[:, 1:8], ref[:, 1:8])
    assert np.array_equal(b[:, [0, 8]], a[:, [0, 8]])
    c = a.copy(order="F")
    Backend.laswp(be, c[:, 1:8], piv, 2)  # the generic composed-permutation path (GPU's)
    assert np.array_equal(c, b)
    assert np.array_equal(apply_swaps([2, 1, 2], 3), [2, 1, 0])
    n = 37  # diagonally dominant: GENP is stable; several recursion levels and leaves
    d = (r.standard_normal((n, n)) + 4 * n * np.eye(n)).astype(dtype)
    f = np.asfortranarray(d)
    be._getrf_nopiv(f, leaf=4)
    L = np.tril(f, -1) + np.eye(n)
    U = np.triu(f)
    assert np.linalg.norm(L @ U - d, np.inf) <= 50 * n * _eps(dtype) * np.linalg.norm(d, np.inf)


@pytest.mark.parametrize("device", ["cpu", pytest.param("gpu", marks=pytest.mark.gpu)])
def test_take_and_put_rows_on_column_major_views(device):
    """take_rows/put_rows == fancy row indexing, on strided column-major views (the swaps'
    gathers and scatters; on GPU they walk columns)."""
    from distla.device import get_backend, gpu_available
    if device == "gpu" and not gpu_available():
        pytest.skip("no GPU")
    be = get_backend(device)
    xp = be.xp
    r = _rng(8)
    a = np.asfortranarray(r.standard_normal((23, 11)))
    idx = np.array([17, 2, 9, 19, 0, 5], dtype=np.int64)
    A = xp.asfortranarray(xp.asarray(a))
    view = A[3:, 2:9]  # strided: ld 23
    out = xp.zeros((40, 7), order="F")[5:11]  # a strided output view
    be.take_rows(view, xp.asarray(idx), out)
    assert np.array_equal(get_backend(device).to_host(out), a[3:, 2:9][idx])
    vals = r.standard_normal((len(idx), 7))
    be.put_rows(view, xp.asarray(idx), xp.asfortranarray(xp.asarray(vals)))
    ref = a.copy()
    ref[3:, 2:9][idx] = vals
    assert np.array_equal(get_backend(device).to_host(A), ref)


# ---------------------------------------------------------------------------------------
# MPI: accuracy on every grid
# ---------------------------------------------------------------------------------------
@pytest.mark.mpi
@pytest.mark.timeout(300)
def test_random_matrices_all_grids():
    """Random 45 x 45 (nb 6), every grid/order/src; partial, tournament (binary, flat);
    lookahead 0 and 1; pivots equal SciPy's; solve and transposed solve."""
    from mpi4py import MPI

    from distla.linalg import lu_factor
    comm = MPI.COMM_WORLD
    n, nb = 45, 6
    a = _random(n, key=10)
    b = _rng(11).standard_normal((n, 3))
    _, piv_ref = sl.lu_factor(a)
    for i, (g, src) in enumerate(_grids()):
        A = _dist(g, a, nb, src)
        B = _dist(g, b, nb, src, rb=2)
        for pivoting, tree in (("partial", "binary"), ("tournament", "binary"),
                               ("tournament", "flat")):
            F = lu_factor(A, pivoting=pivoting, tree=tree, lookahead=i % 2)
            assert F.pivoting == pivoting
            assert F.piv.dtype == np.int64 and F.piv.shape == (n,)
            assert _same_everywhere(comm, F.piv)
            assert all(F.piv[j] >= j for j in range(n))
            if pivoting == "partial":
                assert np.array_equal(F.piv, piv_ref), "pivots differ from LAPACK's"
            _check_factor(A, F)
            _check_solve(A, F, a, B, b)
            _check_solve(A, F, a, B, b, trans=True)
            gf = F.growth_factor()
            assert 1.0 <= gf < 10.0 * n
        # A itself is untouched (overwrite_a=False)
        assert np.array_equal(A.to_global(root=None), a)


@pytest.mark.mpi
@pytest.mark.timeout(300)
def test_growth_factor_and_lu_match_scipy():
    """Partial pivoting reproduces LAPACK's L and U and growth factor (same pivots)."""
    from distla.linalg import lu_factor
    n, nb = 38, 5
    a = _random(n, key=12)
    lu_ref, piv_ref = sl.lu_factor(a)
    g_ref = np.abs(np.triu(lu_ref)).max() / np.abs(a).max()
    for g, src in _grids(srcs=False):
        F = lu_factor(_dist(g, a, nb, src))
        lu = F.lu.to_global(root=None)
        assert np.allclose(lu, lu_ref, rtol=1e-10, atol=1e-12)
        assert F.growth_factor() == pytest.approx(g_ref, rel=1e-10)
        assert np.array_equal(F.perm, _perm_of(piv_ref, n))


def _perm_of(piv, m):
    order = np.arange(m)
    for i, p in enumerate(piv):
        order[i], order[p] = order[p], order[i]
    return order


@pytest.mark.mpi
@pytest.mark.timeout(300)
@pytest.mark.parametrize("cond", [1e4, 1e14])
def test_prescribed_condition(cond):
    """A = U diag(s) V^T with cond(A) = 1e4, 1e14: backward errors like GEPP's (forward error
    is not checked: it is cond-limited)."""
    from distla.linalg import lu_factor
    n, nb = 40, 7
    a = _conditioned(n, cond, key=int(np.log10(cond)))
    b = _rng(13).standard_normal((n, 2))
    for i, (g, src) in enumerate(_grids()):
        A = _dist(g, a, nb, src)
        B = _dist(g, b, nb, src)
        for pivoting in ("partial", "tournament"):
            F = lu_factor(A, pivoting=pivoting,
                          tree=("binary", "flat")[i % 2] if pivoting == "tournament" else
                          "binary")
            _check_factor(A, F)
            _check_solve(A, F, a, B, b)


def _structured(kind, n):
    r = _rng(20, len(kind))
    if kind == "upper":
        return np.triu(r.standard_normal((n, n))) + 2 * np.diag(np.sign(r.standard_normal(n)))
    if kind == "lower":
        return np.tril(r.standard_normal((n, n))) + 2 * np.diag(np.sign(r.standard_normal(n)))
    if kind == "diagonal":
        return np.diag(r.uniform(0.5, 2.0, n) * np.sign(r.standard_normal(n)))
    if kind == "tiny":
        return 1e-300 * r.standard_normal((n, n))
    if kind == "huge":
        return 1e300 * r.standard_normal((n, n))
    if kind == "dominant":
        return r.standard_normal((n, n)) + 2 * n * np.eye(n)
    raise ValueError(kind)


@pytest.mark.mpi
@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", ["upper", "lower", "diagonal", "tiny", "huge"])
def test_structured_and_scaled(kind):
    """Triangular, diagonal, and random matrices scaled near underflow (1e-300) and overflow
    (1e300); partial and tournament pivoting, plus GENP where no pivoting is needed."""
    from distla.linalg import lu_factor
    n, nb = 33, 4
    a = _structured(kind, n)
    b = _rng(21).standard_normal((n, 2))
    _, piv_ref = sl.lu_factor(a)
    pivs = ["partial", "tournament"] + (["none"] if kind in ("upper", "diagonal") else [])
    for g, src in _grids():
        A = _dist(g, a, nb, src)
        B = _dist(g, b, nb, src)
        for pivoting in pivs:
            F = lu_factor(A, pivoting=pivoting)
            if pivoting == "partial":
                assert np.array_equal(F.piv, piv_ref)
            if kind in ("upper", "diagonal"):  # nothing to pivot
                assert np.array_equal(F.piv, np.arange(n))
            _check_factor(A, F)
            _check_solve(A, F, a, B, b)
            if kind == "diagonal":
                assert np.array_equal(F.lu.to_global(root=None), a)


@pytest.mark.mpi
@pytest.mark.timeout(300)
def test_float32_and_complex():
    from distla.linalg import lu_factor
    n, nb = 41, 6
    a32 = _random(n, key=30, dtype=np.float32)
    b32 = _rng(31).standard_normal((n, 2)).astype(np.float32)
    r = _rng(32)
    ac = (r.standard_normal((n, n)) + 1j * r.standard_normal((n, n))).astype(np.complex128)
    bc = (r.standard_normal((n, 1)) + 1j * r.standard_normal((n, 1))).astype(np.complex128)
    for i, (g, src) in enumerate(_grids()):
        for a, b in ((a32, b32), (ac, bc)):
            A = _dist(g, a, nb, src)
            B = _dist(g, b, nb, src)
            for pivoting in ("partial", "tournament"):
                F = lu_factor(A, pivoting=pivoting, lookahead=i % 2)
                assert F.lu.dtype == a.dtype
                _check_factor(A, F)
                _check_solve(A, F, a, B, b)
                _check_solve(A, F, a, B, b, trans=True)


@pytest.mark.mpi
@pytest.mark.timeout(300)
def test_genp_diagonally_dominant():
    from distla.checks import passes, solve_residual
    from distla.linalg import lu_factor, solve_lu
    n, nb = 43, 5
    a = _structured("dominant", n)
    b = _rng(40).standard_normal((n, 2))
    for g, src in _grids():
        A = _dist(g, a, nb, src)
        B = _dist(g, b, nb, src)
        F = lu_factor(A, pivoting="none")
        assert F.pivoting == "none"
        assert np.array_equal(F.piv, np.arange(n))
        _check_factor(A, F)
        _check_solve(A, F, a, B, b)
        X = solve_lu(A, B, pivoting="none")
        assert passes(solve_residual(A, X, B), 1.0)


@pytest.mark.mpi
@pytest.mark.timeout(300)
def test_rectangular_factorization():
    """m > n and m < n: FRESID and LAPACK's pivots."""
    from distla.linalg import lu_factor
    nb = 5
    for m, n in ((37, 22), (21, 34)):
        a = _rng(50, m).standard_normal((m, n))
        _, piv_ref = sl.lu_factor(a)
        for g, src in _grids():
            A = _dist(g, a, nb, src)
            for pivoting in ("partial", "tournament", "none"):
                F = lu_factor(A, pivoting=pivoting)
                assert F.piv.shape == (min(m, n),)
                assert F.perm.shape == (m,)
                if pivoting == "partial":
                    assert np.array_equal(F.piv, piv_ref)
                if pivoting != "none":
                    _check_factor(A, F)


@pytest.mark.mpi
@pytest.mark.timeout(300)
def test_singular_raises_on_every_rank():
    """A zeroed column c: SingularMatrixError(index=c) on every rank, for every pivoting (no
    hang, no NaN result); lu_solve is never reached."""
    from mpi4py import MPI

    from distla import SingularMatrixError
    from distla.linalg import lu_factor, solve_lu
    comm = MPI.COMM_WORLD
    n, nb = 30, 4
    base = _structured("dominant", n)  # GENP-safe apart from the zeroed column
    grids = _grids()
    for ci, c in enumerate((0, 3, 4, 13, n - 1)):
        a = base.copy()
        a[:, c] = 0.0
        for gi, (g, src) in enumerate(grids):
            if (gi + ci) % 2:  # half the grids per column position keeps the test short
                continue
            A = _dist(g, a, nb, src)
            for pivoting in ("partial", "tournament", "none"):
                with pytest.raises(SingularMatrixError) as ei:
                    lu_factor(A, pivoting=pivoting)
                assert ei.value.index == c, (pivoting, c, ei.value.index)
                assert isinstance(ei.value, np.linalg.LinAlgError)
                assert _same_everywhere(comm, np.array([ei.value.index]))
    # two zero columns: the first one is reported; solve_lu raises too
    a = base.copy()
    a[:, [9, 21]] = 0.0
    g, src = grids[-1]
    A = _dist(g, a, nb, src)
    B = _dist(g, np.ones((n, 1)), nb, src)
    for pivoting in ("partial", "tournament", "none"):
        with pytest.raises(SingularMatrixError) as ei:
            solve_lu(A, B, pivoting=pivoting)
        assert ei.value.index == 9


@pytest.mark.mpi
@pytest.mark.timeout(300)
def test_edge_sizes():
    """n = 1, n < nb, n = nb, one block per process, nrhs = 1."""
    from distla.linalg import lu_factor
    for n, nb in ((1, 4), (3, 8), (8, 8), (9, 8), (17, 2)):
        a = _random(n, key=60 + n)
        b = _rng(61).standard_normal((n, 1))
        _, piv_ref = sl.lu_factor(a)
        for g, src in _grids(srcs=False):
            A = _dist(g, a, nb, src)
            B = _dist(g, b, nb, src)
            for pivoting in ("partial", "tournament"):
                F = lu_factor(A, pivoting=pivoting)
                if pivoting == "partial":
                    assert np.array_equal(F.piv, piv_ref)
                _check_factor(A, F)
                # n = 1: x = b / a alone leaves |a x - b| up to ~2 eps |b| (SRESID <= 2;
                # SciPy's own is 1.097 on this matrix)
                _check_solve(A, F, a, B, b, sres_max=1.0 if n > 1 else 2.0)


@pytest.mark.mpi
@pytest.mark.timeout(300)
def test_overwrite_flags_and_profile(monkeypatch):
    from distla.linalg import _local, lu_factor, lu_solve
    from distla.trace import Tracer
    monkeypatch.setattr(_local, "LOCAL_UP_TO", {k: 0 for k in _local.LOCAL_UP_TO})
    n, nb = 26, 4
    a = _random(n, key=70)
    b = _rng(71).standard_normal((n, 2))
    g, src = _grids()[-1]
    A = _dist(g, a, nb, src)
    B = _dist(g, b, nb, src)
    with Tracer() as tr:
        F = lu_factor(A, overwrite_a=True)
    assert F.lu is A
    assert {"panel", "update", "bcast", "trsm", "swap"} <= set(tr.counts())
    assert tr.counts()["panel"] == -(-n // nb)
    X = lu_solve(F, B, overwrite_b=True)
    ref = sl.lu_solve(sl.lu_factor(a), b)
    assert np.allclose(X.to_global(root=None), ref, rtol=1e-9, atol=1e-12)
    assert np.allclose(B.to_global(root=None), ref, rtol=1e-9, atol=1e-12)  # B reused
    F2 = F.solve  # method form
    X2 = F2(_dist(g, b, nb, src))
    assert np.allclose(X2.to_global(root=None), ref, rtol=1e-9, atol=1e-12)


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_bad_input_raises_everywhere():
    from distla import DistMatrix
    from distla.linalg import lu_factor, lu_solve, solve_lu
    g, src = _grids()[-1]
    a = _random(12, key=80)
    A = _dist(g, a, 4, src)
    with pytest.raises(ValueError, match="square blocks"):
        lu_factor(DistMatrix.from_global(g, a, block=(4, 3)))
    with pytest.raises(ValueError, match="pivoting"):
        lu_factor(A, pivoting="rook")
    with pytest.raises(ValueError, match="tree"):
        lu_factor(A, pivoting="tournament", tree="ternary")
    for pivoting in ("partial", "none"):     # a tree that would do nothing: refused
        with pytest.raises(ValueError, match="tournament pivoting"):
            lu_factor(A, pivoting=pivoting, tree="flat")
    with pytest.raises(ValueError, match="lookahead"):
        lu_factor(A, lookahead=-1)
    with pytest.raises(TypeError):
        lu_factor(a)
    F = lu_factor(A)
    Bo = DistMatrix.from_global(g, np.ones((12, 1)), block=(3, 3))   # another row blocking:
    Xo = lu_solve(F, Bo)                                              # redistributed inside
    assert Xo.same_layout(Bo)
    np.testing.assert_allclose(a @ Xo.to_global(None), np.ones((12, 1)), atol=1e-10)
    with pytest.raises(ValueError, match="rows"):
        lu_solve(F, _dist(g, np.ones((11, 1)), 4, src))
    with pytest.raises(TypeError, match="dtype"):
        lu_solve(F, _dist(g, np.ones((12, 1), dtype=np.float32), 4, src))
    rect = _dist(g, _rng(81).standard_normal((12, 8)), 4, src)
    with pytest.raises(ValueError, match="square"):
        lu_solve(lu_factor(rect), _dist(g, np.ones((12, 1)), 4, src))
    with pytest.raises(ValueError, match="square"):
        solve_lu(rect, _dist(g, np.ones((12, 1)), 4, src))


@pytest.mark.mpi
@pytest.mark.timeout(300)
def test_larger_case():
    """One bigger case (n = 200, nb = 16) on the default grid: many steps, every process row
    and column owns several blocks."""
    from mpi4py import MPI

    from distla import ProcessGrid
    from distla.linalg import lu_factor
    g = ProcessGrid(comm=MPI.COMM_WORLD)
    n, nb = 200, 16
    a = _random(n, key=90)
    b = _rng(91).standard_normal((n, 1))
    _, piv_ref = sl.lu_factor(a)
    A = _dist(g, a, nb)
    B = _dist(g, b, nb)
    for pivoting in ("partial", "tournament"):
        F = lu_factor(A, pivoting=pivoting)
        if pivoting == "partial":
            assert np.array_equal(F.piv, piv_ref)
        _check_factor(A, F)
        _check_solve(A, F, a, B, b)


@pytest.mark.mpi
@pytest.mark.gpu
@pytest.mark.timeout(300)
def test_gpu_matches_cpu():
    """GPU ranks (CuPy/NCCL): same pivots as CPU for partial pivoting, residuals pass."""
    from distla.device import gpu_available
    if not gpu_available():
        pytest.skip("no GPU")
    from distla.linalg import lu_factor
    n, nb = 64, 8
    a = _random(n, key=100)
    b = _rng(101).standard_normal((n, 2))
    _, piv_ref = sl.lu_factor(a)
    for i, (g, src) in enumerate(_grids()):
        A = _dist(g, a, nb, src).to("gpu")
        B = _dist(g, b, nb, src).to("gpu")
        for pivoting in ("partial", "tournament"):
            F = lu_factor(A, pivoting=pivoting, lookahead=(i // 2) % 2,
                          tree=("binary", "flat")[i % 2] if pivoting == "tournament" else
                          "binary")
            if pivoting == "partial":
                assert np.array_equal(F.piv, piv_ref)
            _check_factor(A, F)
            _check_solve(A, F, a, B, b)
        d = _structured("dominant", n)
        F = lu_factor(_dist(g, d, nb, src).to("gpu"), pivoting="none")
        _check_factor(_dist(g, d, nb, src).to("gpu"), F)


@pytest.mark.mpi
@pytest.mark.parametrize("la", [0, 1])
def test_u12_by_inverse_and_gemm(monkeypatch, la):
    """U12 = L11^-1 A12 as the inverse (a trsm on the identity) and one GEMM -- what GPU
    ranks do in the tensor-core update modes -- on CPU ranks: the same pivots and factors
    to working precision for every pivoting, on every grid, blocks that do not divide n, a
    corner source."""
    from distla.device.cpu import CpuBackend
    from distla.linalg import lu_factor
    n, nb = 41, 6
    a = _random(n, key=301)
    dominant = a + n * np.eye(n)                 # no pivoting needs no growth
    for g, src in _grids():
        As = {piv: _dist(g, dominant if piv == "none" else a, nb, src)
              for piv in ("partial", "tournament", "none")}
        refs = {piv: lu_factor(A, pivoting=piv, lookahead=la) for piv, A in As.items()}
        with monkeypatch.context() as mp:
            mp.setattr(CpuBackend, "inverse_panel", lambda self, compute, driver: True)
            for piv, ref in refs.items():
                A = As[piv]
                F = lu_factor(A, pivoting=piv, lookahead=la)
                assert np.array_equal(F.piv, ref.piv), (g, src, piv)
                _check_factor(A, F)
                np.testing.assert_allclose(F.lu.to_global(None), ref.lu.to_global(None),
                                           rtol=0, atol=1e-11)


@pytest.mark.mpi
def test_gemm_option_validated_and_cpu_float32_unchanged():
    """The tensor-core gemm modes are float32-only (clear errors first); on CPU ranks every
    one of them is plain float32."""
    from distla.linalg import lu_factor
    n, nb = 40, 8
    a = _random(n, key=300).astype(np.float32)
    for g, src in _grids(srcs=False):
        A = _dist(g, a, nb, src)
        with pytest.raises(ValueError, match="gemm"):
            lu_factor(A, gemm="fp8")
        with pytest.raises(TypeError, match="float32"):
            lu_factor(A.astype(np.float64), gemm="tf32x3")
        F2 = lu_factor(A, pivoting="partial")
        for mode in ("tf32x3", "fp16x3", "tf32", "fp16", "bf16"):
            F1 = lu_factor(A, pivoting="partial", gemm=mode)
            assert np.array_equal(F1.piv, F2.piv)
            assert np.array_equal(F1.lu.to_global(root=None), F2.lu.to_global(root=None))


@pytest.mark.mpi
@pytest.mark.gpu
def test_gpu_tf32x3_update_is_float32_accurate():
    """On GPU ranks the 3xTF32 update keeps float32 accuracy: GENP/GEPP factorization residuals
    stay within a small factor of plain float32 ones, and the split is exact."""
    from distla.device import get_backend, gpu_available
    from distla.linalg import lu_factor
    if not gpu_available():
        pytest.skip("no GPU")
    import cupy as cp
    be = get_backend("gpu")
    x = cp.asarray(_rng(310).standard_normal((300, 70)), dtype=cp.float32)
    y = cp.asarray(_rng(311).standard_normal((70, 90)), dtype=cp.float32)
    X3, Y3 = be.split_tf32x3(x, y)
    hi, lo = X3[:, :70], X3[:, 140:]
    assert int(cp.count_nonzero(hi.view(cp.uint32) & 0x1FFF)) == 0     # TF32-exact
    assert bool(cp.all(hi + lo == x)) and bool(cp.all(X3[:, 70:140] == hi))
    assert bool(cp.all(Y3[:70] + Y3[70:140] == y)) and bool(cp.all(Y3[140:] == Y3[:70]))
    c = cp.zeros((300, 90), cp.float32, order="F")
    be.gemm("N", "N", 1.0, X3, Y3, 0.0, c, tf32=True)
    ref = x.get().astype(np.float64) @ y.get().astype(np.float64)
    rel = np.abs(c.get() - ref).max() / (np.abs(x.get()).max() * np.abs(y.get()).max() * 70)
    assert rel < 2.0 ** -19
    n, nb = 192, 32
    a = _random(n, key=312).astype(np.float32)
    d = _structured("dominant", n).astype(np.float32)
    for g, src in _grids(srcs=False):
        for mat, piv in ((a, "partial"), (d, "none")):
            A = _dist(g, mat, nb, src).to("gpu")
            for mode in ("tf32x3", "fp16x3"):      # (fp16x3: two fp16 GEMMs of halves)
                F = lu_factor(A, pivoting=piv, gemm=mode)
                _check_factor(A, F, fres_max=8.0)


@pytest.mark.mpi
def test_lu_solve_trans_spellings_and_conjugate_transpose():
    """trans as SciPy's lu_solve: 0/1/2, booleans, 'N'/'T'/'C'; 'C' solves A^H x = b for
    complex A (and equals 'T' for real A); bad values are rejected on every rank."""
    from distla.linalg import lu_factor, lu_solve
    n, nb = 30, 4
    rng = _rng(400)
    a = rng.standard_normal((n, n)) + 1j * rng.standard_normal((n, n))
    b = rng.standard_normal((n, 2)) + 1j * rng.standard_normal((n, 2))
    for g, src in _grids(srcs=False):
        A, B = _dist(g, a, nb, src), _dist(g, b, nb, src)
        F = lu_factor(A)
        for trans, op in ((0, a), ("N", a), (1, a.T), (True, a.T), ("t", a.T), (2, a.conj().T),
                          ("C", a.conj().T)):
            x = lu_solve(F, B, trans=trans).to_global(None)
            ref = sl.lu_solve(sl.lu_factor(a), b, trans={"N": 0, "T": 1, "C": 2}.get(
                str(trans).upper(), trans if not isinstance(trans, bool) else int(trans)))
            np.testing.assert_allclose(op @ x, b, atol=1e-10 * np.abs(b).max() * n)
            np.testing.assert_allclose(x, ref, rtol=1e-8, atol=1e-10)
        with pytest.raises(ValueError, match="trans"):
            lu_solve(F, B, trans="H")
        ar = a.real.copy()
        Fr = lu_factor(_dist(g, ar, nb, src))
        Br = _dist(g, b.real.copy(), nb, src)
        np.testing.assert_array_equal(lu_solve(Fr, Br, trans="C").to_global(None),
                                      lu_solve(Fr, Br, trans="T").to_global(None))


@pytest.mark.parametrize("shape", [(40, 40), (45, 31), (31, 45)])
def test_one_rank_local_library_and_loop_agree(shape, monkeypatch):
    """1 x 1: the local library (getrf) and the step loop give the same factors and pivots,
    and the same singular-column index."""
    from mpi4py import MPI

    from distla import DistMatrix, ProcessGrid, SingularMatrixError
    from distla.linalg import _local, lu_factor
    from distla.trace import Tracer
    g = ProcessGrid(1, 1, MPI.COMM_SELF)
    a = _random(shape[1], shape[0], key=81)
    out = {}
    for mode, limit in (("local", 1 << 40), ("loop", 0)):
        monkeypatch.setattr(_local, "LOCAL_UP_TO", {k: limit for k in _local.LOCAL_UP_TO})
        with Tracer() as tr:
            F = lu_factor(DistMatrix.from_global(g, a, block=8))
        assert ("getrf" in tr.counts()) == (mode == "local")
        out[mode] = (F.lu.to_global(root=None), F.piv)
        sq = _random(30, 30, key=82)
        sq[:, 17] = 0.0
        with pytest.raises(SingularMatrixError) as e:
            lu_factor(DistMatrix.from_global(g, sq, block=8))
        assert e.value.index == 17
    assert np.array_equal(out["local"][1], out["loop"][1])
    assert np.allclose(out["local"][0], out["loop"][0], rtol=1e-12, atol=1e-12)


@pytest.mark.mpi
def test_genp_warns_when_multipliers_and_growth_together_lose_the_digits(grids):
    """A standard-normal A of n = 300: GENP's largest multiplier (6e4) and element growth
    (3e4) are each below 1 / sqrt(eps), but the solution's scaled residual is 300 times
    ScaLAPACK's threshold; the solve now warns (the product is the backward error bound's
    factor). A diagonally dominant A (multipliers and growth near 1) still solves quietly."""
    import warnings

    from distla import DistMatrix, LinAlgWarning
    from distla.linalg import solve
    n = 300
    a = np.random.default_rng(1).standard_normal((n, n))
    dd = a + 2 * n * np.eye(n)
    b = np.ones((n, 1))
    for g in grids:
        with pytest.warns(LinAlgWarning, match=r"max \|L\| max \|U\| / max \|A\|"):
            solve(DistMatrix.from_global(g, a, block=16),
                  DistMatrix.from_global(g, b, block=16), method="genp")
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            x = solve(DistMatrix.from_global(g, dd, block=16),
                      DistMatrix.from_global(g, b, block=16), method="genp")
        np.testing.assert_allclose(dd @ x.to_global(None), b, atol=1e-12)
