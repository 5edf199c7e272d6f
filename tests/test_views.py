"""Block-level views of DistMatrix (mt, nt, tile owners, my block columns, block-aligned
``sub``), wrapping local storage with a leading dimension larger than the local row count
(ScaLAPACK's LLD), the NaN-safe scalar allreduce, and the host streams' ordering."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg as sl

from distla import DistMatrix, ProcessGrid, layout
from distla.device.streams import HostStream
from distla.linalg import cho_factor, cho_solve, lu_factor, lu_solve
from distla.testing import grid_shapes


def _grids(comm):
    return [ProcessGrid(p, q, comm) for p, q in grid_shapes(comm.size)]


def _srcs(g):
    return sorted({(0, 0), (g.nprow - 1, g.npcol - 1)})


def _a(m, n, seed=0):
    return np.random.default_rng(seed).standard_normal((m, n))


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_block_counts_owners_and_my_block_cols(comm):
    for g in _grids(comm):
        for src in _srcs(g):
            A = DistMatrix.zeros(g, (23, 17), block=(4, 5), src=src)
            assert (A.mt, A.nt) == (6, 4)
            for i in range(A.mt):
                for j in range(A.nt):
                    assert A.tile_owner(i, j) == ((src[0] + i) % g.nprow,
                                                  (src[1] + j) % g.npcol)
            cols = A.col_indices()
            got = [(j, cs, w) for j, cs, w in A.my_block_cols()]
            for j, cs, w in got:
                assert A.tile_owner(0, j)[1] == g.mycol
                assert list(cols[cs:cs + w]) == list(range(j * 5, min(17, j * 5 + 5)))
            assert sum(w for _, _, w in got) == A.local_shape[1]
            assert [t[0] for t in A.my_block_cols(2)] == [j for j, _, _ in got if j >= 2]


@pytest.mark.mpi
@pytest.mark.timeout(120)
@pytest.mark.parametrize("blocks", [(0, 6, 0, 4), (1, 4, 2, 4), (5, 6, 0, 1), (2, 2, 1, 3)])
def test_sub_is_the_global_slice_and_shares_storage(comm, blocks):
    i0, i1, j0, j1 = blocks
    a = _a(23, 17, 1)
    for g in _grids(comm):
        for src in _srcs(g):
            A = DistMatrix.from_global(g, a, block=(4, 5), src=src)
            S = A.sub(i0, i1, j0, j1)
            r0, r1, c0, c1 = 4 * i0, min(4 * i1, 23), 5 * j0, min(5 * j1, 17)
            assert S.shape == (r1 - r0, c1 - c0)
            assert np.array_equal(S.to_global(root=None), a[r0:r1, c0:c1])
            S.local[...] = -1.0            # writes land in A
            ref = a.copy()
            ref[r0:r1, c0:c1] = -1.0
            assert np.array_equal(A.to_global(root=None), ref)
    with pytest.raises(IndexError, match="outside"):
        A.sub(0, 7, 0, 1)


@pytest.mark.mpi
@pytest.mark.timeout(300)
def test_factor_and_solve_on_storage_with_a_larger_leading_dimension(comm):
    """A DESC with LLD > mloc: the user's (lld x nloc) array is used in place."""
    n, nb, extra = 29, 4, 3
    a = _a(n, n, 2) + n * np.eye(n)
    spd = a @ a.T + n * np.eye(n)
    b = _a(n, 2, 3)
    for g in _grids(comm):
        for src in _srcs(g):
            ref = DistMatrix.from_global(g, spd, block=nb, src=src)
            mloc, nloc = ref.local_shape
            store = np.full((mloc + extra, nloc), np.nan, order="F")
            store[:mloc] = ref.local
            desc = layout.Descriptor(n, n, nb, nb, src[0], src[1], mloc + extra)
            A = DistMatrix.from_descriptor(g, store, desc.to_scalapack())
            assert np.shares_memory(A.local, store) and A.local.strides[1] == 8 * (mloc + extra)
            B = DistMatrix.from_global(g, b, block=nb, src=src)
            X = cho_solve(cho_factor(A, overwrite_a=True), B)
            assert np.allclose(X.to_global(root=None), np.linalg.solve(spd, b))
            assert np.isnan(store[mloc:]).all()          # rows beyond mloc untouched
            G = DistMatrix.from_global(g, a, block=nb, src=src)
            store2 = np.zeros((mloc + extra, nloc), order="F")
            store2[:mloc] = G.local
            A2 = DistMatrix.from_descriptor(g, store2, layout.Descriptor(
                n, n, nb, nb, src[0], src[1], mloc + extra))
            X2 = lu_solve(lu_factor(A2, overwrite_a=True), B)
            assert np.allclose(X2.to_global(root=None), sl.solve(a, b))


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_grid_allreduce_scalar_is_nan_safe(comm):
    g = ProcessGrid(comm=comm)
    r = comm.rank
    assert g.allreduce(r, "sum") == sum(range(comm.size))
    assert isinstance(g.allreduce(r, "max"), int)
    assert g.allreduce(float(r), "max") == float(comm.size - 1)
    assert g.allreduce(-r, "min") == -(comm.size - 1)
    v = float("nan") if r == comm.size - 1 else 1.0
    assert np.isnan(g.allreduce(v, "max")) and np.isnan(g.allreduce(v, "min"))
    with pytest.raises(ValueError, match="op must be"):
        g.allreduce(1, "prod")


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_grid_allreduce_of_ints_is_exact_beyond_int64(comm):
    """Sums of ints do not wrap at 2^63 (NumPy's int64 sum did, silently); mixed int and
    float values reduce as floats."""
    g = ProcessGrid(comm=comm)
    assert g.allreduce(2 ** 62, "sum") == comm.size * 2 ** 62
    assert g.allreduce(np.int64(2 ** 62), "sum") == comm.size * 2 ** 62
    assert g.allreduce(-(2 ** 70) * (comm.rank + 1), "min") == -(2 ** 70) * comm.size
    if comm.size > 1:
        mixed = g.allreduce(1 if comm.rank == 0 else 0.5, "sum")
        assert isinstance(mixed, float) and mixed == 1 + 0.5 * (comm.size - 1)


def test_host_stream_runs_deferred_work_at_join_in_order():
    s, log = HostStream(), []
    with s:
        log.append("queued")
    s.defer(log.append, "deferred 1")
    s.defer(log.append, "deferred 2")
    log.append("next in program order")
    assert s.record() is None
    s.join()
    assert log == ["queued", "next in program order", "deferred 1", "deferred 2"]
    s.join()
    assert len(log) == 4


def test_generators_peak_near_the_local_matrix():
    """DistMatrix.random (hashing temporaries) and from_function work in column slabs: the
    peak of NumPy allocations stays within 1.3x the local matrix (it was 6x)."""
    import tracemalloc

    from mpi4py import MPI
    g = ProcessGrid(1, 1, MPI.COMM_SELF)
    m, n = 1500, 2400
    tracemalloc.start()
    A = DistMatrix.random(g, (m, n), block=64, seed=3)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak <= 1.25 * A.local.nbytes, peak / A.local.nbytes
    ref = DistMatrix.random(ProcessGrid(1, 1, MPI.COMM_SELF), (m, n), block=(7, 5), seed=3)
    assert np.array_equal(A.to_global(root=None), ref.to_global(root=None))
