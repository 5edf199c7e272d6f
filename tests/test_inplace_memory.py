"""In-place factorizations (``overwrite_a=True``): the same factors as out of place, in A's
storage, with O(n nb) extra memory; the benchmarks' generators, residual check and peak-memory
and per-step overhead fields."""
import argparse
import tracemalloc

import numpy as np
import pytest

from distla import DistMatrix, ProcessGrid
from distla.bench import common
from distla.checks import passes, solve_residual
from distla.linalg import cholesky, lu_factor

THRESH = 3.0


def spd(n, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((n, n))
    return a @ a.T + n * np.eye(n)


@pytest.fixture(scope="module")
def grid1():
    from mpi4py import MPI
    return ProcessGrid(1, 1, MPI.COMM_SELF)


# --------------------------------------------------------------------------------------
# in place == out of place, on every grid shape
# --------------------------------------------------------------------------------------
@pytest.mark.mpi
def test_inplace_factors_equal_out_of_place(comm, grids):
    """n not a multiple of nb, a nonzero source process: the in-place factor is A itself
    (same local array) and equals the out-of-place factor bit for bit."""
    n, nb = 37, 5
    a, g_ = spd(n, seed=1), np.random.default_rng(2).standard_normal((n, n))
    for g in grids:
        src = (g.nprow - 1, g.npcol - 1)
        A = DistMatrix.from_global(g, a, block=nb, src=src)
        ref = cholesky(A).to_global(root=None)
        mem = A.local
        L = cholesky(A, overwrite_a=True)
        assert L is A and L.local is mem
        np.testing.assert_array_equal(L.to_global(root=None), ref)
        for piv in ("partial", "tournament", "none"):
            b = g_ + (n * np.eye(n) if piv == "none" else 0)
            G = DistMatrix.from_global(g, b, block=nb, src=src)
            F0 = lu_factor(G, pivoting=piv)
            mem = G.local
            F1 = lu_factor(G, pivoting=piv, overwrite_a=True)
            assert F1.lu is G and F1.lu.local is mem
            np.testing.assert_array_equal(F1.lu.to_global(root=None),
                                          F0.lu.to_global(root=None))
            np.testing.assert_array_equal(F1.piv, F0.piv)


@pytest.mark.mpi
def test_regenerated_residual_matches_solve_residual(comm, grids):
    """The benchmarks' residual with A regenerated in slabs agrees with SRESID with A held:
    both pass for the computed solution (values at rounding level differ with the summation
    order) and are equal for a perturbed one."""
    from distla.linalg import cho_solve, lu_solve
    n, nb = 45, 6
    for g in grids:
        B = DistMatrix.random(g, (n, 1), (nb, nb), seed=5)
        for kind, seed in (("spd", 3), ("general", 4)):
            make = common.spd_matrix if kind == "spd" else common.general_matrix
            A = make(g, n, nb, seed=seed)
            X = cho_solve((cholesky(A), True), B) if kind == "spd" else \
                lu_solve(lu_factor(A), B)
            A = make(g, n, nb, seed=seed)
            assert passes(common.regenerated_residual(kind, g, n, seed, X, B), THRESH)
            assert passes(solve_residual(A, X, B), THRESH)
            X.local[...] *= 1 + 1e-6          # a wrong solution: caught, same value
            bad = common.regenerated_residual(kind, g, n, seed, X, B)
            assert not passes(bad, THRESH)
            assert bad == pytest.approx(solve_residual(A, X, B), rel=1e-6)


# --------------------------------------------------------------------------------------
# memory (serial, tracemalloc: NumPy's allocations)
# --------------------------------------------------------------------------------------
def _peak_extra(fn):
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak - base


@pytest.mark.parametrize("loop", [False, True])
def test_inplace_extra_memory_is_o_n_nb(grid1, monkeypatch, loop):
    """With overwrite_a, the factorizations allocate O(n nb) beyond A (step loop: panel and
    U12 buffers reused; local library: in place by pointer), far below a copy of A."""
    if loop:
        from distla.linalg import _local
        monkeypatch.setattr(_local, "LOCAL_UP_TO", {k: 0 for k in _local.LOCAL_UP_TO})
    n, nb = 1200, 16
    bound = 16 * n * nb * 8 + (1 << 16)
    A = common.spd_matrix(grid1, n, nb, seed=1)
    extra = _peak_extra(lambda: cholesky(A, overwrite_a=True, check_finite=False,
                                         check_symmetric=False))
    assert extra <= bound, (extra, bound)
    G = common.general_matrix(grid1, n, nb, seed=1)
    extra = _peak_extra(lambda: lu_factor(G, overwrite_a=True, check_finite=False))
    assert extra <= bound and extra <= 0.25 * G.local.nbytes, (extra, bound)


def test_benchmark_problems_and_check_peak_near_the_local_matrix(grid1):
    """The benchmarks' generators stay within 1.25x the local matrix; the regenerated
    residual (A made again in slabs) needs a fraction of it."""
    from distla.linalg import cho_solve
    n, nb = 1500, 64
    for make in (common.spd_matrix, common.general_matrix):
        tracemalloc.start()
        A = make(grid1, n, nb, seed=2)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert peak <= 1.25 * A.local.nbytes, peak / A.local.nbytes
    A = common.spd_matrix(grid1, n, nb, seed=2)
    B = DistMatrix.random(grid1, (n, 1), (nb, nb), seed=1)
    X = cho_solve((cholesky(A, overwrite_a=True), True), B)
    extra = _peak_extra(lambda: common.regenerated_residual("spd", grid1, n, 2, X, B))
    assert extra <= 0.3 * A.local.nbytes, extra / A.local.nbytes


# --------------------------------------------------------------------------------------
# benchmark records: peak memory and per-step overhead fields
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["cholesky", "lu"])
@pytest.mark.parametrize("inplace", [False, True])
def test_benchmark_memory_and_step_fields(name, inplace):
    import importlib
    bench = importlib.import_module(f"distla.bench.{name}")
    p = argparse.ArgumentParser()
    bench.add_arguments(p)
    argv = ["--n", "100", "--nb", "16", "--device", "cpu", "--reps", "2", "--trace",
            "--grid", "1x1", "--no-reference", "--force-loop"] + \
        (["--inplace"] if inplace else [])
    rec = [r for r in bench.run(p.parse_args(argv)) if r["impl"] == "distla"][0]
    assert rec["host_peak_mb"] > 0 and rec["local_mb"] == pytest.approx(100 * 100 * 8 / 1e6)
    assert "device_peak_mb" not in rec                      # CPU ranks: no device pool
    assert rec.get("inplace", False) == inplace
    assert passes(rec["sresid"], THRESH)
    assert rec["steps"] == 7                                # ceil(100 / 16) block columns
    assert rec["step_host_us"] > 0 and rec["step_lib_calls"] >= 1
    assert 0 <= rec["step_overhead_median_us"] and 0 <= rec["step_overhead_us"]
    assert rec["step_overhead_us"] < rec["step_host_us"] or rec["step_lib_calls"] == 0
    # the largest n that fits: far beyond this n, and no more than the node's memory allows
    from distla.device.memory import capacity_bytes
    assert 100 < rec["largest_n"] <= (capacity_bytes(False) / (8 * (1 if inplace else 2))) ** 0.5


