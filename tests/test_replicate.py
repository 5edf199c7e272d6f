"""Whole copies of a DistMatrix on every rank and back (distla/replicate.py), exact on every
grid, block size, source process and dtype; on GPU ranks through NCCL (marked ``gpu``)."""
from __future__ import annotations

import numpy as np
import pytest

from distla import DistMatrix
from distla.replicate import distribute_like, one_node, replicate, self_grid
from distla.testing import corner, random_array

pytestmark = pytest.mark.mpi

SHAPES = [(23, 14), (14, 1), (1, 9), (5, 5), (0, 3)]
BLOCKS = [(3, 2), (4, 4), (30, 7)]     # (30, 7): one block holds every row: ranks hold nothing


def _round_trip(grid, a, block, src, device="cpu"):
    A = DistMatrix.from_global(grid, a, block=block, src=src)
    if device == "gpu":
        A = A.to("gpu")
    R = replicate(A)
    assert R.grid is self_grid() and R.grid.size == 1 and R.shape == A.shape
    assert (R.block, R.dtype, R.device) == (A.block, A.dtype, A.device)
    np.testing.assert_array_equal(R.backend.to_host(R.local), a)   # bit for bit
    B = distribute_like(R, A)
    assert B.same_layout(A) and B.dtype == A.dtype and B.device == A.device
    np.testing.assert_array_equal(B.to_global(None), a)
    return A, R, B


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex64])
def test_replicate_and_back_on_every_layout(grids, dtype):
    for grid in grids:
        for shape in SHAPES:
            a = random_array(shape, dtype, seed=sum(shape))
            for block in BLOCKS:
                for src in ((0, 0), corner(grid)):
                    _round_trip(grid, a, block, src)


def test_distribute_like_takes_the_target_layout_not_the_copy_s(grids):
    """The copy's own block size does not matter: distribute_like follows ``like``."""
    a = random_array((19, 6), seed=3)
    for grid in grids:
        A = DistMatrix.from_global(grid, a, block=(5, 5), src=corner(grid))
        like = DistMatrix.zeros(grid, (19, 6), (2, 3))
        B = distribute_like(replicate(A), like)
        assert B.same_layout(like)
        np.testing.assert_array_equal(B.to_global(None), a)


def test_one_node_is_cached_and_agreed(grids, comm):
    """Every test job's ranks share one node; the answer is cached on the grid."""
    for grid in grids:
        assert one_node(grid) is True and grid._one_node is True
    assert comm.allgather(one_node(grids[0])) == [True] * comm.size


@pytest.mark.gpu
def test_replicate_on_gpu_ranks(grids):
    for grid in grids[:2]:
        for shape, block in (((23, 14), (3, 2)), ((40, 1), (8, 1)), ((7, 7), (30, 30))):
            a = random_array(shape, np.float32, seed=5)
            _round_trip(grid, a, block, corner(grid), device="gpu")
