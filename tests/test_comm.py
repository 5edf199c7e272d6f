"""Data communicators (MPI and NCCL implementations of one interface) and the device seam.

* mpi-marked: MpiComm (NumPy) and, where a GPU exists, NcclComm (CuPy) through the same tests;
  grid communicators; node_local_rank.
* serial: Backend('cpu') kernels on strided column-major sub-views (and the copy fallback for
  other layouts) against NumPy/SciPy.
"""

import numpy as np
import pytest
import scipy.linalg as sla

from distla import ProcessGrid
from distla.comm import MpiComm, NcclComm, Request
from distla.device import CpuBackend, get_backend, gpu_available, node_local_rank
from distla.testing import grid_shapes

HAVE_GPU = gpu_available()


# ======================================================================================
# communicators (mpi)
# ======================================================================================
@pytest.fixture(params=["mpi", pytest.param("nccl", marks=pytest.mark.gpu)])
def impl(request, comm):
    """(communicator factory, array namespace) for each implementation of the interface."""
    if request.param == "mpi":
        return MpiComm, np
    if not HAVE_GPU:
        pytest.skip("NcclComm needs CuPy and a GPU")
    import cupy
    get_backend("gpu", comm)  # select this rank's GPU
    return NcclComm, cupy


def host(x):
    return x.get() if hasattr(x, "get") and not isinstance(x, np.ndarray) else np.asarray(x)


@pytest.mark.mpi
def test_interface_basics(comm, impl):
    make, xp = impl
    c = make(comm)
    assert (c.rank, c.size) == (comm.rank, comm.size)
    assert c.device == ("cpu" if xp is np else "gpu")
    c.barrier()


@pytest.mark.mpi
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128, np.int64])
def test_bcast_and_ibcast_from_every_root(comm, impl, dtype):
    make, xp = impl
    c = make(comm)
    for root in range(comm.size):
        want = (np.arange(12).reshape(3, 4) * (root + 1)).astype(dtype)
        for order in "CF":
            buf = xp.asarray(want, order=order) if comm.rank == root else \
                xp.zeros((3, 4), dtype=dtype, order=order)
            c.bcast(buf, root)
            np.testing.assert_array_equal(host(buf), want)
        buf = xp.asarray(want) if comm.rank == root else xp.zeros((3, 4), dtype=dtype)
        req = c.ibcast(buf, root)
        assert isinstance(req, Request)
        req.wait()
        req.wait()  # idempotent
        np.testing.assert_array_equal(host(buf), want)