def test_largest_n_extrapolation():
    """memory.largest_n: matrices grow as n^2, the rest of the peak as n."""
    from distla.device.memory import largest_n
    MB = 1e6
    assert largest_n(1000, 8 * MB, 8 * MB, 32 * MB) == 2000          # no workspace: 4x room
    assert largest_n(1000, 8 * MB, 16 * MB, 64 * MB, copies=2) == 2000   # A and its copy
    # workspace of 8 MB at n = 1000: 8 x^2 + 8 x = 48 at x = 2
    assert largest_n(1000, 8 * MB, 16 * MB, 48 * MB) == 2000
    assert largest_n(1000, 8 * MB, 4 * MB, 32 * MB) == 2000          # peak below the matrix
    assert largest_n(1000, 0, 0, 32 * MB) == 0 and largest_n(1000, 8 * MB, 8 * MB, 0) == 0


def test_timed_fresh_holds_one_input():
    """Each repetition gets a fresh input and the previous result is dropped first."""
    made, alive = [], []

    class Thing:
        def __init__(self):
            alive.append(1)

        def __del__(self):
            alive.pop()

    def make():
        made.append(len(alive))
        return Thing()
    best, last = common.timed_fresh(make, lambda t: t, reps=3, warmup=1)
    assert best >= 0 and isinstance(last, Thing)
    assert made == [0, 0, 0, 0]                             # nothing alive at each make


