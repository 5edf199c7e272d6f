"""redistribute (pdgemr2d) between every pair of grids of the communicator, transposes (mpi)."""

import numpy as np
import pytest

from distla import DistMatrix, ProcessGrid, layout
from distla.testing import corner

pytestmark = pytest.mark.mpi


def check_local(A, a):
    g = A.grid
    assert A.local.shape == (layout.numroc(A.m, A.mb, g.myrow, A.rsrc, g.nprow),
                             layout.numroc(A.n, A.nb, g.mycol, A.csrc, g.npcol))
    assert A.local.flags.f_contiguous
    np.testing.assert_array_equal(A.local, a[np.ix_(A.row_indices(), A.col_indices())])


@pytest.mark.parametrize("max_slices", [0, 1, 4096])
def test_redistribute_between_all_grids(grids, monkeypatch, max_slices):
    """Every pair of grids, blockings and source processes; the pieces copied as runs of
    slices, or by fancy indexing where they have more than redistribute.MAX_SLICES (0:
    always; 1: only single-run pieces sliced)."""
    from distla import redistribute
    monkeypatch.setattr(redistribute, "MAX_SLICES", {"cpu": max_slices, "gpu": max_slices})
    m, n = 23, 14
    a = np.arange(m * n, dtype=np.float64).reshape(m, n) + 0.5
    layouts = [((3, 2), "origin"), ((5, 5), "corner"), ((8, 3), "origin"), ((30, 1), "corner")]
    for g1 in grids:
        for blk1, s1 in layouts[:2]:
            src1 = corner(g1) if s1 == "corner" else (0, 0)
            A = DistMatrix.from_global(g1, a, block=blk1, src=src1)
            for g2 in grids:
                for blk2, s2 in layouts:
                    src2 = corner(g2) if s2 == "corner" else (0, 0)
                    B = A.redistribute(grid=g2, block=blk2, src=src2)
                    assert (B.grid, B.block, B.src, B.shape) == (g2, blk2, src2, (m, n))
                    check_local(B, a)
            check_local(A, a)  # the source is untouched


@pytest.mark.parametrize("dtype", [np.float32, np.complex128, np.complex64])
def test_redistribute_dtypes_and_defaults(grids, dtype):
    rng = np.random.default_rng(2)
    a = rng.standard_normal((9, 10)) + (1j * rng.standard_normal((9, 10))
                                         if np.dtype(dtype).kind == "c" else 0)
    a = a.astype(dtype)
    for g in grids:
        A = DistMatrix.from_global(g, a, block=(2, 3))
        B = A.redistribute()  # same layout: an equal copy
        assert B.same_layout(A) and B.dtype == np.dtype(dtype) and B.local is not A.local
        check_local(B, a)
        C = A.redistribute(block=4)  # an int block means square blocks
        assert C.block == (4, 4) and C.grid is g
        check_local(C, a)
        D = A.redistribute(src=corner(g))
        assert D.src == corner(g) and D.block == A.block
        check_local(D, a)


@pytest.mark.parametrize("shape", [(0, 7), (7, 0), (0, 0), (1, 1), (1, 9), (9, 1), (2, 3)])
def test_redistribute_degenerate_shapes(grids, shape):
    a = np.arange(np.prod(shape), dtype=np.float64).reshape(shape)
    for g1 in grids:
        A = DistMatrix.from_global(g1, a, block=(2, 2), src=corner(g1))
        for g2 in grids:
            B = A.redistribute(grid=g2, block=(1, 3), src=(0, 0))
            check_local(B, a)
            np.testing.assert_array_equal(B.to_global(None), a)
        T = A.T
        assert T.shape == shape[::-1]
        check_local(T, a.T)


def test_transpose_and_conjugate_transpose(grids):
    rng = np.random.default_rng(3)
    m, n = 11, 7
    a = rng.standard_normal((m, n)) + 1j * rng.standard_normal((m, n))
    r = rng.standard_normal((m, n))
    for g in grids:
        for block in [(2, 3), (4, 4), (16, 1)]:
            for src in sorted({(0, 0), corner(g)}):
                A = DistMatrix.from_global(g, a, block=block, src=src)
                for T, want in [(A.T, a.T), (A.H, a.conj().T), (A.transpose(), a.T),
                                (A.transpose(conjugate=True), a.conj().T)]:
                    assert T.shape == (n, m) and T.block == block[::-1] and T.src == src
                    assert T.grid is g and T.dtype == A.dtype
                    check_local(T, want)
                check_local(A.T.T, a)
                R = DistMatrix.from_global(g, r, block=block, src=src)
                check_local(R.H, r.T)  # conjugation is a no-op for real


