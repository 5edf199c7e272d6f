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

import contextlib
import warnings

import numpy as np

from ..errors import LinAlgWarning
from ..layout import block_cyclic_views
from ..matrix import DistMatrix
from ..pblas import inverted_diagonal_solves

__all__ = ["rcond_estimate", "inverse_norm1_estimate", "norm1_estimate", "lapack_rcond",
           "estimator_scale",
           "reciprocal_condition", "first_block", "solve_and_rcond", "FUSE_MAX_RHS",
           "warn_if_ill_conditioned", "refined_rcond"]

_T = 2          # vectors per block (Higham-Tisseur t) unless the backend says otherwise
# iterations, each one solve with A, then one with A^H but the last: LAPACK's (xLACN2, ITMAX
# 5), so that an estimate does not depend on the grid (one CPU rank calls LAPACK's xGECON /
# xPOCON); most estimates stop at their second (the estimate no longer grows)
_ITMAX = 5


def _from_replicated(like: DistMatrix, X: np.ndarray, block, src) -> DistMatrix:
    """X (a host array, the same on every rank) as a DistMatrix on ``like``'s grid, device
    and dtype, with ``block`` and ``src``: each rank copies its own entries, no messages.
    Collective (the constructor agrees on errors)."""
    Z = DistMatrix.zeros(like.grid, X.shape, block, dtype=like.dtype, device=like.device,
                         src=src)
    if Z.local.size:
        mine = np.empty(Z.local_shape, dtype=like.dtype, order="F")
        for gv, lv in block_cyclic_views(X, mine, Z.block, (Z.grid.myrow, Z.grid.mycol),
                                         Z.src, Z.grid.shape):
            lv[...] = gv
        Z.local[...] = Z.backend.asarray(mine)
    return Z


def _block(template: DistMatrix, X: np.ndarray) -> DistMatrix:
    """X (n x k, replicated) as a DistMatrix with the template's row layout. Collective."""
    return _from_replicated(template, X, (template.mb, max(1, X.shape[1])),
                            (template.rsrc, 0))


def _sign(Y: np.ndarray) -> np.ndarray:
    if Y.dtype.kind == "c":
        a = np.abs(Y)
        return np.where(a > 0, Y / np.where(a > 0, a, 1), 1)
    return np.where(Y >= 0, 1.0, -1.0).astype(Y.dtype)


def _largest_first(h: np.ndarray, k: int) -> list:
    """The indices of the ``k`` largest entries of ``h``, largest first, ties by index (the
    first ``k`` of a stable sort of ``-h``), without sorting all of ``h``: a full sort and a
    Python pass over its n indices cost 37 ms of the estimate at n = 65536."""
    if np.isnan(h).any():                                  # (last, as in the sort)
        h = np.where(np.isnan(h), -np.inf, h)
    if k < h.size:
        thr = np.partition(h, h.size - k)[h.size - k]       # the k-th largest value
        idx = np.flatnonzero(h >= thr)                     # index order: ties stay stable
    else:
        idx = np.arange(h.size)
    return idx[np.argsort(-h[idx], kind="stable")][:k].tolist()


def first_block(n: int, dtype, t: int = _T) -> np.ndarray:
    """The estimator's first block (n x (t + 1), the same on every rank): ``ones / n``, t - 1
    columns of random signs ``/ n`` and LAPACK's alternating test vector."""
    rng = np.random.default_rng(1)
    X = np.ones((n, t + 1), dtype=dtype) / n
    X[:, 1:t] = rng.choice([-1.0, 1.0], size=(n, t - 1)) / n
    # LAPACK's extra test vector (dlacn2): alternating signs, growing magnitudes
    X[:, t] = ((-1.0) ** np.arange(n)) * (1 + np.arange(n) / max(n - 1, 1))
    return X


