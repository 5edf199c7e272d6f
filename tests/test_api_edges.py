"""Edges of the matrix, PBLAS and I/O API that once gave a silent wrong answer, lost data or
hung (found by adversarial sweeps): each now computes the right thing or raises the same
clear error on every rank."""

import os
import warnings

import numpy as np
import pytest

from distla import DistMatrix
from distla.pblas import matmul, triangular_solve


def _rand(shape, complex_=False, seed=0):
    r = np.random.default_rng(seed)
    a = r.standard_normal(shape)
    return a + 1j * r.standard_normal(shape) if complex_ else a


@pytest.mark.mpi
def test_matmul_trans_spellings_and_conjugate_transpose(grids):
    for g in grids:
        for cplx in (False, True):
            a, b = _rand((5, 4), cplx, 1), _rand((5, 3), cplx, 2)
            A = DistMatrix.from_global(g, a, block=2)
            B = DistMatrix.from_global(g, b, block=2)
            for t, op in (("N", None), (False, None), (0, None), ("n", None), ("T", "T"),
                          (True, "T"), (1, "T"), ("C", "C"), (2, "C")):
                if op is None:
                    ref = a @ b[:4]
                    got = matmul(A, DistMatrix.from_global(g, b[:4], block=2), transa=t)
                else:
                    ref = (a.T if op == "T" else a.conj().T) @ b
                    got = matmul(A, B, transa=t)
                np.testing.assert_allclose(got.to_global(None), ref, atol=1e-12,
                                           err_msg=f"transa={t!r} complex={cplx}")
            got = matmul(B, DistMatrix.from_global(g, a.T.copy(), block=2), transa="C",
                         transb="C")                 # B^H (a^T)^H = b^H conj(a)
            np.testing.assert_allclose(got.to_global(None), b.conj().T @ a.conj(),
                                       atol=1e-12)
            with pytest.raises(ValueError, match="trans must be"):
                matmul(A, B, transa="X")


@pytest.mark.mpi
def test_complex_scalars_on_real_matrices_are_refused(grids):
    for g in grids:
        A = DistMatrix.from_global(g, np.eye(4) * 2, block=2)
        B = DistMatrix.from_global(g, np.ones((4, 1)), block=2)
        for alpha in (np.complex64(1j), np.complex128(2 + 1j), 1j):
            with pytest.raises(TypeError, match="complex"):
                matmul(A, B, alpha=alpha)
            with pytest.raises(TypeError, match="complex"):
                triangular_solve(A, B, alpha=alpha)
        X = triangular_solve(A, B, alpha=np.complex128(3.0))     # zero imaginary part: fine
        np.testing.assert_allclose(X.to_global(None), 1.5 * np.ones((4, 1)))


@pytest.mark.mpi
def test_astype_complex_to_real_and_ndarray_products_are_refused(grids):
    for g in grids:
        A = DistMatrix.from_global(g, _rand((4, 4), True), block=2)
        with pytest.raises(TypeError, match="imaginary"):
            A.astype(np.float64)
        assert A.astype(np.complex64).dtype == np.complex64
        R = DistMatrix.from_global(g, np.ones((4, 4)), block=2)
        with pytest.raises(TypeError):
            R * np.ones((4, 4))
        with pytest.raises(TypeError):
            np.ones((4, 4)) * R


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_empty_complex_mtx_round_trip(grids, mpi_tmp_path):
    from distla import io
    d = mpi_tmp_path
    g = grids[0]
    path = str(d / "z.mtx")
    for shape in ((0, 3), (3, 0)):
        io.write_matrix(path, DistMatrix.zeros(g, shape, (2, 2), dtype=np.complex128))
        B = io.read_matrix(path, g, (2, 2))
        assert B.shape == shape and B.dtype.kind == "c"
        assert not [f for f in os.listdir(d) if f.endswith(".partial")]


@pytest.mark.mpi
def test_hdf5_writes_never_replace_a_group(grids, mpi_tmp_path):
    h5py = pytest.importorskip("h5py")
    from distla import io
    from distla.filebase import MatrixFileError
    g = grids[0]
    f = str(mpi_tmp_path / "f.h5")
    if g.comm.rank == 0:
        with h5py.File(f, "w") as h:
            h.create_dataset("/g/B", data=np.ones((2, 2)))
            h.create_dataset("/A", data=np.zeros((2, 2)))
    g.comm.Barrier()
    A = DistMatrix.from_global(g, np.arange(4.0).reshape(2, 2), block=2)
    for target, msg in ((f + ":/g", r"/g is a group \(holding 1 object"),
                        (f + ":/A/sub", r"/A is a dataset, not a group"),
                        (f + ":/", "name a dataset")):
        with pytest.raises(MatrixFileError, match=msg):
            io.write_matrix(target, A)
    g.comm.Barrier()
    with h5py.File(f, "r") as h:          # nothing lost
        assert sorted(h) == ["A", "g"] and list(h["g"]) == ["B"]
    io.write_matrix(f + ":/g/C", A)       # beside B in the group: fine
    np.testing.assert_array_equal(io.read_matrix(f + ":/g/C", g, (2, 2)).to_global(None),
                                  np.arange(4.0).reshape(2, 2))
    with h5py.File(f, "r") as h:
        assert sorted(h["g"]) == ["B", "C"]


@pytest.mark.mpi
def test_writes_never_replace_a_special_file(grids, mpi_tmp_path):
    """The atomic rename would put a regular file where a FIFO (or a device) was."""
    import stat

    from distla import io
    from distla.filebase import MatrixFileError
    g = grids[0]
    fifo = mpi_tmp_path / "pipe.npy"
    if g.comm.rank == 0:
        os.mkfifo(fifo)
    g.comm.Barrier()
    A = DistMatrix.from_global(g, np.ones((3, 3)), block=2)
    for write in (io.write_npy, io.write_matrix):
        with pytest.raises(MatrixFileError, match="not a regular file"):
            write(str(fifo), A)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


@pytest.mark.mpi
@pytest.mark.parametrize("stored,want", [(">f4", np.float32), (">c8", np.complex64),
                                         (">f8", np.float64), (">c16", np.complex128)])
