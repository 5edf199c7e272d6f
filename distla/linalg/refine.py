"""Iterative refinement for any solver: classical IR and GMRES-IR (docs/mixed.md, docs/rbt.md).

:func:`refine` improves ``x ~ A^-1 b`` in A's (working) precision, given ``solve(R) ~ A^-1 R``
(any approximate inverse: low-precision LU or Cholesky factors, RBT + GENP, ...):

* classical IR: ``r = b - A x`` (a distributed GEMV, :func:`distla.vector.residual`),
  ``x += solve(r)``;
* GMRES-IR (Carson & Higham): each correction ``A d = r`` is solved by left-preconditioned
  GMRES on ``solve(A) d = solve(r)`` in working precision, so the Krylov space absorbs the
  error of the preconditioner that plain IR cannot (:func:`gmres`);
* ``mode='auto'``: classical IR first; the first correction that does not halve the scaled
  residual switches to GMRES-IR; a GMRES-IR correction that does not halve it ends the
  refinement (the contraction test that makes mixed-precision solves fall back early). The
  condition estimate, when asked for, is then checked before the switch rather than at
  acceptance: it does not depend on x, a GMRES-IR correction costs more than it, and an
  estimate that fails would reject whatever GMRES-IR reaches.

Convergence: the scaled residual ``rho = max_j max|r_j| / (||A||_inf max|x_j| eps sqrt(n))``
(dsgesv's criterion) is at most 1 after at least one correction; after that, refinement goes
on while each correction still halves rho, down to ``rho <= 1/sqrt(n)``. An answer is then
accepted only when LAPACK's componentwise backward error is at most ``max(10, sqrt(n)) eps``
and (when asked) the condition estimate is at least eps. All functions are collective over
A's grid.
"""
from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass, field

import numpy as np
import scipy.linalg

from ..matrix import DistMatrix
from ..trace import trace
from ..vector import (
    _rows_like,
    axpy_columns,
    column_dots,
    column_max,
    column_scales,
    componentwise_error,
    global_max,
    residual,
)

__all__ = ["refine", "gmres", "Refinement", "scaled_residual", "stalled", "MODES",
           "projected_corrections"]

MODES = ("ir", "gmres", "auto")
PATIENCE = 3             # classical IR: corrections in a row that may fail to halve rho
# mode 'auto': classical IR hands over to GMRES-IR after a correction that shrinks rho by less
# than this factor (GMRES-IR's own corrections must still halve it). 4 was slower wherever it
# changed anything: one H200, n = 32768, fp16 Cholesky at cond 1e4 0.231 -> 0.306 s (18
# classical corrections replaced by two GMRES-IR corrections of 9 iterations, each iteration a
# float64 solve with the promoted factors), LU at cond 1e3 0.493 -> 0.589 s, n = 65536
# Cholesky at cond 1e4 0.741 -> 0.917 s (record 2026-11-26-h200-refine-ir-switch.jsonl)
IR_SWITCH = 2.0
GMRES_RESTART = 30       # Krylov vectors per GMRES-IR correction
GMRES_TOL = 1e-8         # relative reduction of the preconditioned residual per correction
# a GMRES-IR correction stops early when, after GMRES_PROBE iterations, the reduction rate of
# its last five projects more than GMRES_HOPELESS times ``restart`` iterations to reach the
# tolerance (docs/mixed.md: such corrections did not even halve the true residual)
GMRES_PROBE = 10
GMRES_HOPELESS = 2.0
# with a time budget, from PROJECT_FROM corrections on: a refinement whose scaled residual
# shrinks too slowly to reach 1 within the budget (at the rate of its last two corrections and
# its seconds per correction so far) fails then, not when the budget is spent (docs/mixed.md)
PROJECT_FROM = 3


@dataclass
class Refinement:
    """What :func:`refine` returns (the same on every rank). ``x``: the refined solution (in
    B's layout; ``None`` never: an unconverged x is returned with ``converged=False``);
    ``iterations``: corrections applied; ``history``: rho at each check;
    ``gmres_iterations``: Krylov iterations of each GMRES-IR correction; ``reason``: why
    refinement failed (None when converged); ``rcond``: the estimate used for acceptance;
    ``estimate``: the condition estimate a caller reports, when it is not that one (RBT)."""

    x: DistMatrix
    iterations: int = 0
    converged: bool = False
    reason: str | None = None
    history: list = field(default_factory=list)
    gmres_iterations: list = field(default_factory=list)
    rcond: float | None = None
    estimate: float | None = None
    berr_last: float = math.inf     # the componentwise error at the last normwise acceptance


