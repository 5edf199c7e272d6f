"""Gaussian-process maximum likelihood and kriging with distla's Cholesky factorizations,
tile low-rank (:class:`TLRLikelihood`) or dense (:class:`DenseLikelihood`).

Model: observations ``y`` (``n``) at points ``x`` (``n x d``, Morton-ordered for TLR) are
``N(0, sigma^2 C(beta))`` with ``C(beta) = R_beta + tau I``: ``R_beta`` a correlation kernel
(a :class:`distla.covariance.Kernel` with ``sigma = 1``, length scale ``beta``) and ``tau``
its nugget (the noise-to-signal ratio, fixed). The log-likelihood

    l(beta, sigma^2) = -1/2 (y^T C^-1 y / sigma^2 + n log sigma^2 + log det C + n log 2 pi)

is largest over ``sigma^2`` at ``sigma^2 = y^T C^-1 y / n``, which leaves the profile

    lp(beta) = -n/2 (log(2 pi sigma^2_hat) + 1) - 1/2 log det C(beta),

maximized over ``log beta`` by Brent's bounded method (:func:`fit`). One evaluation builds
``C``, factors it, reads ``log det C`` from the factor and solves ``alpha = C^-1 y``.

Kriging (:func:`predict`, zero mean) at new points ``x_*``: mean ``K_* alpha``, variance of
the field ``sigma^2 (1 - ||L^-1 K_*^T||^2)`` column by column, with the cross-covariance
``K_*`` computed a slab of new points at a time (replicated on every rank, like the TLR
solve's right-hand sides). Add ``sigma^2 tau`` for the variance of a new observation.
Variances that come out negative (rounding near the training points, or a TLR factor's
truncation) are set to 0 with a ``RuntimeWarning``, as scikit-learn's
GaussianProcessRegressor does.

``y`` is scaled by ``max |y|`` inside (the profile likelihood's maximizer does not depend on
the scale; ``sigma^2``, ``loglik`` and the kriging mean are reported for ``y`` itself), so a
very large or very small ``y`` does not overflow; a ``sigma^2`` that float64 cannot hold is
refused.

Every function and call here is collective over the grid; all ranks get the same numbers
(rank 0's are broadcast), so an optimizer driven by them takes the same path everywhere.
"""
from __future__ import annotations

import math
import numbers
import time
from dataclasses import dataclass, field

import numpy as np

from . import covariance as cov
from . import tlr
from .errors import NotPositiveDefiniteError, agree, collective, signature
from .matrix import DistMatrix

__all__ = ["DenseLikelihood", "Evaluation", "Fit", "TLRLikelihood", "fit", "predict",
           "profile_loglik"]


def profile_loglik(logdet_c: float, quad: float, n: int) -> tuple[float, float]:
    """``(lp, sigma2_hat)``: the profile log-likelihood for ``log det C`` and ``y^T C^-1 y``.
    Not collective."""
    s2 = quad / n
    return -0.5 * n * (math.log(2 * math.pi * s2) + 1.0) - 0.5 * logdet_c, s2


@dataclass
class Evaluation:
    """One likelihood evaluation at ``beta``: ``loglik`` (profiled; ``-inf`` when it is not
    finite, ``why`` then says why: ``C`` not positive definite, ``y^T C^-1 y = 0``, ...),
    ``sigma2`` (its maximizer), ``logdet`` (of ``C``), ``quad`` (``y^T C^-1 y``), seconds of
    each phase (max over ranks) and, for TLR, the mean tile rank. ``factor`` and ``alpha``
    are kept only when asked (``keep=True``)."""

    beta: float
    loglik: float
    sigma2: float
    logdet: float
    quad: float
    build_s: float
    factor_s: float
    solve_s: float
    rank_mean: float = 0.0
    factor: object = field(default=None, repr=False)
    alpha: object = field(default=None, repr=False)
    why: str = ""

    @property
    def seconds(self) -> float:
        return self.build_s + self.factor_s + self.solve_s


