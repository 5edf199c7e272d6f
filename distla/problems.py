"""Test problems, generated block by block from global indices (never formed on one rank; the
same matrix whatever the grid, block size or device): shared by the CLI (``distla generate``,
``distla solve --matrix spd:N``), the benchmarks and the tests.

* :func:`spd_matrix` -- symmetric, strictly diagonally dominant (cond < 3);
* :func:`general_matrix` -- independent standard normal entries;
* :func:`covariance_matrix` -- a Gaussian-process covariance (st-2D-sqexp and relatives);
* :func:`conditioned_matrix` -- prescribed singular values (a condition-number sweep), general
  or symmetric positive definite;
* :func:`make_problem` / :func:`problem_entries` -- by name, as a DistMatrix or as an entry
  function for any part of it.

Collective-ness is stated per function.
"""
from __future__ import annotations

import numpy as np

from . import covariance as cov
from .matrix import DistMatrix
from .random import hashed_normal, spd_entries

__all__ = ["PROBLEM_KINDS", "spd_matrix", "general_matrix", "global_normal",
           "covariance_matrix", "problem_entries", "make_problem"]


PROBLEM_KINDS = ("spd", "general", "covariance")


def spd_matrix(grid, n: int, block=64, *, seed: int = 0, dtype=np.float64, device="cpu"):
    """Collective: a symmetric, strictly diagonally dominant (hence SPD) ``n x n`` matrix:
    ``a_ij = u(i, j) - 0.5`` off the diagonal (u symmetric, uniform in [0, 1), hashed from
    the seed and the indices: :func:`distla.random.spd_entries`) and ``a_ii = n``. Well
    conditioned (cond < 3)."""
    return DistMatrix.from_function(grid, (n, n), _pair(block),
                                    lambda I, J: spd_entries(seed, n, I, J), dtype=dtype,
                                    device=device)


def general_matrix(grid, n: int, block=64, *, seed: int = 0, dtype=np.float64, device="cpu",
                   m: int | None = None):
    """Collective: an ``m x n`` (default square) matrix of independent standard normal entries
    (nonsingular with probability one; condition number grows like n)."""
    return DistMatrix.random(grid, (n if m is None else m, n), _pair(block), seed=seed,
                             dtype=dtype, device=device)


