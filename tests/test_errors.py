"""Failures agreed on by every rank: agree/collective, error types, bad inputs (mpi).

A test here passes only if every rank raises (pytest.raises fails on a rank that does not) and
nobody is left in a collective (the closing Barrier, or the run's timeout, would show it).
"""

import pickle

import numpy as np
import pytest

from distla import (
    ConvergenceError,
    DistlaError,
    DistMatrix,
    NotPositiveDefiniteError,
    ProcessGrid,
    SingularMatrixError,
)
from distla.errors import agree, collective
from distla.testing import grid_shapes

pytestmark = pytest.mark.mpi

FAILING = [0, 1, 2, 3, "last"]


def failing_rank(comm, which):
    if which == "last":
        return comm.size - 1
    if which >= comm.size:
        pytest.skip(f"no rank {which} in a {comm.size}-rank run")
    return which


class TwoArgError(Exception):
    """An exception whose constructor cannot take a single message."""

    def __init__(self, a, b):
        super().__init__(a, b)


def same_everywhere(comm, value):
    got = comm.allgather(value)
    assert got == [value] * comm.size, got


@pytest.fixture(scope="module")
def grids(comm):
    return [ProcessGrid(p, q, comm, order=o) for p, q in grid_shapes(comm.size)
            for o in ("row", "col")]


# --------------------------------------------------------------------------------------
# agree / collective
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("which", FAILING)
@pytest.mark.parametrize("exc_type", [ValueError, TypeError, RuntimeError, DistlaError,
                                      ConvergenceError])
def test_agree_raises_same_exception_everywhere(comm, which, exc_type):
    f = failing_rank(comm, which)
    exc = exc_type(f"broken on {f}") if comm.rank == f else None
    with pytest.raises(exc_type) as ei:
        agree(comm, exc)
    msg = str(ei.value)
    assert f"broken on {f}" in msg
    if comm.size > 1:
        assert msg.startswith(f"[rank {f}]")
    same_everywhere(comm, (type(ei.value).__name__, msg))
    comm.Barrier()


def test_agree_on_the_same_failure_everywhere_names_no_rank(comm):
    """Every rank raising the same error (a bad argument all passed) gets it unprefixed: rank
    1 read '[rank 0] block sizes must be positive' as if about rank 0."""
    with pytest.raises(ValueError) as ei:
        agree(comm, ValueError("block sizes must be positive"))
    assert str(ei.value) == "block sizes must be positive"
    if comm.size > 1:
        exc = ValueError(f"differs on {comm.rank}")
        with pytest.raises(ValueError, match=r"^\[rank 0\] differs on 0$"):
            agree(comm, exc)


def test_agree_without_failure_is_silent(comm):
    agree(comm, None)
    agree(None, None)
    with collective(comm):
        pass
    comm.Barrier()