@pytest.mark.mpi
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64])
def test_allreduce_in_place(comm, impl, dtype):
    make, xp = impl
    c = make(comm)
    r, s = comm.rank, comm.size
    base = np.arange(6, dtype=dtype).reshape(2, 3)
    for op, want in [("sum", base * s + s * (s - 1) // 2), ("max", base + s - 1),
                     ("min", base)]:
        buf = xp.asarray(base + r, order="F")
        c.allreduce(buf, op)
        np.testing.assert_array_equal(host(buf), want.astype(dtype))
    with pytest.raises(KeyError):
        c.allreduce(xp.zeros(2), "prod")


@pytest.mark.mpi
def test_allgather(comm, impl):
    make, xp = impl
    c = make(comm)
    send = xp.full(5, float(comm.rank))
    recv = xp.zeros(5 * comm.size)
    c.allgather(send, recv)
    np.testing.assert_array_equal(host(recv), np.repeat(np.arange(comm.size, dtype=float), 5))


@pytest.mark.mpi
def test_exchange_ring_and_all_pairs(comm, impl):
    make, xp = impl
    c = make(comm)
    r, s = comm.rank, comm.size
    # a ring: send to the right, receive from the left (2-D column-major buffers)
    out = xp.asarray(np.full((2, 3), r, dtype=np.float64), order="F")
    inn = xp.zeros((2, 3), order="F")
    c.exchange(sends=[((r + 1) % s, out)], recvs=[((r - 1) % s, inn)])
    np.testing.assert_array_equal(host(inn), np.full((2, 3), (r - 1) % s))
    # everybody with everybody else, message sizes depending on the pair
    sends = [(p, xp.full(r + p + 1, 10.0 * r + p)) for p in range(s) if p != r]
    recvs = [(p, xp.zeros(r + p + 1)) for p in range(s) if p != r]
    c.exchange(sends, recvs)
    for p, b in recvs:
        np.testing.assert_array_equal(host(b), np.full(r + p + 1, 10.0 * p + r))
    c.exchange([], [])  # nothing to do is fine


@pytest.mark.mpi
@pytest.mark.parametrize("dtype", [np.float64, np.complex128, np.float32])
def test_alltoallv_uneven_and_empty(comm, impl, dtype):
    make, xp = impl
    c = make(comm)
    r, s = comm.rank, comm.size

    def size(src, dst):
        return (src * 3 + dst) % 4  # some pairs send nothing

    def payload(src, dst):
        return (np.arange(size(src, dst)) + 100 * src + 10 * dst).astype(dtype)

    sends = [xp.asarray(payload(r, d)) for d in range(s)]
    recvs = [xp.zeros(size(p, r), dtype=dtype) for p in range(s)]
    c.alltoallv(sends, recvs)
    for p in range(s):
        np.testing.assert_array_equal(host(recvs[p]), payload(p, r))
    # all empty
    c.alltoallv([xp.zeros(0, dtype=dtype)] * s, [xp.zeros(0, dtype=dtype) for _ in range(s)])


@pytest.mark.mpi
def test_non_contiguous_buffers_are_rejected(comm, impl):
    make, xp = impl
    c = make(comm)
    strided = xp.zeros((6, 6))[::2, ::2]
    for call in (lambda: c.bcast(strided, 0), lambda: c.ibcast(strided, 0),
                 lambda: c.allreduce(strided, "sum"),
                 lambda: c.allgather(strided, xp.zeros((3 * comm.size, 3))),
                 lambda: c.exchange([((comm.rank + 1) % comm.size, strided)], [])):
        with pytest.raises(ValueError, match="contiguous"):
            call()
    comm.Barrier()


@pytest.mark.mpi
@pytest.mark.parametrize("order", ["row", "col"])
def test_grid_data_communicators(comm, order):
    for p, q in grid_shapes(comm.size):
        g = ProcessGrid(p, q, comm, order=order)
        cs = g.comms("cpu")
        # row broadcast from every process column reaches exactly my process row
        for pc in range(q):
            buf = np.array([float(g.rank_of(g.myrow, pc)) if g.mycol == pc else -1.0])
            cs.row.bcast(buf, pc)
            assert buf[0] == g.rank_of(g.myrow, pc)
        for pr in range(p):
            buf = np.array([float(g.rank_of(pr, g.mycol)) if g.myrow == pr else -1.0])
            cs.col.bcast(buf, pr)
            assert buf[0] == g.rank_of(pr, g.mycol)
        buf = np.array([1.0])
        cs.all.allreduce(buf)
        assert buf[0] == comm.size


@pytest.mark.mpi
def test_gpu_grid_comms_and_backend_skip_or_fail_cleanly(comm):
    g = ProcessGrid(comm=comm)
    if HAVE_GPU:
        cs = g.comms("gpu")
        assert isinstance(cs.row, NcclComm) and cs.all.size == comm.size
        be = get_backend("gpu", comm)
        assert be.is_gpu and be.xp.__name__ == "cupy"
    else:
        with pytest.raises(ValueError, match="gpu"):
            get_backend("gpu", comm)
        with pytest.raises(ValueError, match="gpu"):
            g.comms("gpu")  # raised on every rank (collective check), nothing hangs
    comm.Barrier()


@pytest.mark.mpi
def test_node_local_rank(comm):
    lr = node_local_rank(comm)
    # ranks are grouped by node: local ranks on a node are 0..k-1 in world-rank order
    names = comm.allgather(__import__("socket").gethostname())
    mine = [r for r, h in enumerate(names) if h == names[comm.rank]]
    assert lr == mine.index(comm.rank)
    env = node_local_rank()  # from the launcher's environment (0 if it sets none)
    assert isinstance(env, int) and 0 <= env < comm.size


# ======================================================================================
# device seam (serial)
# ======================================================================================
def test_gpu_available_is_a_bool():
    assert gpu_available() in (True, False)


def test_get_backend_cpu_and_bad_device():
    be = get_backend("cpu")
    assert be is get_backend("cpu") and be.xp is np and not be.is_gpu
    with pytest.raises(ValueError, match="device"):
        get_backend("tpu")
    if not HAVE_GPU:
        with pytest.raises(ValueError, match="gpu"):
            get_backend("gpu")


def test_cpu_storage_helpers():
    be = CpuBackend()
    for f in (be.empty, be.zeros):
        a = f((3, 4), np.float32)
        assert a.flags.f_contiguous and a.dtype == np.float32 and a.shape == (3, 4)
    c = np.arange(6.0).reshape(2, 3)
    f = be.asarray(c)
    assert f.flags.f_contiguous
    np.testing.assert_array_equal(f, c)
    assert be.asarray(c, dtype=np.float32).dtype == np.float32
    assert be.to_host(f) is f and be.owns(f) and not be.owns([1.0])
    be.synchronize()


RNG = np.random.default_rng(42)


def rand(shape, dtype):
    a = RNG.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        a = a + 1j * RNG.standard_normal(shape)
    return a.astype(dtype)


def embedded(a, layout, pad=(3, 2)):
    """``a`` stored as a strided view of a larger array: 'F' = a column-major sub-view with
    a leading dimension larger than its rows, 'C' = a row-major sub-view (not column-major:
    the kernels must fall back to a copy), 'T' = the transpose of a column-major array."""
    m, n = a.shape
    if layout == "F":
        big = np.full((m + pad[0] + 2, n + pad[1] + 1), np.nan, dtype=a.dtype, order="F")
        v = big[pad[0]:pad[0] + m, pad[1]:pad[1] + n]
    elif layout == "C":
        big = np.full((m + pad[0], n + pad[1] + 2), np.nan, dtype=a.dtype, order="C")
        v = big[pad[0]:pad[0] + m, pad[1]:pad[1] + n]
    else:
        v = np.empty((n, m), dtype=a.dtype, order="F").T
    v[...] = a
    return v, (big if layout != "T" else None)


def assert_outside_untouched(view, big):
    """The kernel wrote inside the view only: the rest of the NaN-filled parent is NaN."""
    if big is None:
        return
    assert not np.isnan(view).any()
    assert np.isnan(big).sum() == big.size - view.size


TOL = {np.float32: 2e-5, np.float64: 1e-12, np.complex128: 1e-12}
LAYOUTS = ["F", "C", "T"]


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128])
@pytest.mark.parametrize("ta,tb", [("N", "N"), ("T", "N"), ("N", "T"), ("T", "T")])
@pytest.mark.parametrize("lay", LAYOUTS)
def test_gemm_on_views(dtype, ta, tb, lay):
    be = get_backend("cpu")
    m, n, k = 7, 5, 6
    a = rand((m, k) if ta == "N" else (k, m), dtype)
    b = rand((k, n) if tb == "N" else (n, k), dtype)
    c0 = rand((m, n), dtype)
    for alpha, beta in [(1.0, 0.0), (-0.5, 2.0), (2.0, 1.0)]:
        A, _ = embedded(a, lay)
        B, _ = embedded(b, "F" if lay == "C" else lay)
        C, big = embedded(c0, lay)
        be.gemm(ta, tb, alpha, A, B, beta, C)
        opa = a if ta == "N" else a.T
        opb = b if tb == "N" else b.T
        np.testing.assert_allclose(C, alpha * opa @ opb + beta * c0, rtol=TOL[dtype],
                                   atol=TOL[dtype] * 10)
        assert_outside_untouched(C, big)
        np.testing.assert_array_equal(A, a)  # inputs unchanged


