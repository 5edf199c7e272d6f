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


def check_tol(tol):
    """``tol`` as a float in (0, 1), or None; TypeError for a non-number (a string, a bool),
    ValueError outside (0, 1) (NaN included)."""
    if tol is None:
        return None
    if not isinstance(tol, numbers.Real) or isinstance(tol, bool):
        raise TypeError(f"tol must be a number in (0, 1) or None, not {tol!r}")
    if not 0 < float(tol) < 1:
        raise ValueError(f"tol must be in (0, 1), got {tol}")
    return float(tol)


def check_max_rank(max_rank):
    """``max_rank`` as an int >= 0, or None; TypeError for a non-integer (a bool, a float, a
    string), ValueError when negative."""
    if max_rank is None:
        return None
    if not isinstance(max_rank, numbers.Integral) or isinstance(max_rank, bool):
        raise TypeError(f"max_rank must be a non-negative integer or None, not {max_rank!r}")
    if max_rank < 0:
        raise ValueError(f"max_rank must be a non-negative integer or None, got {max_rank}")
    return int(max_rank)


def check_count(name, v, least: int) -> int:
    """``v`` as an int if it is an int >= ``least`` (not a bool, a float or a string: 40.7
    was truncated to 40), else TypeError/ValueError."""
    if not isinstance(v, numbers.Integral) or isinstance(v, bool):
        raise TypeError(f"{name} must be an int >= {least}, not {v!r}")
    if v < least:
        raise ValueError(f"{name} must be an int >= {least}, not {v!r}")
    return int(v)


def check_workspace(workspace):
    """``workspace`` (bytes of scratch) as an int >= 1, or None (from the free memory); a
    ValueError otherwise ('1GB' raised int()'s message, -1 was accepted)."""
    if workspace is None:
        return None
    if not isinstance(workspace, numbers.Integral) or isinstance(workspace, bool) \
            or workspace < 1:
        raise ValueError(f"workspace must be a number of bytes (an int >= 1) or None, not "
                         f"{workspace!r}")
    return int(workspace)


def real_values(vals, xp):
    """``vals`` (an entry function's output) unless complex or not numbers: TypeError (a cast
    dropped the imaginary part with only a NumPy ComplexWarning)."""
    a = vals if hasattr(vals, "dtype") else np.asarray(vals)
    if a.dtype.kind not in "biuf":
        raise TypeError(f"the entry function returned {a.dtype} values; a TLR matrix is real "
                        f"(float32/float64)"
                        + (": give the real part explicitly" if a.dtype.kind == "c" else ""))
    return vals