def test_agree_lowest_failing_rank_wins(comm):
    exc = KeyError(comm.rank) if comm.rank >= comm.size // 2 else None
    with pytest.raises(KeyError) as ei:
        agree(comm, exc)
    same_everywhere(comm, str(ei.value))
    assert str(comm.size // 2) in str(ei.value)


@pytest.mark.parametrize("which", FAILING)
def test_collective_block(comm, which):
    f = failing_rank(comm, which)
    with pytest.raises(TypeError, match="bad input") as ei:
        with collective(comm):
            if comm.rank == f:
                raise TypeError("bad input")
    same_everywhere(comm, str(ei.value))
    # the failing rank keeps its original as the cause
    if comm.size > 1 and comm.rank == f:
        assert isinstance(ei.value.__cause__, TypeError)


@pytest.mark.parametrize("which", FAILING)
@pytest.mark.parametrize("cls", [NotPositiveDefiniteError, SingularMatrixError])
def test_linalg_errors_keep_index(comm, which, cls):
    f = failing_rank(comm, which)
    assert issubclass(cls, np.linalg.LinAlgError)
    with pytest.raises(np.linalg.LinAlgError) as ei:
        agree(comm, cls(17) if comm.rank == f else None)
    e = ei.value
    assert type(e) is cls and e.index == 17
    assert "17" in str(e) or "18" in str(e)
    same_everywhere(comm, (type(e).__name__, e.index, str(e)))
    # and the type survives pickling on its own
    e2 = pickle.loads(pickle.dumps(cls(3)))
    assert type(e2) is cls and e2.index == 3


def test_unpicklable_and_odd_exceptions(comm):
    f = comm.size - 1
    # an unpicklable payload becomes a DistlaError naming the original type
    bad = ValueError("with a lambda")
    bad.hook = lambda: None
    with pytest.raises(Exception) as ei:
        agree(comm, bad if comm.rank == f else None)
    if comm.size > 1:
        assert isinstance(ei.value, DistlaError) and "ValueError" in str(ei.value)
    same_everywhere(comm, type(ei.value).__name__)
    # an exception whose constructor takes two arguments keeps its type
    with pytest.raises(TwoArgError) as ei:
        agree(comm, TwoArgError(1, 2) if comm.rank == f else None)
    assert ei.value.args == (1, 2)


# --------------------------------------------------------------------------------------
# bad inputs to constructors: the same error on every rank, before any work
# --------------------------------------------------------------------------------------
def constructors(g):
    """(name, callable(**overrides)) for every constructor taking block/src/dtype/device."""
    a = np.ones((6, 5))
    return [
        ("zeros", lambda **kw: DistMatrix.zeros(g, (6, 5), **kw)),
        ("random", lambda **kw: DistMatrix.random(g, (6, 5), **kw)),
        ("eye", lambda **kw: DistMatrix.eye(g, 5, **kw)),
        ("from_function", lambda **kw: DistMatrix.from_function(
            g, (6, 5), kw.pop("block", 2), lambda I, J: I + J, **kw)),
        ("from_global", lambda **kw: DistMatrix.from_global(g, a, **kw)),
    ]


@pytest.mark.parametrize("bad,exc", [
    (dict(block=0), ValueError), (dict(block=(2, -1)), ValueError),
    (dict(block=(2, 2, 2)), TypeError), (dict(block=1.5), TypeError),
    (dict(src=(-1, 0)), ValueError), (dict(src="far"), ValueError),
    (dict(dtype=np.int32), TypeError), (dict(dtype="U1"), TypeError),
    (dict(device="tpu"), ValueError),
])
def test_bad_constructor_arguments(comm, grids, bad, exc):
    for g in (grids[0], grids[-1]):  # 1 x S row-major and S x 1 column-major
        bad_ = dict(bad)
        if bad_.get("src") == "far":
            bad_["src"] = (0, g.npcol)  # one column past the grid
        for _name, make in constructors(g):
            with pytest.raises(exc):
                make(**bad_)
    comm.Barrier()


def test_bad_shapes(comm, grids):
    g = grids[0]
    with pytest.raises(ValueError, match="non-negative"):
        DistMatrix.zeros(g, (-1, 3), 2)
    with pytest.raises(TypeError, match="shape"):
        DistMatrix.zeros(g, (2, 3, 4), 2)
    with pytest.raises(TypeError, match="ProcessGrid"):
        DistMatrix.zeros(None, (2, 3), 2)
    comm.Barrier()


@pytest.mark.parametrize("which", FAILING)
def test_from_local_wrong_shape_on_one_rank(comm, grids, which):
    f = failing_rank(comm, which)
    for g in (grids[0], grids[-1]):
        A = DistMatrix.random(g, (7, 5), 2)
        loc = A.local if comm.rank != f else np.zeros((A.local_shape[0] + 1, 3), order="F")
        with pytest.raises(ValueError, match=f"rank {f}|local array") as ei:
            DistMatrix.from_local(g, loc, (7, 5), 2)
        same_everywhere(comm, str(ei.value))
        loc = A.local if comm.rank != f else A.local.tolist()  # not an array at all
        with pytest.raises(TypeError):
            DistMatrix.from_local(g, loc, (7, 5), 2)
        loc = A.local if comm.rank != f else A.local.astype(np.int64)
        with pytest.raises(TypeError, match="dtype"):
            DistMatrix.from_local(g, loc, (7, 5), 2)
    comm.Barrier()


@pytest.mark.parametrize("which", FAILING)
def test_from_descriptor_bad_desc_on_one_rank(comm, grids, which):
    f = failing_rank(comm, which)
    g = grids[0]
    A = DistMatrix.random(g, (7, 5), (2, 3))
    desc = A.desc.to_scalapack()
    bad = desc.copy()
    bad[0] = 2  # not a dense descriptor
    with pytest.raises(ValueError, match="descriptor"):
        DistMatrix.from_descriptor(g, A.local, bad if comm.rank == f else desc)
    bad = desc.copy()
    bad[4] = 3  # another row block size: the local array no longer fits on some rank
    misfit = DistMatrix.zeros(g, (7, 5), (3, 3)).local_shape[0] != A.local_shape[0]
    if comm.allreduce(misfit):
        with pytest.raises(ValueError, match="local array"):
            DistMatrix.from_descriptor(g, A.local, bad)
    comm.Barrier()


@pytest.mark.parametrize("root", [0, "last"])
def test_from_global_bad_array_on_root(comm, grids, root):
    root = comm.size - 1 if root == "last" else root
    g = grids[-1]
    on_root = lambda a: a if comm.rank == root else None  # noqa: E731
    with pytest.raises(ValueError, match="does not match"):
        DistMatrix.from_global(g, on_root(np.ones((4, 3))), shape=(3, 4), root=root)
    with pytest.raises(ValueError, match="needs the array"):
        DistMatrix.from_global(g, None, root=root)
    with pytest.raises(ValueError, match="2-D"):
        DistMatrix.from_global(g, on_root(np.ones((2, 2, 2))), root=root)
    with pytest.raises(TypeError, match="complex"):
        DistMatrix.from_global(g, on_root(np.ones((2, 2)) * 1j), root=root,
                               dtype=np.float64)
    with pytest.raises(TypeError, match="dtype"):     # (integers become float64)
        DistMatrix.from_global(g, on_root(np.array([["a", "b"], ["c", "d"]])), root=root)
    with pytest.raises(ValueError, match="root"):
        DistMatrix.from_global(g, np.ones((2, 2)), root=comm.size)
    A = DistMatrix.from_global(g, on_root(np.arange(4.0).reshape(2, 2)), root=root)
    with pytest.raises(ValueError, match="root"):
        A.to_global(root=comm.size)
    with pytest.raises(ValueError, match="root"):
        A.to_global(root=-1)
    comm.Barrier()


@pytest.mark.parametrize("which", FAILING)
def test_from_function_failing_on_one_rank(comm, grids, which):
    f = failing_rank(comm, which)

    def fn(I, J):
        if comm.rank == f:
            raise ArithmeticError("fn failed here")
        return I + J

    for g in grids:
        with pytest.raises(ArithmeticError, match="fn failed here"):
            DistMatrix.from_function(g, (5, 5), 2, fn)

    def wrong_shape(I, J):
        return np.zeros((I.shape[0] + (comm.rank == f), J.shape[1]))

    with pytest.raises(ValueError):
        DistMatrix.from_function(grids[0], (5, 5), 2, wrong_shape)
    with pytest.raises(TypeError, match="complex"):
        DistMatrix.from_function(grids[0], (5, 5), 2,
                                 lambda I, J: I + (1j if comm.rank == f else 0))
    comm.Barrier()


def test_operations_between_grids_and_devices(comm, grids):
    from distla.pblas import matmul
    g1, g2 = grids[0], grids[-1]
    A = DistMatrix.random(g1, (4, 4), 2)
    B = DistMatrix.random(g2, (4, 4), 2)
    if g1 != g2:
        with pytest.raises(ValueError, match="grid"):
            matmul(A, B)
    with pytest.raises(TypeError, match="dtype"):
        matmul(A, A.astype(np.float32))
    with pytest.raises(ValueError, match="inner"):
        matmul(A, DistMatrix.random(g1, (3, 4), 2))
    comm.Barrier()


def test_from_local_and_descriptor_layouts_agree_across_ranks(comm, grids):
    """A global shape, block, source or dtype that differs on one rank built a matrix whose
    ranks disagreed until the next collective (from_descriptor even cut a rank's rows): the
    same ValueError on every rank at construction now; an LLD below the local rows is
    refused as ScaLAPACK's DESCINIT does."""
    from distla import layout
    if comm.size < 2:
        pytest.skip("needs several ranks")
    last = comm.rank == comm.size - 1
    g = grids[0]
    n, nb = 13, 3
    ref = DistMatrix.from_global(g, np.eye(n), block=nb)
    for kw in (dict(shape=(n, n + 1) if last else (n, n)), dict(src=(0, 1) if last else (0, 0)),
               dict(local=ref.local.astype(np.float32) if last else ref.local)):
        args = dict(local=ref.local, shape=(n, n), block=(nb, nb), src=(0, 0)) | kw
        with pytest.raises(ValueError) as ei:   # (the signatures differ, or the local array
            #                                        no longer fits: whichever comes first)
            DistMatrix.from_local(g, args["local"], args["shape"], args["block"], args["src"])
        same_everywhere(comm, str(ei.value))
    g2 = grids[-1]
    ref2 = DistMatrix.from_global(g2, np.eye(n), block=nb, src=(g2.nprow - 1, 0))
    d = layout.Descriptor(n, n, nb, nb, 0 if last else g2.nprow - 1, 0,
                          max(1, ref2.local.shape[0]))
    with pytest.raises(ValueError):
        DistMatrix.from_descriptor(g2, ref2.local, d)
    d = ref2.desc
    if comm.allreduce(ref2.local.shape[0] > 1):
        short = layout.Descriptor(d.m, d.n, d.mb, d.nb, d.rsrc, d.csrc, 1)
        with pytest.raises(ValueError, match="LLD") as ei:
            DistMatrix.from_descriptor(g2, ref2.local, short)
        same_everywhere(comm, type(ei.value).__name__)
    comm.Barrier()


def test_bools_are_not_dimensions(comm, grids):
    from distla import ProcessGrid
    g = grids[0]
    for bad in (dict(shape=(True, 2)), dict(block=True)):
        args = dict(shape=(3, 2), block=2) | bad
        with pytest.raises(TypeError):
            DistMatrix.zeros(g, args["shape"], args["block"])
    with pytest.raises(ValueError, match="integers"):
        ProcessGrid(True, comm.size, comm=comm)
    with pytest.raises(TypeError, match="dtype"):
        DistMatrix(g, (3, 2), 2, dtype=np.complex128, local=DistMatrix.zeros(g, (3, 2), 2).local)
    with pytest.raises(ValueError, match="broadcastable"):
        DistMatrix.from_function(g, (4, 4), 2, lambda I, J: np.zeros((2, 2, 2)))
    comm.Barrier()


def test_lu_solve_refuses_storage_factored_again_and_nan_is_named(comm, grids):
    """lu_solve used an LUFactor whose storage cholesky(overwrite_a=True) had overwritten
    (error 0.24, no message) while cho_solve, rcond and logdet refused such factors; a NaN
    with check_finite=False was reported as asymmetry."""
    from distla.linalg import cholesky, lu_factor, lu_solve
    g = grids[-1]
    n = 8
    x = np.random.default_rng(0).standard_normal((n, n))
    a = x @ x.T + n * np.eye(n)
    A = DistMatrix.from_global(g, a, block=2)
    B = DistMatrix.from_global(g, np.ones((n, 1)), block=2)
    F = lu_factor(A, overwrite_a=True)
    cholesky(A, overwrite_a=True, check_symmetric=False)
    with pytest.raises(ValueError, match="no longer holds lu_factor's LU"):
        lu_solve(F, B)
    a[3, 2] = np.nan
    with pytest.raises(ValueError, match="NaN or Inf") as ei:
        cholesky(DistMatrix.from_global(g, a, block=2), check_finite=False)
    assert "not symmetric" not in str(ei.value)
    comm.Barrier()


def test_rcond_of_a_rectangular_lu_factor_is_refused_alike(comm, grids):
    """LUFactor.rcond on a 7 x 4 factor raised SciPy's f2py error on one rank and lu_solve's
    message on several (sweep 29)."""
    from distla.linalg import lu_factor
    for g in (grids[0], grids[-1]):
        F = lu_factor(DistMatrix.random(g, (7, 4), 2, seed=1))
        with pytest.raises(ValueError, match="rcond needs a square factorization"):
            F.rcond()
    comm.Barrier()
