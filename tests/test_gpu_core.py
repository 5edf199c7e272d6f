"""The GPU path of the core against the CPU path.

* ``test_backend_kernels``: the device seam's local kernels (gemm, potrf, trsm, syrk, getrf)
  on strided column-major views, against NumPy/SciPy. Runs for ``cpu`` everywhere and for
  ``gpu`` where CuPy sees a device (the gpu case is ``@pytest.mark.gpu``).
* mpi + gpu: every distributed core operation (constructors, redistribute, transpose, matmul,
  norms, triangular solve, MPI-IO read/write) on GPU ranks gives what the CPU ranks give, on
  every grid shape of the communicator, both grid orders, nonzero source process.

On a GPU machine: ``python -m pytest -m gpu --require-gpu tests/test_gpu_core.py`` and
``mpirun -n 2 python -m pytest --with-mpi -m gpu --require-gpu tests/test_gpu_core.py``.
"""

import numpy as np
import pytest
import scipy.linalg as sla

from distla import DistMatrix, ProcessGrid
from distla.device import get_backend
from distla.pblas import matmul, norm, triangular_solve
from distla.testing import grid_shapes

DEVICES = ["cpu", pytest.param("gpu", marks=pytest.mark.gpu)]


def _tol(dtype):
    return 1e-10 if dtype == np.float64 else 1e-3


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_gemv_abs_one_pass(dtype, monkeypatch):
    """GpuBackend.gemv_abs: A x, |A| |x| and |A| 1 in one pass, on a strided column-major view
    (leading dimension > rows), 0 to 9 columns (groups of 4), more columns than one chunk,
    NaN propagated; None for what it does not cover (complex, mixed dtypes, row-major A)."""
    import cupy as cp
    be = get_backend("gpu")
    monkeypatch.setattr(type(be), "GEMV_CHUNK", 64)   # several column chunks at this size
    rng = np.random.default_rng(3)
    big = rng.standard_normal((300, 270)).astype(dtype)
    a = big[5:262, 3:203]                     # 257 x 200, ld 300
    tol = 1e-12 if dtype == np.float64 else 1e-4
    for k in (0, 1, 2, 4, 5, 9):
        x = rng.standard_normal((200, k)).astype(dtype)
        for absolute, rowsums in ((True, True), (False, False), (True, False), (False, True)):
            g = cp.asfortranarray(cp.asarray(big))[5:262, 3:203]
            y, ya, rs = be.gemv_abs(g, cp.asarray(x), absolute=absolute, rowsums=rowsums)
            scale = np.abs(a).sum(axis=1, keepdims=True) * max(1.0, np.abs(x).max(initial=0))
            np.testing.assert_allclose(y.get(), a @ x, rtol=0, atol=tol * scale.max())
            assert (ya is not None) == absolute and (rs is not None) == rowsums
            if absolute:
                np.testing.assert_allclose(ya.get(), np.abs(a) @ np.abs(x), rtol=tol, atol=0)
            if rowsums:
                np.testing.assert_allclose(rs.get(), np.abs(a).sum(axis=1, keepdims=True),
                                           rtol=tol)
    x = rng.standard_normal((200, 6)).astype(dtype)     # squares' sums, two column groups
    g = cp.asfortranarray(cp.asarray(big))[5:262, 3:203]
    y, ya, rs = be.gemv_abs(g, cp.asarray(x), absolute=False, squares=True)
    assert ya is None
    np.testing.assert_allclose(rs.get(), (a * a).sum(axis=1, keepdims=True), rtol=tol)
    np.testing.assert_allclose(y.get(), a @ x, rtol=0, atol=tol * np.abs(a).sum(1).max() * 5)
    bad = big.copy()
    bad[10, 50] = np.nan
    g = cp.asfortranarray(cp.asarray(bad))[5:262, 3:203]
    y, ya, rs = be.gemv_abs(g, cp.ones((200, 1), dtype), rowsums=True)
    assert np.isnan(y.get()[5, 0]) and np.isnan(ya.get()[5, 0]) and np.isnan(rs.get()[5, 0])
    assert np.isfinite(y.get()[6:, 0]).all()
    gc = cp.asfortranarray(cp.asarray(a, dtype=np.complex128))
    assert be.gemv_abs(gc, cp.ones((200, 1), np.complex128)) is None
    assert be.gemv_abs(g, cp.ones((200, 1), np.float16)) is None
    assert be.gemv_abs(cp.ascontiguousarray(g), cp.ones((200, 1), dtype)) is None


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_backend_kernels(device, dtype):
    be = get_backend(device)
    xp = be.xp
    tol = _tol(dtype)
    rng = np.random.default_rng(7)

    # gemm into a strided sub-view of a column-major array: only the view changes
    big = rng.standard_normal((40, 40)).astype(dtype)
    a, b = rng.standard_normal((7, 5)).astype(dtype), rng.standard_normal((5, 6)).astype(dtype)
    g = xp.asarray(np.asfortranarray(big))
    be.gemm("N", "N", -1.0, be.asarray(a), be.asarray(b), 1.0, g[3:10, 4:10])
    ref = big.copy()
    ref[3:10, 4:10] -= a @ b
    np.testing.assert_allclose(be.to_host(g), ref, atol=tol)

    # potrf on an offset view; info names the first non-positive leading minor (1-based)
    s = rng.standard_normal((9, 9)).astype(dtype)
    spd = s @ s.T + 9 * np.eye(9, dtype=dtype)
    g = xp.asarray(np.asfortranarray(np.pad(spd, ((2, 0), (1, 0)))))
    info = be.potrf("L", g[2:, 1:])
    L = np.tril(be.to_host(g)[2:, 1:])
    assert be.info_value(info) == 0
    np.testing.assert_allclose(L @ L.T, spd, atol=10 * tol * np.abs(spd).max())
    bad = spd.copy()
    bad[4, 4] = -1
    assert be.info_value(be.potrf("L", be.asarray(bad))) == 5

    # trsm and syrk
    x = rng.standard_normal((9, 3)).astype(dtype)
    gx = be.asarray(x)
    be.trsm("L", "L", "N", "N", 1.0, be.asarray(np.tril(spd)), gx)
    np.testing.assert_allclose(np.tril(spd) @ be.to_host(gx), x, atol=10 * tol * 9)
    c = be.zeros((9, 9), dtype)
    be.syrk("L", "N", 1.0, be.asarray(x), 0.0, c)
    np.testing.assert_allclose(np.tril(be.to_host(c)), np.tril(x @ x.T), atol=10 * tol * 9)

    # getrf: the same pivots as LAPACK, the same factors
    m = rng.standard_normal((8, 8)).astype(dtype)
    gm = be.asarray(m)
    piv, info = be.getrf(gm)
    lu, p = sla.lu_factor(m)
    assert be.info_value(info) == 0
    np.testing.assert_array_equal(np.asarray(be.to_host(piv)), p)
    np.testing.assert_allclose(be.to_host(gm), lu, atol=10 * tol)


