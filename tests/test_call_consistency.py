"""Ranks calling alike, factors left as they were, and scipy's conversions (tenth and eleventh
sweeps): RBT, the constructors and TLR refuse arguments that differ between ranks on every
rank (the RBT ones hung); a storage reused from LU for Cholesky is a Cholesky factor;
rcond(A, F) leaves F as it was; empty systems solve with every method; integer, bool and
float16 arrays become float matrices; norm(None) is the Frobenius norm."""
import numpy as np
import pytest

from distla import DistMatrix, linalg, tlr

N, NB = 24, 4


def _spd(n, seed=1):
    a = np.random.default_rng(seed).standard_normal((n, n))
    return a @ a.T + n * np.eye(n)


@pytest.mark.mpi
def test_arguments_that_differ_between_ranks_are_refused_everywhere(grids, comm):
    """Each call below once hung or built a patchwork when ranks passed different values."""
    if comm.size == 1:
        pytest.skip("needs two ranks or more")
    r = comm.rank
    g = grids[0]
    a = _spd(N)
    A = DistMatrix.from_global(g, a, block=(NB, NB))
    B = DistMatrix.from_global(g, a[:, :2], block=(NB, NB))
    calls = [
        lambda: linalg.rbt_solve(A, B, depth=1 + r % 2),
        lambda: linalg.rbt_solve(A, B, max_iter=0 if r == 0 else 30),
        lambda: linalg.rbt_solve(A, B, refine=r == 0),
        lambda: linalg.rbt_solve(A, B, seed=r),
        lambda: linalg.rbt_transform(A, depth=1 + r % 2),
        lambda: DistMatrix.from_global(g, a if r == 0 else None, block=(NB + r % 2, NB)),
        lambda: DistMatrix.from_global(g, a, root=r),
        lambda: DistMatrix.from_global(g, a, src=(0, r % g.npcol) if r else (0, 0)),
        lambda: DistMatrix.random(g, (N, N), (NB + r % 2, NB)),
        lambda: DistMatrix.zeros(g, (N, N + r % 2), (NB, NB)),
        lambda: tlr.compress(A, tol=10.0 ** -(6 + r)),
        lambda: tlr.cholesky(tlr.compress(A), workspace=(1 << 20) * (1 + r)),
    ]
    for i, call in enumerate(calls):
        if i == 7 and g.npcol == 1:
            continue                       # one source column only
        with pytest.raises(ValueError, match="different arguments"):
            call()


@pytest.mark.mpi
def test_storage_reused_from_lu_for_cholesky_has_a_log_determinant(grids):
    from distla.linalg import cholesky, logdet, lu_factor
    a = _spd(N)
    for g in grids:
        A = DistMatrix.from_global(g, a, block=(NB, NB))
        lu_factor(A, overwrite_a=True)
        with pytest.raises(ValueError, match="lu_factor"):
            logdet(A)                      # an LU matrix is still refused
        A.local[...] = DistMatrix.from_global(g, a, block=(NB, NB)).local
        L = cholesky(A, overwrite_a=True)
        assert np.isclose(logdet(L), np.linalg.slogdet(a)[1], rtol=1e-12)
        A = DistMatrix.from_global(g, a, block=(NB, NB))
        cholesky(A, overwrite_a=True)
        F = lu_factor(A, overwrite_a=True)     # (the storage held a Cholesky factor)
        assert F.lu is A


@pytest.mark.mpi
def test_rcond_with_another_matrix_leaves_the_factor_as_it_was(grids):
    from distla.linalg import lu_factor, rcond
    a = np.random.default_rng(2).standard_normal((N, N)) + N * np.eye(N)
    for g in grids:
        A = DistMatrix.from_global(g, a, block=(NB, NB))
        F = lu_factor(A)
        own = F.rcond()
        scaled = rcond(A * 1000.0, F)
        assert np.isclose(scaled, own / 1000.0, rtol=1e-12)
        assert F.rcond() == own
        assert rcond(A, F) == own


