"""Helpers for distla's test suite (and for users testing code built on distla).

Kept free of imports from the rest of the package so that the test harness
itself does not depend on the core modules being importable.
"""

from __future__ import annotations

__all__ = ["grid_shapes"]


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