def test_big_endian_files_keep_their_precision(grids, mpi_tmp_path, stored, want):
    from distla import io
    g = grids[0]
    a = (np.arange(15.0).reshape(5, 3) * (1.5 + (0.5j if stored[1] == "c" else 0)))
    path = mpi_tmp_path / f"be{stored[1:]}.npy"
    if g.comm.rank == 0:
        np.save(path, a.astype(stored))
    g.comm.Barrier()
    for grid in grids:
        B = io.read_matrix(str(path), grid, (2, 2))
        assert B.dtype == want
        np.testing.assert_array_equal(B.to_global(None), a.astype(want))


@pytest.mark.mpi
def test_solves_whose_b_shares_storage_with_a_or_the_factor(grids):
    """B the same object as A, or a view of A, with ``overwrite_a`` (and the factor passed as
    B with ``overwrite_b``): the factorization in place or the solve would overwrite what
    the other still reads (X was off by up to 7). Each gives SciPy's answer now."""
    from distla.linalg import cho_factor, cho_solve, lu_factor, lu_solve, solve
    n = 12
    r = np.random.default_rng(4)
    a = r.standard_normal((n, n)) + 4 * np.eye(n)
    s = a @ a.T + n * np.eye(n)
    for g in grids:
        for method, mat in (("gepp", a), ("calu", a), ("genp", s), ("cholesky", s)):
            A = DistMatrix.from_global(g, mat, block=4)
            X = solve(A, A, method=method, overwrite_a=True)
            np.testing.assert_allclose(X.to_global(None), np.eye(n), atol=1e-12,
                                       err_msg=f"{method}: solve(A, A, overwrite_a=True)")
            A = DistMatrix.from_global(g, mat, block=4)
            X = solve(A, A.sub(0, A.mt, 0, 1), method=method, overwrite_a=True)
            np.testing.assert_allclose(X.to_global(None), np.eye(n)[:, :4], atol=1e-12,
                                       err_msg=f"{method}: B a view of A")
        F = lu_factor(DistMatrix.from_global(g, a, block=4))
        lu = F.lu.to_global(None)
        X = lu_solve(F, F.lu, overwrite_b=True)
        np.testing.assert_allclose(X.to_global(None), np.linalg.solve(a, lu), atol=1e-10)
        np.testing.assert_array_equal(F.lu.to_global(None), lu)     # the factor intact
        L, low = cho_factor(DistMatrix.from_global(g, s, block=4))
        ll = L.to_global(None)
        X = cho_solve((L, low), L, overwrite_b=True)
        np.testing.assert_allclose(X.to_global(None), np.linalg.solve(s, ll), atol=1e-10)
        np.testing.assert_array_equal(L.to_global(None), ll)


def _wilkinson(n):
    """GEPP's worst case: a_ii = 1, a_ij = -1 below the diagonal, last column 1 (growth
    2^(n-1) with multipliers all 1; cond_1 = n)."""
    a = np.eye(n) - np.tril(np.ones((n, n)), -1)
    a[:, -1] = 1
    return a


@pytest.mark.mpi
def test_element_growth_is_never_silent(grids):
    """Wilkinson's matrix (n = 60, growth 2^59, well conditioned): GEPP and CALU answers had
    forward error 3 with no warning, GENP's multiplier check passed them. Now gepp/calu
    warn (LinAlgWarning naming the growth), genp raises, rbt solves it; growth_factor
    agrees with max|U| / max|A| from SciPy's LU on a random matrix."""
    import scipy.linalg as sl

    from distla import LinAlgWarning, SingularMatrixError
    from distla.linalg import lu_factor, solve
    n = 60
    a = _wilkinson(n)
    b = a @ np.ones((n, 1))
    for g in grids:
        for method in ("gepp", "calu"):
            with pytest.warns(LinAlgWarning, match="element growth"):
                solve(DistMatrix.from_global(g, a, block=8),
                      DistMatrix.from_global(g, b, block=8), method=method)
        with pytest.raises(SingularMatrixError, match="element growth"):
            solve(DistMatrix.from_global(g, a, block=8),
                  DistMatrix.from_global(g, b, block=8), method="genp")
        x = solve(DistMatrix.from_global(g, a, block=8), DistMatrix.from_global(g, b, block=8),
                  method="rbt")
        np.testing.assert_allclose(x.to_global(None), np.ones((n, 1)), atol=1e-12)
        r = np.random.default_rng(1).standard_normal((37, 37))
        u = sl.lu(r)[2]
        F = lu_factor(DistMatrix.from_global(g, r, block=5))
        assert F.growth_factor() == pytest.approx(np.abs(u).max() / np.abs(r).max(), rel=1e-12)


@pytest.mark.mpi
def test_entries_below_the_normal_range_are_never_silent(grids):
    """A float32 matrix with entries near 1e-39 (cond ~ 10): LAPACK's factorization in
    gradual underflow gave errors of 2 with no warning; now a LinAlgWarning says so. A
    float64 matrix scaled by 1e-40 solved with precision='mixed' crashed in GMRES (its
    float32 copy underflowed): now the float64 solve, with the reason."""
    from distla import LinAlgWarning
    from distla.linalg import solve
    n = 16
    r = np.random.default_rng(2)
    a = r.standard_normal((n, n)) + 6 * np.eye(n)
    s = a @ a.T
    for g in grids:
        for method, mat in (("gepp", a), ("calu", a), ("cholesky", s)):
            m32 = (mat * 1e-39).astype(np.float32)
            b32 = (m32.astype(np.float64) @ np.ones(n)).astype(np.float32).reshape(n, 1)
            with pytest.warns(LinAlgWarning, match="below float32's normal range"):
                solve(DistMatrix.from_global(g, m32, block=4),
                      DistMatrix.from_global(g, b32, block=4), method=method)
            tiny = mat * 1e-40
            b = tiny @ np.ones((n, 1))
            X, info = solve(DistMatrix.from_global(g, tiny, block=4),
                            DistMatrix.from_global(g, b, block=4), method=method,
                            precision="mixed", return_info=True)
            assert info.fallback and "normal range" in info.reason
            np.testing.assert_allclose(X.to_global(None), np.ones((n, 1)), rtol=1e-12)