@pytest.mark.mpi
@pytest.mark.parametrize("k", [0, 2])
def test_empty_systems_solve_with_every_method(grids, k):
    """As scipy.linalg.solve: a 0 x 0 A gives a 0 x k X (solve refused it; the mixed solves
    divided by zero; TLR's solve failed to reshape)."""
    for g in grids:
        A = DistMatrix.zeros(g, (0, 0), (NB, NB))
        B = DistMatrix.zeros(g, (0, k), (NB, NB))
        for method in ("gepp", "calu", "genp", "cholesky", "rbt", "tlr"):
            variants = [{}] if method == "tlr" else [{}, {"precision": "mixed"}]
            for kw in variants:
                X = linalg.solve(A, B, method=method, **kw)
                assert X.shape == (0, k), (method, kw)
        with pytest.raises(ValueError, match="square"):
            linalg.solve(DistMatrix.zeros(g, (0, 3), (NB, NB)), B)
        # rcond of the 0 x 0 matrix is LAPACK's xGECON/xPOCON value, 1 (it was inf)
        assert linalg.rcond(A) == linalg.rcond(A, linalg.cholesky(A)) == \
            linalg.lu_factor(A).rcond() == 1.0


@pytest.mark.mpi
def test_integer_bool_and_half_arrays_become_float_matrices(grids):
    """scipy.linalg.solve converts integer and bool matrices to float64 (from_global refused
    them with a TypeError), float16 to float32; an explicit dtype still wins."""
    ai = np.array([[4, 1, 0], [1, 3, 1], [0, 1, 2]], dtype=np.int32)
    bi = np.array([[1], [2], [3]], dtype=np.int64)
    for g in grids:
        A = DistMatrix.from_global(g, ai, block=(2, 2))
        B = DistMatrix.from_global(g, bi, block=(2, 2))
        assert A.dtype == np.float64 and B.dtype == np.float64
        X = linalg.solve(A, B)
        np.testing.assert_allclose(X.to_global(None), np.linalg.solve(ai, bi), rtol=1e-12)
        assert DistMatrix.from_global(g, ai > 1, block=(2, 2)).dtype == np.float64
        assert DistMatrix.from_global(g, ai.astype(np.float16), block=(2, 2)).dtype == \
            np.float32
        assert DistMatrix.from_global(g, ai, block=(2, 2), dtype=np.float32).dtype == \
            np.float32
        with pytest.raises(TypeError, match="dtype"):
            DistMatrix.from_global(g, ai.astype(object), block=(2, 2))


@pytest.mark.mpi
def test_norm_none_is_frobenius(grids):
    a = np.random.default_rng(4).standard_normal((7, 5))
    for g in grids:
        A = DistMatrix.from_global(g, a, block=(2, 3))
        assert A.norm(None) == A.norm("fro")
        assert np.isclose(A.norm(None), np.linalg.norm(a), rtol=1e-14)


@pytest.mark.mpi
def test_numpy_and_python_scalars_of_one_value_agree(comm):
    """The call signature compared repr text: block=np.int64(3) on one rank and 3 on another
    (the same layout) were refused as different arguments; values of different kinds (3 and
    3.0, or a different value) still are."""
    from distla import DistMatrix, ProcessGrid
    g = ProcessGrid(comm=comm)
    a = np.arange(36.0).reshape(6, 6)
    blk = np.int64(3) if comm.rank == 0 else 3
    A = DistMatrix.from_global(g, a if comm.rank == 0 else None, block=blk,
                               root=np.int64(0) if comm.rank == 1 else 0)
    np.testing.assert_array_equal(A.to_global(None), a)
    if comm.size > 1:
        with pytest.raises(ValueError, match="different arguments"):
            DistMatrix.from_global(g, a if comm.rank == 0 else None,
                                   block=2 if comm.rank == 0 else 3)