def test_gemm_reads_row_major_operands_through_the_transposed_op():
    """A row-major operand is passed as its (column-major) transpose with 'N' and 'T'
    swapped, not copied; 'C' on a row-major view and strided views keep the copy path."""
    from distla.device._lapack import colmajor_op
    be = get_backend("cpu")
    a = rand((6, 4), np.complex128)
    r = np.ascontiguousarray(a)
    for t, want in (("N", "T"), ("T", "N")):
        v, t2 = colmajor_op(r, t)
        assert t2 == want and np.shares_memory(v, r)
        np.testing.assert_array_equal(v.T, r)
    assert colmajor_op(r, "C") == (r, "C")
    f = np.asfortranarray(a)
    assert colmajor_op(f, "N") == (f, "N")
    strided = np.asfortranarray(rand((12, 8), np.float64))[::2, ::2]
    assert colmajor_op(strided, "T")[1] == "T"
    b = rand((6, 3), np.complex128)
    for ta, opa in (("C", r.conj().T), ("T", r.T)):
        c = np.zeros((4, 3), np.complex128, order="F")
        be.gemm(ta, "N", 1.0, r, np.ascontiguousarray(b), 0.0, c)
        np.testing.assert_allclose(c, opa @ b, rtol=1e-12, atol=1e-12)


