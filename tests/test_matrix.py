"""DistMatrix: constructors, layout of local storage, gather/scatter, arithmetic, norms (mpi).

Every test runs on every grid shape of the communicator (1xS ... Sx1), in row- and column-major
rank order, with odd sizes, blocks that do not divide them and nonzero source processes.
"""

import numpy as np
import pytest

from distla import DistMatrix, layout
from distla.device import gpu_available
from distla.random import hashed_normal, hashed_uniform
from distla.testing import random_array

pytestmark = pytest.mark.mpi

DTYPES = [np.float64, np.float32, np.complex128]


def srcs(g):
    """Source processes to try on grid g: the origin and the far corner."""
    return sorted({(0, 0), (g.nprow - 1, g.npcol - 1), (g.nprow // 2, 0)})


global_array = random_array


def check_local(A, a):
    """A's local piece is a's entries at A's global indices, column-major, numroc-shaped."""
    g = A.grid
    mloc = layout.numroc(A.m, A.mb, g.myrow, A.rsrc, g.nprow)
    nloc = layout.numroc(A.n, A.nb, g.mycol, A.csrc, g.npcol)
    assert A.local_shape == (mloc, nloc) == A.local.shape
    assert A.local.flags.f_contiguous
    assert A.local.dtype == A.dtype
    np.testing.assert_array_equal(A.local, a[np.ix_(A.row_indices(), A.col_indices())])


# --------------------------------------------------------------------------------------
# from_global / to_global
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape,block", [((13, 7), (3, 2)), ((5, 9), (4, 4)),
                                         ((6, 6), (16, 8)), ((1, 11), (1, 3))])
def test_from_global_every_root_and_source(comm, grids, shape, block):
    a = global_array(shape)
    for g in grids:
        for src in srcs(g):
            for root in range(comm.size):
                A = DistMatrix.from_global(g, a if comm.rank == root else None, block=block,
                                           root=root, src=src)
                assert (A.shape, A.block, A.src, A.dtype) == (shape, block, src, a.dtype)
                assert A.device == "cpu" and A.grid is g
                check_local(A, a)


def test_to_global_every_root_and_all(comm, grids):
    a = global_array((11, 8), seed=3)
    for g in grids:
        for src in srcs(g):
            A = DistMatrix.from_global(g, a, block=(3, 5), src=src)
            for root in range(comm.size):
                out = A.to_global(root=root)
                if comm.rank == root:
                    assert isinstance(out, np.ndarray)
                    np.testing.assert_array_equal(out, a)
                else:
                    assert out is None
            np.testing.assert_array_equal(A.to_global(root=None), a)


def test_from_global_1d_and_dtype_and_shape(comm, grids):
    v = np.arange(10.0)
    for g in grids:
        V = DistMatrix.from_global(g, v, block=(3, 3))
        assert V.shape == (10, 1)
        np.testing.assert_array_equal(V.to_global(None), v.reshape(-1, 1))
        A = DistMatrix.from_global(g, np.ones((4, 6)), shape=(4, 6), block=2,
                                   dtype=np.float32)
        assert A.dtype == np.float32 and A.block == (2, 2)
        np.testing.assert_array_equal(A.to_global(None), np.ones((4, 6), np.float32))
        # shape/dtype on non-root ranks are taken from the root
        B = DistMatrix.from_global(g, np.ones((3, 2)) if comm.rank == 0 else None, block=2)
        assert B.shape == (3, 2) and B.dtype == np.float64


@pytest.mark.parametrize("dtype", DTYPES)
def test_dtypes_round_trip(comm, grids, dtype):
    a = global_array((9, 7), dtype, seed=5)
    for g in grids:
        A = DistMatrix.from_global(g, a, block=(2, 3), src=srcs(g)[-1])
        assert A.dtype == np.dtype(dtype)
        check_local(A, a)
        np.testing.assert_array_equal(A.to_global(None), a)


def test_empty_matrices(grids):
    for g in grids:
        for shape in [(0, 5), (4, 0), (0, 0)]:
            A = DistMatrix.from_global(g, np.zeros(shape), block=2)
            assert A.shape == shape
            assert A.to_global(None).shape == shape
            Z = DistMatrix.zeros(g, shape, block=3)
            assert Z.local.shape == Z.local_shape


# --------------------------------------------------------------------------------------
# from_function, zeros, eye, random
# --------------------------------------------------------------------------------------
def test_from_function_values_and_index_shapes(grids):
    m, n = 17, 10
    for g in grids:
        for src in srcs(g):
            seen = {"J": []}

            def fn(I, J):
                seen["I"] = I
                seen["J"].append(J)
                return 1000.0 * I + J

            A = DistMatrix.from_function(g, (m, n), (4, 3), fn, src=src)
            mloc, nloc = A.local_shape
            if nloc == 0:
                continue
            assert seen["I"].shape == (mloc, 1) and all(J.shape[0] == 1 for J in seen["J"])
            assert isinstance(seen["I"], np.ndarray)
            np.testing.assert_array_equal(seen["I"][:, 0], A.row_indices())
            # column slabs, in order, covering my local columns once
            np.testing.assert_array_equal(np.concatenate([J[0] for J in seen["J"]]),
                                          A.col_indices())
            i, j = np.indices((m, n))
            check_local(A, 1000.0 * i + j)


def test_from_function_broadcasts_and_casts(grids):
    for g in grids:
        A = DistMatrix.from_function(g, (5, 6), 2, lambda I, J: 3.0, dtype=np.float32)
        assert A.dtype == np.float32
        np.testing.assert_array_equal(A.to_global(None), np.full((5, 6), 3.0, np.float32))
        B = DistMatrix.from_function(g, (5, 6), 2, lambda I, J: J + 0 * I)  # int -> float64
        np.testing.assert_array_equal(B.to_global(None), np.tile(np.arange(6.0), (5, 1)))
        C = DistMatrix.from_function(g, (4, 4), 3, lambda I, J: I + 1j * J,
                                     dtype=np.complex128)
        i, j = np.indices((4, 4))
        np.testing.assert_array_equal(C.to_global(None), i + 1j * j)


def test_zeros_and_eye(grids):
    for g in grids:
        for src in srcs(g):
            Z = DistMatrix.zeros(g, (7, 9), (2, 4), dtype=np.float32, src=src)
            assert Z.dtype == np.float32 and Z.local.flags.f_contiguous
            check_local(Z, np.zeros((7, 9), np.float32))
            E = DistMatrix.eye(g, 9, block=(4, 2), src=src)
            check_local(E, np.eye(9))
            R = DistMatrix.eye(g, 5, block=3, m=8)  # rectangular
            assert R.shape == (8, 5)
            check_local(R, np.eye(8, 5))


def test_random_same_matrix_whatever_the_layout(comm, grids):
    m, n, seed = 19, 13, 1234
    i, j = np.indices((m, n))
    want_n = hashed_normal(seed, i, j)
    want_u = hashed_uniform(seed, i, j)
    for g in grids:
        for block in [(2, 3), (5, 5), (32, 32)]:
            for src in srcs(g):
                N = DistMatrix.random(g, (m, n), block, seed=seed, src=src)
                check_local(N, want_n)
                U = DistMatrix.random(g, (m, n), block, seed=seed, src=src,
                                      distribution="uniform")
                check_local(U, want_u)
    # another seed gives another matrix; float32 is the rounded float64 one
    g = grids[0]
    other = DistMatrix.random(g, (m, n), 4, seed=seed + 1).to_global(None)
    assert not np.allclose(other, want_n)
    f32 = DistMatrix.random(g, (m, n), 4, seed=seed, dtype=np.float32)
    check_local(f32, want_n.astype(np.float32))


def test_random_statistics(grids):
    g = grids[-1]
    m, n = 300, 40  # 12000 samples
    x = DistMatrix.random(g, (m, n), (16, 8), seed=7).to_global(None).ravel()
    s = np.sqrt(x.size)
    assert abs(x.mean()) < 4 / s
    assert abs(x.std() - 1) < 4 * np.sqrt(0.5) / s
    assert abs(np.mean(np.abs(x) < 1) - 0.6827) < 0.02  # the normal's 1-sigma mass
    u = DistMatrix.random(g, (m, n), (16, 8), seed=7, distribution="uniform")
    u = u.to_global(None).ravel()
    assert u.min() >= 0 and u.max() < 1
    assert abs(u.mean() - 0.5) < 4 * np.sqrt(1 / 12) / s
    assert abs(u.var() - 1 / 12) < 0.005
    hist = np.histogram(u, bins=10, range=(0, 1))[0]
    assert np.all(np.abs(hist - u.size / 10) < 5 * np.sqrt(u.size / 10))
    assert abs(np.corrcoef(u[:-1], u[1:])[0, 1]) < 0.05  # neighbours uncorrelated


def test_random_bad_distribution(grids):
    with pytest.raises(ValueError, match="distribution"):
        DistMatrix.random(grids[0], (3, 3), 2, distribution="cauchy")


# --------------------------------------------------------------------------------------
# copy, astype, to, descriptors
# --------------------------------------------------------------------------------------
def test_copy_astype_to(grids):
    a = global_array((8, 5), seed=9)
    for g in grids:
        A = DistMatrix.from_global(g, a, block=3, src=srcs(g)[-1])
        C = A.copy()
        assert C.same_layout(A) and C.local is not A.local
        C.local[...] = 0
        check_local(A, a)  # the copy is deep
        S = A.astype(np.float32)
        assert S.dtype == np.float32 and S.same_layout(A) and S.local.flags.f_contiguous
        check_local(S, a.astype(np.float32))
        Z = A.astype(np.complex128)
        check_local(Z, a.astype(np.complex128))
        assert A.to("cpu") is A
        with pytest.raises(TypeError):
            A.astype(np.int32)


def test_to_gpu_without_gpu_raises_everywhere(comm, grids):
    if gpu_available():
        pytest.skip("a GPU is present (the GPU path is tested elsewhere)")
    A = DistMatrix.zeros(grids[0], (4, 4), 2)
    with pytest.raises(ValueError, match="gpu"):
        A.to("gpu")
    with pytest.raises(ValueError):
        A.to("tpu")
    comm.Barrier()


def test_descriptor_round_trip(comm, grids):
    a = global_array((10, 7), seed=11)
    for g in grids:
        for src in srcs(g):
            A = DistMatrix.from_global(g, a, block=(3, 2), src=src)
            d = A.desc
            assert (d.m, d.n, d.mb, d.nb, d.rsrc, d.csrc) == (10, 7, 3, 2) + src
            assert d.lld == max(1, A.local_shape[0])
            desc9 = d.to_scalapack()
            for spec in (desc9, d):
                B = DistMatrix.from_descriptor(g, A.local.copy(order="F"), spec)
                assert B.same_layout(A)
                np.testing.assert_array_equal(B.to_global(None), a)
            C = DistMatrix.from_local(g, np.ascontiguousarray(A.local), (10, 7), (3, 2),
                                      src=src)  # C-ordered input is stored column-major
            assert C.local.flags.f_contiguous
            np.testing.assert_array_equal(C.to_global(None), a)


def test_bare_constructor_wraps_without_communication(grids):
    g = grids[0]
    A = DistMatrix.random(g, (6, 5), 2)
    B = DistMatrix(g, (6, 5), 2, local=A.local)
    assert B.local is A.local and B.dtype == A.dtype
    with pytest.raises(ValueError, match="local array has shape"):
        DistMatrix(g, (6, 5), 2, local=np.zeros((A.local_shape[0] + 1, 1), order="F"))


# --------------------------------------------------------------------------------------
# arithmetic
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
def test_arithmetic_matches_numpy(grids, dtype):
    a = global_array((9, 11), dtype, seed=1)
    b = global_array((9, 11), dtype, seed=2)
    tol = dict(rtol=1e-6 if dtype == np.float32 else 1e-14)
    for g in grids:
        src = srcs(g)[-1]
        A = DistMatrix.from_global(g, a, block=(2, 3), src=src)
        B = DistMatrix.from_global(g, b, block=(2, 3), src=src)
        cases = [(A + B, a + b), (A - B, a - b), (A * 2.5, a * 2.5), (2.5 * A, 2.5 * a),
                 (A / 4, a / 4), (-A, -a), (A.add(B, alpha=2.0, beta=-3.0), 2 * a - 3 * b),
                 (A.add(B), a + b), (np.float32(2) * A, 2 * a)]
        for R, r in cases:
            assert isinstance(R, DistMatrix) and R.same_layout(A)
            if dtype == np.float32:
                assert R.dtype == np.float32  # python/NumPy scalars keep the precision
            np.testing.assert_allclose(R.to_global(None), r, **tol)
        # operands are untouched
        np.testing.assert_array_equal(A.to_global(None), a)


def test_arithmetic_with_arrays_and_scalars_names_the_operand(grids):
    """``A + ndarray``, ``ndarray + A``, ``A - 1.0``: a TypeError naming the other operand's
    type and what to do (not NumPy's or Python's generic message about another type)."""
    A = DistMatrix.random(grids[0], (5, 5), (2, 2), seed=1)
    for f, name in ((lambda: A + np.ones((5, 5)), "ndarray"), (lambda: np.ones((5, 5)) + A,
                    "ndarray"), (lambda: A - 1.0, "float"), (lambda: 2 + A, "int")):
        with pytest.raises(TypeError, match=rf"DistMatrix [+-] {name}: both operands must be "
                                            r"DistMatrix"):
            f()
    np.testing.assert_allclose((np.float64(2.0) * A).to_global(None), 2 * A.to_global(None))


def test_frobenius_norm_does_not_overflow_or_underflow(grids):
    """'fro' accumulates scaled squares (LAPACK's dlassq): float32 entries of 1e20 and float64
    ones of 1e200 / 1e-200 give the right norm (the squares overflowed to inf); an infinite
    entry gives inf, a NaN anywhere NaN, an empty matrix 0."""
    for g in grids:
        for dt, v in ((np.float32, 1e20), (np.float64, 1e200), (np.float64, 1e-200),
                      (np.complex128, 1e200)):
            a = np.full((5, 4), v, dtype=dt)
            want = float(np.sqrt(20.0)) * abs(complex(a[0, 0]))
            assert DistMatrix.from_global(g, a, block=2).norm("fro") == pytest.approx(
                want, rel=1e-6 if dt == np.float32 else 1e-13)
        a = np.random.default_rng(2).standard_normal((7, 5))
        a[2, 3] = np.inf
        assert DistMatrix.from_global(g, a, block=2).norm("fro") == np.inf
        a[5, 0] = np.nan
        assert np.isnan(DistMatrix.from_global(g, a, block=2).norm("fro"))
        assert DistMatrix.zeros(g, (0, 3), (2, 2)).norm("fro") == 0.0


def test_sub_at_the_end_is_empty(grids):
    A = DistMatrix.random(grids[0], (7, 5), (2, 2), seed=1)
    assert A.sub(A.mt, A.mt, 0, 3).shape == (0, 5)
    assert A.sub(0, 2, A.nt, A.nt).shape == (4, 0)


def test_arithmetic_layout_mismatch_raises(comm, grids):
    for g in grids:
        A = DistMatrix.random(g, (6, 6), (2, 2))
        others = [DistMatrix.random(g, (6, 6), (3, 2)),      # block
                  DistMatrix.random(g, (6, 5), (2, 2)),      # shape
                  DistMatrix.random(g, (6, 6), (2, 2), src=(g.nprow - 1, g.npcol - 1))]
        if g.shape != grids[-1].shape or g.order != grids[-1].order:
            others.append(DistMatrix.random(grids[-1], (6, 6), (2, 2)))  # grid
        for B in others:
            if B.same_layout(A):  # e.g. the far-corner source is (0, 0) on a 1x1 grid
                continue
            for op in (lambda: A + B, lambda: A - B, lambda: A.add(B)):
                with pytest.raises(ValueError, match="redistribute"):
                    op()
        with pytest.raises(TypeError):
            A + np.ones((6, 6))  # noqa: B018
        with pytest.raises(TypeError):
            A + 1  # noqa: B018
    comm.Barrier()


# --------------------------------------------------------------------------------------
# norms
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
def test_norms_match_numpy(comm, grids, dtype):
    rtol = 1e-5 if dtype == np.float32 else 1e-13
    for shape in [(13, 8), (1, 9), (9, 1)]:
        a = global_array(shape, dtype, seed=4)
        for g in grids:
            A = DistMatrix.from_global(g, a, block=(3, 2), src=srcs(g)[-1])
            for ord_, want in [("fro", np.linalg.norm(a, "fro")), (1, np.linalg.norm(a, 1)),
                               (np.inf, np.linalg.norm(a, np.inf)),
                               ("inf", np.linalg.norm(a, np.inf)), ("max", np.abs(a).max())]:
                got = A.norm(ord_)
                assert isinstance(got, float)
                assert got == pytest.approx(float(want), rel=rtol)
                assert comm.allgather(got) == [got] * comm.size  # identical on every rank
    with pytest.raises(ValueError, match="ord"):
        A.norm(2)


def test_norms_of_empty(grids):
    for g in grids:
        E = DistMatrix.zeros(g, (0, 4), 2)
        for ord_ in ("fro", 1, np.inf, "max"):
            assert E.norm(ord_) == 0.0


@pytest.mark.mpi
def test_from_global_refuses_what_it_would_change_silently(comm, grids):
    """A masked array's masked entries were used (np.asarray drops the mask); an object array
    that does not convert failed on the root alone, inside the scatter (the others hung);
    int64 beyond 2^53 was rounded and float64 1e300 became inf in float32, as read_matrix
    refuses for the same data in a file. Each is now one error on every rank."""
    from distla import ProcessGrid
    g = grids[0]
    a = np.arange(16.0).reshape(4, 4)
    cases = [
        (np.ma.masked_array(a, mask=a > 10), {}, TypeError, "masked arrays"),
        (np.array([[1.0, "x"], [2.0, 3.0]], dtype=object), {"dtype": np.float64},
         ValueError, "could not convert"),
        (np.array([[2 ** 53 + 1, 0], [0, 1]], dtype=np.int64), {}, ValueError,
         "would be rounded"),
        (np.full((2, 2), 1e300), {"dtype": np.float32}, ValueError, "beyond float32's range"),
    ]
    for arr, kw, exc, msg in cases:
        with pytest.raises(exc, match=msg):
            DistMatrix.from_global(g, arr if comm.rank == 0 else None, block=2, **kw)
    with pytest.raises(TypeError, match="pass dtype=float64 to round them"):
        DistMatrix.from_global(g, np.ones((2, 2), np.longdouble) if comm.rank == 0 else None,
                               block=1)
    big_endian = DistMatrix.from_global(g, a.astype(">f8") if comm.rank == 0 else None,
                                        block=2, dtype=">f8")       # stored natively
    assert big_endian.dtype == np.float64
    np.testing.assert_array_equal(big_endian.to_global(None), a)
    x = DistMatrix.from_global(g, np.array([[2 ** 53 + 1]], dtype=np.int64)
                               if comm.rank == 0 else None, block=1, dtype=np.float64)
    assert x.to_global(None)[0, 0] == 2.0 ** 53                  # asked for: rounded
    with pytest.raises(TypeError, match="masked array"):
        DistMatrix.from_function(g, (4, 4), 2, lambda i, j: np.ma.masked_array(i + j + 0.0))
    with pytest.raises(TypeError, match="below 2\\^64"):
        DistMatrix.random(g, (4, 4), 2, seed=2 ** 64 + 5)
    if comm.size > 1:        # each rank a valid grid, but not the same one
        with pytest.raises(ValueError, match="different arguments"):
            ProcessGrid(comm.size, 1, comm) if comm.rank == 0 else ProcessGrid(1, comm.size,
                                                                                 comm)


@pytest.mark.mpi
def test_transpose_agreement_and_descriptor_and_sub_arguments(comm, grids):
    """transpose() did not check that the ranks asked for the same one: a conjugate on one
    rank and a plain transpose on another returned neither, silently; a DESC with MB = 0
    divided by zero and one with 5.7 rows made a 5-row matrix; sub(True, ...) took True as 1."""
    g = grids[0]
    C = DistMatrix.from_global(g, (np.arange(35.0) + 1j).reshape(5, 7) if comm.rank == 0
                               else None, block=(2, 3))
    if comm.size > 1:
        with pytest.raises(ValueError, match="different arguments"):
            C.transpose(conjugate=comm.rank == 0)
    np.testing.assert_array_equal(C.H.to_global(None), C.to_global(None).conj().T)
    local = np.zeros((5, 7), order="F")
    for desc, exc, msg in (([1, 0, 5, 7, 0, 3, 0, 0, 5], ValueError, "must be positive"),
                           ([1, 0, 5.7, 7, 2, 3, 0, 0, 5], TypeError, "holds integers")):
        with pytest.raises(exc, match=msg):
            DistMatrix.from_descriptor(g, local, desc)
    with pytest.raises(TypeError, match="sub: block indices must be ints"):
        C.sub(True, 2, 0, 2)