@pytest.mark.mpi
def test_solver_flags_and_mixed_options_are_checked(grids):
    """Flags that are not bools ('no' counted as True), lookahead=True, factor_dtype='' (read
    as the default) and gemm= beside precision='mixed' (a raw 'multiple values' TypeError)
    are refused before any work, the same on every rank."""
    from distla.linalg import cholesky, lu_factor, rbt_solve, solve, solve_cholesky, solve_lu
    n = 8
    s = np.eye(n) * 4 + np.ones((n, n))
    for g in grids:
        A = DistMatrix.from_global(g, s, block=4)
        B = DistMatrix.from_global(g, np.ones((n, 1)), block=4)
        for f, kw in ((solve_lu, {"check_rcond": "no"}), (solve_lu, {"return_info": "yes"}),
                      (solve_lu, {"overwrite_a": 1}), (solve_cholesky, {"check_symmetric": None}),
                      (solve_cholesky, {"overwrite_b": "yes"}), (rbt_solve, {"refine": "no"})):
            with pytest.raises(TypeError, match="must be True or False") as ei:
                f(A, B, **kw)
            assert len(set(g.comm.allgather(str(ei.value)))) == 1
        with pytest.raises(TypeError, match="must be True or False"):
            lu_factor(A, check_finite="no")
        for f in (lu_factor, cholesky):
            with pytest.raises(ValueError, match="lookahead"):
                f(A, lookahead=True)
        with pytest.raises(ValueError, match="factor_dtype"):
            solve(A, B, precision="mixed", factor_dtype="")
        with pytest.raises(ValueError, match="factor_dtype"):
            solve(A, B, precision="mixed", gemm="fp16")
        np.testing.assert_allclose(solve_lu(A, B, check_rcond=np.bool_(False)).to_global(None),
                                   np.linalg.solve(s, np.ones((n, 1))), rtol=1e-12)


@pytest.mark.mpi
@pytest.mark.gpu
def test_storage_growth_scale_and_zero_residual_checks_on_gpu_ranks(grids):
    """The checks above on GPU ranks: B sharing A's storage with overwrite_a, Wilkinson's
    growth (gepp warns; growth_factor as on CPU ranks), a mixed solve of a matrix scaled by
    1e-40 (falls back, with the reason) and an exactly zero residual (0, not NaN)."""
    from distla import LinAlgWarning
    from distla.checks import solve_checks
    from distla.linalg import lu_factor, solve
    n = 40                                   # growth 2^39 > 1 / sqrt(eps)
    a = np.random.default_rng(5).standard_normal((n, n)) + 5 * np.eye(n)
    w = _wilkinson(n)
    for g in grids:
        def dm(v, device="gpu"):
            return DistMatrix.from_global(g, np.asarray(v).reshape(n, -1), block=4,
                                          device=device)
        A = dm(a)
        X = solve(A, A, overwrite_a=True)
        np.testing.assert_allclose(X.to_global(None), np.eye(n), atol=1e-12)
        with pytest.warns(LinAlgWarning, match="element growth"):
            solve(dm(w), dm(w @ np.ones(n)))
        assert lu_factor(dm(a)).growth_factor() == \
            pytest.approx(lu_factor(dm(a, "cpu")).growth_factor(), rel=1e-12)
        X, info = solve(dm(a * 1e-40), dm(a @ np.ones(n) * 1e-40), precision="mixed",
                        return_info=True)
        assert info.fallback and "normal range" in info.reason
        np.testing.assert_allclose(X.to_global(None), np.ones((n, 1)), rtol=1e-12)
        zero = solve_checks(dm(a), dm(np.zeros(n)), dm(np.zeros(n)), berr=True)
        assert zero["sresid"] == 0 and zero["berr"] == 0


@pytest.mark.mpi
def test_fifth_sweep_api_edges(grids):
    """triangular_solve(lower=None) solved the upper triangle on one rank and another on
    several (error 4e-2); vector.residual with B's rows blocked unlike A's returned a wrong
    B - A X; column_dots with X in another layout hung; alpha=None gave NaN; GENP of an empty
    matrix blamed growth; rcond with another matrix's factor returned 6.8. Each is now right
    or refused, the same on every rank."""
    from distla.linalg import lu_factor, rcond
    from distla.vector import column_dots, residual
    r = np.random.default_rng(8)
    n = 10
    a = r.standard_normal((n, n)) + n * np.eye(n)
    b = r.standard_normal((n, 2))
    for g in grids:
        A = DistMatrix.from_global(g, a, block=3)
        B = DistMatrix.from_global(g, b, block=3)
        for flag in ({"lower": None}, {"unit_diagonal": "no"}, {"overwrite_b": 1}):
            with pytest.raises(TypeError, match="must be True or False"):
                triangular_solve(A, B, **flag)
        for v in (None, "2", [2.0], np.array([2.0]), True):
            with pytest.raises(TypeError, match="must be a number"):
                matmul(A, B, alpha=v)
            with pytest.raises(TypeError, match="must be a number"):
                triangular_solve(A, B, alpha=v)
        np.testing.assert_allclose(matmul(A, B, alpha=np.float32(2)).to_global(None),
                                   2 * a @ b, rtol=1e-12)
        Bother = DistMatrix.from_global(g, b, block=(2, 3))
        with pytest.raises(ValueError, match="must have A's rows"):
            residual(A, B, Bother)
        R = residual(A, B, B)
        np.testing.assert_allclose(R.to_global(None), b - a @ b, atol=1e-12)
        with pytest.raises(ValueError, match="layout"):
            column_dots([Bother], B)
        for shape in ((0, 5), (5, 0)):
            for piv in ("partial", "tournament", "none"):
                F = lu_factor(DistMatrix.zeros(g, shape, (2, 2)), pivoting=piv)
                assert F.piv.shape == (0,)
        other = DistMatrix.from_global(g, np.eye(n) * 1e-3, block=3)   # ||.||_1 small
        with pytest.raises(ValueError, match="another matrix"):
            rcond(other, lu_factor(A))
        assert rcond(A, lu_factor(A)) == pytest.approx(1 / np.linalg.cond(a, 1), rel=2)