class _Likelihood:
    """What does not depend on the parameters, set up once: the grid, the points (and their
    order), the tiling, the data on the device. ``lik(beta)`` -> :class:`Evaluation`;
    ``history`` lists every evaluation; ``report(ev)`` (optional) is called after each."""

    kind = "?"

    def __init__(self, grid, pts, y, kernel, tile, *, device="cpu"):
        from .errors import signature
        sig = signature("gp likelihood")
        with collective(grid.comm, sig):
            tile = _positive_int("tile", tile)
            pts, y = _real_array("points", pts), _real_array("y", y)
            if pts.ndim != 2 or y.shape != (pts.shape[0],):
                raise ValueError(f"need points n x d and y of n entries, got {pts.shape} and "
                                 f"{y.shape}")
            for name, v in (("points", pts), ("y", y)):
                bad = np.argwhere(~np.isfinite(v))
                if bad.size:
                    raise ValueError(f"the {name} hold a non-finite value ({v[tuple(bad[0])]})"
                                     f" at index {tuple(int(i) for i in bad[0])}")
            if not isinstance(kernel, cov.Kernel):
                raise TypeError(f"kernel must be a distla.covariance.Kernel, not "
                                f"{type(kernel).__name__}")
            if grid.comm.Get_size() > 1:   # the points and y must be the same on every rank
                sig.kw.update(points=cov.digest(pts), y=cov.digest(y))
            if kernel.nugget == 0:
                _refuse_coinciding(pts)
            from .device import get_backend
            self.backend = get_backend(device, grid.comm)
        self.grid, self.pts, self.y, self.n = grid, pts, y, len(y)
        self.kernel = kernel.replace(sigma=1.0)
        self.tile, self.device, self.xp = tile, device, self.backend.xp
        amax = float(np.max(np.abs(y))) if y.size else 0.0
        self.yscale = amax if amax > 0 else 1.0     # computed with y / yscale: no overflow
        self.y_dev = self.xp.asarray(y / self.yscale)
        self.history: list[Evaluation] = []
        self.report = None

    def __call__(self, beta: float, keep: bool = False) -> Evaluation:
        """Collective: evaluate the profile log-likelihood at ``beta`` (a real number in
        :data:`distla.covariance.SCALE_RANGE`, else ValueError/TypeError on every rank)."""
        with collective(self.grid.comm):
            kern = self.kernel.replace(beta=_real("beta", beta))
        t = [time.perf_counter()]
        factor, rank, ok = None, 0.0, True
        self._rcond = None          # set by a back end that estimates it (dense)
        try:
            factor, rank = self._factor(kern, t)
        except NotPositiveDefiniteError:     # raised on every rank alike
            ok = False
            t += [time.perf_counter()] * (3 - len(t))
        ld = quad = float("nan")
        alpha = None
        if ok:
            ld = self._logdet(factor)
            alpha = self._solve(factor)
            quad = float(self.y_dev @ alpha)
        self.backend.synchronize()
        t.append(time.perf_counter())
        times = np.diff(np.array(t))
        from mpi4py import MPI
        self.grid.comm.Allreduce(MPI.IN_PLACE, times, op=MPI.MAX)
        ld, quad, rcond = self.grid.comm.bcast((ld, quad, self._rcond), root=0)
        why = self._why_not_finite(ok, ld, quad, rcond)   # the same on every rank
        ll, s2 = -math.inf, math.nan
        if not why:       # for y / yscale, then for y: sigma2 * yscale^2, loglik - n log yscale
            ll, s2 = profile_loglik(ld, quad, self.n)
            ll, s2 = ll - self.n * math.log(self.yscale), s2 * self.yscale * self.yscale
            if not (np.finfo(np.float64).tiny <= s2 < math.inf):
                why = (f"sigma^2 = y^T C^-1 y / n = {s2:.3g} is outside float64's normal "
                       f"range (max |y| = {self.yscale:.3g}); divide y by a constant c and "
                       f"multiply sigma^2 by c^2")
                ll, s2 = -math.inf, math.nan
        if keep and not why:
            alpha = alpha * self.yscale
        quad = quad * self.yscale * self.yscale
        ev = Evaluation(float(beta), ll, s2, ld, quad, *map(float, times), rank_mean=rank,
                        factor=factor if keep else None, alpha=alpha if keep else None,
                        why=why)
        self.history.append(ev)
        if self.report is not None:   # a user callback: raising on one rank, it left the
            with collective(self.grid.comm):    # others in the next evaluation
                self.report(ev)
        return ev

    def _why_not_finite(self, ok, ld, quad, rcond=None) -> str:
        """Why the likelihood from ``log det C = ld`` and ``quad`` (for y / yscale) is not
        finite ('' when it is); ``rcond``: C's reciprocal condition estimate, when the back
        end has one. Not collective."""
        if not ok:
            return "C(beta) is not positive definite (at this accuracy)"
        limit = self.n * float(np.finfo(np.float64).eps)
        if rcond is not None and not rcond >= limit:
            return (f"C(beta) is numerically singular (reciprocal condition estimate below "
                    f"n eps = {limit:.2g}: its Cholesky factor, log det and y^T C^-1 y carry "
                    f"no correct digits; near-coinciding points without a nugget?)")
        if not math.isfinite(ld):
            return f"log det C(beta) = {ld} is not finite"
        if quad == 0 and not np.any(self.y):
            return "y is zero, so sigma^2 = y^T C^-1 y / n = 0"
        if not quad > 0:
            return (f"y^T C^-1 y = {quad:.3g} is not positive (C(beta) is numerically "
                    f"singular)")
        return ""

    def _sync_mark(self, t):
        self.backend.synchronize()
        t.append(time.perf_counter())


