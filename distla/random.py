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


def _splitmix64_inplace(z, xp):
    """:func:`splitmix64` of the uint64 array ``z``, computed in z (one temporary)."""
    t = xp.empty_like(z)
    z += _C1
    for shift, mult in ((30, _C2), (27, _C3)):
        xp.right_shift(z, np.uint64(shift), out=t)
        z ^= t
        z *= mult
    xp.right_shift(z, np.uint64(31), out=t)
    z ^= t
    return z


def symmetric_uniform(seed, I, J, stream=0):
    """Uniform [0, 1) float64 with u(i, j) = u(j, i), for I (m x 1) and J (1 x w) index
    vectors: SplitMix64 of h(i) + h(j), where h hashes the vectors alone. One 2-D hash per
    entry, in place (hashed_uniform of (min, max) takes two plus the min and max)."""
    xp = _xp(I)
    with np.errstate(over="ignore"):
        key = splitmix64(np.uint64(seed & 0xFFFFFFFFFFFFFFFF) + np.uint64(stream) * _K)
        hi = splitmix64(xp.asarray(I).astype(xp.uint64) ^ key)
        hj = splitmix64(xp.asarray(J).astype(xp.uint64) ^ key)
        if hi.ndim == 2 and hj.ndim == 2 and hi.shape[1] == 1 and hj.shape[0] == 1:
            z = (hj.reshape(-1, 1) + hi.reshape(1, -1)).T   # column-major, as DistMatrix
        else:
            z = hi + hj
        z = _splitmix64_inplace(z, xp)
    z >>= np.uint64(11)
    u = z.astype(np.float64)
    u *= 2.0 ** -53
    return u


def spd_entries(seed, n, I, J):
    """Entries of the test SPD matrix at global indices I (m x 1), J (1 x w): symmetric
    uniform off-diagonal entries in [-0.5, 0.5), ``n`` on the diagonal (strictly diagonally
    dominant, cond < 3)."""
    xp = _xp(I)
    a = symmetric_uniform(seed, I, J)
    a -= 0.5
    xp.copyto(a, float(n), where=(I == J))
    return a


def hashed_normal(seed, I, J):
    """Standard normal float64 of global indices (Box-Muller on two hashed uniforms)."""
    xp = _xp(I)
    u1 = 1.0 - hashed_uniform(seed, I, J, 0)  # (0, 1]
    u2 = hashed_uniform(seed, I, J, 1)
    return xp.sqrt(-2.0 * xp.log(u1)) * xp.cos(2.0 * np.pi * u2)