def test_gemm_degenerate():
    be = get_backend("cpu")
    c = np.full((3, 2), np.nan, order="F")
    be.gemm("N", "N", 1.0, np.zeros((3, 0), order="F"), np.zeros((0, 2), order="F"), 0.0, c)
    np.testing.assert_array_equal(c, 0)  # beta = 0: C is not read
    c = np.ones((3, 2), order="F")
    be.gemm("N", "N", 1.0, np.zeros((3, 0), order="F"), np.zeros((0, 2), order="F"), 3.0, c)
    np.testing.assert_array_equal(c, 3)
    be.gemm("N", "N", 1.0, np.zeros((0, 4)), np.zeros((4, 2)), 0.0, np.zeros((0, 2)))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("uplo", ["L", "U"])
@pytest.mark.parametrize("trans", ["N", "T"])
@pytest.mark.parametrize("lay", LAYOUTS)
def test_syrk_on_views(dtype, uplo, trans, lay):
    be = get_backend("cpu")
    n, k = 6, 4
    a = rand((n, k) if trans == "N" else (k, n), dtype)
    c0 = rand((n, n), dtype)
    A, _ = embedded(a, lay)
    C, big = embedded(c0, lay)
    be.syrk(uplo, trans, -1.0, A, 0.5, C)
    full = -(a @ a.T if trans == "N" else a.T @ a) + 0.5 * c0
    tri = np.tril if uplo == "L" else np.triu
    other = np.triu if uplo == "L" else np.tril
    np.testing.assert_allclose(tri(C), tri(full), rtol=TOL[dtype], atol=TOL[dtype] * 10)
    # the other strict triangle is untouched
    np.testing.assert_array_equal(other(C, 1 if uplo == "L" else -1),
                                  other(c0, 1 if uplo == "L" else -1))
    assert_outside_untouched(C, big)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128])
@pytest.mark.parametrize("side", ["L", "R"])
@pytest.mark.parametrize("uplo", ["L", "U"])
@pytest.mark.parametrize("transa", ["N", "T"])
@pytest.mark.parametrize("diag", ["N", "U"])
@pytest.mark.parametrize("lay", ["F", "C"])
def test_trsm_on_views(dtype, side, uplo, transa, diag, lay):
    be = get_backend("cpu")
    n, nrhs = 6, 4
    t = rand((n, n), dtype) + 4 * np.eye(n, dtype=dtype)  # well conditioned triangle
    junk = rand((n, n), dtype) * 100                     # the other triangle is not read
    tri = np.tril(t) + np.triu(junk, 1) if uplo == "L" else np.triu(t) + np.tril(junk, -1)
    assert tri.dtype == np.dtype(dtype)
    b = rand((n, nrhs) if side == "L" else (nrhs, n), dtype)
    T = (np.tril if uplo == "L" else np.triu)(t)
    if diag == "U":
        T = T - np.diag(np.diag(T)) + np.eye(n)
    opT = T if transa == "N" else T.T
    A, _ = embedded(tri, lay)
    B, big = embedded(b, lay)
    be.trsm(side, uplo, transa, diag, 2.0, A, B)
    if side == "L":
        want = sla.solve_triangular(opT, 2.0 * b, lower=(uplo == "L") == (transa == "N"))
    else:  # X op(T) = 2 b  <=>  op(T)^T X^T = 2 b^T
        want = sla.solve_triangular(opT.T, 2.0 * b.T,
                                    lower=(uplo == "L") != (transa == "N")).T
    np.testing.assert_allclose(B, want, rtol=TOL[dtype] * 10, atol=TOL[dtype] * 10)
    assert_outside_untouched(B, big)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("uplo", ["L", "U"])