def global_normal(m: int, n: int, seed: int, xp, dtype=np.float64):
    """The entries of :func:`general_matrix` (same seed) formed on one device as an ``m x n``
    column-major array, in column chunks so that the hashing temporaries stay ~16M entries
    (single-device references; not collective)."""
    out = xp.empty((m, n), dtype=dtype, order="F")
    I = xp.arange(m, dtype=xp.int64).reshape(-1, 1)
    step = max(1, (1 << 24) // max(1, m))
    for j0 in range(0, n, step):
        J = xp.arange(j0, min(n, j0 + step), dtype=xp.int64).reshape(1, -1)
        out[:, j0:j0 + J.shape[1]] = hashed_normal(seed, I, J)
    return out


def covariance_matrix(grid, n: int, block=64, *, seed: int = 0, dtype=np.float64,
                      device="cpu", length: float = 0.1, nugget: float = 1e-2,
                      kernel: str = "sqexp"):
    """Collective: the covariance matrix of ``n`` jittered-grid points in the unit square
    (Morton-ordered, :func:`distla.covariance.points`) under the ``kernel`` 'sqexp'
    (squared exponential, the HiCMA/STARS-H "st-2D-sqexp" problem), 'exp' (exponential) or
    'matern' (nu = 3/2), with length scale ``length`` and ``nugget`` on the diagonal: SPD and
    data-sparse (low-rank off-diagonal tiles), as in a Gaussian-process likelihood."""
    pts = cov.points(n, dim=2, kind="jittered", seed=seed)
    return cov.covariance_matrix(grid, pts, _kernel(kernel, length, nugget), _pair(block),
                                 device=device, dtype=dtype)


def conditioned_matrix(grid, n: int, block=64, *, cond: float = 1e6, seed: int = 0,
                       spd: bool = False, dtype=np.float64, device="cpu"):
    """Collective: ``A = Q1 diag(s) Q2^T`` (n x n, real) with singular values
    ``s_i = cond^(-i / (n - 1))`` (1 down to 1/cond, log-spaced: LAPACK latms' mode 3) and
    random orthogonal Q1, Q2; ``spd=True``: ``Q2 = Q1`` (symmetric positive definite, its
    eigenvalues are s). Each Q is a Kronecker product ``Qa (x) Qb`` of two Haar-random
    orthogonal matrices of sizes p x q = n (p the largest divisor of n up to sqrt(n); QR of
    seeded normal matrices, replicated: O(n) memory), so both factors are generated entry by
    entry; A is then the product ``Q1 @ (diag(s) Q2^T)`` (2 n^3 flops), accumulated by every
    rank over panels of ``PANEL`` inner indices: the Q1 columns at its rows and the
    ``diag(s) Q2^T`` rows at its columns, generated where they are used (no messages, and no
    n x n factor held: the peak is A's local part plus two panels). The same matrix on any
    grid, block size or device (up to the product's rounding)."""
    p = max(d for d in range(1, int(np.sqrt(n)) + 1) if n % d == 0) if n else 1
    q = n // p if n else 0
    qa, qb = _haar(p, seed), _haar(q, seed + 1)
    qc, qd = (qa, qb) if spd else (_haar(p, seed + 2), _haar(q, seed + 3))
    s = float(cond) ** (-np.arange(n) / max(n - 1, 1))

    def q1(I, J):
        xp = _xp_of(I)
        return xp.asarray(qa)[I // q, J // q] * xp.asarray(qb)[I % q, J % q]

    def dq2t(I, J):                 # (diag(s) Q2^T)[i, j] = s_i Q2[j, i]
        xp = _xp_of(I)
        return xp.asarray(s)[I] * xp.asarray(qc)[J // q, I // q] * xp.asarray(qd)[J % q, I % q]
    A = DistMatrix.zeros(grid, (n, n), _pair(block), dtype=dtype, device=device)
    be, xp = A.backend, A.xp
    rows, cols = xp.asarray(A.row_indices()), xp.asarray(A.col_indices())
    if A.local.size:
        for k0 in range(0, n, PANEL):
            K = xp.arange(k0, min(n, k0 + PANEL))
            left = be.asarray(q1(rows[:, None], K[None, :]), dtype=dtype)      # mloc x w
            right = be.asarray(dq2t(K[:, None], cols[None, :]), dtype=dtype)   # w x nloc
            be.gemm("N", "N", 1.0, left, right, 1.0, A.local)
    return A


#: inner indices per panel of conditioned_matrix's product
PANEL = 512


def _haar(m: int, seed: int) -> np.ndarray:
    """A Haar-random m x m orthogonal matrix (QR of a seeded normal matrix, signs fixed)."""
    g = np.random.default_rng([seed, m, 0x51ED]).standard_normal((m, m))
    qm, r = np.linalg.qr(g)
    return qm * np.where(np.diag(r) < 0, -1.0, 1.0)


def _kernel(name: str, length: float, nugget: float):
    kinds = {"sqexp": cov.SquaredExponential, "exp": cov.Exponential,
             "matern": lambda **k: cov.Matern(nu=1.5, **k)}
    if name not in kinds:
        raise ValueError(f"kernel must be one of {', '.join(kinds)}, not {name!r}")
    return kinds[name](sigma=1.0, beta=length, nugget=nugget)


def problem_entries(kind: str, n: int, *, seed: int = 0, length: float = 0.1,
                    nugget: float = 1e-2, kernel: str = "sqexp", xp=np):
    """``fn(I, J)`` giving the entries of :func:`make_problem`'s matrix ``kind`` at global
    index arrays I (column) and J (row), for generating any part of it (not collective)."""
    if kind == "spd":
        return lambda I, J: spd_entries(seed, n, I, J)
    if kind == "general":
        return lambda I, J: hashed_normal(seed, I, J)
    if kind == "covariance":
        pts = cov.points(n, dim=2, kind="jittered", seed=seed)
        return cov.entry_function(pts, _kernel(kernel, length, nugget), xp)
    raise ValueError(f"problem kind must be one of spd, general, covariance, not {kind!r}")


def make_problem(kind: str, grid, n: int, block=64, **kw):
    """Collective: ``spd_matrix``, ``general_matrix`` or ``covariance_matrix`` by name."""
    makers = {"spd": spd_matrix, "general": general_matrix, "covariance": covariance_matrix}
    if kind not in makers:
        raise ValueError(f"problem kind must be one of {', '.join(makers)}, not {kind!r}")
    return makers[kind](grid, n, block, **kw)


def _pair(block):
    return (block, block) if isinstance(block, (int, np.integer)) else tuple(block)


def _xp_of(a):
    if isinstance(a, np.ndarray):
        return np
    import cupy
    return cupy