@pytest.mark.mpi
def test_in_place_operators_write_through_views(grids):
    """``V *= 2`` on a sub() view rebound the name to a new matrix, so the parent never
    changed; in-place operators now work in place, as NumPy's do (and refuse a complex
    operand for a real matrix)."""
    a = np.arange(48.0).reshape(8, 6)
    for g in grids:
        P = DistMatrix.from_global(g, a, block=2)
        V = P.sub(1, 3, 0, 2)                    # rows 2..5, columns 0..3
        W = V
        V *= 2
        V += DistMatrix.from_global(g, np.ones((4, 4)), block=2, src=V.src)
        V /= 4
        V -= V.copy()
        assert W is V
        want = a.copy()
        want[2:6, 0:4] = 0.0
        np.testing.assert_array_equal(P.to_global(None), want)
        with pytest.raises(TypeError, match="imaginary"):
            V *= 1j


@pytest.mark.mpi
def test_scalar_operands_behave_alike_on_every_rank(grids):
    """``A * Decimal(2)`` raised on ranks holding entries and returned on the others (empty
    local arrays); a Fraction made object arrays. Decimal (no complex number) is a TypeError
    everywhere; Fraction acts as its float; the dtype stays."""
    from decimal import Decimal
    from fractions import Fraction
    a = np.arange(12.0, dtype=np.float32).reshape(3, 4)
    for g in grids:
        A = DistMatrix.from_global(g, a, block=2)     # some ranks hold nothing on 4 ranks
        for op in (lambda: A * Decimal(2), lambda: Decimal(2) * A, lambda: A / Decimal(2)):
            with pytest.raises(TypeError, match="Decimal"):
                op()
        C = A.copy()
        with pytest.raises(TypeError, match="Decimal"):
            C *= Decimal(2)
        for B in (A * Fraction(1, 2), Fraction(1, 2) * A, A / Fraction(2)):
            assert B.dtype == np.float32 and B.local.dtype == np.float32
            np.testing.assert_array_equal(B.to_global(None), a / 2)


@pytest.mark.mpi
def test_random_seeds_are_checked_and_agreed(grids, comm):
    """DistMatrix.random with a different seed on each rank built a patchwork of matrices;
    seed=None or 1.5 gave raw errors. Now the same clear error on every rank."""
    g = grids[0]
    for bad in (None, 1.5, -1, True):
        with pytest.raises(TypeError, match="seed must be a non-negative int"):
            DistMatrix.random(g, (6, 6), (2, 2), seed=bad)
    if comm.size > 1:
        with pytest.raises(ValueError, match="different arguments"):
            DistMatrix.random(g, (6, 6), (2, 2), seed=comm.rank)
    a = DistMatrix.random(g, (6, 6), (2, 2), seed=np.int64(4)).to_global(None)
    np.testing.assert_array_equal(a, DistMatrix.random(g, (6, 6), (3, 3), seed=4).to_global(None))


@pytest.mark.mpi
def test_logdet_of_a_non_positive_diagonal_is_refused(grids):
    """logdet of a 'factor' with a diagonal entry <= 0 returned NaN (NumPy's warning on the
    ranks holding it only): now a ValueError on every rank; a real factor agrees with
    NumPy's slogdet."""
    from distla.linalg import cholesky, logdet
    r = np.random.default_rng(3)
    a = r.standard_normal((9, 9))
    s = a @ a.T + 9 * np.eye(9)
    bad = np.linalg.cholesky(s)
    bad[4, 4] = -1.0
    for g in grids:
        L = cholesky(DistMatrix.from_global(g, s, block=2))
        assert logdet(L) == pytest.approx(np.linalg.slogdet(s)[1], rel=1e-12)
        with pytest.raises(ValueError, match="<= 0"):
            logdet(DistMatrix.from_global(g, bad, block=2))


@pytest.mark.mpi
def test_roots_null_communicators_and_big_endian_arrays(grids, comm):
    """to_global(root='0') failed with "'<=' not supported"; ProcessGrid(comm=COMM_NULL) with
    a raw MPI error; from_global of a big-endian ('>f8', as read from some files) array was
    refused as an unsupported dtype. Now clear errors, and big-endian data is converted."""
    from mpi4py import MPI

    from distla import ProcessGrid
    g = grids[0]
    a = np.arange(12.0).reshape(3, 4)
    A = DistMatrix.from_global(g, a.astype(">f8"), block=2)
    assert A.dtype == np.float64
    np.testing.assert_array_equal(A.to_global(None), a)
    for root in ("0", 1.0, True, comm.size):
        with pytest.raises(ValueError, match="is not a rank"):
            A.to_global(root)
        with pytest.raises(ValueError, match="is not a rank"):
            DistMatrix.from_global(g, a, block=2, root=root)
    with pytest.raises(ValueError, match="COMM_NULL"):
        ProcessGrid(comm=MPI.COMM_NULL)


@pytest.mark.mpi
def test_matmul_with_a_view_as_left_operand(grids):
    """A sub() view as A with more than 16 columns in B hung: only the ranks holding a block
    of A raised 'communication buffers must be contiguous' (a view's columns are strided by
    its parent's leading dimension); the product is now computed."""
    a = np.random.default_rng(3).standard_normal((40, 40))
    b = np.random.default_rng(4).standard_normal((24, 20))     # > 16 columns: SUMMA
    c = np.random.default_rng(5).standard_normal((12, 33))
    for g in grids:
        P = DistMatrix.from_global(g, a, block=3)
        V = P.sub(1, 12, 1, 9)                        # rows 3..35, columns 3..26
        Bm = DistMatrix.from_global(g, b, block=3, src=V.src)
        np.testing.assert_allclose((V @ Bm).to_global(None), a[3:36, 3:27] @ b,
                                   rtol=1e-12, atol=1e-12)
        W = DistMatrix.from_global(g, c, block=3)
        np.testing.assert_allclose((W @ V).to_global(None), c @ a[3:36, 3:27],
                                   rtol=1e-12, atol=1e-12)