def stalled(hist: list, patience: int) -> bool:
    """True when none of the last ``patience`` checks improved the best earlier one by 2x."""
    if len(hist) <= patience:
        return False
    return min(hist[-patience:]) > 0.5 * min(hist[:-patience])


def _shrinks_less(hist: list, factor: float) -> bool:
    """True when the last check is not ``factor`` times below the best earlier one."""
    return len(hist) > 1 and hist[-1] * factor > min(hist[:-1])


def scaled_residual(R: DistMatrix, X: DistMatrix, anorm: float, eps_sqrtn: float) -> float:
    """Collective: ``max_j (max|r_j| / anorm / max|x_j|) / (eps sqrt n)``: inf when R or X
    holds a NaN or an infinity (the refinement then fails at once), at most the largest
    float otherwise (a zero x column with a nonzero residual, or an overflowing quotient)."""
    xp = R.xp
    rmax, ymax = column_max(R), column_max(X)
    tiny, big = np.finfo(np.float64).tiny, np.finfo(np.float64).max
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        ratio = xp.where(rmax == 0, 0.0,
                         xp.minimum((rmax / max(anorm, tiny)) / ymax / eps_sqrtn, big))
        ratio = xp.where(xp.isfinite(rmax) & xp.isfinite(ymax), ratio, np.inf)
        # (nan_to_num's default would turn inf into the largest float: a finite rho)
        loc = float(R.backend.to_host(xp.nan_to_num(ratio, nan=np.inf, posinf=np.inf)
                                      .max())) if ratio.size else 0.0
    return global_max(R.grid, loc)