def norm1_estimate(n: int, dtype, apply, apply_h, first=None, t: int = _T) -> float:
    """Collective (through ``apply``): an estimate (lower bound) of ``||M||_1`` for an n x n
    operator M given only products, the block Higham-Tisseur method (docs/condition.md).

    ``apply(X)`` / ``apply_h(X)`` return ``M X`` / ``M^H X`` for ``X`` a host ndarray (n x k,
    the same on every rank), as a host ndarray replicated on every rank; every rank calls
    them in the same order. ``2 _ITMAX - 1`` calls at most, three usually (k = t + 1, t, t
    columns; ``t``: the block size, 1 is LAPACK's dlacn2). ``first``: ``M @ first_block(n,
    dtype, t)`` when already computed (then one call fewer)."""
    if n == 0:
        return 0.0
    X = first_block(n, dtype, t)
    est, est_old, est_alt, hist = 0.0, 0.0, 0.0, set()
    cur_ind, best_ind = None, None      # unit-vector indices of X's columns, once chosen
    for k in range(_ITMAX):
        Y = np.asarray(first if (k == 0 and first is not None) else apply(X))
        norms = np.abs(Y).sum(axis=0)
        if k == 0:   # the alternating vector's own estimate, as in dlacn2
            est_alt = 2 * float(norms[t]) / (3 * n)
            Y, norms = Y[:, :t], norms[:t]
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
        Z = np.asarray(apply_h(_sign(Y)))
        h = np.abs(Z).max(axis=1)
        if best_ind is not None and h.max() <= h[best_ind]:
            break
        cur_ind = [i for i in _largest_first(h, t + len(hist)) if i not in hist][:t]
        if not cur_ind:
            break
        hist.update(cur_ind)
        X = np.zeros((n, len(cur_ind)), dtype=dtype)
        X[cur_ind, range(len(cur_ind))] = 1
    return max(est, float(est_alt))


