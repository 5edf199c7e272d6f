"""Reciprocal condition number estimates from existing factors (ScaLAPACK's pdgecon/pdpocon).

``rcond = 1 / (||A||_1 * est)`` where ``est`` estimates ``||A^-1||_1`` by the block 1-norm
power method of Higham and Tisseur (docs/condition.md): a few solves with the factors, applied
to ``t`` vectors at a time, each an O(n^2 / p) triangular sweep -- a small fraction of the
factorization. The estimate is a lower bound of ``||A^-1||_1`` and in practice within a factor
of 3 of it (tested within 10 of ``numpy.linalg.cond(a, 1)``).

The n x t blocks are small, so each iteration replicates them (``to_global(None)``: O(n t)
words) to pick signs and the next unit vectors; the solves stay distributed.
"""
from __future__ import annotations

import warnings

import numpy as np

from ..errors import LinAlgWarning
from ..matrix import DistMatrix

__all__ = ["rcond_estimate", "inverse_norm1_estimate", "warn_if_ill_conditioned"]

_T = 2          # vectors per block (Higham-Tisseur t)
_ITMAX = 2      # iterations (each: one solve with A, then one with A^H but the last)


def _block(template: DistMatrix, X: np.ndarray) -> DistMatrix:
    """X (n x k, replicated) as a DistMatrix with the template's row layout. Collective."""
    k = X.shape[1]
    return DistMatrix.from_function(template.grid, X.shape, (template.mb, max(1, k)),
                                    lambda I, J: X[template.backend.to_host(I).ravel()][
                                        :, template.backend.to_host(J).ravel()],
                                    dtype=template.dtype, device=template.device,
                                    src=(template.rsrc, 0))


def _sign(Y: np.ndarray) -> np.ndarray:
    if Y.dtype.kind == "c":
        a = np.abs(Y)
        return np.where(a > 0, Y / np.where(a > 0, a, 1), 1)
    return np.where(Y >= 0, 1.0, -1.0).astype(Y.dtype)


def inverse_norm1_estimate(template: DistMatrix, apply_inv, apply_inv_h) -> float:
    """Collective: an estimate (lower bound) of ``||A^-1||_1``.

    ``apply_inv(X)`` / ``apply_inv_h(X)`` return ``A^-1 X`` / ``A^-H X`` for an n x k
    DistMatrix X with ``template``'s row layout (``mb``, ``rsrc``), grid, device and dtype."""
    n = template.n
    if n == 0:
        return 0.0
    rng = np.random.default_rng(1)
    X = np.ones((n, _T + 1), dtype=template.dtype) / n
    X[:, 1:_T] = rng.choice([-1.0, 1.0], size=(n, _T - 1)) / n
    # LAPACK's extra test vector (dlacn2): alternating signs, growing magnitudes
    X[:, _T] = ((-1.0) ** np.arange(n)) * (1 + np.arange(n) / max(n - 1, 1))
    est, est_old, est_alt, hist = 0.0, 0.0, 0.0, set()
    cur_ind, best_ind = None, None      # unit-vector indices of X's columns, once chosen
    for k in range(_ITMAX):
        Y = apply_inv(_block(template, X)).to_global(None)
        norms = np.abs(Y).sum(axis=0)
        if k == 0:   # the alternating vector's own estimate, as in dlacn2
            est_alt = 2 * float(norms[_T]) / (3 * n)
            Y, norms = Y[:, :_T], norms[:_T]
        j = int(np.argmax(norms))
        est = float(norms[j])
        if not np.isfinite(est):
            return np.inf
        if k > 0 and est <= est_old:
            est = est_old
            break
        est_old = est
        if cur_ind is not None:
            best_ind = cur_ind[j]
        if k == _ITMAX - 1:
            break
        Z = apply_inv_h(_block(template, _sign(Y))).to_global(None)
        h = np.abs(Z).max(axis=1)
        if best_ind is not None and h.max() <= h[best_ind]:
            break
        cur_ind = [int(i) for i in np.argsort(-h, kind="stable") if int(i) not in hist][:_T]
        if not cur_ind:
            break
        hist.update(cur_ind)
        X = np.zeros((n, len(cur_ind)), dtype=template.dtype)
        X[cur_ind, range(len(cur_ind))] = 1
    return max(est, float(est_alt))


def rcond_estimate(anorm: float, template: DistMatrix, apply_inv, apply_inv_h) -> float:
    """Collective: ``1 / (anorm * est ||A^-1||_1)``; 0.0 when A is numerically singular."""
    if anorm == 0 or template.n == 0:
        return 0.0 if template.n else np.inf
    if not np.isfinite(anorm):
        return 0.0
    est = inverse_norm1_estimate(template, apply_inv, apply_inv_h)
    if not np.isfinite(est) or est == 0:
        return 0.0
    return float(1.0 / (anorm * est))


def warn_if_ill_conditioned(rc: float, dtype, what: str = "solve") -> None:
    """Warn with :class:`distla.LinAlgWarning` (every rank) when ``rc`` < eps, like
    ``scipy.linalg.solve``."""
    eps = np.finfo(dtype).eps
    if not rc >= eps:
        warnings.warn(f"{what}: ill-conditioned matrix (rcond={rc:.3g}): the result may not "
                      f"be accurate", LinAlgWarning, stacklevel=3)
