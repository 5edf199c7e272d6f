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


@pytest.mark.parametrize("device", DEVICES)
def test_staging_fills_views_in_any_dtype_and_order(device):
    """Backend.staging: pieces written by fill() into host buffers land in views of device
    storage (contiguous column slabs and strided row slabs), cast from the piece's dtype
    and re-laid out from its order; pieces of growing and shrinking size reuse the buffers;
    on CPU ranks a piece of the storage's own dtype and layout is filled in place."""
    be = get_backend(device)
    rng = np.random.default_rng(11)
    ref = np.zeros((9, 40))
    dest = be.zeros((9, 40), np.float64)
    pieces = [((slice(None), slice(0, 3)), np.float64, "F"),
              ((slice(None), slice(3, 20)), np.float32, "F"),
              ((slice(None), slice(20, 21)), np.float64, "C"),
              ((slice(2, 7), slice(None)), np.float32, "C"),
              ((slice(7, 9), slice(None)), np.float64, "C"),
              ((slice(0, 0), slice(None)), np.float64, "F")]
    seen = []
    with be.staging() as put:
        for idx, dt, order in pieces:
            view = dest[idx]
            vals = rng.standard_normal(view.shape).astype(dt)
            ref[idx] = vals

            def fill(buf, vals=vals, dt=dt, order=order):
                assert buf.shape == vals.shape and buf.dtype == dt
                assert isinstance(buf, np.ndarray) or device == "cpu"
                seen.append(buf)
                buf[...] = vals
            put(view, fill, dt, order)
    np.testing.assert_array_equal(be.to_host(dest), ref)
    if device == "cpu":
        assert np.shares_memory(seen[0], dest)         # same dtype and layout: in place
        assert not np.shares_memory(seen[1], dest)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_gemv_abs_one_pass(device, dtype, monkeypatch):
    """Backend.gemv_abs: A x, |A| |x| and |A| 1 (or the squares' sums) in one pass, on a
    strided column-major view (leading dimension > rows), 0 to 9 columns, several GPU column
    chunks / CPU tiles in both directions, NaN propagated; an empty view gives zeros (never
    None, so that every rank of a grid takes the same path); None for what it does not cover
    (complex, mixed dtypes, row-major A)."""
    be = get_backend(device)
    xp = be.xp
    if device == "gpu":
        monkeypatch.setattr(type(be), "GEMV_CHUNK", 64)   # several column chunks
    else:
        monkeypatch.setattr(type(be), "GEMV_TILE", 64 * 8)          # tiles of 64 x 8
        monkeypatch.setattr(type(be), "GEMV_TILE_ROWS", 64)

    def view(host):
        return xp.asfortranarray(xp.asarray(host))[5:262, 3:203]

    rng = np.random.default_rng(3)
    big = rng.standard_normal((300, 270)).astype(dtype)
    a = big[5:262, 3:203]                     # 257 x 200, ld 300
    tol = 1e-12 if dtype == np.float64 else 1e-4
    for k in (0, 1, 2, 4, 5, 9):
        x = rng.standard_normal((200, k)).astype(dtype)
        for absolute, rowsums in ((True, True), (False, False), (True, False), (False, True)):
            y, ya, rs = be.gemv_abs(view(big), xp.asarray(x), absolute=absolute,
                                    rowsums=rowsums)
            scale = np.abs(a).sum(axis=1, keepdims=True) * max(1.0, np.abs(x).max(initial=0))
            np.testing.assert_allclose(be.to_host(y), a @ x, rtol=0, atol=tol * scale.max())
            assert (ya is not None) == absolute and (rs is not None) == rowsums
            if absolute:
                np.testing.assert_allclose(be.to_host(ya), np.abs(a) @ np.abs(x), rtol=tol,
                                           atol=0)
            if rowsums:
                np.testing.assert_allclose(be.to_host(rs), np.abs(a).sum(axis=1, keepdims=True),
                                           rtol=tol)
    x = rng.standard_normal((200, 6)).astype(dtype)     # squares' sums, two column groups
    for absolute in (False, True):
        y, ya, rs = be.gemv_abs(view(big), xp.asarray(x), absolute=absolute, squares=True)
        assert (ya is not None) == absolute
        np.testing.assert_allclose(be.to_host(rs), (a * a).sum(axis=1, keepdims=True),
                                   rtol=tol)
        np.testing.assert_allclose(be.to_host(y), a @ x, rtol=0,
                                   atol=tol * np.abs(a).sum(1).max() * 5)
        if absolute:
            np.testing.assert_allclose(be.to_host(ya), np.abs(a) @ np.abs(x), rtol=tol)
    bad = big.copy()
    bad[10, 50] = np.nan
    g = view(bad)
    y, ya, rs = be.gemv_abs(g, xp.ones((200, 1), dtype), rowsums=True)
    y, ya, rs = be.to_host(y), be.to_host(ya), be.to_host(rs)
    assert np.isnan(y[5, 0]) and np.isnan(ya[5, 0]) and np.isnan(rs[5, 0])
    assert np.isfinite(y[6:, 0]).all()
    for shape in ((0, 7), (7, 0), (0, 0)):       # a rank holding no rows or no columns
        y, ya, rs = be.gemv_abs(xp.zeros(shape, dtype, order="F"),
                                xp.ones((shape[1], 2), dtype), rowsums=True)
        assert y.shape == ya.shape == (shape[0], 2) and rs.shape == (shape[0], 1)
        assert not be.to_host(y).any() and not be.to_host(rs).any()
    gc = xp.asfortranarray(xp.asarray(a, dtype=np.complex128))
    assert be.gemv_abs(gc, xp.ones((200, 1), np.complex128)) is None
    assert be.gemv_abs(g, xp.ones((200, 1), np.float16)) is None
    assert be.gemv_abs(xp.ascontiguousarray(g), xp.ones((200, 1), dtype)) is None


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128])
def test_one_column_products_and_solves(device, dtype):
    """gemm and trsm with one column of C / B (CPU ranks: BLAS gemv and trsv) on strided
    views, every op, alpha and beta, a right-hand side given as a row of a transposed
    operand; against NumPy/SciPy."""
    if device == "gpu" and dtype == np.complex128:
        pytest.skip("the GPU backend's kernels are real (float32/float64) only")
    be = get_backend(device)
    xp = be.xp
    tol = _tol(np.float32 if dtype == np.float32 else np.float64)
    rng = np.random.default_rng(11)

    def r(*shape):
        v = rng.standard_normal(shape)
        return (v + 1j * rng.standard_normal(shape) if dtype == np.complex128 else v
                ).astype(dtype)

    big = r(40, 40)
    a = big[2:32, 4:24]                                        # 30 x 20, ld 40
    for ta in ("N", "T", "C"):
        opa = {"N": a, "T": a.T, "C": a.conj().T}[ta]
        k = opa.shape[1]
        xb = r(k + 3, 3)
        cb = r(opa.shape[0] + 2, 3)
        x, c = xb[1:k + 1, 1:2], cb[2:, 2:3]                  # strided single columns
        want = 1.5 * opa @ x + 0.5 * c
        dc = xp.asfortranarray(xp.asarray(cb))
        be.gemm(ta, "N", 1.5, xp.asfortranarray(xp.asarray(big))[2:32, 4:24],
                xp.asfortranarray(xp.asarray(xb))[1:k + 1, 1:2], 0.5, dc[2:, 2:3])
        np.testing.assert_allclose(be.to_host(dc[2:, 2:3]), want, rtol=tol, atol=tol * 10)
        xt = xp.asfortranarray(xp.asarray(r(1, k)))             # op(b) = b^T: a row of b
        ct = xp.zeros((opa.shape[0], 1), dtype, order="F")
        be.gemm(ta, "T", 1.0, xp.asfortranarray(xp.asarray(a)), xt, 0.0, ct)
        np.testing.assert_allclose(be.to_host(ct), opa @ be.to_host(xt).T, rtol=tol,
                                   atol=tol * 10)
    t = (np.tril(r(20, 20)) + 20 * np.eye(20)).astype(dtype)
    for uplo, tt in (("L", t), ("U", t.T)):
        for ta in ("N", "T", "C"):
            for diag in ("N", "U"):
                m = tt - np.diag(np.diag(tt)) + np.eye(20) if diag == "U" else tt
                op = {"N": m, "T": m.T, "C": m.conj().T}[ta]
                bb = r(25, 2)
                db = xp.asfortranarray(xp.asarray(bb))
                be.trsm("L", uplo, ta, diag, 2.0, xp.asfortranarray(xp.asarray(tt)),
                        db[3:23, 1:2])
                np.testing.assert_allclose(be.to_host(db[3:23, 1:2]),
                                           np.linalg.solve(op, 2.0 * bb[3:23, 1:2]),
                                           rtol=tol, atol=tol)
                np.testing.assert_array_equal(be.to_host(db[:3]), bb[:3])   # rest untouched


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


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("uplo, trans", [("L", "T"), ("L", "N"), ("U", "T"), ("U", "N")])
@pytest.mark.parametrize("split", [0, 96])
def test_syrk_on_views_and_split(device, uplo, trans, split, monkeypatch):
    """syrk on a row-major operand (the Cholesky loop's transposed panel) and into an offset
    view; on GPU ranks also split in halves recursively (SYRK_SPLIT, orders not divisible by
    the split): only the ``uplo`` triangle of the view changes, to ``beta C + alpha op(a)
    op(a)^T``."""
    be = get_backend(device)
    if split:
        if device == "cpu":
            pytest.skip("SYRK_SPLIT is the GPU backend's")
        monkeypatch.setattr(type(be), "SYRK_SPLIT", split)
    rng = np.random.default_rng(3)
    n, k = 333, 40
    a = rng.standard_normal((k, n) if trans == "T" else (n, k))
    big = rng.standard_normal((n + 5, n + 3))
    g = be.xp.asarray(np.asfortranarray(big))
    ga = be.asarray(np.ascontiguousarray(a))          # row-major: no copy on either device
    be.syrk(uplo, trans, -0.5, ga, 2.0, g[5:, 3:])
    prod = a.T @ a if trans == "T" else a @ a.T
    tri = np.tril if uplo == "L" else np.triu
    ref = big.copy()
    ref[5:, 3:] = np.where(tri(np.ones((n, n))) > 0, 2.0 * big[5:, 3:] - 0.5 * prod,
                           big[5:, 3:])
    np.testing.assert_allclose(be.to_host(g), ref, atol=1e-11 * np.abs(ref).max())


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


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128])
def test_column_abs_stats(device, dtype, monkeypatch):
    """Backend.column_abs_stats: per column sum and max of |a| from one pass, on strided views
    of both layouts (several CPU slabs), NaN and inf propagated into their column only, and
    empty parts (a rank holding no rows or no columns)."""
    be = get_backend(device)
    xp = be.xp
    monkeypatch.setattr(type(be), "ABS_SLAB", 300)      # slabs of one to a few columns
    rng = np.random.default_rng(5)
    big = rng.standard_normal((300, 270)).astype(dtype)
    if dtype == np.complex128:
        big = big + 1j * rng.standard_normal((300, 270))
    big[40, 7] = np.nan
    big[41, 9] = -np.inf
    tol = 1e-12 if dtype != np.float32 else 1e-5
    for order in ("F", "C"):
        dev = xp.asarray(np.array(big, order=order))[5:262, 3:203]
        a = big[5:262, 3:203]
        sums, maxes = be.column_abs_stats(dev)
        sums, maxes = be.to_host(sums), be.to_host(maxes)
        assert sums.shape == maxes.shape == (200,)
        assert np.isnan(sums[4]) and np.isnan(maxes[4])
        assert sums[6] == np.inf and maxes[6] == np.inf
        ok = np.ones(200, bool)
        ok[[4, 6]] = False
        np.testing.assert_allclose(sums[ok], np.abs(a).sum(axis=0)[ok], rtol=tol)
        # complex |z|: the device's hypot may differ from NumPy's in the last bit
        np.testing.assert_allclose(maxes[ok], np.abs(a).max(axis=0)[ok],
                                   rtol=0 if dtype != np.complex128 else 1e-15)
    for shape in ((0, 7), (7, 0)):
        sums, maxes = be.column_abs_stats(xp.zeros(shape, dtype, order="F"))
        assert sums.shape == maxes.shape == (shape[1],)
        assert not be.to_host(sums).any() and not be.to_host(maxes).any()