def _f(I, J):
    return (I * 3 + J * 7) % 11 + 0.5 * (I == J)


def _triangle(I, J):
    return (I >= J) * (1.0 + (I == J) * 29 + 0.01 * J)


def _grids(comm):
    for P, Q in grid_shapes(comm.size):
        for order in ("row", "col"):
            yield ProcessGrid(P, Q, comm=comm, order=order)


@pytest.mark.mpi
@pytest.mark.gpu
def test_core_operations_gpu_match_cpu(comm):
    for grid in _grids(comm):
        P, Q = grid.nprow, grid.npcol
        out = {}
        for dev in ("cpu", "gpu"):
            A = DistMatrix.from_function(grid, (37, 29), (4, 5), _f, device=dev, src=(P - 1, 0))
            R = DistMatrix.random(grid, (29, 23), (5, 3), seed=5, device=dev)
            T = DistMatrix.from_function(grid, (29, 29), (5, 5), _triangle, device=dev)
            assert A.device == dev and R.device == dev
            out[dev] = dict(
                a=A.to_global(None), r=R.to_global(None),
                redist=A.redistribute(block=(3, 2), src=(0, Q - 1)).to_global(None),
                at=A.T.to_global(None),
                c=matmul(A, R).to_global(None),
                norms=[norm(A, o) for o in ("fro", 1, np.inf, "max")],
                x=triangular_solve(T, R).to_global(None),
            )
        cpu, gpu = out["cpu"], out["gpu"]
        tag = f"{P}x{Q} {grid.order}"
        np.testing.assert_array_equal(gpu["a"], cpu["a"], err_msg=tag)
        np.testing.assert_allclose(gpu["r"], cpu["r"], rtol=1e-14, atol=1e-14, err_msg=tag)
        np.testing.assert_array_equal(gpu["redist"], cpu["a"], err_msg=tag)
        np.testing.assert_array_equal(gpu["at"], cpu["a"].T, err_msg=tag)
        np.testing.assert_allclose(gpu["c"], cpu["c"], atol=1e-10, err_msg=tag)
        np.testing.assert_allclose(gpu["norms"], cpu["norms"], rtol=1e-12, err_msg=tag)
        t = np.tril(_triangle(np.arange(29)[:, None], np.arange(29)[None, :]))
        np.testing.assert_allclose(t @ gpu["x"], cpu["r"], atol=1e-10, err_msg=tag)


@pytest.mark.mpi
@pytest.mark.gpu
def test_io_roundtrip_on_gpu(comm, mpi_tmp_path):
    from distla import io

    n = 45
    want = np.asfortranarray(np.arange(n * n, dtype=np.float64).reshape(n, n) / 7.0)
    path = str(mpi_tmp_path / "a.npy")
    if comm.rank == 0:
        np.save(path, want)
    comm.Barrier()
    for grid in _grids(comm):
        A = io.read_matrix(path, grid, (8, 6), device="gpu", src=(grid.nprow - 1, 0))
        assert A.device == "gpu"
        np.testing.assert_array_equal(A.to_global(None), want)
        out = str(mpi_tmp_path / f"b{grid.nprow}x{grid.npcol}.npy")
        io.write_matrix(out, A)
        comm.Barrier()
        np.testing.assert_array_equal(np.load(out), want)
        comm.Barrier()