# --------------------------------------------------------------------------------------
# GPU ranks
# --------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("loop", [False, True])
def test_gpu_inplace_equals_out_of_place(grid1, monkeypatch, loop):
    if loop:
        from distla.linalg import _local
        monkeypatch.setattr(_local, "LOCAL_UP_TO", {k: 0 for k in _local.LOCAL_UP_TO})
    n, nb = 300, 64
    A = DistMatrix.from_global(grid1, spd(n, 3), block=nb, device="gpu")
    ref = cholesky(A).to_global()
    mem = A.local
    L = cholesky(A, overwrite_a=True)
    assert L.local is mem
    np.testing.assert_allclose(L.to_global(), ref, rtol=0, atol=1e-12 * n)
    G = DistMatrix.from_global(grid1, np.random.default_rng(1).standard_normal((n, n)),
                               block=nb, device="gpu")
    F0 = lu_factor(G)
    mem = G.local
    F1 = lu_factor(G, overwrite_a=True)
    assert F1.lu.local is mem
    np.testing.assert_array_equal(F1.piv, F0.piv)
    np.testing.assert_allclose(F1.lu.to_global(), F0.lu.to_global(), rtol=0, atol=1e-10)


@pytest.mark.gpu
def test_gpu_peak_memory_tracks_the_pool():
    import cupy

    from distla.device.memory import PeakMemory
    common.free_device_pool("gpu")
    with PeakMemory("gpu") as pk:
        a = cupy.empty(100 * 10 ** 6 // 8)
        del a
    assert pk.device_bytes >= 100 * 10 ** 6 and pk.host_bytes > 0


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["cholesky", "lu"])
def test_gpu_benchmark_reports_device_peak(name):
    import importlib
    bench = importlib.import_module(f"distla.bench.{name}")
    p = argparse.ArgumentParser()
    bench.add_arguments(p)
    argv = ["--n", "512", "--nb", "128", "--device", "gpu", "--reps", "1", "--trace",
            "--grid", "1x1", "--no-reference", "--inplace", "--force-loop"]
    rec = [r for r in bench.run(p.parse_args(argv)) if r["impl"] == "distla"][0]
    assert rec["device_peak_mb"] >= rec["local_mb"] and rec["device_peak_ratio"] >= 1
    import cupy
    total = cupy.cuda.runtime.memGetInfo()[1]
    assert 512 < rec["largest_n"] <= (total / 8) ** 0.5
    assert passes(rec["sresid"], THRESH) and rec["steps"] == 4