def _local_factor_cases(dtype, seed):
    """``(nb, rows, cols, a)``: the global row and column indices a process holds in
    block-cyclic layouts of n = 47 (process rows/columns of 2 or 3, blocks of 4 and 5, a
    partial last block, one 1 x 1 grid) and random local storage of that shape (host)."""
    from distla import layout
    rng = np.random.default_rng(seed)
    for nb, p, q, (pr, pc) in ((4, 2, 3, (1, 2)), (5, 3, 2, (0, 1)), (4, 1, 1, (0, 0))):
        rows = layout.local_indices(47, nb, pr, 0, p)
        cols = layout.local_indices(47, nb, pc, 0, q)
        a = rng.standard_normal((rows.size, cols.size)).astype(dtype)
        if dtype == np.complex128:
            a = a + 1j * rng.standard_normal(a.shape)
        yield nb, rows, cols, a


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128])
def test_upper_max_abs(device, dtype):
    """Backend.upper_max_abs: max |a_ij| over rows[i] <= cols[j] for the local indices of
    block-cyclic layouts (a process row/column of 2 or 3, blocks of 4 and 5, partial last
    block), a NaN on or above the diagonal propagated and one below ignored."""
    be = get_backend(device)
    xp = be.xp
    for nb, rows, cols, a in _local_factor_cases(dtype, seed=11):
        keep = rows[:, None] <= cols[None, :]
        a[~keep] *= 1e3                          # the strict lower part must not count
        want = np.abs(a[keep]).max()
        dev = xp.asarray(np.asfortranarray(a))
        got = float(be.to_host(be.upper_max_abs(dev, rows, cols, nb)))
        assert got == pytest.approx(want, rel=1e-15), nb
        i, j = np.argwhere(~keep)[0]
        b = a.copy()
        b[i, j] = np.nan
        got = float(be.to_host(be.upper_max_abs(xp.asarray(np.asfortranarray(b)), rows,
                                                cols, nb)))
        assert got == pytest.approx(want, rel=1e-15)
        i, j = np.argwhere(keep)[-1]
        b[i, j] = np.nan
        assert np.isnan(float(be.to_host(be.upper_max_abs(
            xp.asarray(np.asfortranarray(b)), rows, cols, nb))))