@pytest.mark.mpi
def test_refinement_accepts_solutions_with_exact_zeros(grids):
    """B with an all-zero column, or x with exact zero blocks (block-diagonal A, B = I[:, :4]):
    rows with |A||x| + |b| = 0 or at rounding level counted as backward error 1, so rbt_solve
    and every mixed solve fell back claiming A numerically singular (and raised with
    fallback=False). They now converge with no warning; x is right."""
    import warnings

    from distla.linalg import rbt_solve, solve
    rng = np.random.default_rng(0)
    n = 48
    a1 = rng.standard_normal((n, n)) + n * np.eye(n)
    b1 = rng.standard_normal((n, 2))
    b1[:, 0] = 0.0
    a2 = np.zeros((n, n))
    a2[:24, :24] = rng.standard_normal((24, 24))
    a2[24:, 24:] = rng.standard_normal((24, 24))
    a2 = (a2 + a2.T) / 2 + n * np.eye(n)
    b2 = np.eye(n)[:, :4]
    for g in grids[:3]:
        for a, b in ((a1, b1), (a2, b2)):
            A = DistMatrix.from_global(g, a, block=8)
            B = DistMatrix.from_global(g, b, block=8)
            want = np.linalg.solve(a, b)
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                runs = [rbt_solve(A, B, return_info=True, fallback=False),
                        solve(A, B, method="gepp", precision="mixed", return_info=True,
                              fallback=False)]
                if a is a2:
                    runs.append(solve(A, B, method="cholesky", precision="mixed",
                                      return_info=True, fallback=False))
            for X, info in runs:
                assert not info.fallback and info.reason is None, info.reason
                np.testing.assert_allclose(X.to_global(None), want, atol=1e-13)


@pytest.mark.mpi
def test_cholesky_factor_used_as_the_other_triangle_is_refused(grids):
    """cho_solve((U, True), B) with U from cholesky(A, lower=False) gave errors of 2e-2 and
    rcond(A, (U, True)) a wrong estimate, silently (only the bare U was refused); (L, False)
    likewise. Factors from cholesky now know their triangle."""
    from distla.linalg import cho_solve, cholesky, rcond
    rng = np.random.default_rng(1)
    a = rng.standard_normal((14, 14))
    a = a @ a.T + 14 * np.eye(14)
    for g in grids:
        A = DistMatrix.from_global(g, a, block=4)
        B = DistMatrix.from_global(g, np.ones((14, 2)), block=4)
        U, L = cholesky(A, lower=False), cholesky(A)
        for bad, needle in (((U, True), "upper factor"), ((L, False), "lower factor"),
                            (U, "upper factor")):
            with pytest.raises(ValueError, match=needle):
                cho_solve(bad, B)
            with pytest.raises(ValueError, match=needle):
                rcond(A, bad)
        for good in ((U, False), (L, True), L):
            np.testing.assert_allclose(cho_solve(good, B).to_global(None),
                                       np.linalg.solve(a, np.ones((14, 2))), rtol=1e-12)
            assert rcond(A, good) == pytest.approx(1 / np.linalg.cond(a, 1), rel=2)


@pytest.mark.mpi
def test_factor_marks_survive_copies(grids):
    """Copies of a factor that keep its values (copy, astype, redistribute) keep what it is:
    U.copy() was taken for a lower factor by cho_solve and rcond (errors of 0.5, silently),
    logdet(F.lu.copy()) read an LU matrix as a Cholesky factor, and cho_solve(F.lu, B) solved
    with it. A transpose turns L into U; a matrix made otherwise carries no mark."""
    from distla.linalg import cho_solve, cholesky, logdet, lu_factor, rcond
    rng = np.random.default_rng(3)
    a = rng.standard_normal((13, 13))
    a = a @ a.T + 13 * np.eye(13)
    want = np.linalg.solve(a, np.ones((13, 2)))
    for g in grids:
        A = DistMatrix.from_global(g, a, block=4)
        B = DistMatrix.from_global(g, np.ones((13, 2)), block=4)
        U, L, F = cholesky(A, lower=False), cholesky(A), lu_factor(A)
        Bq = B.redistribute(block=(3, 2))
        for Uc, Bc in ((U.copy(), B), (U.astype(np.float64), B),
                       (U.redistribute(block=(3, 3)), Bq), (L.T, B)):
            with pytest.raises(ValueError, match="upper factor"):
                cho_solve(Uc, Bc)
            with pytest.raises(ValueError, match="upper factor"):
                rcond(A, Uc)
            np.testing.assert_allclose(cho_solve((Uc, False), Bc).to_global(None), want,
                                       rtol=1e-12)
        for Lc, Bc in ((L.copy(), B), (L.redistribute(block=(3, 3)), Bq), (U.T, B)):
            np.testing.assert_allclose(cho_solve(Lc, Bc).to_global(None), want, rtol=1e-12)
        for lu in (F.lu, F.lu.copy(), F.lu.astype(np.float64)):
            with pytest.raises(ValueError, match="lu_factor's LU matrix"):
                logdet(lu)
            with pytest.raises(ValueError, match="lu_factor's LU matrix"):
                cho_solve(lu, B)
        assert not hasattr(A + A, "cholesky_lower") and not hasattr(A.copy(), "lu_factor")


@pytest.mark.mpi
def test_complex_factor_transposes_are_told_apart(grids):
    """A complex Cholesky factor's plain transpose L.T (no factor of A = L L^H) was taken by
    cho_solve((L.T, False), B) and rcond as the upper factor: relative error 0.73, silently.
    It is refused now; L.H works, and a real factor's L.H is its upper factor as L.T is."""
    from distla.linalg import cho_solve, cholesky, rcond
    rng = np.random.default_rng(5)
    g0 = rng.standard_normal((13, 13)) + 1j * rng.standard_normal((13, 13))
    a = g0 @ g0.conj().T + 13 * np.eye(13)
    b = rng.standard_normal((13, 2)) + 1j * rng.standard_normal((13, 2))
    want = np.linalg.solve(a, b)
    for g in grids:
        A = DistMatrix.from_global(g, a, block=4)
        B = DistMatrix.from_global(g, b, block=4)
        L = cholesky(A)
        for bad in (L.T, L.T.T):
            with pytest.raises(ValueError, match="plain transpose of a complex Cholesky"):
                cho_solve((bad, False), B)
            with pytest.raises(ValueError, match="plain transpose of a complex Cholesky"):
                rcond(A, (bad, False))
        np.testing.assert_allclose(cho_solve((L.H, False), B).to_global(None), want,
                                   rtol=1e-12)
        with pytest.raises(ValueError, match="upper factor"):
            cho_solve(L.H, B)
        np.testing.assert_allclose(cho_solve(L.H.H, B).to_global(None), want, rtol=1e-12)
        R = cholesky(DistMatrix.from_global(g, a.real + 13 * np.eye(13), block=4))
        with pytest.raises(ValueError, match="upper factor"):
            cho_solve(R.H, DistMatrix.from_global(g, b.real.copy(), block=4))