class TLRLikelihood(_Likelihood):
    """Collective: the profile likelihood with the TLR Cholesky (``tol``: fixed accuracy;
    ``method``: build method of :func:`distla.tlr.from_kernel`; the default 'auto' meets
    ``tol``, 'aca' is a heuristic that can miss it silently). ``C`` is built from the kernel
    tile by tile, never dense. As with :class:`DenseLikelihood`, a ``C`` whose reciprocal
    condition estimate (from the factor) is below ``n eps`` gives ``-inf`` with ``why``."""

    kind = "TLR"

    def __init__(self, grid, pts, y, kernel, tile, *, tol=1e-8, method="auto", device="cpu",
                 seed=0):
        with collective(grid.comm):
            if not 0 < _real("tol", tol) < 1:
                raise ValueError(f"tol must be a number in (0, 1), not {tol!r}")
            from .tlr.build import BUILD_METHODS
            if method not in BUILD_METHODS:
                raise ValueError(f"method must be one of {BUILD_METHODS}, not {method!r}")
            from .tlr._args import check_seed
            seed = check_seed(seed)
        super().__init__(grid, pts, y, kernel, tile, device=device)
        self.tol, self.method, self.seed = tol, method, seed

    def _factor(self, kern, t):
        T = tlr.from_kernel(self.grid, self.pts, kern, self.tile, tol=self.tol,
                            method=self.method, device=self.device, seed=self.seed)
        rank = T.ranks.mean
        self._sync_mark(t)
        L = tlr.cholesky(T, overwrite=True, seed=self.seed)
        self._rcond = float(L.rcond())      # (as the dense back end: see _why_not_finite)
        self._sync_mark(t)
        return L, rank

    def _logdet(self, L):
        return L.logdet()

    def _solve(self, L):
        return L.solve(self.y_dev)

    def forward(self, L, B):
        """``L^-1 B`` for ``B`` replicated ``(n, r)``."""
        return L.solve_triangular(B)


class DenseLikelihood(_Likelihood):
    """Collective: the profile likelihood with distla's dense Cholesky (``C`` formed in
    ``tile x tile`` blocks, then factored in place). A ``C`` whose reciprocal condition
    estimate (from the factor) is below ``n eps`` is numerically singular: the evaluation is
    ``-inf`` with ``why`` saying so, as when ``C`` is not positive definite (the TLR back end's
    outcome for such a ``C``)."""

    kind = "dense"

    def _factor(self, kern, t):
        from .linalg.cholesky import cho_rcond, cholesky
        A = cov.covariance_matrix(self.grid, self.pts, kern, block=(self.tile, self.tile),
                                  device=self.device)
        anorm = A.norm(1)
        self._sync_mark(t)
        L = cholesky(A, overwrite_a=True, check_finite=False, check_symmetric=False)
        # a factor that exists may still be meaningless: near-coinciding points without a
        # nugget gave log-likelihoods off by hundreds and a wrong fit (sweep 16)
        self._rcond = float(cho_rcond(L, anorm))
        self._sync_mark(t)
        return L, 0.0

    def _logdet(self, L):
        from .linalg.cholesky import logdet
        return logdet(L)

    def _rhs(self, L, fn, r):
        return DistMatrix.from_function(self.grid, (self.n, r), (L.mb, L.mb), fn,
                                        device=self.device)

    def _solve(self, L):
        from .linalg.cholesky import cho_solve
        y = self.y_dev
        X = cho_solve(L, self._rhs(L, lambda I, J: y[I], 1), check_finite=False)
        return self.xp.asarray(X.to_global(root=None)[:, 0])

    def forward(self, L, B):
        """``L^-1 B`` for ``B`` replicated ``(n, r)`` (through a distributed TRSM)."""
        from .pblas import triangular_solve
        xp = self.xp
        Bd = xp.asarray(B)
        W = triangular_solve(L, self._rhs(L, lambda I, J: Bd[I, J], Bd.shape[1]), lower=True)
        return xp.asarray(W.to_global(root=None))