@pytest.mark.parametrize("device", DEVICES)
def test_arithmetic_results_are_column_major(device):
    """DistMatrix +, -, *, /, unary - and add() store their results column-major like every
    other constructor (CuPy wrote them in C order, and kernels reading them later ran ~2x
    slower), with NumPy's type promotion, views included."""
    from distla import DistMatrix, ProcessGrid
    g = ProcessGrid()
    A = DistMatrix.random(g, (30, 20), (8, 8), dtype=np.float32, device=device)
    V = A.sub(0, 2, 1, 3)
    cases = {"A+A": (A + A, np.float32), "A-A": (A - A, np.float32),
             "2*A": (2 * A, np.float32), "A/3": (A / 3, np.float32),
             "-A": (-A, np.float32), "V*2": (V * 2.0, np.float32),
             "add": (A.add(A, 2.0, 3.0), np.float32)}
    if device == "cpu":
        cases["A*1j"] = (A * 1j, np.complex64)
    else:                               # (complex matrices stay on CPU ranks)
        with pytest.raises(TypeError, match="not supported on GPU ranks"):
            A * 1j
    for name, (M, dt) in cases.items():
        assert M.local.flags.f_contiguous and M.local.dtype == dt and M.dtype == dt, name
    a = A.to_global(None)
    np.testing.assert_array_equal((A - 2 * A).to_global(None), a - 2 * a)
    np.testing.assert_array_equal((-A / 2).to_global(None), -a / 2)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128])