@pytest.mark.mpi
def test_solve_options_logdet_of_lu_and_rcond_grids(grids):
    """solve(method='gepp', lower=False) raised Python's 'lu_factor() got an unexpected
    keyword argument' (an internal name); logdet(F.lu) of an LU factor returned 2 sum log
    U[i, i], not log det A; rcond(A, F) with F on another grid was accepted (lu_solve refuses
    it)."""
    from distla.linalg import logdet, lu_factor, rcond, solve
    a = np.random.default_rng(2).standard_normal((10, 10)) + 10 * np.eye(10)
    for g in grids:
        A = DistMatrix.from_global(g, a, block=3)
        B = DistMatrix.from_global(g, np.ones((10, 1)), block=3)
        for m, bad in (("gepp", "lower"), ("cholesky", "tree"), ("rbt", "lookahead"),
                       ("tlr", "depth")):
            with pytest.raises(TypeError, match=f"solve: method='{m}' takes no option '{bad}'"):
                solve(A, B, method=m, **{bad: 1})
        C = DistMatrix.from_global(g, a + 1j * np.eye(10), block=3)
        with pytest.raises(TypeError, match="TLR supports real"):   # not 'not Hermitian'
            solve(C, B.astype(np.complex128), method="tlr")
        F = lu_factor(A)
        with pytest.raises(ValueError, match="logdet: this is lu_factor's LU matrix"):
            logdet(F.lu)
        other = [h for h in grids if h is not g and (h.nprow, h.npcol) != (g.nprow, g.npcol)]
        if other:
            A2 = DistMatrix.from_global(other[0], a, block=3)
            with pytest.raises(ValueError, match="different grids"):
                rcond(A2, F)


@pytest.mark.mpi
def test_ill_conditioning_warning_does_not_depend_on_the_grid(grids):
    """The matrix of tests/data/rcond_defeats_two_iterations.npy (cond_1 1.8e16): scipy
    warns, and so does distla on every grid (one CPU rank's LAPACK estimate and the other
    grids' distla estimate iterate alike), with rcond within 3x of the true one."""
    import warnings
    from pathlib import Path

    from distla import LinAlgWarning
    from distla.linalg import solve
    a = np.load(Path(__file__).parent / "data" / "rcond_defeats_two_iterations.npy")
    true = 1 / np.linalg.cond(a, 1)
    for g in grids:
        A = DistMatrix.from_global(g, a, block=7, src=(g.nprow - 1, 0))
        B = DistMatrix.from_global(g, a.sum(axis=1, keepdims=True), block=7,
                                   src=(g.nprow - 1, 0))
        for method in ("gepp", "calu"):
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                _, info = solve(A, B, method=method, return_info=True)
            assert any(issubclass(x.category, LinAlgWarning) and "ill-conditioned" in
                       str(x.message) for x in w), [str(x.message) for x in w]
            assert true / 3 <= info.rcond <= 3 * true, (info.rcond, true)


# ---- the solve dispatcher's options and info (sweep of solve(); each once ignored or unclear)

def _spd(n, seed=0):
    r = np.random.default_rng(seed)
    m = r.standard_normal((n, n))
    return m @ m.T + n * np.eye(n)


@pytest.mark.mpi
def test_refinement_options_refused_in_one_precision(grids):
    """max_iter and fallback belong to a mixed-precision solve's refinement: given to a solve
    in one precision they were accepted and ignored; now a ValueError on every rank."""
    from distla.linalg import solve
    a = _spd(9)
    for g in grids:
        A = DistMatrix.from_global(g, a, block=2)
        B = DistMatrix.from_global(g, np.ones((9, 1)), block=2)
        for method in ("gepp", "calu", "genp", "cholesky"):
            for kw in ({"max_iter": 0}, {"fallback": False}, {"max_iter": 5, "fallback": True}):
                with pytest.raises(ValueError, match="precision='mixed' only"):
                    solve(A, B, method=method, **kw)
            X = solve(A, B, method=method, precision="mixed", max_iter=None, fallback=None)
            np.testing.assert_allclose(X.to_global(None), np.linalg.solve(a, np.ones((9, 1))),
                                       rtol=1e-10)
        X, info = solve(A, B, method="rbt", max_iter=None, return_info=True)   # RBT refines
        assert info.converged and info.iterations >= 1, info


@pytest.mark.mpi
def test_overwrite_b_is_honoured_with_the_condition_estimate(grids):
    """overwrite_b=True let the solve work in B's storage only with check_rcond=False; the
    default (check_rcond=True) copied B anyway. Where the solves are not fused with the
    estimator's block (more right-hand sides than FUSE_MAX_RHS, or one CPU rank) X is B."""
    from distla.linalg import solve
    from distla.linalg.condition import FUSE_MAX_RHS
    a = _spd(11, 3)
    k = FUSE_MAX_RHS + 1
    b = np.random.default_rng(4).standard_normal((11, k))
    ref = np.linalg.solve(a, b)
    for g in grids:
        for method in ("gepp", "cholesky"):
            A = DistMatrix.from_global(g, a, block=3)
            B = DistMatrix.from_global(g, b, block=3)
            X = solve(A, B, method=method, overwrite_b=True)
            np.testing.assert_allclose(X.to_global(None), ref, rtol=1e-10)
            assert np.shares_memory(X.local, B.local), method
            B = DistMatrix.from_global(g, b, block=3)
            X = solve(A, B, method=method)             # overwrite_b=False: B is kept
            np.testing.assert_array_equal(B.to_global(None), b)
            assert not np.shares_memory(X.local, B.local)
        # rbt takes the flag too (it refused it; RBT refines against the original B)
        B = DistMatrix.from_global(g, b, block=3)
        X = solve(DistMatrix.from_global(g, a, block=3), B, method="rbt", overwrite_b=True)
        np.testing.assert_allclose(X.to_global(None), ref, rtol=1e-10)


