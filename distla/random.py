"""Counter-based random numbers of global indices: the same matrix whatever the layout.

``hashed_uniform(seed, I, J)`` hashes (seed, i, j) with SplitMix64, so each entry depends only
on its global position and the seed. Works on NumPy and CuPy integer arrays alike.
"""
from __future__ import annotations

import numpy as np

_C1 = np.uint64(0x9E3779B97F4A7C15)
_C2 = np.uint64(0xBF58476D1CE4E5B9)
_C3 = np.uint64(0x94D049BB133111EB)
_K = np.uint64(0xD1B54A32D192ED03)


def _xp(a):
    if isinstance(a, np.ndarray):
        return np
    import cupy
    return cupy


def splitmix64(x):
    """SplitMix64 finalizer of a uint64 array (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        z = x + _C1
        z = (z ^ (z >> np.uint64(30))) * _C2
        z = (z ^ (z >> np.uint64(27))) * _C3
        return z ^ (z >> np.uint64(31))


def _bits(seed, I, J, stream=0):
    xp = _xp(I)
    with np.errstate(over="ignore"):
        key = splitmix64(np.uint64(seed & 0xFFFFFFFFFFFFFFFF) + np.uint64(stream) * _K)
    i = xp.asarray(I).astype(xp.uint64)
    j = xp.asarray(J).astype(xp.uint64)
    with np.errstate(over="ignore"):
        return splitmix64(splitmix64(i ^ key) + j * _K)


def hashed_uniform(seed, I, J, stream=0):
    """Uniform [0, 1) float64 of global indices I, J (broadcast together)."""
    return (_bits(seed, I, J, stream) >> np.uint64(11)).astype(np.float64) * (2.0 ** -53)


def hashed_normal(seed, I, J):
    """Standard normal float64 of global indices (Box-Muller on two hashed uniforms)."""
    xp = _xp(I)
    u1 = 1.0 - hashed_uniform(seed, I, J, 0)  # (0, 1]
    u2 = hashed_uniform(seed, I, J, 1)
    return xp.sqrt(-2.0 * xp.log(u1)) * xp.cos(2.0 * np.pi * u2)