def test_lower_column_max_abs(device, dtype):
    """Backend.lower_column_max_abs: per column, max |a_ij| over rows[i] > cols[j] (the
    multipliers of an LU factor) for the local indices of block-cyclic layouts; the upper
    part ignored, a NaN below the diagonal propagated into its column only, 0 for a column
    with no row below it."""
    be = get_backend(device)
    if dtype == np.complex128 and device == "gpu":
        pytest.skip("GPU ranks hold real matrices")
    xp = be.xp
    for nb, rows, cols, a in _local_factor_cases(dtype, seed=12):
        below = rows[:, None] > cols[None, :]
        a[~below] *= 1e3                         # the upper part must not count
        want = np.where(below, np.abs(a), 0).max(axis=0)
        got = be.to_host(be.lower_column_max_abs(xp.asarray(np.asfortranarray(a)), rows,
                                                 cols, nb))
        np.testing.assert_allclose(got, want, rtol=1e-6 if dtype == np.float32 else 1e-15)
        i, j = np.argwhere(below)[len(np.argwhere(below)) // 2]
        b = a.copy()
        b[i, j] = np.nan
        got = be.to_host(be.lower_column_max_abs(xp.asarray(np.asfortranarray(b)), rows,
                                                 cols, nb))
        assert np.isnan(got[j]) and not np.isnan(np.delete(got, j)).any()


def test_complex_on_gpu_ranks_is_refused_first():
    """GPU ranks run real kernels only: a complex matrix there is a TypeError when it is
    made (it failed later, inside a product, with KeyError: 'D'), with or without CuPy."""
    from distla import DistMatrix, ProcessGrid
    g = ProcessGrid()
    for dt in (np.complex64, np.complex128):
        with pytest.raises(TypeError, match="not supported on GPU ranks"):
            DistMatrix(g, (8, 8), (4, 4), dtype=dt, device="gpu")
        with pytest.raises(TypeError, match="not supported on GPU ranks"):
            DistMatrix.zeros(g, (8, 8), (4, 4), dtype=dt, device="gpu")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128])
