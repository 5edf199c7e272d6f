"""Argument checks shared by the TLR constructors and factorization (local, called inside the
callers' collective argument checks so that every rank raises alike), and the per-rank
random streams."""
from __future__ import annotations

import numbers

import numpy as np


def check_seed(seed) -> int:
    """``seed`` as an int if it is a non-negative int (not a bool), else TypeError/ValueError.
    Any size is fine: :func:`rank_rng` derives each rank's stream from it without overflow."""
    if not isinstance(seed, numbers.Integral) or isinstance(seed, bool):
        raise TypeError(f"seed must be a non-negative int, not {seed!r}")
    if seed < 0:
        raise ValueError(f"seed must be a non-negative int, not {seed!r}")
    return int(seed)


def rank_rng(xp, seed: int, rank: int):
    """This rank's ``xp.random.RandomState``, seeded from ``(seed, rank)`` through NumPy's
    SeedSequence (valid for every non-negative ``seed`` on every rank; ``seed + 7919 * rank``
    went out of RandomState's range on some ranks only, and the others hung)."""
    state = np.random.SeedSequence([int(seed), int(rank)]).generate_state(1)[0]
    return xp.random.RandomState(int(state))
