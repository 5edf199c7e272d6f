"""ProcessGrid: BLACS-like shapes, rank orderings, row/column communicators (mpi)."""

import numpy as np
import pytest

from distla import ProcessGrid
from distla.grid import squarest_shape
from distla.testing import grid_shapes

pytestmark = pytest.mark.mpi

ORDERS = ["row", "col"]


def all_grids(comm):
    return [(p, q, o) for p, q in grid_shapes(comm.size) for o in ORDERS]


def test_squarest_shape_values():
    assert squarest_shape(1) == (1, 1)
    assert squarest_shape(2) == (1, 2)
    assert squarest_shape(4) == (2, 2)
    assert squarest_shape(6) == (2, 3)
    assert squarest_shape(7) == (1, 7)
    assert squarest_shape(12) == (3, 4)
    for s in range(1, 50):
        p, q = squarest_shape(s)
        assert p * q == s and p <= q
        # p is the largest divisor of s not above sqrt(s)
        assert p == max(d for d in range(1, s + 1) if s % d == 0 and d * d <= s)


def test_default_shape_is_squarest(comm):
    g = ProcessGrid()
    assert g.shape == squarest_shape(comm.size)
    assert g.comm is comm and g.order == "row"
    assert (g.nprow, g.npcol) == g.shape


