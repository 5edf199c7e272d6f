"""Mixed-precision solves (``precision='mixed'``): factor a low-precision copy of A, refine in
A's precision, fall back to the full-precision solve when refinement will not converge.

One driver for every factorization (:func:`mixed_solve`; LU with any pivoting, Cholesky, and
the same rules in RBT): A (float64 / complex128) is copied to float32 / complex64 and factored
there with the trailing updates in ``factor_dtype`` ('fp32'; on GPU ranks also 'tf32',
'fp16', 'bf16' on tensor cores with float32 accumulation, :meth:`distla.device.base.Backend.
gemm_lowp`). Refinement (:mod:`distla.linalg.refine`, ``mode='auto'``): classical IR with the
low-precision solves; GMRES-IR, preconditioned by the factors applied in A's precision, from
the first correction that does not halve the residual; stop at the first GMRES-IR correction
that does not halve it, or when the refinement has taken ``REFINE_BUDGET`` times the
low-precision factorization's time (``MIN_SOLVES`` solves' at least). With a condition
certificate (``check_rcond``) the certificate is checked before the switch to GMRES-IR (its
answer would be rejected without it). On GPU ranks of one node the low-precision factors are
copied whole onto every rank when they fit (:data:`REPLICATE`): each refinement solve then
runs on every rank alone, without the per-block messages of a distributed triangular sweep
(:mod:`distla.replicate`). Any failure
(factorization breakdown, overflow, stagnation, the time budget, no convergence in
``max_iter``) runs the full-precision solve instead (``fallback=True``) or raises
:class:`distla.ConvergenceError`; an unrefined answer is never returned. docs/mixed.md.
Collective over A's grid.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from ..errors import ConvergenceError, DistlaError, collective, raised_everywhere
from ..matrix import DistMatrix
from ..pblas import inverted_diagonal_solves
from ..replicate import distribute_like, one_node, replicate, replicate_bytes
from ..trace import trace
from ..validate import check_flags
from ..vector import column_scales
from .condition import refined_rcond, subnormal_floor
from .methods import FACTOR_DTYPES
from .refine import refine

__all__ = ["SolveInfo", "mixed_solve", "check_mixed", "low_dtype", "double_info", "PRECISIONS",
           "verified_rcond", "check_refinement_options", "REPLICATE"]

PRECISIONS = ("double", "mixed")
# The refinement may take REFINE_BUDGET times the low-precision factorization's seconds, or
# MIN_SOLVES times its first solve's, or MIN_BUDGET_S, whichever is most (small n: the
# factorization is latency-bound too, and timings of milliseconds are noise): past it the
# attempt fails (a converged answer is kept), so a failed attempt costs about
# (1 + REFINE_BUDGET) low-precision factorizations on top of the float64 solve.
# REFINE_BUDGET = None: no time limit.
REFINE_BUDGET = 1.5
MIN_SOLVES = 10
MIN_BUDGET_S = 0.25
# Whole copies of the low-precision factors on every rank for the refinement's solves, per
# device, on grids of one node only (one all-gather over NVLink or shared memory), when the copy
# and its receive buffer take at most REPLICATE_MEMORY of every rank's free device memory (the
# buffer returns to the pool right after: n = 65536 on two 80 GB GPUs needs 34 of ~52 GB free).
# CPU ranks: off (host memory is shared by the node's ranks; tests turn it on).
REPLICATE = {"cpu": False, "gpu": True}
REPLICATE_MEMORY = 0.8
_LOW = {np.dtype(np.float64): np.dtype(np.float32),
        np.dtype(np.complex128): np.dtype(np.complex64)}


@dataclass
class SolveInfo:
    """Diagnostics of a solve with ``return_info=True`` (the same on every rank).

    ``precision``: what produced X, 'mixed' or 'double'; ``factor_dtype``: the dtype of the
    factors that produced X ('float32', 'complex64', or A's dtype after a fallback);
    ``compute``: their trailing updates' precision ('fp32', 'tf32', 'fp16', 'bf16'; A's
    dtype name for a full-precision factorization); ``requested``: the asked-for low
    precision (None for ``precision='double'``). ``iterations``: refinement corrections (0
    for a full-precision solve; after a fallback, those of the failed attempt, as
    ``history``); ``gmres_iterations``: Krylov iterations of each GMRES-IR correction;
    ``history``: the scaled residual at each check (<= 1: converged).
    ``fallback``: a mixed solve ended in the full-precision one; ``reason``: why.
    ``times``: host seconds of 'factor' (low precision), 'refine', 'fallback' and 'total'
    (each the slowest rank's);
    ``anorm``: ``||A||_inf`` (both for mixed solves only: a full-precision solve leaves
    ``times`` empty and ``anorm`` NaN). ``replicated``: the refinement solved with whole
    copies of the factors on every rank (``times['replicate']``: making them). ``rcond``:
    the reciprocal condition estimate of a full-precision solve with ``check_rcond`` (None
    otherwise; a mixed solve's is its certificate's, or the fallback's). ``details``: what
    the family reports beyond these (``method='tlr'``: the TLR factor's ``info`` dict:
    ranks, memory, times).
    """

    method: str
    precision: str
    factor_dtype: str
    compute: str
    requested: str | None = None
    iterations: int = 0
    gmres_iterations: list = field(default_factory=list)
    history: list = field(default_factory=list)
    fallback: bool = False
    reason: str | None = None
    times: dict = field(default_factory=dict)
    anorm: float = float("nan")
    replicated: bool = False
    rcond: float | None = None
    details: dict = field(default_factory=dict)


def slowest_times(grid, times: dict) -> dict:
    """Collective over ``grid``: ``times`` with each entry the largest over the ranks (host
    seconds differ per rank; the info a solve returns is the same on every rank)."""
    if grid.size == 1:
        return dict(times)
    every = grid.comm.allgather(times)
    keys = dict.fromkeys(k for t in every for k in t)
    return {k: max(float(t.get(k, 0.0)) for t in every) for k in keys}


def low_dtype(dtype) -> np.dtype:
    """float32 for float64, complex64 for complex128 (TypeError otherwise)."""
    d = np.dtype(dtype)
    if d not in _LOW:
        raise TypeError(f"precision='mixed' needs a float64 or complex128 matrix, not {d}")
    return _LOW[d]


def check_mixed(A: DistMatrix, precision: str, factor_dtype, what: str,
                default: str | None = None) -> str | None:
    """The factor precision to use (None for 'double'; for None ``default``, else the
    device's: 'fp32' on CPU ranks, 'tf32' on GPU ranks): ValueError / TypeError for a bad
    ``precision`` or ``factor_dtype``, a non-double A, or a ``factor_dtype`` A's device does
    not factor in (CPU ranks: 'fp32' only). Call inside ``collective``."""
    if precision not in PRECISIONS:
        raise ValueError(f"{what}: precision must be 'double' or 'mixed', not {precision!r}")
    if precision == "double":
        if factor_dtype is not None:
            raise ValueError(f"{what}: factor_dtype={factor_dtype!r} needs precision='mixed'")
        return None
    try:
        low_dtype(A.dtype)
    except TypeError as e:
        raise TypeError(f"{what}: {e}") from None
    fd = factor_dtype if factor_dtype is not None else default or A.backend.DEFAULT_LOWP
    if fd not in FACTOR_DTYPES:
        raise ValueError(f"{what}: factor_dtype must be one of {', '.join(FACTOR_DTYPES)}, "
                         f"not {fd!r}")
    if fd not in A.backend.LOWP:
        raise ValueError(f"{what}: factor_dtype={fd!r} needs GPU ranks (tensor cores); "
                         f"{A.device} ranks factor in {', '.join(A.backend.LOWP)}")
    return fd


def check_refinement_options(max_iter, fallback, what: str, refines: bool = True):
    """``(max_iter, fallback)`` with their defaults (30, True) for None; ValueError/TypeError
    for a ``max_iter`` that is not a non-negative int or a ``fallback`` that is not a bool,
    and, when the solve does not refine (``refines`` False: one precision), for either given
    at all: it would have no effect (local; every rank raises alike)."""
    import numbers
    if not refines:
        given = [k for k, v in (("max_iter", max_iter), ("fallback", fallback)) if v is not None]
        if given:
            raise ValueError(f"{what}: {given[0]}= applies with precision='mixed' only (the "
                             f"refinement of a mixed-precision solve); a solve in one "
                             f"precision does not refine")
        return None, None
    max_iter = DEFAULT_MAX_ITER if max_iter is None else max_iter
    fallback = True if fallback is None else fallback
    if not isinstance(max_iter, numbers.Integral) or isinstance(max_iter, (bool, np.bool_)) \
            or max_iter < 0:
        raise ValueError(f"{what}: max_iter must be a non-negative int, not {max_iter!r}")
    check_flags(what, fallback=fallback)
    return int(max_iter), bool(fallback)


#: refinement steps of a mixed-precision solve unless ``max_iter`` says otherwise
DEFAULT_MAX_ITER = 30


def mixed_solve(A: DistMatrix, B: DistMatrix, *, method: str, factor_dtype: str, factor,
                apply, promote, full, apply_h=None, localize=None, max_iter: int = 30,
                fallback: bool = True, check_rcond: bool = False):
    """Collective: ``(X, SolveInfo)`` for ``A X = B`` (B with A's row blocking).

    ``factor(A_low, gemm)``: the factorization of the low-precision copy (gemm: the update
    mode for ``factor_dtype``); a :class:`distla.DistlaError` or ``LinAlgError`` it raises
    (breakdown, raised on every rank) means fallback. ``apply(F, C)``: ``A^-1 C`` from
    factors F in C's dtype; ``apply_h(F, C)``: ``A^-H C`` (None: A is Hermitian and ``apply``
    serves both). ``promote(F)``: the factors in A's precision (GMRES-IR's preconditioner).
    ``localize(F, rep)``: F with each of its DistMatrix parts M replaced by ``rep(M)`` (None:
    never replicated, :data:`REPLICATE`). ``full()``: the full-precision solve, ``(X,
    SolveInfo)``.
    ``check_rcond``: certify A's condition from the factors (:func:`verified_rcond`)."""
    info = SolveInfo(method=method, precision="mixed", factor_dtype=str(low_dtype(A.dtype)),
                     compute=factor_dtype, requested=factor_dtype)
    t0 = time.perf_counter()

    def done(X):            # (the info's times: each the slowest rank's, every rank alike)
        info.times["total"] = time.perf_counter() - t0
        info.times = slowest_times(A.grid, info.times)
        return X, info

    info.anorm = A.norm("inf")
    if A.n == 0:                        # nothing to factor or refine (as scipy: an empty X)
        return done(B.copy())
    F, why = _factor_low(A, factor, factor_dtype, info)
    if F is not None and B.n == 0:      # A factored (and so checked); nothing to refine
        return done(B.copy())
    if F is not None:
        solves = _LowSolves(A, F, apply, apply_h, promote, localize, info)
        ref = _refine(A, B, solves, max_iter, check_rcond, f"{factor_dtype} {method}", info)
        if ref.converged:
            info.rcond = None if ref.rcond is None else float(ref.rcond)
            return done(ref.x)
        why = ref.reason
        del ref, solves
    del F
    info.reason = why
    if not fallback:
        raise ConvergenceError(f"{method} (precision='mixed', n={A.n}): {why} (pass "
                               f"fallback=True to solve in {A.dtype} instead)")
    with trace("mixed.fallback"):
        t = time.perf_counter()
        X, full_info = full()
        info.times["fallback"] = time.perf_counter() - t
    info.rcond = full_info.rcond
    info.fallback, info.precision = True, "double"
    info.factor_dtype = info.compute = str(A.dtype)
    return done(X)


def _fits_everywhere(A: DistMatrix, nbytes: int, wanted: bool = True) -> bool:
    """Collective: whether every rank ``wanted`` it and ``nbytes`` take at most
    :data:`REPLICATE_MEMORY` of every rank's free device memory (unknown free memory counts as
    enough), the same on every rank (one reduction)."""
    free = A.backend.free_memory()
    ok = bool(wanted) and (free is None or nbytes <= REPLICATE_MEMORY * free)
    return A.grid.allreduce(int(ok), "min") == 1


def _replicates(A: DistMatrix) -> bool:
    """Collective: whether the refinement's solves use whole copies of the low-precision
    factors on every rank (:data:`REPLICATE` for the device on every rank, memory for the copy
    and its receive buffer on every rank, one node), the same on every rank."""
    if A.grid.size == 1:
        return False
    need = replicate_bytes(A) * low_dtype(A.dtype).itemsize // A.dtype.itemsize
    # the flag and the memory agreed first (a flag set on some ranks only must not split
    # the collectives), one_node's split only then
    return _fits_everywhere(A, need, REPLICATE.get(A.device, False)) and one_node(A.grid)


class _LowSolves:
    """The refinement's solves with the low-precision factors F of A (collective, C and R
    with A's row layout): ``solve(C)`` / ``solve_h(C)``: ``A^-1 C`` / ``A^-H C`` in the factors'
    dtype (``solve_h`` is ``solve`` when ``apply_h`` is None); ``precond(R)``: ``A^-1 R`` with
    the factors promoted to A's precision (GMRES-IR), promoted on first use. On whole copies
    of F on every rank when :func:`_replicates` says so (``info.replicated``); GMRES-IR then
    promotes the copies too where every rank has the memory for it, else F."""

    def __init__(self, A, F, apply, apply_h, promote, localize, info):
        self.A, self.F, self.apply, self.promote = A, F, apply, promote
        self.Fs, self._precond = None, None
        if localize is not None and _replicates(A):
            t = time.perf_counter()
            self.Fs = self._agreed(lambda: localize(F, replicate), "mixed.replicate",
                                   local=False)
            info.times["replicate"] = time.perf_counter() - t
        info.replicated = self.Fs is not None
        self.solve = self._through(apply, F, self.Fs)
        self.solve_h = self.solve if apply_h is None else self._through(apply_h, F, self.Fs)

    def _agreed(self, make, name, local: bool):
        """``make()`` on every rank, or None on every rank when it failed on any (out of
        memory, most likely): the copies are only a faster way to the same solves. ``local``:
        make is local work, agreed here; else it agrees on its failures itself (such as
        :func:`distla.replicate.replicate`: no enclosing agreement, whose ranks could part
        ways when one fails before the inner one)."""
        comm = self.A.grid.comm
        try:
            with trace(name):
                if not local:
                    return make()
                with collective(comm):
                    return make()
        except Exception as e:   # noqa: BLE001 - only failures agreed by every rank
            if not raised_everywhere(e, comm):
                raise
            return None

    def _through(self, f, F, Fs):
        """``C -> f(F, C)``, or with Fs: C copied whole to every rank, ``f(Fs, C)`` there,
        each rank keeping its own blocks of the answer."""
        if Fs is None:
            return lambda C: f(F, C)
        comm = self.A.grid.comm

        def solve(C):
            Cs = replicate(C)                # (agrees on its own failures)
            with collective(comm):           # one rank's failure raised on every rank
                return distribute_like(f(Fs, Cs), C)
        return solve

    def precond(self, R):
        if self._precond is None:
            A, Fs, G = self.A, self.Fs, None
            if Fs is not None and _fits_everywhere(A, A.m * A.n * A.dtype.itemsize):
                G = self._agreed(lambda: self.promote(Fs), "mixed.promote", local=True)
            if G is not None:
                self._precond = self._through(self.apply, None, G)
            else:
                with trace("mixed.promote"):
                    G = self.promote(self.F)
                self._precond = self._through(self.apply, G, None)
        return self._precond(R)


def _factor_low(A, factor, factor_dtype, info):
    """(factors of A's low-precision copy, None) or (None, the reason it failed)."""
    label = f"{factor_dtype} {info.method}"
    low = low_dtype(A.dtype)
    big = float(np.finfo(low).max) / 4      # (max|a_ij| <= ||A||_inf: one pass usually)
    if info.anorm >= big and A.norm("max") >= big:
        return None, f"{label}: max|A| overflows {low}"
    small = subnormal_floor(low)                      # (max|a_ij| >= ||A||_inf / n)
    if info.anorm < small * A.n and not A.norm("max") >= small:
        return None, (f"{label}: max|A| is below {low}'s normal range over its precision "
                      f"({small:.2g}): the copy's entries would lose their digits")
    t = time.perf_counter()
    try:
        with trace("mixed.factor"):
            F = factor(A.astype(low), A.backend.lowp_mode(factor_dtype))
    except (DistlaError, np.linalg.LinAlgError) as e:   # zero pivot, not SPD, overflow
        if not raised_everywhere(e, A.grid.comm):   # one rank's: the others are still in
            raise                                   # the factorization's collectives
        info.times["factor"] = time.perf_counter() - t  # (slowest_times agrees it later)
        return None, f"{label}: the factorization failed ({e})"
    info.times["factor"] = A.grid.allreduce(time.perf_counter() - t, "max")
    return F, None


def _refine(A, B, solves, max_iter, check_rcond, label, info):
    """Refinement in A's precision with the low-precision factors (module docstring):
    ``solves``, a :class:`_LowSolves`."""
    wdt, low = A.dtype, low_dtype(A.dtype)

    def solve(R):                       # classical IR: solves in the factors' precision,
        s = column_scales(R)            # each column scaled by a power of two into its range
        T = R.copy()
        T.local /= s[None, :]
        X = solves.solve(T.astype(low)).astype(wdt)
        with np.errstate(over="ignore", invalid="ignore"):   # an overflowing solution is
            X.local *= s[None, :]     # the refinement's to judge (non-finite: it fails)
        return X

    t = time.perf_counter()
    # the corrections' solves may use inverted diagonal blocks: refinement removes their error
    with trace("mixed.refine"), inverted_diagonal_solves():
        x = solve(B)
        t_solve = A.grid.allreduce(time.perf_counter() - t, "max")
        budget = None if REFINE_BUDGET is None else \
            max(REFINE_BUDGET * info.times["factor"], MIN_SOLVES * t_solve, MIN_BUDGET_S)
        ref = refine(A, B, solve, x=x, precond=solves.precond, anorm=info.anorm,
                     max_iter=max_iter, mode="auto", label=label, rcond=(
                         lambda: verified_rcond(A, info.anorm, solves.solve, solves.solve_h))
                     if check_rcond else None, budget=budget)
    info.times["refine"] = time.perf_counter() - t
    info.iterations, info.history = ref.iterations, ref.history
    info.gmres_iterations = list(ref.gmres_iterations)
    return ref


def verified_rcond(A: DistMatrix, anorm_inf: float, solve, solve_h) -> float:
    """Collective: A's reciprocal condition number in its own precision, certified from the
    low-precision factors' solves ``solve(C)`` / ``solve_h(C)`` (``A^-1 C`` / ``A^-H C`` in
    the factors' dtype; the same function for Hermitian A, whose ``||A||_1`` is the
    ``anorm_inf`` given) by :func:`distla.linalg.condition.refined_rcond`: the estimator's
    solves verified by refinement against A, so that a numerically singular A is not accepted
    from factors that cannot see it (the full-precision fallback then warns)."""
    low = low_dtype(A.dtype)

    def through(f):
        return lambda X: f(X.astype(low)).astype(A.dtype)
    anorm1 = anorm_inf if solve_h is solve else A.norm(1)
    return refined_rcond(A, anorm1, through(solve), through(solve_h))


def double_info(A: DistMatrix, method: str, rcond: float | None = None) -> SolveInfo:
    """The info of a full-precision solve (``precision='double'``; ``rcond``: its estimate)."""
    return SolveInfo(method=method, precision="double", factor_dtype=str(A.dtype),
                     compute=str(A.dtype), rcond=None if rcond is None else float(rcond))
