"""Block-cyclic index math (distla.layout): property tests against brute force (serial)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distla import layout
from distla.layout import Descriptor

# one dimension of a block-cyclic layout: (n, nb, nprocs, src)
dims = st.integers(1, 7).flatmap(lambda P: st.tuples(
    st.integers(0, 120), st.integers(1, 17), st.just(P), st.integers(0, P - 1)))


def brute_owner_local(n, nb, P, src):
    """Deal the global indices out block by block, as ScaLAPACK's picture does."""
    owners, locals_ = np.empty(n, int), np.empty(n, int)
    count = [0] * P
    for g in range(n):
        p = (src + g // nb) % P
        owners[g], locals_[g] = p, count[p]
        count[p] += 1
    return owners, locals_, count


@settings(max_examples=150)
@given(dims)
def test_numroc_matches_brute_force_and_sums_to_n(d):
    n, nb, P, src = d
    _, _, count = brute_owner_local(n, nb, P, src)
    got = [layout.numroc(n, nb, p, src, P) for p in range(P)]
    assert got == count
    assert sum(got) == n


@settings(max_examples=150)
@given(dims)
def test_owner_and_local_index_match_brute_force(d):
    n, nb, P, src = d
    owners, locals_, _ = brute_owner_local(n, nb, P, src)
    g = np.arange(n)
    assert np.array_equal(layout.owner(g, nb, src, P), owners)
    assert np.array_equal(layout.global_to_local(g, nb, P), locals_)
    for i in range(0, n, max(1, n // 7)):  # scalar ints too
        assert layout.owner(i, nb, src, P) == owners[i]
        assert layout.global_to_local(i, nb, P) == locals_[i]


@settings(max_examples=150)
@given(dims)
def test_global_local_maps_are_inverse_bijections(d):
    n, nb, P, src = d
    g = np.arange(n)
    own = layout.owner(g, nb, src, P)
    loc = layout.global_to_local(g, nb, P)
    # global -> (owner, local) -> global
    back = np.array([layout.local_to_global(l, nb, p, src, P) for l, p in zip(loc, own)],
                    dtype=int)
    assert np.array_equal(back, g)
    # (p, local) -> global -> (p, local), over every local slot of every process
    for p in range(P):
        nl = layout.numroc(n, nb, p, src, P)
        l = np.arange(nl)
        gg = layout.local_to_global(l, nb, p, src, P)
        assert np.all((gg >= 0) & (gg < n))
        assert np.all(layout.owner(gg, nb, src, P) == p)
        assert np.array_equal(layout.global_to_local(gg, nb, P), l)


@settings(max_examples=150)
@given(dims)
def test_local_indices_sorted_disjoint_covering(d):
    n, nb, P, src = d
    parts = [layout.local_indices(n, nb, p, src, P) for p in range(P)]
    for p, idx in enumerate(parts):
        assert idx.dtype == np.int64
        assert len(idx) == layout.numroc(n, nb, p, src, P)
        assert np.all(np.diff(idx) > 0)
    allidx = np.concatenate(parts) if parts else np.array([], int)
    assert np.array_equal(np.sort(allidx), np.arange(n))  # disjoint and covering


@settings(max_examples=150)
@given(dims, st.data())
def test_local_start_counts_local_indices_below_g(d, data):
    n, nb, P, src = d
    g = data.draw(st.integers(0, n))
    for p in range(P):
        idx = layout.local_indices(n, nb, p, src, P)
        ls = layout.local_start(g, nb, p, src, P)
        assert ls == int(np.sum(idx < g))
        # the local slice [ls:] holds exactly the global indices >= g
        assert np.all(idx[ls:] >= g) and np.all(idx[:ls] < g)


@given(dims)
def test_numroc_of_leading_part_is_leading_local_slice(d):
    # the leading k indices of a dimension are the leading numroc(k) local indices
    n, nb, P, src = d
    for p in range(P):
        idx = layout.local_indices(n, nb, p, src, P)
        for k in (0, n // 3, n):
            assert np.array_equal(layout.local_indices(k, nb, p, src, P),
                                  idx[:layout.numroc(k, nb, p, src, P)])


def test_numroc_known_values():
    # 10 in blocks of 3 over 2 processes: blocks 0, 2 (3 + 3) on process 0, blocks 1, 3
    # (3 + 1) on process 1; with src = 1 the roles swap.
    assert [layout.numroc(10, 3, p, 0, 2) for p in range(2)] == [6, 4]
    assert [layout.numroc(10, 3, p, 1, 2) for p in range(2)] == [4, 6]
    assert [layout.numroc(7, 2, p, 2, 3) for p in range(3)] == [2, 2, 3]  # blocks on 2,0,1,2
    assert layout.numroc(0, 4, 0, 0, 3) == 0
    assert list(layout.local_indices(10, 3, 1, 1, 2)) == [0, 1, 2, 6, 7, 8]


@settings(max_examples=100)
@given(st.integers(0, 10**6), st.integers(0, 10**6), st.integers(1, 4096),
       st.integers(1, 4096), st.integers(0, 63), st.integers(0, 63), st.integers(1, 10**6),
       st.integers(0, 2**31 - 1))
def test_descriptor_round_trip(m, n, mb, nb, rsrc, csrc, lld, ctxt):
    d = Descriptor(m, n, mb, nb, rsrc, csrc, lld, ctxt)
    desc = d.to_scalapack()
    assert desc.dtype == np.int32 and desc.shape == (9,)
    assert list(desc) == [1, ctxt, m, n, mb, nb, rsrc, csrc, lld]  # DESCINIT's order
    assert Descriptor.from_scalapack(desc) == d
    assert Descriptor.from_scalapack(list(map(int, desc))) == d


@pytest.mark.parametrize("bad", [[1, 0, 4, 4, 2, 2, 0, 0], [2, 0, 4, 4, 2, 2, 0, 0, 4],
                                 [1] * 10])
def test_descriptor_rejects_non_dense(bad):
    with pytest.raises(ValueError):
        Descriptor.from_scalapack(bad)


def test_block_cyclic_views_match_local_indices():
    """The strided views pair each process's local part with exactly its global entries
    (np.ix_ of local_indices), both ways, for C- and Fortran-ordered global arrays, blocks
    that do not divide the size, nonzero sources, sizes below one block and empty ones."""
    rng = np.random.default_rng(5)
    for _ in range(400):
        m, n = (int(x) for x in rng.integers(0, 30, 2))
        mb, nb = (int(x) for x in rng.integers(1, 8, 2))
        P, Q = (int(x) for x in rng.integers(1, 5, 2))
        src = (int(rng.integers(0, P)), int(rng.integers(0, Q)))
        g = rng.standard_normal((m, n))
        if rng.random() < 0.5:
            g = np.asfortranarray(g)
        back = np.full_like(g, np.nan)
        for p in range(P):
            for q in range(Q):
                rows = layout.local_indices(m, mb, p, src[0], P)
                cols = layout.local_indices(n, nb, q, src[1], Q)
                loc = np.zeros((rows.size, cols.size), order="F")
                views = layout.block_cyclic_views(g, loc, (mb, nb), (p, q), src, (P, Q))
                assert len(views) <= 4
                for gv, lv in views:
                    lv[...] = gv
                assert np.array_equal(loc, g[np.ix_(rows, cols)])
                for gv, lv in layout.block_cyclic_views(back, loc, (mb, nb), (p, q), src,
                                                        (P, Q)):
                    gv[...] = lv
        assert np.array_equal(back, g)     # every entry written once, by its owner