@pytest.mark.parametrize("lay", LAYOUTS)
def test_potrf_on_views(dtype, uplo, lay):
    be = get_backend("cpu")
    n = 7
    g = rand((n, n), np.float64)
    s = (g @ g.T + n * np.eye(n)).astype(dtype)
    A, big = embedded(s, lay)
    info = be.potrf(uplo, A)
    assert be.info_value(info) == 0
    want = sla.cholesky(s.astype(np.float64), lower=(uplo == "L"))
    tri = np.tril if uplo == "L" else np.triu
    np.testing.assert_allclose(tri(A), want, rtol=TOL[dtype] * 10, atol=TOL[dtype] * 10)
    assert_outside_untouched(A, big)
    # not positive definite: info is the 1-based order of the failing minor
    bad = s.copy()
    bad[4, 4] = -100.0
    A, _ = embedded(bad, lay)
    assert be.info_value(be.potrf(uplo, A)) == 5
    assert be.potrf(uplo, np.zeros((0, 0), order="F")) == 0


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128])
@pytest.mark.parametrize("shape", [(7, 7), (9, 5), (4, 6)])
@pytest.mark.parametrize("lay", LAYOUTS)
def test_getrf_on_views_matches_scipy(dtype, shape, lay):
    be = get_backend("cpu")
    a = rand(shape, dtype)
    A, big = embedded(a, lay)
    piv, info = be.getrf(A)
    assert be.info_value(info) == 0
    assert piv.dtype == np.int64 and piv.shape == (min(shape),)
    if shape[0] == shape[1]:
        lu, spiv = sla.lu_factor(a)
        np.testing.assert_array_equal(piv, spiv)  # 0-based, LAPACK's order of swaps
        np.testing.assert_allclose(A, lu, rtol=TOL[dtype] * 10, atol=TOL[dtype] * 10)
    # P A = L U with P from the swaps
    m, n = shape
    k = min(m, n)
    perm = np.arange(m)
    for i, p in enumerate(piv):
        perm[[i, p]] = perm[[p, i]]
    L = np.tril(A[:, :k], -1) + np.eye(m, k)
    U = np.triu(A[:k, :])
    np.testing.assert_allclose(L @ U, a[perm], rtol=TOL[dtype] * 100, atol=TOL[dtype] * 100)
    assert_outside_untouched(A, big)


def test_kernels_reject_mixed_dtypes():
    be = get_backend("cpu")
    c = np.zeros((3, 3), order="F")
    with pytest.raises(TypeError, match="dtype"):
        be.gemm("N", "N", 1.0, np.ones((3, 3), np.float32, order="F"), c.copy(order="F"),
                0.0, c)
    with pytest.raises(TypeError, match="dtype"):
        be.trsm("L", "L", "N", "N", 1.0, np.eye(3, order="F"), c.astype(np.float32))
    with pytest.raises(TypeError, match="dtype"):
        be.syrk("L", "N", 1.0, np.ones((3, 2), np.complex128, order="F"), 0.0, c)


def test_getrf_singular_info():
    be = get_backend("cpu")
    a = np.asfortranarray(np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0]]))
    a[:, 2] = a[:, 0] + a[:, 1]  # rank 2: U[2, 2] is exactly zero
    piv, info = be.getrf(a)
    assert be.info_value(info) == 3
    piv, info = be.getrf(np.zeros((0, 3), order="F"))
    assert piv.shape == (0,) and info == 0