def estimator_scale(anorm: float, dtype=np.float64) -> float:
    """The power of two the estimator's vectors are multiplied by for a matrix of 1-norm
    ``anorm``: about ``anorm / 4`` (1.0 for a zero or non-finite one), so that ``A^-1 x``
    is of the order of the condition number, within the square root of ``dtype``'s range
    (vectors of a float32 matrix with ``||A||_1`` near 3e38 overflowed: rcond 0 on a
    well-conditioned matrix). Unscaled, a matrix near the underflow threshold (entries
    ~1e-308) overflowed its solves and reported rcond = 0; the scaling is exact."""
    if not (np.isfinite(anorm) and anorm > 0):
        return 1.0
    fi = np.finfo(np.dtype(dtype))
    e = min(max(int(np.frexp(anorm)[1]) - 2, fi.minexp // 2), fi.maxexp // 2)
    return float(np.ldexp(1.0, e))


def inverse_norm1_estimate(template: DistMatrix, apply_inv, apply_inv_h, first=None,
                           inverses: bool = True, scale: float = 1.0) -> float:
    """Collective: an estimate (lower bound) of ``||A^-1||_1``, times ``scale`` (a power of
    two the vectors are multiplied by: :func:`estimator_scale`; ``first`` then solved with
    the scaled first block).

    ``apply_inv(X)`` / ``apply_inv_h(X)`` return ``A^-1 X`` / ``A^-H X`` for an n x k
    DistMatrix X with ``template``'s row layout (``mb``, ``rsrc``), grid, device and dtype.
    ``first``: ``A^-1 first_block(n)`` (replicated) when already computed. The block size
    is the backend's ``rcond_vectors``. The solves may use inverted diagonal blocks
    (:func:`distla.pblas.inverted_diagonal_solves`: an estimate tolerates their rounding)
    unless ``inverses`` is False (LU: inverting two triangles costs more than the
    estimator's few solves save, docs/condition.md)."""
    with inverted_diagonal_solves() if inverses else contextlib.nullcontext():
        return norm1_estimate(
            template.n, template.dtype,
            lambda X: apply_inv(_block(template, X * scale)).to_global(None),
            lambda X: apply_inv_h(_block(template, X * scale)).to_global(None), first=first,
            t=template.backend.rcond_vectors)


FUSE_MAX_RHS = 13   # solve_and_rcond fuses up to this many right-hand sides (13 + 3 <= 16)


def lapack_rcond(factor: DistMatrix, anorm: float, kind: str, lower: bool = True):
    """``(() -> rcond)`` from LAPACK's own estimator (xGECON for ``kind`` 'lu', xPOCON for
    'cholesky' with the ``lower`` or upper factor) on the factor's local storage, for
    :func:`rcond_estimate` and :func:`solve_and_rcond`'s ``local``: they use it on one CPU
    rank, where the local matrix is the whole factor in LAPACK's layout. Its estimator is the
    one distla's runs (dlacn2's, one vector), at microseconds instead of four distributed
    solves (a default solve at n = 64 spent 60% of its time in them). 0.0 when A is
    numerically singular (a zero, non-finite or NaN estimate), as :func:`reciprocal_condition`."""
    def rc() -> float:
        from scipy.linalg import lapack
        a = factor.local
        if a.shape[0] == 0:
            return 1.0      # (LAPACK's xGECON / xPOCON for n = 0)
        if anorm == 0 or not np.isfinite(anorm):
            return 0.0
        # rcond(A) = rcond(A / s) with ||A / s|| = anorm / s: an anorm beyond the factor's
        # precision (float32, ||A||_1 > 3.4e38) is passed as anorm / s, the result divided by
        # s (it was inf there, and the estimate 0)
        big = float(np.finfo(a.dtype).max) / 4
        s = float(np.ldexp(1.0, int(np.frexp(anorm)[1]))) if anorm >= big else 1.0
        if kind == "lu":
            out, info = lapack.get_lapack_funcs("gecon", (a,))(a, anorm / s, norm="1")
        else:
            out, info = lapack.get_lapack_funcs("pocon", (a,))(a, anorm / s,
                                                                uplo="L" if lower else "U")
        out = float(out) / s
        return out if info == 0 and np.isfinite(out) and out > 0 else 0.0
    return rc


def _on_one_cpu(template: DistMatrix) -> bool:
    return template.grid.size == 1 and template.backend.host_lapack


def solve_and_rcond(B: DistMatrix, template: DistMatrix, solve, anorm: float, apply_inv,
                    apply_inv_h, inverses: bool = True, local=None, overwrite_b: bool = False):
    """Collective: ``(X, rcond)`` with ``X = solve(B)`` (``A^-1 B``, in B's layout) and the
    condition estimate, the estimator's first block solved in the same sweeps as B.

    The solves with few right-hand sides read the whole factor once per triangular sweep
    whatever the number of columns (``pblas._trsv_few``), so ``[B, first_block]`` costs about
    what B alone does and the estimate needs two more solves instead of three. For B with more
    than :data:`FUSE_MAX_RHS` columns, or on a backend whose solves cost per column
    (``Backend.fuse_few_rhs`` False: GPU ranks), the two run separately. ``template``: the
    factor (its row layout is used for the blocks solved); ``solve(M)`` returns ``A^-1 M`` for a
    DistMatrix M in B's or the template's row layout; ``apply_inv``/``apply_inv_h`` as in
    :func:`inverse_norm1_estimate` (and ``inverses``). ``overwrite_b``: ``solve`` may work
    in B's storage (where the sweeps are not fused with the estimator's block)."""
    n, k = B.m, B.n
    if local is not None and _on_one_cpu(template):   # LAPACK's estimator: no solves
        return solve(B if overwrite_b else B.copy()), local()
    if k > FUSE_MAX_RHS or n == 0 or not template.backend.fuse_few_rhs:
        X = solve(B if overwrite_b else B.copy())   # solve() may work in its argument's
        return X, rcond_estimate(anorm, template, apply_inv, apply_inv_h, inverses)
    sc = estimator_scale(anorm, template.dtype)
    aug = np.hstack([np.asarray(B.to_global(None)).reshape(n, k),
                     first_block(n, B.dtype, template.backend.rcond_vectors) * sc])
    Xa = np.asarray(solve(_block(template, aug)).to_global(None))
    X = _from_replicated(B, Xa[:, :k], B.block, B.src)
    return X, rcond_estimate(anorm, template, apply_inv, apply_inv_h, inverses,
                             first=Xa[:, k:])


def reciprocal_condition(n: int, anorm: float, inverse_norm, scale: float = 1.0) -> float:
    """``scale / (anorm * inverse_norm())`` for an n x n matrix (``inverse_norm``: the estimate
    of ``||A^-1||_1`` times ``scale``): 1.0 when n == 0 (LAPACK's xGECON/xPOCON: RCOND
    stays in [0, 1]), 0.0 when A is numerically singular
    (``anorm`` zero or not finite, or that estimate zero or not finite). ``inverse_norm``
    (called only when needed) is collective."""
    if n == 0:
        return 1.0
    if anorm == 0 or not np.isfinite(anorm):
        return 0.0
    est = inverse_norm()
    if not np.isfinite(est) or est == 0:
        return 0.0
    return float((scale / anorm) / est)


def rcond_estimate(anorm: float, template: DistMatrix, apply_inv, apply_inv_h,
                   inverses: bool = True, local=None, first=None) -> float:
    """Collective: ``1 / (anorm * est ||A^-1||_1)``; 0.0 when A is numerically singular
    (``inverses``: see :func:`inverse_norm1_estimate`). ``local``: :func:`lapack_rcond` for
    the factor, used on one CPU rank. ``first``: ``A^-1`` times the first block scaled by
    :func:`estimator_scale` (``anorm``), when already solved."""
    if local is not None and _on_one_cpu(template):
        return local()
    sc = estimator_scale(anorm, template.dtype)
    return reciprocal_condition(
        template.n, anorm, lambda: inverse_norm1_estimate(template, apply_inv, apply_inv_h,
                                                          first=first, inverses=inverses,
                                                          scale=sc),
        scale=sc)


#: refined_rcond: classical corrections allowed for the estimator's vectors, and the relative
#: size (1-norm, per column) of the last one below which they count as solved
VERIFY_CORRECTIONS, VERIFY_TOL = 3, 0.25
#: ... and an estimate below this many times max(10, sqrt(n)) eps counts as singular
CERTIFY_MARGIN = 10.0


def refined_rcond(A: DistMatrix, anorm: float, solve, solve_h) -> float:
    """Collective: ``rcond(A)`` in A's own precision from approximate solves, such as
    low-precision factors (mixed-precision solves): their own estimate cannot fall below
    their precision's eps, so it cannot tell a numerically singular A from a merely
    ill-conditioned one. ``solve(X)`` / ``solve_h(X)`` return approximations of ``A^-1 X``
    / ``A^-H X`` (X: n x k with A's row layout) in A's dtype.

    The block 1-norm estimator runs on the approximate solves. Its estimate is the 1-norm of
    some ``y = A^-1 x`` it computed, so those solutions (not the ``A^-H`` ones, which only
    steer it) are then refined against A itself -- the one of largest ``||y||_1 / ||x||_1``,
    which the estimate comes from -- by classical corrections,
    residuals in A's precision (at most :data:`VERIFY_CORRECTIONS`), until its last
    correction is below :data:`VERIFY_TOL` of it and, after the first, at most half the
    one before: near a singular A a correction keeps its size (it adds a null direction of
    A, not accuracy). Refinement converges forward only while ``cond(A)`` times the solves'
    relative error is below 1, so this certifies A's condition only in that range; GMRES-IR
    would converge in backward error beyond it but stagnates at a forward-wrong y near
    singularity (tried: a rank-deficient 48 x 48 matrix gave estimates of 2e-15..3e-14, by
    grid). The estimate is the refined pair's ``||y||_1 / ||x||_1``, a lower bound of
    ``||A^-1||_1``. Solutions that do not refine, or an estimate below
    :data:`CERTIFY_MARGIN` ``max(10, sqrt(n)) eps``, give 0.0: not certified (for a solver:
    numerically singular as far as these solves can tell; solve in full precision).
    """
    from ..vector import residual
    if A.n == 0:
        return 1.0      # (as LAPACK's xGECON for n = 0)
    if anorm == 0 or not np.isfinite(anorm):
        return 0.0
    pairs = []

    def recording(X):
        Y = np.asarray(solve(_block(A, X)).to_global(None))
        pairs.append((X, Y))
        return Y

    def col_norms(M):
        return np.abs(np.asarray(M.to_global(None))).sum(axis=0)

    def refined(X, Y) -> bool:
        last = None
        for _ in range(VERIFY_CORRECTIONS):
            D = solve(residual(A, Y, X))
            Y.local[...] += D.local
            dn, yn = col_norms(D), col_norms(Y)
            if np.all(dn <= VERIFY_TOL * yn) and (last is None or np.all(dn <= last / 2)):
                return True
            last = dn
        return False

    with inverted_diagonal_solves():
        est = norm1_estimate(A.n, A.dtype, recording,
                             lambda X: np.asarray(solve_h(_block(A, X)).to_global(None)),
                             t=A.backend.rcond_vectors)
        if not np.isfinite(est) or est == 0:
            return 0.0
        # refine the pair the estimate comes from, not all of them: one column's solves
        # instead of the three or four the estimator made (each solve reads the factors)
        Xh, Yh = np.hstack([x for x, _ in pairs]), np.hstack([y for _, y in pairs])
        xn = np.abs(Xh).sum(axis=0)
        j = int(np.argmax(np.abs(Yh).sum(axis=0) / xn))
        X, Y = _block(A, Xh[:, j:j + 1]), _block(A, Yh[:, j:j + 1])
        if not refined(X, Y):
            return 0.0
        yn = col_norms(Y)
    best = float(yn[0] / xn[j])
    rc = reciprocal_condition(A.n, anorm, lambda: best)
    margin = CERTIFY_MARGIN * max(10.0, np.sqrt(A.n)) * float(np.finfo(A.dtype).eps)
    return rc if rc >= margin else 0.0


def warn_if_ill_conditioned(rc: float, dtype, what: str = "solve",
                            accuracy: float | None = None, growth: float | None = None) -> None:
    """Warn with :class:`distla.LinAlgWarning` (every rank) when ``rc`` < eps, like
    ``scipy.linalg.solve``; for an approximate factorization of relative accuracy
    ``accuracy`` (a TLR compression's ``tol``), when ``rc`` < ``accuracy``: its forward error
    is then up to ``accuracy / rc`` >= 1. ``growth``: an LU factorization's element growth
    ``max|U| / max|A|``: its backward error is up to about ``growth eps``, so it warns when
    ``rc`` < ``growth eps`` (the estimate itself, of the matrix the factors hold, cannot fall
    much below that: LU without pivoting returned forward errors of 2.5 with rcond 7e-14 and
    growth 6e4, and of 1 for a numerically singular A whose estimate was 4e-16)."""
    eps = np.finfo(dtype).eps
    if growth is not None and growth > 1 and rc >= eps and not rc >= growth * eps:
        warnings.warn(f"{what}: ill-conditioned matrix for the factorization's element "
                      f"growth (rcond={rc:.3g} < growth {growth:.3g} x eps): the result may "
                      f"not be accurate", LinAlgWarning, stacklevel=3)
        return
    if accuracy is not None and accuracy > eps:
        if not rc >= accuracy:
            warnings.warn(f"{what}: ill-conditioned matrix for the approximation's accuracy "
                          f"(rcond={rc:.3g} < tol={accuracy:.3g}): the result may have no "
                          f"correct digits; use a smaller tol", LinAlgWarning, stacklevel=3)
        return
    if not rc >= eps:
        # (an estimate from factors of large growth is only as good as their solves: it
        # may reflect the growth rather than A, and then differs between grids)
        note = "" if growth is None or not growth > 1 / np.sqrt(eps) else \
            (f"; the estimate comes from factors with element growth {growth:.3g} and may "
             f"reflect that growth rather than A")
        warnings.warn(f"{what}: ill-conditioned matrix (rcond={rc:.3g}): the result may not "
                      f"be accurate{note}", LinAlgWarning, stacklevel=3)


def subnormal_floor(dtype) -> float:
    """``tiny / eps`` of ``dtype``'s precision (9.9e-32 in float32, 2e-292 in float64): below
    it, a matrix's largest entry leaves its elimination in gradual underflow."""
    fi = np.finfo(dtype)
    return float(fi.tiny / fi.eps)


def warn_if_subnormal_scale(max_abs: float, dtype, what: str = "solve") -> None:
    """Warn with :class:`distla.LinAlgWarning` (every rank, given the same ``max_abs``) when
    A's largest entry is below ``tiny / eps`` of its precision (9.9e-32 in float32, 2e-292 in
    float64): its elimination then runs in gradual underflow, where every operation loses
    digits, and the answer can be wrong at any condition number (float32 entries near 1e-39
    gave errors of 2 at cond 76, as LAPACK's do). Scaling A by a power of 2 is exact."""
    small = subnormal_floor(dtype)
    if 0 < max_abs < small:
        warnings.warn(f"{what}: the matrix's largest entry ({max_abs:.3g}) is below "
                      f"{np.finfo(dtype).dtype}'s "
                      f"normal range over its precision ({small:.2g}): the factorization "
                      f"runs in gradual underflow and the result may not be accurate; scale "
                      f"A (and B) by a power of 2 first", LinAlgWarning, stacklevel=3)