def test_max_abs(device, dtype):
    """Backend.max_abs: max |a_ij| of strided views of both layouts (the GPU's per-column
    kernel then the row), NaN propagated, an empty part 0."""
    be = get_backend(device)
    xp = be.xp
    rng = np.random.default_rng(7)
    big = rng.standard_normal((300, 270)).astype(dtype)
    if dtype == np.complex128:
        big = big + 1j * rng.standard_normal((300, 270))
    big[100, 100] = -40.0
    for order in ("F", "C"):
        dev = xp.asarray(np.array(big, order=order))
        for sl in (np.s_[5:262, 3:203], np.s_[:, 90:110], np.s_[100:101, :]):
            got = float(be.to_host(be.max_abs(dev[sl])))
            assert got == pytest.approx(float(np.abs(big[sl]).max()), rel=1e-15), sl
        bad = dev.copy()
        bad[7, 9] = np.nan
        assert np.isnan(float(be.to_host(be.max_abs(bad[:, 5:20]))))
    assert float(be.to_host(be.max_abs(xp.zeros((0, 4), dtype)))) == 0.0


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("order", ["F", "C"])
def test_zero_above(device, order, monkeypatch):
    """Backend.zero_above zeroes exactly the entries whose global row is above their global
    column, for block-cyclic index sets (blocks the band crosses, several CPU column groups)
    on strided views; the rest is untouched."""
    be = get_backend(device)
    xp = be.xp
    rng = np.random.default_rng(6)
    from distla import layout
    for n, nb, P, Q, pr, pc in ((1000, 7, 3, 2, 1, 1), (530, 64, 1, 1, 0, 0),
                                (530, 16, 2, 3, 0, 2)):
        rows = layout.local_indices(n, nb, pr, 0, P)
        cols = layout.local_indices(n, nb, pc, 0, Q)
        big = rng.standard_normal((rows.size + 9, cols.size + 4))
        dev = xp.asarray(np.array(big, order=order))[4:4 + rows.size, 2:2 + cols.size]
        be.zero_above(dev, rows, cols)
        want = big[4:4 + rows.size, 2:2 + cols.size].copy()
        want[rows[:, None] < cols[None, :]] = 0
        np.testing.assert_array_equal(be.to_host(dev), want)
    be.zero_above(xp.zeros((0, 5)), np.zeros(0, np.int64), np.arange(5))   # no rows here