@pytest.mark.mpi
def test_tlr_through_solve_checks_flags_and_returns_solveinfo(grids):
    from distla.linalg import SolveInfo, solve
    x = np.linspace(0, 1, 24)
    a = np.exp(-np.abs(x[:, None] - x[None, :]) / 0.3) + 1e-3 * np.eye(24)
    for g in grids:
        A = DistMatrix.from_global(g, a, block=6)
        B = DistMatrix.from_global(g, np.ones((24, 1)), block=6)
        for flag in ("return_info", "check_finite", "check_rcond", "check_symmetric"):
            with pytest.raises(TypeError, match=f"{flag} must be True or False"):
                solve(A, B, method="tlr", tol=1e-10, **{flag: "no"})
        with pytest.raises(ValueError, match="solve: compression must be one of"):
            solve(A, B, method="tlr", compression="bogus")
        X, info = solve(A, B, method="tlr", tol=1e-12, return_info=True)
        assert isinstance(info, SolveInfo)
        assert (info.method, info.precision, info.factor_dtype) == ("tlr", "double", "float64")
        assert info.rcond is not None and 0 < info.rcond <= 1
        assert info.rcond == info.details["rcond"]
        np.testing.assert_allclose(X.to_global(None), np.linalg.solve(a, np.ones((24, 1))),
                                   rtol=1e-6)
        _, info = solve(A, B, method="tlr", tol=1e-12, return_info=True, check_rcond=False)
        assert info.rcond is None


@pytest.mark.mpi
def test_solve_info_times_agree_on_every_rank(comm, grids):
    """The info's times were each rank's own; the docs say the info is the same on every
    rank: each entry is now the slowest rank's."""
    from distla.linalg import solve
    a = _spd(10, 5)
    for g in grids:
        A = DistMatrix.from_global(g, a, block=3)
        B = DistMatrix.from_global(g, np.ones((10, 2)), block=3)
        for kw in ({"method": "gepp", "precision": "mixed"},
                   {"method": "cholesky", "precision": "mixed"}, {"method": "rbt"}):
            _, info = solve(A, B, return_info=True, **kw)
            assert info.times and "total" in info.times, kw
            every = comm.allgather(sorted(info.times.items()))
            assert all(t == every[0] for t in every), (kw, every)


@pytest.mark.mpi
def test_messages_name_the_function_and_the_cause(grids):
    from distla import SingularMatrixError
    from distla.linalg import solve, solve_lu
    for g in grids:
        A32 = DistMatrix.from_global(g, np.eye(4, dtype=np.float32) * 2, block=2)
        B32 = DistMatrix.from_global(g, np.ones((4, 1), np.float32), block=2)
        with pytest.raises(TypeError, match="solve_lu: precision='mixed' needs a float64"):
            solve_lu(A32, B32, precision="mixed")
        a = np.eye(5) * 2
        a[3, 1] = np.nan
        A = DistMatrix.from_global(g, a, block=2)
        B = DistMatrix.from_global(g, np.ones((5, 1)), block=2)
        with pytest.raises(SingularMatrixError, match="non-finite value .* A holds NaN"):
            solve(A, B, method="genp", check_finite=False, check_rcond=False)


@pytest.mark.mpi
def test_growth_warnings_name_nan_and_unreliable_estimates(grids):
    """Inf in A with check_finite=False: the growth warning said 'max |U| / max |A| = nan >
    6.7e+07'; it now says the factors hold NaN. Wilkinson's matrix in float32 (growth 2^59):
    the condition estimate from such factors depends on the blocking (2e-9 on some grids for a
    matrix of condition 60); the ill-conditioning warning then says it may reflect the
    growth."""
    from distla import LinAlgWarning
    from distla.linalg import solve
    n = 60
    w = (np.tril(-np.ones((n, n)), -1) + np.eye(n))
    w[:, -1] = 1
    for g in grids:
        a = np.eye(6) * 3 + 0.5
        a[2, 4] = np.inf
        A = DistMatrix.from_global(g, a, block=2)
        B = DistMatrix.from_global(g, np.ones((6, 1)), block=2)
        with pytest.warns(LinAlgWarning, match="the LU factors hold NaN: A holds NaN or Inf"):
            solve(A, B, check_finite=False, check_rcond=False)
        A = DistMatrix.from_global(g, w.astype(np.float32), block=13)
        B = DistMatrix.from_global(g, np.ones((n, 1), np.float32), block=13)
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            solve(A, B)
        texts = [str(x.message) for x in got if issubclass(x.category, LinAlgWarning)]
        assert any("large element growth" in t for t in texts), texts
        for t in texts:
            if "ill-conditioned matrix (rcond=" in t:
                assert "may reflect that growth rather than A" in t, t


@pytest.mark.mpi
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128])
def test_hermitian_norm_inf_on_any_blocking(grids, dtype):
    """xLANHE('I', 'L') of the lower triangle: rectangular blocks, sizes they do not divide,
    every source process, NaN above the diagonal, against NumPy on the Hermitian matrix."""
    from distla.linalg.cholesky import hermitian_norm_inf
    r = np.random.default_rng(5)
    for n, block in ((1, (1, 1)), (17, (3, 5)), (30, (7, 4)), (23, (23, 23))):
        a = r.standard_normal((n, n)) + (1j * r.standard_normal((n, n))
                                         if np.dtype(dtype).kind == "c" else 0)
        a = a.astype(dtype)
        h = np.tril(a, -1) + np.tril(a, -1).conj().T + np.diag(a.diagonal().real)
        want = np.abs(h.astype(np.complex128)).sum(axis=1).max()
        a[np.triu_indices(n, 1)] = np.nan
        for g in grids:
            for src in ((0, 0), (g.nprow - 1, g.npcol - 1)):
                A = DistMatrix.from_global(g, a, block=block, src=src)
                assert hermitian_norm_inf(A) == pytest.approx(want, rel=1e-6), (n, block, src)