# --------------------------------------------------------------------------------------
# recursive panels (Backend.getrf_recursive, LU's PANEL_LEAF)
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("m,n,leaf", [(200, 64, 8), (100, 100, 16), (300, 37, 5), (9, 9, 1)])
def test_recursive_getrf_matches_library(m, n, leaf):
    from distla.device import get_backend
    be = get_backend("cpu")
    a = np.asfortranarray(np.random.default_rng(m + n).standard_normal((m, n)))
    b, c = a.copy(order="F"), a.copy(order="F")
    p1, i1 = be.getrf(b)
    p2, i2 = be.getrf_recursive(c, leaf)
    np.testing.assert_array_equal(p1, p2)
    np.testing.assert_allclose(c, b, rtol=0, atol=1e-12 * n)
    assert i1 == i2 == 0
    a[:, n // 2 + 1] = 0.0          # exactly singular: the first zero pivot, 1-based
    b, c = a.copy(order="F"), a.copy(order="F")
    assert be.getrf_recursive(c, leaf)[1] == be.getrf(b)[1] > 0


@pytest.mark.mpi
def test_recursive_panel_lu_on_every_grid(comm, grids, monkeypatch):
    """LU with recursive panels: same pivots as one getrf per panel, backward stable."""
    from distla.linalg import _lu_loop, lu_solve
    n, nb = 45, 8
    a = np.random.default_rng(7).standard_normal((n, n))
    for g in grids:
        A = DistMatrix.from_global(g, a, block=nb, src=(0, g.npcol - 1))
        F0 = lu_factor(A)
        monkeypatch.setitem(_lu_loop.PANEL_LEAF, "cpu", 2)
        F1 = lu_factor(A)
        monkeypatch.setitem(_lu_loop.PANEL_LEAF, "cpu", 0)
        np.testing.assert_array_equal(F1.piv, F0.piv)
        np.testing.assert_allclose(F1.lu.to_global(root=None), F0.lu.to_global(root=None),
                                   rtol=0, atol=1e-12 * n)
        B = DistMatrix.random(g, (n, 1), (nb, nb), seed=1)
        assert passes(solve_residual(A, lu_solve(F1, B), B), THRESH)


def test_benchmark_panel_leaf_option():
    from distla.bench import lu as bench
    from distla.linalg import _lu_loop
    p = argparse.ArgumentParser()
    bench.add_arguments(p)
    before = dict(_lu_loop.PANEL_LEAF)
    rec = bench.run(p.parse_args(["--n", "96", "--nb", "32", "--device", "cpu", "--reps", "1",
                                  "--grid", "1x1", "--no-ref", "--force-loop",
                                  "--panel-leaf", "8"]))[0]
    assert rec["panel_leaf"] == 8 and passes(rec["sresid"], THRESH)
    assert _lu_loop.PANEL_LEAF == before


# --------------------------------------------------------------------------------------
# grouped trailing updates (Cholesky's UPDATE_GROUP)
# --------------------------------------------------------------------------------------
@pytest.mark.mpi
def test_grouped_cholesky_update_on_every_grid(comm, grids, monkeypatch):
    """Grouping adjacent block columns into one SYRK + GEMM gives the same factor on every
    grid (on 1 x 1 every column groups; elsewhere runs are shorter or single)."""
    from distla.linalg import _potrf_loop
    n, nb = 53, 6
    a = spd(n, seed=9)
    for g in grids:
        A = DistMatrix.from_global(g, a, block=nb, src=(g.nprow - 1, 0))
        ref = cholesky(A).to_global(root=None)
        for group in (2, 5, 100):
            monkeypatch.setitem(_potrf_loop.UPDATE_GROUP, "cpu", group)
            for la in (0, 1, 2):
                L = cholesky(A, lookahead=la).to_global(root=None)
                np.testing.assert_allclose(L, ref, rtol=0, atol=1e-12 * n)
        monkeypatch.setitem(_potrf_loop.UPDATE_GROUP, "cpu", 1)


@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_forced_step_loop_on_one_process_matches_lapack(grid1, monkeypatch, dtype):
    """The step loop on 1 x 1 (forced; there the transposed panel is the panel itself for
    real A, a conjugated copy for complex A): every lookahead and group size gives LAPACK's
    factor, with a last block column narrower than the others."""
    from distla.linalg import _local, _potrf_loop
    monkeypatch.setattr(_local, "LOCAL_UP_TO", {k: 0 for k in _local.LOCAL_UP_TO})
    n, nb = 61, 8
    rng = np.random.default_rng(4)
    g = rng.standard_normal((n, n)) + (1j * rng.standard_normal((n, n))
                                       if dtype == np.complex128 else 0)
    a = (g @ g.conj().T + n * np.eye(n)).astype(dtype)
    ref = np.linalg.cholesky(a)
    A = DistMatrix.from_global(grid1, a, block=nb)
    for group in (1, 3):
        monkeypatch.setitem(_potrf_loop.UPDATE_GROUP, "cpu", group)
        for la in (0, 1, 2):
            L = cholesky(A, lookahead=la).to_global(root=None)
            np.testing.assert_allclose(L, ref, rtol=0, atol=1e-12 * n * np.abs(ref).max())


def test_grouped_update_makes_fewer_calls(grid1, monkeypatch):
    """On 1 x 1 with the loop forced, the whole trailing update of a step is one SYRK + GEMM
    pair when the group covers it (besides the lookahead column and the one after it), so
    far fewer library calls per step."""
    from distla.linalg import _local, _potrf_loop
    from distla.trace import Tracer
    monkeypatch.setattr(_local, "LOCAL_UP_TO", {k: 0 for k in _local.LOCAL_UP_TO})
    A = DistMatrix.from_global(grid1, spd(96, seed=3), block=8)
    calls = {}
    for group in (1, 100):
        monkeypatch.setitem(_potrf_loop.UPDATE_GROUP, "cpu", group)
        with Tracer() as tr:
            cholesky(A, check_finite=False, check_symmetric=False)
        calls[group] = tr.lib_calls["update"]
    assert calls[100] < calls[1] / 2, calls      # lookahead column + 2 pairs per step


def test_benchmark_update_group_option():
    from distla.bench import cholesky as bench
    from distla.linalg import _potrf_loop
    p = argparse.ArgumentParser()
    bench.add_arguments(p)
    before = dict(_potrf_loop.UPDATE_GROUP)
    rec = bench.run(p.parse_args(["--n", "96", "--nb", "16", "--device", "cpu", "--reps", "1",
                                  "--grid", "1x1", "--no-reference", "--force-loop",
                                  "--update-group", "4", "--inplace"]))[0]
    assert rec["update_group"] == 4 and passes(rec["sresid"], THRESH)
    assert _potrf_loop.UPDATE_GROUP == before