def test_redistribute_then_transpose_across_grids(grids):
    a = np.arange(60.0).reshape(6, 10)
    for g1 in grids:
        for g2 in grids:
            A = DistMatrix.from_global(g1, a, block=(4, 3))
            B = A.redistribute(grid=g2, block=(2, 5), src=corner(g2))
            check_local(B.T, a.T)


def test_redistribute_bad_arguments_raise_everywhere(comm, grids):
    A = DistMatrix.zeros(grids[0], (5, 5), 2)
    with pytest.raises(ValueError, match="block"):
        A.redistribute(block=(0, 2))
    with pytest.raises(ValueError, match="source"):
        A.redistribute(src=(grids[0].nprow, 0))
    with pytest.raises(TypeError):
        A.redistribute(block="big")
    if comm.size > 1:
        sub = comm.Split(color=0 if comm.rank == 0 else 1, key=comm.rank)
        small = ProcessGrid(comm=sub)  # a grid over fewer ranks
        with pytest.raises(ValueError, match="same communicator"):
            A.redistribute(grid=small)
        sub.Free()
    comm.Barrier()


def test_redistribute_to_grid_over_another_communicator(comm, grids):
    a = np.arange(42.0).reshape(7, 6)
    A = DistMatrix.from_global(grids[0], a, block=(2, 3))
    dup = comm.Dup()  # the same ranks in the same order: allowed
    B = A.redistribute(grid=ProcessGrid(comm=dup, order="col"), block=2, src=(0, 0))
    check_local(B, a)
    if comm.size > 1:  # the same ranks in another order: rejected on every rank
        rev = comm.Split(0, key=comm.size - comm.rank)
        with pytest.raises(ValueError, match="same order"):
            A.redistribute(grid=ProcessGrid(comm=rev), src=(0, 0))
        rev.Free()
    dup.Free()
    comm.Barrier()


def test_remap_reuses_its_work_buffers(grids, monkeypatch):
    """remap with a caller's work dict (as the slab-by-slab .npy writer uses it on GPU
    ranks, where pieces go through packed buffers): buffers are kept between calls, grown
    for a larger exchange and replaced for another dtype, and every result is right."""
    from distla import redistribute
    from distla.redistribute import remap
    monkeypatch.setattr(redistribute, "TYPED_EXCHANGE", False)
    work = {}
    for g1 in grids:
        for g2 in grids:
            for (m, n), dt in (((9, 7), np.float64), ((23, 14), np.float64), ((5, 4), np.float64),
                               ((23, 14), np.complex128)):
                a = (np.arange(m * n).reshape(m, n) + 0.5).astype(dt)
                A = DistMatrix.from_global(g1, a, block=(3, 2), src=corner(g1))
                B = DistMatrix.zeros(g2, (m, n), (2, 3), dtype=dt)
                remap(A, B, work=work)
                check_local(B, a)
                assert {w.dtype for w in work.values()} == {np.dtype(dt)}


@pytest.mark.parametrize("typed", [True, False])
def test_remap_typed_and_buffered_agree_on_strided_views(grids, monkeypatch, typed):
    """CPU remap through MPI datatypes over the local arrays (the default) and through packed
    buffers, right for sources and targets whose local arrays are strided: sub-matrix views
    (the parent's leading dimension) and C-ordered local storage; float32 and complex128.
    The target view's parent is untouched outside it."""
    from distla import redistribute
    from distla.redistribute import remap
    monkeypatch.setattr(redistribute, "TYPED_EXCHANGE", typed)
    for g1 in grids:
        for g2 in grids:
            for dt in (np.float32, np.complex128):
                big = (np.arange(31 * 29).reshape(31, 29) + 0.5).astype(dt)
                if dt is np.complex128:
                    big = big * (1 - 2j)
                a = big[3:27, 4:28]                      # 24 x 24
                P = DistMatrix.from_global(g1, big, block=(3, 4), src=corner(g1))
                C = DistMatrix.from_global(g1, a, block=(3, 4), src=corner(g1))
                C.local = np.ascontiguousarray(C.local)  # C-ordered local storage
                for S in (P.sub(1, 9, 1, 7), C):
                    T = DistMatrix.zeros(g2, (24, 30), (5, 2), dtype=dt)
                    remap(S, T.sub(0, 5, 0, 12))         # a 24 x 24 view of T's storage
                    t = np.zeros((24, 30), dt)
                    t[:, :24] = a
                    check_local(T, t)