def refine(A: DistMatrix, B: DistMatrix, solve, *, anorm: float, x: DistMatrix | None = None,
           max_iter: int = 30, mode: str = "ir", label: str = "refinement",
           rcond=None, precond=None, budget: float | None = None,
           mixes_rows: bool = False) -> Refinement:
    """Collective: refine ``A X = B`` (A n x n; B n x k with A's row blocking) to working
    precision. ``solve(R)``: ``~A^-1 R`` in R's layout and dtype (collective). ``x``: a
    first solution (default ``solve(B)``) of B's shape, dtype, grid and device, in any layout
    (not modified; the answer is in B's layout). ``anorm``: ``||A||_inf``. ``mode``: 'ir', 'gmres'
    or 'auto' (module docstring). ``precond``: GMRES-IR's preconditioner (default ``solve``;
    it must be one fixed linear operator to working accuracy). ``rcond``: optional callable
    giving a condition estimate checked (>= eps) before acceptance. ``label`` prefixes the
    failure reason. ``budget``: seconds the refinement may take (the maximum over ranks,
    checked at every residual and every GMRES iteration): past it, a converged x is
    accepted as it is and an unconverged one fails. ``mixes_rows``: the solves mix rows
    (RBT's butterflies), so rows whose ``|A||x| + |b|`` is tiny are judged against
    ``||A|| ||x||`` as well (Arioli, Demmel and Duff; docs/condition.md); otherwise the
    acceptance is componentwise on every row."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    _rows_like(A, B, "refine")          # (descriptors only: the same answer on every rank)
    if x is not None:
        if not isinstance(x, DistMatrix) or x.shape != B.shape or x.grid != B.grid or \
                x.device != B.device:
            raise ValueError(f"refine: x must be a DistMatrix of B's shape {B.shape} on B's "
                             f"grid and device, not {_describe(x)}")
        if x.dtype != B.dtype:
            raise TypeError(f"refine: x has dtype {x.dtype}, B {B.dtype}")
        # the corrections come in B's layout; the caller's x is left as it is
        x = x.copy() if x.same_layout(B) else x.redistribute(block=B.block, src=B.src)
    clock = _Budget(A.grid, budget)
    with trace("refine.solve"):
        x = solve(B) if x is None else x
    out = Refinement(x)
    eps = np.finfo(A.dtype).eps
    eps_sqrtn, polish = eps * math.sqrt(A.n), 1.0 / math.sqrt(A.n)
    gmres_on = mode == "gmres"
    while True:
        with trace("refine.residual"), clock.first("residual"):
            R, absax = residual(A, out.x, B, with_abs=True)   # |A||x| too (real A)
            rho = scaled_residual(R, out.x, anorm, eps_sqrtn)
        out.history.append(rho)
        it, hist = out.iterations, out.history
        if rho <= 1.0 and it >= min(1, max_iter):
            if rho <= polish or stalled(hist, 1) or it >= max_iter or clock.over():
                with trace("refine.accept"):
                    berr = _componentwise(A, B, R, out, anorm, eps, absax, mixes_rows)
                    # a normwise-converged x whose componentwise error is not yet at working
                    # precision is corrected further while that error still halves (rows of
                    # very different scales: the normwise residual says nothing of them)
                    if berr <= _berr_tol(A, eps) or it >= max_iter or clock.over() or \
                            not berr <= out.berr_last / 2:
                        return _accept(A, out, berr, eps, label, rcond, max_iter, clock)
                    out.berr_last = berr
        elif it >= max_iter or not math.isfinite(rho) or stalled(hist, PATIENCE) or \
                clock.over() or clock.will_run_out(hist, it):
            return _fail(out, label, rho, max_iter, clock)
        elif gmres_on and stalled(hist, 1):
            return _fail(out, label, rho, max_iter, clock)   # GMRES-IR does not contract
        elif not gmres_on and mode != "ir" and _shrinks_less(hist, IR_SWITCH):
            gmres_on = True        # classical IR contracts too slowly: GMRES-IR from here
            with clock.first("rcond"):   # (charged nowhere, as at acceptance)
                if rcond is not None and not _certified(out, rcond, eps, label):
                    return out
        if gmres_on:
            with trace("refine.gmres"):   # its first preconditioner and iteration: free
                d, m = gmres(A, R, precond or solve, GMRES_RESTART, GMRES_TOL, clock.over,
                             free=clock.first)
            out.gmres_iterations.append(m)
        else:
            with trace("refine.solve"), clock.first("solve"):
                d = solve(R)
        out.x.local += d.local
        out.iterations += 1


class _Budget:
    """Seconds since construction against a budget, agreed over the grid (collective). The
    first call of each kind (:meth:`first`) is not charged: in a fresh process it includes
    compiling and loading device kernels, which would otherwise end a healthy refinement."""

    def __init__(self, grid, budget):
        self.grid, self.budget, self.t0 = grid, budget, time.perf_counter()
        self.spent, self.free, self.seen, self.inside = 0.0, 0.0, set(), False
        self.projected = None    # seconds projected by will_run_out, when it last ran

    @contextlib.contextmanager
    def first(self, kind: str):
        """Do not charge the time of the block the first time ``kind`` runs."""
        if kind in self.seen or self.budget is None:
            yield
            return
        self.seen.add(kind)
        t, self.inside = time.perf_counter(), True
        try:
            yield
        finally:
            self.free += time.perf_counter() - t
            self.inside = False

    def over(self) -> bool:
        if self.budget is None or self.inside:
            return False
        self.spent = self.grid.allreduce(time.perf_counter() - self.t0 - self.free, "max")
        return self.spent > self.budget

    def will_run_out(self, hist: list, done: int) -> bool:
        """After :meth:`over` (same agreed ``spent``; not collective): whether reaching
        rho <= 1 at the rate of the last two corrections (:func:`projected_corrections`)
        would take the refinement past its budget, at the seconds per correction so far."""
        if self.budget is None or done < PROJECT_FROM:
            return False
        more = projected_corrections(hist)
        self.projected = self.spent + more * self.spent / done
        return self.projected > self.budget


def projected_corrections(hist: list) -> float:
    """Corrections still needed to bring the scaled residual ``hist[-1]`` to 1 at the rate of
    the last two (``(hist[-1] / hist[-3])^(1/2)`` per correction); 0 when it is already there,
    inf when it no longer shrinks. Not collective."""
    if len(hist) < 3 or hist[-1] <= 1.0:
        return 0.0
    r, r0 = hist[-1], hist[-3]
    if not (r0 > 0 and math.isfinite(r) and r < r0):
        return math.inf
    rate = math.sqrt(r / r0)
    return math.log(r) / -math.log(rate)


def _describe(x) -> str:
    if isinstance(x, DistMatrix):
        return (f"shape {x.shape} on another or a {x.grid.nprow}x{x.grid.npcol} grid, "
                f"device {x.device}")
    return type(x).__name__


def _fail(out: Refinement, label: str, rho: float, max_iter: int, clock=None) -> Refinement:
    if max_iter == 0 and math.isfinite(rho):     # refinement off (refine=False / max_iter=0)
        out.reason = (f"{label}: the unrefined solution misses the refinement criterion "
                      f"(scaled residual {rho:.3g} > 1) and refinement is off")
        return out
    timed = clock is not None and clock.budget is not None
    why = ("produced non-finite values" if not math.isfinite(rho) else
           "did not converge" if out.iterations >= max_iter else
           f"exceeded its time budget ({clock.spent:.3g} s > {clock.budget:.3g} s)"
           if timed and clock.spent > clock.budget else
           "stagnated (its last two corrections did not shrink the scaled residual)"
           if timed and clock.projected is not None and math.isinf(clock.projected) else
           f"would exceed its time budget at its rate so far (projected {clock.projected:.3g}"
           f" s > {clock.budget:.3g} s)"
           if timed and clock.projected is not None and clock.projected > clock.budget
           else "stagnated")
    out.reason = (f"{label}: refinement {why} after {out.iterations} iteration(s) (scaled "
                  f"residual {rho:.3g} > 1)")
    return out


def _berr_tol(A, eps) -> float:
    """The componentwise backward error an accepted x must reach: ``max(10, sqrt(n)) eps``."""
    return max(10.0, math.sqrt(A.n)) * eps


def _accept(A, out: Refinement, berr: float, eps, label, rcond, max_iter: int,
            clock) -> Refinement:
    """A small normwise residual does not make x accurate when A is numerically singular: the
    componentwise backward error ``berr`` (:func:`_componentwise`) must be at working
    precision and the condition estimate (when given) at least eps; otherwise ``out.reason``
    says which, and what ended the corrections. Collective (the estimate)."""
    if not berr <= _berr_tol(A, eps):
        why = (f"the time budget ended the refinement ({clock.spent:.3g} s > "
               f"{clock.budget:.3g} s)" if clock.budget is not None and
               clock.spent > clock.budget else
               f"{max_iter} correction(s) did not reach it" if out.iterations >= max_iter
               else "it no longer halves (A is numerically singular or the factors too "
                    "inaccurate)")
        out.reason = (f"{label}: componentwise backward error {berr:.3g} is not at working "
                      f"precision ({_berr_tol(A, eps):.3g}): {why}")
        return out
    if rcond is not None and not _certified(out, rcond, eps, label):
        return out
    out.converged = True
    return out


def _componentwise(A, B, R, out: Refinement, anorm, eps, absax=None,
                   mixes_rows: bool = False) -> float:
    """Collective: LAPACK's componentwise backward error of ``out.x`` (from x's residual R,
    and ``absax`` = |A||x| when the residual's pass computed it). ``mixes_rows``: see
    :func:`refine`."""
    # (LAPACK's guard against tiny denominators distorts the componentwise error of matrices
    # near the underflow threshold: checked above it only)
    # per column: ||A|| max|x_c|; a column below tiny/eps has its residuals in gradual
    # underflow, where no componentwise measure reaches eps (LAPACK's guard itself gives
    # ~1e-7): it is not judged componentwise (inf), its normwise residual is (above); RBT's
    # tiny rows are judged against their column's scale (its solves mix rows)
    scale = anorm * _column_max_abs(out.x)
    low = scale < np.finfo(A.dtype).tiny / eps
    return componentwise_error(A, out.x, B, R, absax, sparse_scale=np.where(
        low, np.inf, scale if mixes_rows else 0.0))


def _column_max_abs(X: DistMatrix) -> np.ndarray:
    """Collective: ``max_i |x_ic|`` for every column c of X, as a host array on every rank."""
    from mpi4py import MPI
    out = np.zeros(X.n)
    if X.local.size:
        out[X.col_indices()] = np.asarray(X.backend.to_host(X.xp.abs(X.local).max(axis=0)))
    X.grid.comm.Allreduce(MPI.IN_PLACE, out, op=MPI.MAX)
    return out


def _certified(out: Refinement, rcond, eps, label) -> bool:
    """Collective: whether the condition estimate (``rcond()``, computed once per
    refinement and kept in ``out.rcond``) is at least eps; if not, ``out.reason`` says so."""
    if out.rcond is None:
        with trace("refine.rcond"):
            out.rcond = rcond()
    if out.rcond >= eps:
        return True
    what = getattr(rcond, "what", "condition estimate")
    if out.rcond == 0:      # refined_rcond's "not certified"
        out.reason = (f"{label}: no {what} could certify A's condition (the factors' "
                      f"solves did not refine to A's own): A is numerically singular, or too "
                      f"ill-conditioned for these factors (cond(A) times their unit "
                      f"roundoff near or above 1) to tell")
    else:
        out.reason = (f"{label}: the {what} {out.rcond:.3g} < eps: the matrix is "
                      f"numerically singular, or too ill-conditioned for these factors to "
                      f"certify it")
    return False


def gmres(A: DistMatrix, R: DistMatrix, precond, restart: int = GMRES_RESTART,
          tol: float = GMRES_TOL, stop=None, free=None):
    """Collective: ``d ~ A^-1 R`` by left-preconditioned GMRES (``precond(W) ~ A^-1 W``),
    column by column but in lock step (one preconditioner application and one matvec of all
    columns per iteration), classical Gram-Schmidt with reorthogonalization, Givens
    rotations on the host. Stops when every column's preconditioned residual dropped by
    ``tol``, after ``restart`` iterations, or when ``stop()`` (collective, asked after each
    iteration) is True. ``free(kind)``: a context manager that does not charge its block to
    ``stop``'s budget the first time ``kind`` runs (:class:`_Budget`): the first
    preconditioner application and the first iteration, which load and compile kernels (and
    promote the factors) in a fresh process; the rest of the first GMRES-IR correction is
    charged like any other. Returns (d in R's layout, iterations)."""
    free = free or (lambda kind: contextlib.nullcontext())
    s = column_scales(R)        # GMRES is linear in R: solve for columns of max ~1, whose
    R = R.copy()                # dot products cannot overflow (a column of 1e300 did)
    R.local /= s[None, :]
    with free("gmres.start"):
        z = precond(R)
    beta = A.grid.comm.bcast(_norms(z), root=0)     # (the same on every rank: below)
    hdt = np.result_type(R.dtype, np.float64)   # Hessenberg, rotations: complex if R is
    _scale_columns(z, beta)
    Vs = [z]
    rot = _Givens(restart, R.n, hdt, beta)
    res = []                                   # relative preconditioned residual per iteration
    zero = R._like(local=R.backend.zeros(R.local_shape, R.dtype))
    for j in range(restart):
        with free("gmres.iteration"):
            w = residual(A, Vs[j], zero)       # -A v_j
            w.local *= -1.0
            w = precond(w)
        h = column_dots(Vs, w)
        axpy_columns(w, Vs, h)
        h2 = column_dots(Vs, w)                # CGS2: a second pass keeps V orthonormal
        axpy_columns(w, Vs, h2)
        hn = _norms(w)
        # an all-reduced sum may round differently on different ranks: the Hessenberg
        # column every rank's stopping decisions (and coefficients) come from is rank 0's
        h, hn = A.grid.comm.bcast((h + h2, hn), root=0)
        done = rot.add(j, h, hn, tol)
        res.append(rot.relative_residual())
        # (in small systems, n not far above restart, GMRES ends within n iterations anyway)
        if done or np.all(hn == 0) or (A.n > 4 * restart and hopeless(res, tol, restart)) \
                or (stop is not None and stop()):
            break
        _scale_columns(w, hn)
        Vs.append(w)
    y = rot.solve()
    d = R._like(local=R.backend.zeros(R.local_shape, R.dtype))
    axpy_columns(d, Vs[:y.shape[0]], y, sign=1.0)
    d.local *= s[None, :]
    return d, y.shape[0]


def hopeless(res: list, tol: float, restart: int) -> bool:
    """Whether a GMRES run whose relative residuals so far are ``res`` is projected, at the
    rate of its last five iterations, to need more than ``GMRES_HOPELESS * restart``
    iterations in all to reach ``tol`` (asked from ``GMRES_PROBE`` iterations on). Not
    collective (``res`` is the same on every rank)."""
    if len(res) < max(GMRES_PROBE, 6) or res[-1] <= tol:
        return False
    r, r0 = res[-1], res[-6]
    if not (r > 0 and r0 > 0 and np.isfinite(r)):
        return False
    q = (r / r0) ** 0.2
    if q >= 1.0:
        return True
    return len(res) + math.log(tol / r) / math.log(q) > GMRES_HOPELESS * restart


def _norms(W: DistMatrix) -> np.ndarray:
    return np.sqrt(np.maximum(column_dots([W], W)[0].real, 0.0))


def _scale_columns(W: DistMatrix, norms: np.ndarray) -> None:
    """Local: ``W[:, c] /= norms[c]`` (columns of norm 0 left alone)."""
    if W.local.size:
        s = np.where(norms > 0, norms, 1.0)
        W.local *= W.xp.asarray((1.0 / s)[W.col_indices()])[None, :]


class _Givens:
    """The GMRES least-squares problem of k columns in lock step, on the host: Hessenberg
    columns reduced by complex Givens rotations ``[c s; -conj(s) c]`` as they arrive."""

    def __init__(self, restart, k, hdt, beta):
        self.H = np.zeros((restart + 1, restart, k), dtype=hdt)
        self.cs, self.sn = np.zeros((restart, k)), np.zeros((restart, k), dtype=hdt)
        self.g = np.zeros((restart + 1, k), dtype=hdt)
        self.g[0] = beta
        self.beta, self.hdt, self.m = beta, hdt, 0

    def add(self, j, h, hn, tol) -> bool:
        """Append Hessenberg column j (h: (j + 1, k), hn: (k,)); True when every column's
        residual dropped by ``tol``."""
        cs, sn, g = self.cs, self.sn, self.g
        col = np.vstack([h, hn[None, :]]).astype(self.hdt)    # (j + 2, k)
        for i in range(j):                     # previous rotations
            a, b = col[i].copy(), col[i + 1].copy()
            col[i], col[i + 1] = cs[i] * a + sn[i] * b, -np.conj(sn[i]) * a + cs[i] * b
        a, b = col[j].copy(), col[j + 1].real.copy()   # zero col[j + 1] (real, >= 0)
        aa = np.abs(a)
        rr = np.hypot(aa, b)
        ph = np.where(aa > 0, a / np.where(aa > 0, aa, 1.0), 1.0)   # a / |a| (1 if a == 0)
        rs = np.where(rr > 0, rr, 1.0)
        cs[j] = np.where(rr > 0, aa / rs, 1.0)
        sn[j] = np.where(rr > 0, ph * b / rs, 0.0)
        col[j], col[j + 1] = ph * rr, 0.0
        self.H[:j + 2, j] = col
        g[j + 1] = -np.conj(sn[j]) * g[j]
        g[j] = cs[j] * g[j]
        self.m = j + 1
        return bool(np.all(np.abs(g[j + 1]) <= tol * self.beta))

    def relative_residual(self) -> float:
        """The largest column's GMRES residual relative to its start, after the last
        :meth:`add` (columns that started at zero excluded)."""
        live = np.abs(self.beta) > 0
        if not np.any(live):
            return 0.0
        return float(np.max(np.abs(self.g[self.m][live]) / np.abs(self.beta[live])))

    def solve(self) -> np.ndarray:
        """(m, k): the Krylov coefficients, by back substitution per column."""
        m, k = self.m, self.g.shape[1]
        y = np.zeros((m, k), dtype=self.hdt)
        for c in range(k):
            Hc = self.H[:m, :m, c]
            if not (np.all(np.isfinite(Hc)) and np.all(np.isfinite(self.g[:m, c]))):
                y[:, c] = np.nan        # non-finite preconditioned products: the caller's
            elif np.all(np.diag(Hc) != 0):         # residual turns NaN and it stops
                y[:, c] = scipy.linalg.solve_triangular(Hc, self.g[:m, c])
        return y