@dataclass
class Fit:
    """The result of :func:`fit`: estimates, the profile log-likelihood there, the number of
    evaluations, the wall seconds of the whole fit (max over ranks) and the optimizer's
    result."""

    beta: float
    sigma2: float
    loglik: float
    nevals: int
    seconds: float
    result: object = field(repr=False)


def fit(lik: _Likelihood, bounds=(0.02, 0.5), xatol: float = 1e-5) -> Fit:
    """Collective: maximize ``lik``'s profile log-likelihood over ``beta`` in ``bounds``
    (Brent's bounded method on ``log beta``, to ``xatol`` in ``log beta``, i.e. relative in
    beta); ``sigma^2`` is the profiled estimate at the optimum. ``bounds``: two real numbers
    ``0 < lo < hi`` in the kernel's range of beta (:data:`distla.covariance.SCALE_RANGE`);
    ``xatol``: a finite number > 0; anything else raises ValueError/TypeError on every rank
    before the first evaluation."""
    from mpi4py import MPI
    from scipy.optimize import minimize_scalar
    with collective(lik.grid.comm):
        if isinstance(bounds, (str, bytes)) or not hasattr(bounds, "__len__") or \
                len(bounds) != 2:
            raise ValueError(f"bounds must be two numbers (lo, hi), not {bounds!r}")
        lo, hi = _real("bounds[0]", bounds[0]), _real("bounds[1]", bounds[1])
        if not 0 < lo < hi < math.inf:
            raise ValueError(f"bounds must be finite with 0 < lo < hi, got {tuple(bounds)}")
        for b in (lo, hi):
            try:
                lik.kernel.replace(beta=b)
            except ValueError:
                raise ValueError(f"bounds must lie in the kernel's range of beta (about "
                                 f"{cov.SCALE_RANGE[0]:.2g} to {cov.SCALE_RANGE[1]:.2g}), got "
                                 f"{tuple(bounds)}") from None
        if not 0 < _real("xatol", xatol) < math.inf:
            raise ValueError(f"xatol must be a finite number > 0, not {xatol!r}")
        xatol = float(xatol)
        if not np.any(lik.y):
            raise ValueError("y is zero: sigma^2 = y^T C^-1 y / n = 0 for every beta, so the "
                             "likelihood has no maximum (give the observations)")
    # the same search on every rank (different bounds failed later, naming the covariance)
    agree(lik.grid.comm, None, signature("gp.fit", bounds=(lo, hi), xatol=xatol))
    start = len(lik.history)
    t0 = time.perf_counter()

    def objective(logb):
        ll = lik(math.exp(logb)).loglik
        return -ll if math.isfinite(ll) else 1e300

    res = minimize_scalar(objective, bounds=(math.log(lo), math.log(hi)), method="bounded",
                          options={"xatol": xatol})
    secs = lik.grid.comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
    beta = math.exp(float(res.x))
    best = [e for e in lik.history[start:] if e.beta == beta] or [lik(beta)]
    ev = best[-1]
    finite = [e for e in lik.history[start:] if math.isfinite(e.loglik)]
    if not finite:        # every rank has the same history: raised on every rank
        whys = sorted({e.why for e in lik.history[start:]})
        raise ValueError(f"no finite likelihood for beta in [{lo:g}, {hi:g}] "
                         f"({len(lik.history) - start} evaluations): {'; '.join(whys)}"
                         + ("; add a nugget or narrow the bounds"
                            if any("positive" in w or "singular" in w for w in whys) else ""))
    if not math.isfinite(ev.loglik):
        ev = max(finite, key=lambda e: e.loglik)
        beta = ev.beta
    return Fit(beta, ev.sigma2, ev.loglik, len(lik.history) - start, secs, res)