@pytest.mark.gpu
def test_gpu_preload_then_factor(monkeypatch):
    """GpuBackend.preload runs every kernel family once (no error, nothing left queued), in
    the background thread too, and the solvers run right after; DISTLA_PRELOAD=0 turns the
    thread off."""
    be = get_backend("gpu")
    be.preload(np.float64)
    be.preload(np.float32)
    t = be.preload_async(np.float64)
    assert t is not None
    t.join(timeout=60)
    assert not t.is_alive()
    g = ProcessGrid(1, 1)
    from distla.linalg import cholesky
    from distla.problems import spd_matrix
    A = spd_matrix(g, 300, 64, seed=1, device="gpu")
    L = cholesky(A)
    r = be.to_host(L.local @ L.local.T - A.local)
    assert np.abs(r).max() < 1e-10 * 300
    monkeypatch.setenv("DISTLA_PRELOAD", "0")
    assert be.preload_async() is None


# --------------------------------------------------------------------------------------
# the recursive LU panel's GPU leaf kernel (device/_panel_cuda.py, docs/perf.md)
# --------------------------------------------------------------------------------------
def _plu_check(a, lu, piv, tol):
    """P a = L U from LAPACK-style 0-based pivots, |L| <= 1: the defining properties."""
    m, n = a.shape
    perm = np.arange(m)
    for i, p in enumerate(piv):
        perm[[i, p]] = perm[[p, i]]
    L = np.tril(lu, -1)[:, :n] + np.eye(m, n)
    U = np.triu(lu[:n])
    assert np.abs(L).max() <= 1 + tol
    np.testing.assert_allclose(L @ U, a[perm], atol=tol * n * max(1.0, np.abs(a).max()))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("m,n,leaf", [(1000, 96, 32), (5003, 200, 32), (300, 300, 16),
                                      (33, 33, 8), (40000, 40, 64), (257, 64, 64)])