@pytest.mark.mpi
def test_solve_cholesky_condition_uses_the_triangle_it_reads(grids):
    """With check_symmetric=False the strict upper triangle may hold anything: the condition
    estimate used ||A||_inf of the whole storage (1e20 there: 'rcond=1e-23', a false warning;
    NaN: rcond 0; zeros: 1.4x too high). It is now the Hermitian matrix's of the lower one."""
    import scipy.linalg as sla

    from distla.linalg import solve_cholesky
    from distla.linalg.cholesky import hermitian_norm_inf
    r = np.random.default_rng(8)
    for cplx in (False, True):
        m = r.standard_normal((13, 13)) + (1j * r.standard_normal((13, 13)) if cplx else 0)
        h = m @ m.conj().T + 13 * np.eye(13)
        ref = sla.lapack.zpocon if cplx else sla.lapack.dpocon
        c = sla.cholesky(h, lower=True)
        rc_ref = ref(c, np.abs(h).sum(axis=1).max(), uplo="L")[0]
        for g in grids:
            for upper in (1e20, np.nan, 0.0):
                a = np.tril(h) + np.triu(np.full_like(h, upper), 1)
                A = DistMatrix.from_global(g, a, block=4, src=(0, g.npcol - 1))
                assert hermitian_norm_inf(A) == pytest.approx(np.abs(h).sum(axis=1).max())
                B = DistMatrix.from_global(g, h @ np.ones((13, 1)), block=4,
                                           src=(0, g.npcol - 1))
                with warnings.catch_warnings():
                    warnings.simplefilter("error")       # no (false) LinAlgWarning
                    X, info = solve_cholesky(A, B, check_symmetric=False, check_finite=False,
                                             return_info=True)
                np.testing.assert_allclose(X.to_global(None), 1, rtol=1e-12)
                assert rc_ref / 3 <= info.rcond <= 3 * rc_ref, (upper, info.rcond, rc_ref)


@pytest.mark.mpi
def test_cho_solve_lower_flag_differing_between_ranks_is_one_error(comm, grids):
    from distla.linalg import cho_solve, cholesky, logdet
    a = np.eye(6) * 4 + 1
    for g in grids:
        L = cholesky(DistMatrix.from_global(g, a, block=2))
        B = DistMatrix.from_global(g, np.ones((6, 1)), block=2)
        if comm.size > 1:
            with pytest.raises(ValueError) as e:    # one error, the same on every rank
                cho_solve((L, comm.rank == 0), B)
            assert len(set(comm.allgather(str(e.value)))) == 1
        with pytest.raises(ValueError, match="lower factor"):
            cho_solve((L, False), B)
        assert logdet(L) == pytest.approx(np.linalg.slogdet(a)[1])   # collectives in step


@pytest.mark.mpi
def test_condition_estimate_near_the_float_range_ends(grids):
    """A well-conditioned matrix scaled by 1e-308 reported rcond = 0 (and an 'ill-conditioned'
    warning) on grids where the estimator's solves ran unscaled: A^-1 x overflowed. The
    estimator's vectors are scaled by a power of two near ||A||_1 now."""
    from distla.linalg import lu_factor, solve
    from distla.linalg import rcond as rcond_of
    r = np.random.default_rng(1)
    a0 = r.standard_normal((33, 33))
    a0 = a0 @ a0.T + 33 * np.eye(33)
    true = 1 / np.linalg.cond(a0, 1)
    for g in grids:
        for c in (1e-308, 1e-300, 1e300, 1e305):
            A = DistMatrix.from_global(g, c * a0, block=8, src=(0, g.npcol - 1))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")        # (the subnormal-scale warning)
                got = rcond_of(A, lu_factor(A))
            assert true / 3 <= got <= 3 * true, (c, got, true)
        # float32 with ||A||_1 beyond 3.4e38 (entries ~1e37): the estimator's vectors (and
        # LAPACK's anorm on one rank) overflowed float32: rcond 0 and a false warning
        big = (a0 / np.abs(a0).sum(axis=0).max() * 3.9e38).astype(np.float32)
        A = DistMatrix.from_global(g, big, block=8, src=(0, g.npcol - 1))
        B = DistMatrix.from_global(g, big.sum(axis=1, keepdims=True) / 4, block=8,
                                   src=(0, g.npcol - 1))
        with warnings.catch_warnings():
            warnings.simplefilter("error")             # no overflow, no LinAlgWarning
            got = rcond_of(A, lu_factor(A))
            X = solve(A, B, method="gepp")
        assert true / 3 <= got <= 3 * true, (got, true)
        np.testing.assert_allclose(X.to_global(None), 0.25, rtol=1e-3)


@pytest.mark.mpi
def test_norm_tuples_with_repeats_and_float32_sums_on_every_grid(grids):
    """A norm asked twice in one tuple was accumulated twice (fro sqrt(2), inf 2 times too
    large); float32 1- and inf-norms beyond 3.4e38 were inf on some grids and finite on
    others (local sums in float32); norm(True) was the 1-norm; None inside a tuple refused."""
    a = np.arange(1.0, 13.0).reshape(4, 3)
    big = np.full((2, 2), 2e38, np.float32)
    for g in grids:
        A = DistMatrix.from_global(g, a, block=(1, 2))
        got = A.norm(("fro", "fro", np.inf, "inf", 1, 1, "max", "max", None))
        want = [np.linalg.norm(a)] * 2 + [np.linalg.norm(a, np.inf)] * 2 + \
            [np.linalg.norm(a, 1)] * 2 + [12.0, 12.0, np.linalg.norm(a)]
        np.testing.assert_allclose(got, want, rtol=1e-14)
        B = DistMatrix.from_global(g, big, block=1)
        for o in (1, np.inf, "fro"):
            assert B.norm(o) == pytest.approx(4e38, rel=1e-6), (o, g)
        with pytest.raises(ValueError, match="ord must be"):
            A.norm(True)


@pytest.mark.mpi
def test_descriptor_lld_is_the_local_arrays_leading_dimension(grids):
    """A sub() view (or a padded from_descriptor array) reported LLD = its local rows while
    its local storage has its parent's leading dimension: a DESC handed to ScaLAPACK with it
    would read the wrong entries."""
    from distla import layout
    a = np.arange(100.0).reshape(10, 10)
    for g in grids:
        A = DistMatrix.from_global(g, a, block=2)
        S = A.sub(1, 3, 1, 3)
        for M in (A, S):
            loc = M.local
            if loc.shape[1] > 1 and loc.shape[0] > 1:
                assert M.desc.lld == loc.strides[1] // loc.itemsize
            assert M.desc.lld >= max(1, M.local_shape[0])
        mloc = layout.numroc(10, 2, g.myrow, 0, g.nprow)
        pad = np.zeros((mloc + 3, A.local_shape[1]), order="F")
        pad[:mloc] = A.local
        d = A.desc.to_scalapack()
        d[8] = mloc + 3
        B = DistMatrix.from_descriptor(g, pad, d)
        np.testing.assert_array_equal(B.to_global(None), a)
        if B.local.shape[1] > 1:
            assert B.desc.lld == mloc + 3
