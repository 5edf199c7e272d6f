"""Tests of the test harness itself (conftest.py, distla.testing, pytest-mpi)."""

import os

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from distla.testing import grid_shapes


def test_grid_shapes_examples():
    assert grid_shapes(1) == [(1, 1)]
    assert grid_shapes(4) == [(1, 4), (2, 2), (4, 1)]
    assert grid_shapes(6) == [(1, 6), (2, 3), (3, 2), (6, 1)]
    assert grid_shapes(7) == [(1, 7), (7, 1)]


@pytest.mark.parametrize("bad", [0, -3])
def test_grid_shapes_rejects_nonpositive(bad):
    with pytest.raises(ValueError):
        grid_shapes(bad)


@given(st.integers(min_value=1, max_value=2000))
def test_grid_shapes_property(size):
    shapes = grid_shapes(size)
    assert all(p * q == size for p, q in shapes)
    assert [p for p, _ in shapes] == sorted({p for p, _ in shapes})
    assert shapes[0] == (1, size) and shapes[-1] == (size, 1)
    assert len(shapes) == sum(1 for d in range(1, size + 1) if size % d == 0)


@pytest.mark.mpi
def test_allreduce_sum_of_ranks(comm):
    size = comm.Get_size()
    total = comm.allreduce(comm.Get_rank())
    assert total == size * (size - 1) // 2
    buf = np.array([comm.Get_rank()], dtype=np.int64)
    out = np.empty_like(buf)
    from mpi4py import MPI

    comm.Allreduce(buf, out, op=MPI.SUM)
    assert out[0] == size * (size - 1) // 2


@pytest.mark.mpi(min_size=2)
def test_ring_sendrecv(comm):
    rank, size = comm.Get_rank(), comm.Get_size()
    got = comm.sendrecv(rank, dest=(rank + 1) % size, source=(rank - 1) % size)
    assert got == (rank - 1) % size


@pytest.mark.mpi
def test_tmp_path_is_per_rank(comm, tmp_path):
    (tmp_path / "who").write_text(str(comm.Get_rank()))
    paths = comm.allgather(str(tmp_path))
    assert len(set(paths)) == comm.Get_size()
    assert (tmp_path / "who").read_text() == str(comm.Get_rank())


@pytest.mark.mpi
def test_mpi_tmp_path_is_shared(comm, mpi_tmp_path):
    paths = comm.allgather(str(mpi_tmp_path))
    assert len(set(paths)) == 1
    (mpi_tmp_path / f"rank{comm.Get_rank()}").touch()
    comm.Barrier()
    assert len(list(mpi_tmp_path.glob("rank*"))) == comm.Get_size()


@pytest.mark.mpi
@given(st.integers(min_value=0, max_value=10**6))
def test_hypothesis_draws_agree_across_ranks(comm, x):
    # The harness derandomizes hypothesis under MPI, so every rank sees the
    # same example and collectives stay matched.
    assert comm.allgather(x) == [x] * comm.Get_size()


def test_blas_threads_pinned_by_runner():
    # tests/run.sh pins BLAS threads; a bare pytest run need not.
    if os.environ.get("DISTLA_TEST_RUNNER") != "1":
        pytest.skip("not under tests/run.sh")
    assert os.environ.get("OPENBLAS_NUM_THREADS") == "1"