def test_recursive_panel_kernel_matches_cusolver(dtype, m, n, leaf):
    """getrf_recursive with the cooperative leaf kernel: cuSOLVER's pivots and factors on
    random panels (any height, blocks that do not divide it, leaves of 8-64 columns, a view
    with a larger leading dimension); P A = L U with |L| <= 1 where rows tie (small
    integers); the first zero pivot in info, as cuSOLVER; a NaN neither hangs nor vanishes."""
    be = get_backend("gpu")
    xp = be.xp
    tol = _tol(dtype)
    rng = np.random.default_rng(m + n)
    a = rng.standard_normal((m, n)).astype(dtype)
    big = xp.asfortranarray(xp.zeros((m + 5, n + 3), dtype=dtype))
    big[2:m + 2, 1:n + 1] = xp.asarray(a)
    view = big[2:m + 2, 1:n + 1]
    ref = xp.asfortranarray(xp.asarray(a))
    p_ref, i_ref = be.getrf(ref)
    piv, info = be.getrf_recursive(view, leaf)
    np.testing.assert_array_equal(be.to_host(piv), be.to_host(p_ref))
    np.testing.assert_allclose(be.to_host(view), be.to_host(ref), rtol=0,
                               atol=tol * np.sqrt(n) * 10)
    assert be.info_value(info) == be.info_value(i_ref) == 0
    assert float(xp.abs(big[:2]).max() + xp.abs(big[m + 2:]).max() + xp.abs(big[:, 0]).max()
                 + xp.abs(big[:, n + 1:]).max()) == 0.0      # nothing outside the view
    ties = rng.integers(-2, 3, size=(m, n)).astype(dtype)
    g = xp.asfortranarray(xp.asarray(ties))
    piv, info = be.getrf_recursive(g, leaf)
    if be.info_value(info) == 0:
        _plu_check(ties.astype(np.float64), be.to_host(g).astype(np.float64),
                   be.to_host(piv), 100 * tol)
    sing = a.copy()
    sing[:, n // 2 + 1] = 0.0
    g, r = xp.asfortranarray(xp.asarray(sing)), xp.asfortranarray(xp.asarray(sing))
    assert be.info_value(be.getrf_recursive(g, leaf)[1]) == be.info_value(be.getrf(r)[1]) > 0
    bad = a.copy()
    bad[m // 3, min(5, n - 1)] = np.nan
    g = xp.asfortranarray(xp.asarray(bad))
    be.getrf_recursive(g, leaf)
    assert bool(xp.isnan(g).any())


@pytest.mark.mpi
@pytest.mark.gpu
def test_recursive_panel_lu_on_gpu_grids(comm, monkeypatch):
    """LU on GPU ranks with every panel through the recursive panel and its leaf kernel:
    the pivots and factors of one cuSOLVER getrf per panel, on every grid shape."""
    from distla.linalg import _local, _lu_loop, lu_factor
    monkeypatch.setitem(_local.LOCAL_UP_TO, ("gpu", "getrf"), 0)
    n, nb = 150, 32
    a = np.random.default_rng(3).standard_normal((n, n))
    for grid in _grids(comm):
        A = DistMatrix.from_global(grid, a, block=nb, device="gpu", src=(0, grid.npcol - 1))
        F0 = lu_factor(A)
        monkeypatch.setitem(_lu_loop.PANEL_LEAF, "gpu", 16)
        monkeypatch.setitem(_lu_loop.PANEL_MIN_ROWS, "gpu", 0)
        F1 = lu_factor(A)
        monkeypatch.setitem(_lu_loop.PANEL_LEAF, "gpu", 0)
        np.testing.assert_array_equal(F1.piv, F0.piv)
        np.testing.assert_allclose(F1.lu.to_global(None), F0.lu.to_global(None), rtol=0,
                                   atol=1e-11 * n)


@pytest.mark.mpi
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_native_inverse_panels_on_gpu_grids(comm, dtype, monkeypatch):
    """The working-precision loops with the diagonal block's inverse and a GEMM in place of
    the triangular solve (GpuBackend.NATIVE_INVERSE): LU's pivots equal the trsm loop's and
    both factorizations' residuals stay at working accuracy, on every grid shape."""
    from distla.device.gpu import GpuBackend
    from distla.linalg import _local, cholesky, lu_factor
    monkeypatch.setitem(_local.LOCAL_UP_TO, ("gpu", "getrf"), 0)
    monkeypatch.setitem(_local.LOCAL_UP_TO, ("gpu", "potrf"), 0)
    n, nb = 150, 32
    rng = np.random.default_rng(4)
    a = rng.standard_normal((n, n)).astype(dtype)
    spd = (a.astype(np.float64) @ a.T + n * np.eye(n)).astype(dtype)
    eps = np.finfo(dtype).eps
    for grid in _grids(comm):
        A = DistMatrix.from_global(grid, a, block=nb, device="gpu", src=(0, grid.npcol - 1))
        S = DistMatrix.from_global(grid, spd, block=nb, device="gpu")
        monkeypatch.setattr(GpuBackend, "NATIVE_INVERSE", frozenset())
        F0 = lu_factor(A)
        monkeypatch.setattr(GpuBackend, "NATIVE_INVERSE", frozenset({"lu", "cholesky"}))
        F1 = lu_factor(A)
        L = cholesky(S).to_global(None)
        np.testing.assert_array_equal(F1.piv, F0.piv)
        lu = F1.lu.to_global(None)
        low, up = np.tril(lu, -1) + np.eye(n), np.triu(lu)
        perm = np.arange(n)
        for i, p in enumerate(F1.piv):
            perm[[i, p]] = perm[[p, i]]
        r = np.abs(a[perm] - low @ up).max() / (np.abs(a).max() * n * eps)
        assert r < 30, r
        r = np.abs(spd - np.tril(L) @ np.tril(L).conj().T).max() / (np.abs(spd).max() * n * eps)
        assert r < 30, r