def predict(lik: _Likelihood, beta: float, new_pts, slab: int | None = None):
    """Collective: kriging at ``new_pts`` (``m x d``, identical on every rank) with the model
    at ``beta`` (``sigma^2`` profiled): ``(mean, var, ev)`` with ``mean``, ``var`` (of the
    field, not of a new observation) host arrays of ``m`` on every rank and ``ev`` the
    evaluation at ``beta``. ``slab``: new points per cross-covariance slab, an int >= 1
    (default: the slab's ``n x slab`` array ~ 256 MiB). Negative variances (rounding, TLR
    truncation) are set to 0 with a ``RuntimeWarning`` (as scikit-learn does)."""
    with collective(lik.grid.comm, signature("gp.predict", beta=beta, slab=slab,
                                             new_points=cov.digest_or_type(new_pts))):
        new = _real_array("new points", new_pts)
        if slab is not None:
            slab = _positive_int("slab", slab)
        _real("beta", beta)
        if new.ndim != 2 or new.shape[1] != lik.pts.shape[1]:
            raise ValueError(f"new points must be m x {lik.pts.shape[1]}, got {new.shape}")
        bad = np.argwhere(~np.isfinite(new))
        if bad.size:
            raise ValueError(f"the new points hold a non-finite value "
                             f"({new[tuple(bad[0])]}) at index "
                             f"{tuple(int(i) for i in bad[0])}")
    ev = lik(beta, keep=True)
    if not math.isfinite(ev.loglik):      # the same on every rank
        raise ValueError(f"no finite likelihood at beta={beta}: {ev.why}")
    xp, m = lik.xp, new.shape[0]
    kern = lik.kernel.replace(beta=float(beta))
    c0 = float(kern(np.zeros(1))[0])
    slab = slab or max(1, (256 << 20) // (8 * max(1, lik.n)))
    mean, var = np.empty(m), np.empty(m)
    for s0 in range(0, m, slab):
        Ks = cov.cross_covariance(new[s0:s0 + slab], lik.pts, kern, xp)    # (s, n)
        mean[s0:s0 + len(Ks)] = _host(Ks @ ev.alpha)
        W = lik.forward(ev.factor, Ks.T)                                    # (n, s)
        var[s0:s0 + len(Ks)] = ev.sigma2 * (c0 - _host(xp.sum(W * W, axis=0)))
        del Ks, W
    ev.factor = None
    neg = var < 0
    if neg.any():         # the same numbers, so the same warning, on every rank
        import warnings
        warnings.warn(f"{int(neg.sum())} of {m} predicted variances were negative (down to "
                      f"{var.min():.3g}, sigma^2 = {ev.sigma2:.3g}: rounding, or the TLR "
                      f"factor's truncation); set to 0", RuntimeWarning, stacklevel=2)
        var[neg] = 0.0
    return mean, var, ev


def _real(name, v) -> float:
    """``v`` as a float if it is a real number (not a bool or a string), else TypeError."""
    if not isinstance(v, numbers.Real) or isinstance(v, bool):
        raise TypeError(f"{name} must be a real number, not {v!r}")
    return float(v)


def _positive_int(name, v) -> int:
    """``v`` as an int if it is an int >= 1 (not a bool, float or string), else an error."""
    if not isinstance(v, numbers.Integral) or isinstance(v, bool):
        raise TypeError(f"{name} must be an int >= 1, not {v!r}")
    if v < 1:
        raise ValueError(f"{name} must be an int >= 1, not {v!r}")
    return int(v)


def _real_array(name, a) -> np.ndarray:
    """``a`` as a float64 NumPy array; TypeError for complex or non-numeric data (a cast
    would drop the imaginary part, or turn text into numbers)."""
    arr = np.asarray(a.get() if hasattr(a, "__cuda_array_interface__") else a)
    if arr.dtype.kind not in "biuf":
        raise TypeError(f"{name} must be real numbers, not {arr.dtype} data"
                        + (" (complex: give the real part explicitly)"
                           if arr.dtype.kind == "c" else ""))
    return np.ascontiguousarray(arr, dtype=np.float64)


def _refuse_coinciding(pts) -> None:
    """Without a nugget, two equal points make two equal rows of ``C(beta)`` for every
    ``beta``: C is singular and any likelihood computed from it is meaningless. Raise
    ValueError naming the first such pair (``O(n log n)``, on every rank alike)."""
    order = np.lexsort(pts.T[::-1])
    same = np.flatnonzero(np.all(pts[order[1:]] == pts[order[:-1]], axis=1))
    if same.size:
        i, j = sorted(int(k) for k in order[same[0]:same[0] + 2])
        raise ValueError(f"points {i} and {j} coincide ({pts[i].tolist()}) and the kernel's "
                         f"nugget is 0: C(beta) is singular for every beta; give a nugget "
                         f"> 0 (the noise-to-signal ratio) or merge coinciding points")


def _host(a):
    return a.get() if hasattr(a, "get") and not isinstance(a, np.ndarray) else np.asarray(a)