@pytest.mark.parametrize("order", ORDERS)
def test_coords_and_rank_of_follow_blacs(comm, order):
    for p, q, _ in all_grids(comm):
        g = ProcessGrid(p, q, comm, order=order)
        assert (g.nprow, g.npcol) == (p, q)
        r = comm.rank
        if order == "row":  # BLACS_GRIDINIT 'Row-major'
            assert (g.myrow, g.mycol) == (r // q, r % q)
        else:  # 'Column-major'
            assert (g.myrow, g.mycol) == (r % p, r // p)
        seen = set()
        for rank in range(comm.size):
            pr, pc = g.coords(rank)
            assert 0 <= pr < p and 0 <= pc < q
            assert g.rank_of(pr, pc) == rank
            seen.add((pr, pc))
        assert len(seen) == comm.size
        for pr in range(p):
            for pc in range(q):
                assert g.coords(g.rank_of(pr, pc)) == (pr, pc)
                want = pr * q + pc if order == "row" else pr + pc * p
                assert g.rank_of(pr, pc) == want
        # all ranks agree on everybody's coordinates
        assert comm.allgather((g.myrow, g.mycol)) == [g.coords(x) for x in range(comm.size)]


@pytest.mark.parametrize("order", ORDERS)
def test_row_and_col_communicators(comm, order):
    for p, q, _ in all_grids(comm):
        g = ProcessGrid(p, q, comm, order=order)
        assert g.row_comm.Get_size() == q and g.col_comm.Get_size() == p
        assert g.row_comm.Get_rank() == g.mycol
        assert g.col_comm.Get_rank() == g.myrow
        # members of my row comm: exactly the world ranks of my process row, by column
        assert g.row_comm.allgather(comm.rank) == [g.rank_of(g.myrow, c) for c in range(q)]
        assert g.col_comm.allgather(comm.rank) == [g.rank_of(r, g.mycol) for r in range(p)]
        # a reduction along the row sums exactly one process row
        tot = g.row_comm.allreduce(comm.rank)
        assert tot == sum(g.rank_of(g.myrow, c) for c in range(q))


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_many_grids_do_not_use_up_mpi_communicators(comm):
    """A job may make the same grid over and over (MPICH has 2048 communicator contexts per
    process; each grid splits two): grids over COMM_WORLD of one shape and order share their
    row and column communicators, which still work."""
    from mpi4py import MPI
    p, q = squarest_shape(comm.size)
    first = ProcessGrid(p, q, MPI.COMM_WORLD)
    for _ in range(2500):
        g = ProcessGrid(p, q, MPI.COMM_WORLD)
    assert g.row_comm is first.row_comm and g.col_comm is first.col_comm
    assert g.row_comm.allreduce(1) == q and g.col_comm.allreduce(1) == p
    other = ProcessGrid(p, q, MPI.COMM_WORLD, order="col")
    assert other.row_comm is not first.row_comm       # (its own key: the rank order differs)
    assert other.row_comm.allgather(comm.rank) == [other.rank_of(other.myrow, c)
                                                   for c in range(q)]


def test_partial_shape_fills_the_other(comm):
    s = comm.size
    assert ProcessGrid(nprow=1, comm=comm).shape == (1, s)
    assert ProcessGrid(npcol=1, comm=comm).shape == (s, 1)
    g = ProcessGrid(npcol=s, comm=comm, order="column")
    assert g.order == "col" and g.shape == (1, s)


@pytest.mark.parametrize("shape", [(0, 1), (-1, -1), "double", "zero", (None, 0), (2.5, None)])
def test_wrong_shape_raises_on_every_rank(comm, shape):
    s = comm.size
    if shape == "double":
        shape = (2, s)
    elif shape == "zero":
        shape = (s + 1, 1)
    with pytest.raises(ValueError, match="grid|ranks"):
        ProcessGrid(*shape, comm=comm)
    if s > 1:  # s not divisible by s + 1
        with pytest.raises(ValueError):
            ProcessGrid(nprow=s + 1, comm=comm)
    comm.Barrier()  # nobody is stuck: everyone got here


def test_bad_order_raises_everywhere(comm):
    with pytest.raises(ValueError, match="order"):
        ProcessGrid(comm=comm, order="diagonal")
    comm.Barrier()


def test_subcommunicator_grid(comm):
    # a grid over a split communicator works independently of the world
    sub = comm.Split(color=comm.rank % 2, key=comm.rank)
    g = ProcessGrid(comm=sub)
    assert g.size == sub.Get_size() and g.shape == squarest_shape(sub.Get_size())
    assert g.row_comm.allreduce(1) == g.npcol
    sub.Free()


def test_grid_equality_and_repr(comm):
    a = ProcessGrid(comm=comm)
    b = ProcessGrid(comm=comm)
    assert a == a and a == b and hash(a) == hash(a)
    c = ProcessGrid(comm=comm, order="col")
    assert (a == c) == False  # noqa: E712
    assert "ProcessGrid(" in repr(a)


def test_comms_cpu_are_mpi_and_cached(comm):
    from distla.comm import MpiComm
    g = ProcessGrid(comm=comm)
    c = g.comms("cpu")
    assert g.comms("cpu") is c
    assert isinstance(c.all, MpiComm) and isinstance(c.row, MpiComm)
    assert (c.all.size, c.row.size, c.col.size) == (comm.size, g.npcol, g.nprow)
    assert (c.row.rank, c.col.rank) == (g.mycol, g.myrow)
    with pytest.raises(ValueError, match="device"):
        g.comms("tpu")


@pytest.mark.parametrize("device", ["cpu", pytest.param("gpu", marks=pytest.mark.gpu)])
def test_free_releases_and_rebuilds_device_comms(comm, device):
    """grid.free() is collective; the grid keeps working (its communicators are rebuilt)."""
    from distla.device import gpu_available
    if device == "gpu" and not gpu_available():
        pytest.skip("no GPU")
    g = ProcessGrid(comm=comm)
    xp = np if device == "cpu" else __import__("cupy")
    first = g.comms(device)
    g.free()
    again = g.comms(device)
    assert again is not first
    buf = xp.full(3, float(g.rank + 1))
    again.all.allreduce(buf)
    assert float(buf[0]) == g.size * (g.size + 1) / 2
    g.free()


@pytest.mark.mpi
def test_flat_grid_is_made_once(comm):
    """ProcessGrid.flat(): the 1 x size grid over the same ranks in order, made once and
    kept (io's regrouped writes ask for it on every write); a 1 x Q row-ordered grid is
    its own flat grid."""
    for p, q in grid_shapes(comm.size):
        for order in ("row", "col"):
            g = ProcessGrid(p, q, comm=comm, order=order)
            f = g.flat()
            assert f is g.flat() and f.shape == (1, comm.size)
            assert [f.rank_of(0, j) for j in range(comm.size)] == list(range(comm.size))
            assert (f is g) == (p == 1 and order == "row")


@pytest.mark.mpi
def test_ranks_with_different_distla_environments_are_refused(comm, monkeypatch):
    """DISTLA_IO=mpiio on one rank and memmap on another (an MPMD launch) hung: each rank took
    its own read path and waited in a collective the other never entered; different
    DISTLA_IO_HINTS hung in MPI_File_open. Building a grid now compares every DISTLA_*
    variable across ranks and raises on every rank, naming the first that differs."""
    from distla import ProcessGrid
    monkeypatch.setenv("DISTLA_IO", "mpiio")
    ProcessGrid(comm=comm)                                  # the same everywhere: fine
    if comm.size == 1:
        return
    if comm.rank == comm.size - 1:
        monkeypatch.setenv("DISTLA_IO", "memmap")
        monkeypatch.setenv("DISTLA_ZZZ", "1")
    with pytest.raises(ValueError, match=r"different environments: DISTLA_IO='mpiio' on rank "
                                         rf"0 but 'memmap' on rank {comm.size - 1}"):
        ProcessGrid(comm=comm)


@pytest.mark.parametrize("name, value", [
    ("DISTLA_IO", "MEMMAP"), ("DISTLA_IO_COLLECTIVE_READ", "true"), ("DISTLA_REMAP", "bogus"),
    ("DISTLA_EXCEPTHOOK", "false"), ("DISTLA_LAUNCH_CHECK", "no"), ("DISTLA_IO_WRITE", ""),
    ("DISTLA_ABORT_TIMEOUT", "abc"), ("DISTLA_ABORT_TIMEOUT", "nan"),
    ("DISTLA_ABORT_TIMEOUT", "-1")])
def test_environment_switches_take_only_their_values(monkeypatch, name, value):
    """A switch set to a value it does not take meant the default, silently (or, for
    DISTLA_ABORT_TIMEOUT=nan, an abort at once): now an error naming it, at grid creation."""
    from mpi4py import MPI

    from distla.grid import SettingError
    monkeypatch.setenv(name, value)
    with pytest.raises(SettingError, match=f"{name}="):
        ProcessGrid(comm=MPI.COMM_SELF)
