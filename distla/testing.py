"""Helpers for distla's test suite (and for users testing code built on distla).

Kept free of imports from the rest of the package so that the test harness
itself does not depend on the core modules being importable.
"""

from __future__ import annotations

__all__ = ["grid_shapes", "random_array", "corner"]

import numpy as np


def grid_shapes(size: int) -> list[tuple[int, int]]:
    """Every process-grid shape ``(P, Q)`` with ``P * Q == size``, by increasing P.

    >>> grid_shapes(4)
    [(1, 4), (2, 2), (4, 1)]
    >>> grid_shapes(1)
    [(1, 1)]
    """
    size = int(size)
    if size < 1:
        raise ValueError(f"size must be a positive integer, got {size}")
    return [(p, size // p) for p in range(1, size + 1) if size % p == 0]


def random_array(shape, dtype=np.float64, seed=0) -> np.ndarray:
    """The same test array on every rank (standard normal; complex parts for complex dtypes)."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        a = a + 1j * rng.standard_normal(shape)
    return a.astype(dtype)


def corner(grid) -> tuple[int, int]:
    """The far-corner source process ``(P - 1, Q - 1)`` of ``grid`` (a nonzero source)."""
    return (grid.nprow - 1, grid.npcol - 1)
