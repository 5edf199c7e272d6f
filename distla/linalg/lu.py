"""LU factorization of general matrices: partial pivoting (pdgetrf), CALU with tournament
pivoting, and no pivoting (GENP), with solves.

One right-looking blocked loop over block columns ``k`` (width ``nb``, ``mb == nb``) for all
three pivoting modes; only the panel differs:

* ``"partial"`` (GEPP, ScaLAPACK pdgetrf): the panel's active rows are gathered along the
  process column (one allgather), and every rank of that column factors the same tall panel
  with LAPACK/cuSOLVER getrf (identical pivots everywhere), keeping its own rows. One
  collective per panel instead of one per column.
* ``"tournament"`` (CALU): TSLU (:mod:`distla.linalg._tslu`) picks the ``nb`` pivot rows by a
  binary or flat tree of GEPPs on candidate rows; they are swapped to the top and the panel is
  factored without pivoting (``L21 = A21 U11^-1``). Fewer and smaller messages than GEPP.
  Stability trade-off: the worst-case growth-factor bound is larger than GEPP's ``2^(n-1)``
  (Grigori, Demmel and Xiang: ``2^(n(H+1)-1)`` for a reduction tree of height H; the flat
  tree has H = 1), but CALU is as stable as GEPP in practice; check
  :meth:`LUFactor.growth_factor`. With one process row the tree has a single leaf and the
  panel is exactly GEPP's.
* ``"none"`` (GENP): the diagonal block is factored without pivoting and broadcast down the
  process column; no swaps. Only safe for matrices that need no pivoting (diagonally dominant,
  or randomized by RBT, :mod:`distla.linalg.rbt`).

Then, every step: the factored panel and the pivots are broadcast along process rows; the
panel's row interchanges are applied to the trailing columns (pdlaswp: row pieces exchanged
pairwise between process rows, one grouped exchange per step; LAPACK laswp in place when one
process row holds every row); the process row owning block
row ``k`` computes ``U12 = L11^-1 A12`` and broadcasts it down process columns; the trailing
matrix gets one GEMM ``A22 -= L21 U12``. With ``lookahead=1`` the next block column is updated
first and its panel factored (and its broadcast started) before the rest of the update.
The interchanges of the already factored L columns are deferred to the end: one composed
permutation per block column (each row moves once) instead of one pass per later step.

Pivot vector (``LUFactor.piv``): LAPACK's ipiv, 0-based and global: row ``i`` was interchanged
with row ``piv[i]`` (``piv[i] >= i``), applied in order ``i = 0, 1, ..., min(m, n) - 1``.
``LUFactor.perm`` is the same as a permutation: ``P A = L U`` with ``(P A)[i] = A[perm[i]]``.
"""
from __future__ import annotations

import contextlib
import math
import numbers
import time

import numpy as np

from .. import layout
from .. import progress
from ..errors import SingularMatrixError, agree, collective
from ..matrix import DistMatrix, check_compatible
from ..pblas import norm, triangular_solve
from ..validate import check_finite as check_finite_
from ..validate import check_finite_result, signature
from .condition import rcond_estimate, warn_if_ill_conditioned
from ._pivoting import (genp, ipiv_to_perm, permute_rows, suffix_moves, swap_rows,
                        put_rows, take_rows, winners_to_ipiv)
from ._tslu import tournament

__all__ = ["LUFactor", "LUProfile", "lu_factor", "lu_solve", "solve_lu", "PIVOTING"]

PIVOTING = ("partial", "tournament", "none")
_ALIASES = {"gepp": "partial", "calu": "tournament", "tslu": "tournament", "genp": "none",
            None: "none"}


# --------------------------------------------------------------------------------------------
class LUProfile:
    """Optional timer for :func:`lu_factor`: seconds per phase (``times``) and call counts.

    Phases: ``panel`` (gather + pivot search + panel factorization), ``swap`` (row
    interchanges), ``bcast`` (waiting for the panel and U12 broadcasts), ``trsm`` (U12),
    ``update`` (trailing GEMMs), ``check`` (zero-pivot agreement); inside ``panel`` (counted
    there too): ``p_gather``, ``p_getrf`` (GEPP), ``p_leaf`` and ``p_tree`` (tournament),
    ``p_swap``, ``p_trsm`` (L21). On GPU ranks each phase
    synchronizes the device at its ends, which removes some overlap: profile separately from
    timing. Not collective.
    """

    def __init__(self, backend=None):
        self.backend = backend
        self.times: dict[str, float] = {}
        self.counts: dict[str, int] = {}

    def _sync(self):
        if self.backend is not None and self.backend.is_gpu:  # all streams (side included)
            self.backend.xp.cuda.runtime.deviceSynchronize()

    @contextlib.contextmanager
    def section(self, name: str):
        self._sync()
        t = time.perf_counter()
        try:
            yield
        finally:
            self._sync()
            self.times[name] = self.times.get(name, 0.0) + time.perf_counter() - t
            self.counts[name] = self.counts.get(name, 0) + 1

    def merge(self, other: "LUProfile") -> None:
        for k, v in other.times.items():
            self.times[k] = self.times.get(k, 0.0) + v
            self.counts[k] = self.counts.get(k, 0) + other.counts.get(k, 0)


class _NoProfile:
    @contextlib.contextmanager
    def section(self, name):
        yield


_NOPROF = _NoProfile()
_POLL_CHUNK = 512  # CPU update: columns per GEMM between MPI progress polls


# --------------------------------------------------------------------------------------------
class LUFactor:
    """The result of :func:`lu_factor`.

    ``lu``: DistMatrix in A's layout, unit L strictly below the diagonal, U on and above.
    ``piv``: int64 NumPy array of length ``min(m, n)``, the same on every rank (LAPACK ipiv,
    0-based: row i was interchanged with row piv[i], in order i = 0, 1, ...).
    ``perm``: int64 array of length m with ``(P A)[i] = A[perm[i]]`` and ``P A = L U``.
    ``pivoting``: 'partial' | 'tournament' | 'none'; ``tree``: the tournament tree.
    """

    def __init__(self, lu: DistMatrix, piv: np.ndarray, pivoting: str, max_abs_a: float,
                 tree: str | None = None):
        self.lu = lu
        self.piv = piv
        self.pivoting = pivoting
        self.tree = tree
        self.max_abs_a = float(max_abs_a)
        self.anorm = None          # ||A||_1, set by lu_factor
        self._perm = None
        self._rcond = None

    def rcond(self) -> float:
        """Collective: reciprocal 1-norm condition estimate of A (pdgecon; cached), the same
        float on every rank."""
        if self._rcond is None:
            if self.anorm is None:
                raise ValueError("this LUFactor has no ||A||_1; use distla.linalg.rcond(A, F)")
            self._rcond = rcond_estimate(
                self.anorm, self.lu, lambda X: lu_solve(self, X, overwrite_b=True,
                                                        check_finite=False),
                lambda X: lu_solve(self, X, trans="C", overwrite_b=True, check_finite=False))
        return self._rcond

    @property
    def shape(self):
        return self.lu.shape

    @property
    def perm(self) -> np.ndarray:
        if self._perm is None:
            self._perm = ipiv_to_perm(self.piv, self.lu.m)
        return self._perm

    def growth_factor(self) -> float:
        """Collective: ``max |U| / max |A|`` (the element growth of the elimination; GEPP's
        bound is ``2^(n-1)``, tournament pivoting's is larger, GENP's unbounded). Returns inf
        for a zero A."""
        U = self.lu
        xp = U.xp
        I = xp.asarray(U.row_indices()).reshape(-1, 1)
        J = xp.asarray(U.col_indices()).reshape(1, -1)
        loc = 0.0
        if U.local.size:
            loc = float(xp.max(xp.where(I <= J, xp.abs(U.local), 0)))
        from mpi4py import MPI
        mu = U.grid.comm.allreduce(loc, op=MPI.MAX)
        return mu / self.max_abs_a if self.max_abs_a > 0 else math.inf

    def solve(self, B: DistMatrix, trans: bool = False, overwrite_b: bool = False):
        """Collective: same as :func:`lu_solve` (``self``, B)."""
        return lu_solve(self, B, trans=trans, overwrite_b=overwrite_b)

    def __repr__(self) -> str:
        return f"LUFactor(pivoting={self.pivoting!r}, lu={self.lu!r})"


# --------------------------------------------------------------------------------------------
def _check_matrix(A, name="A"):
    if not isinstance(A, DistMatrix):
        raise TypeError(f"{name} must be a DistMatrix, not {type(A).__name__}")
    if A.mb != A.nb:
        raise ValueError(f"{name} needs square blocks (mb == nb, as ScaLAPACK's getrf), "
                         f"got {A.block}; redistribute(block=({A.nb}, {A.nb})) first")
    if A.dtype.kind not in "fc":
        raise TypeError(f"{name} must be float32, float64, complex64 or complex128")
    if A.device == "gpu" and A.dtype.kind == "c":
        raise TypeError("complex LU is only available on CPU ranks")


def _norm_pivoting(pivoting):
    p = _ALIASES.get(pivoting, pivoting) if not isinstance(pivoting, str) else \
        _ALIASES.get(pivoting.lower(), pivoting.lower())
    if p not in PIVOTING:
        raise ValueError(f"pivoting must be one of {PIVOTING}, not {pivoting!r}")
    return p


def _max_abs(A) -> float:
    """Collective: max |a_ij| over the whole matrix."""
    from mpi4py import MPI
    loc = float(A.xp.max(A.xp.abs(A.local))) if A.local.size else 0.0
    return A.grid.comm.allreduce(loc, op=MPI.MAX)


def lu_factor(A: DistMatrix, pivoting: str = "partial", overwrite_a: bool = False,
              tree: str = "binary", lookahead: int = 1, profile: LUProfile | None = None,
              gemm: str = "native", check_finite: bool = True) -> LUFactor:
    """LU factorization ``P A = L U`` of the ``m x n`` DistMatrix A (square blocks). Collective
    over A's grid.

    ``pivoting``: 'partial' (GEPP, pdgetrf), 'tournament' (CALU; ``tree`` 'binary' or 'flat'
    shapes the reduction over each process column) or 'none' (GENP). ``overwrite_a``: factor in
    A's storage. ``lookahead``: 0 or 1 (values > 1 act as 1: the loop is synchronous, one panel
    ahead is what hides the panel). ``profile``: an :class:`LUProfile` to accumulate phase
    times into. ``gemm``: 'native' (trailing updates in A's precision) or 'tf32x3' (float32
    only: on GPU ranks each update is one TF32 tensor-core GEMM of split operands, three
    products of 10-bit-mantissa halves, about float32's accuracy (~2^-21 relative) at several
    times float32's rate; CPU ranks compute it in float32 as usual).

    ``check_finite``: scan A for NaN/Inf first (ValueError naming one such entry).

    Raises (on every rank) ``ValueError``/``TypeError`` for bad input before any work, and
    :class:`distla.SingularMatrixError` (``.index`` = 0-based global column of the first
    exactly zero pivot) after the loop: the factorization always runs to the end with the same
    collectives on every rank. A factorization that overflows (non-finite factors from finite
    input) raises :class:`distla.DistlaError`. The factor object's :meth:`LUFactor.rcond`
    estimates the reciprocal condition number.
    """
    with collective(A.grid.comm if isinstance(A, DistMatrix) else None,
                    signature("lu_factor", A, pivoting=pivoting, tree=tree,
                              lookahead=lookahead, gemm=gemm)):
        _check_matrix(A)
        pivoting = _norm_pivoting(pivoting)
        if tree not in ("binary", "flat"):
            raise ValueError(f"tree must be 'binary' or 'flat', not {tree!r}")
        if not isinstance(lookahead, numbers.Integral) or lookahead < 0:
            raise ValueError(f"lookahead must be a non-negative int, not {lookahead!r}")
        if gemm not in ("native", "tf32x3"):
            raise ValueError(f"gemm must be 'native' or 'tf32x3', not {gemm!r}")
        if gemm == "tf32x3" and A.dtype != np.float32:
            raise TypeError(f"gemm='tf32x3' needs a float32 matrix, not {A.dtype}")
    if check_finite:
        check_finite_(("A", A), what="lu_factor")
    anorm = norm(A, 1)
    F = A if overwrite_a else A.copy()
    max_a = _max_abs(F)
    drv = _LU(F, pivoting, tree, int(lookahead), profile,
              tf32x3=gemm == "tf32x3" and A.backend.is_gpu)
    piv = drv.run()
    with drv.prof.section("check"):
        drv.agree_singular()
        if check_finite:   # finite input: non-finite factors mean overflow
            check_finite_result(F, "lu_factor")
    out = LUFactor(F, piv, pivoting, max_a, tree if pivoting == "tournament" else None)
    out.anorm = anorm
    return out


class _Panel:
    """Panel k as every rank sees it after the row broadcast: ``lbuf`` = this process row's
    active rows (global >= j0) of the factored panel (mrem x kb, contiguous), ``piv`` global
    pivots (host) or None for GENP."""

    def __init__(self, k, j0, kb, lbuf, piv, reqs):
        self.k, self.j0, self.kb, self.lbuf, self.piv, self._reqs = k, j0, kb, lbuf, piv, reqs

    def wait(self):
        for r in self._reqs:
            r.wait()
        self._reqs = []
        if self.piv is not None and not isinstance(self.piv, np.ndarray):
            self.piv = self.piv.get()  # GPU pivots: one small device->host read

    def poll(self):
        """Let MPI progress the broadcasts (host requests only; cheap, non-blocking)."""
        for r in self._reqs:
            r.poll()


class _LU:
    """The blocked right-looking loop (one object per factorization, every rank)."""

    def __init__(self, A, pivoting, tree, lookahead, profile, tf32x3=False):
        self.A, self.pivoting, self.tree, self.lookahead = A, pivoting, tree, lookahead
        self.tf32x3 = tf32x3
        self.prof = profile if profile is not None else _NOPROF
        g = self.g = A.grid
        self.be, self.xp = A.backend, A.xp
        self.comms = g.comms(A.device)
        self.m, self.n = A.shape
        self.nb = A.nb
        self.kmax = min(self.m, self.n)
        self.nsteps = -(-self.kmax // self.nb) if self.kmax else 0
        self.piv = np.arange(self.kmax, dtype=np.int64)
        self.rows = A.row_indices()  # my global rows, local order (host)
        self._rows_dev = {}
        self.zero_checks = []  # (j0, 'info' | 'diag', value) for panels this rank factored
        self.side = _SideStream(self.be)

    # ---- helpers --------------------------------------------------------------------------
    def width(self, k):
        return min(self.nb, self.kmax - k * self.nb)

    def rows_of(self, pr):
        """Global rows of process row ``pr`` in local order, on the device (cached)."""
        r = self._rows_dev.get(pr)
        if r is None:
            A = self.A
            r = self._rows_dev[pr] = self.xp.asarray(
                layout.local_indices(self.m, A.mb, pr, A.rsrc, self.g.nprow))
        return r

    def swap(self, local, piv, j0, segs):
        """Apply panel swaps ``piv`` (global, from row j0) to columns ``segs`` of ``local``;
        collective over my process column."""
        A, g = self.A, self.g
        swap_rows(local, piv, j0, mb=A.mb, rsrc=A.rsrc, nprow=g.nprow, myrow=g.myrow,
                  comm=self.comms.col, segs=segs, xp=self.xp)

    # ---- panel factorization (ranks of process column pcol(k) only) ------------------------
    def factor_panel(self, k):
        """Factor panel k in place on the ranks of its process column; returns the global pivots
        of the panel (host), None for GENP. Collective over that process column."""
        A, g, be, xp = self.A, self.g, self.be, self.xp
        j0, kb = k * self.nb, self.width(k)
        lc0, lr0 = A.local_col_start(j0), A.local_row_start(j0)
        pk = A.row_owner(j0)
        view = A.local[lr0:, lc0:lc0 + kb]
        # One process row: TSLU's tree has a single leaf, whose GEPP IS the panel factorization
        # (same pivots), so tournament pivoting takes the partial-pivoting path.
        if self.pivoting == "partial" or (self.pivoting == "tournament" and g.nprow == 1):
            prof = self.prof
            if g.nprow == 1:  # all active rows are mine, in order: factor in place
                with prof.section("p_getrf"):
                    piv, info = be.getrf(view)
            else:
                with prof.section("p_gather"):
                    T = self._gather_panel(j0, kb, view)
                with prof.section("p_getrf"):
                    piv, info = be.getrf(T)
                    take_rows(T, self.rows_of(g.myrow)[lr0:] - j0, view, xp)
            self.zero_checks.append((j0, "info", info))
            return j0 + np.asarray(be.to_host(piv), dtype=np.int64)
        if self.pivoting == "tournament":
            winners, f11, info = tournament(
                view, self.rows[lr0:], kb, comm=self.comms.col, root=pk, tree=self.tree,
                backend=be, profile=self.prof)
            if g.myrow == pk:
                self.zero_checks.append((j0, "info", info))
            piv = winners_to_ipiv(winners, j0)
            with self.prof.section("p_swap"):
                self.swap(A.local, piv, j0, [slice(lc0, lc0 + kb)])
        else:  # GENP: factor the diagonal block, broadcast it down the process column
            if g.myrow == pk:
                f11 = xp.array(A.local[lr0:lr0 + kb, lc0:lc0 + kb], order="F", copy=True)
                genp(f11, be)
                self.zero_checks.append((j0, "diag", xp.diagonal(f11).copy()))
            else:
                f11 = be.empty((kb, kb), A.dtype)
            self.comms.col.bcast(f11, pk)
            piv = None
        if g.myrow == pk:
            A.local[lr0:lr0 + kb, lc0:lc0 + kb] = f11
        lrb = A.local_row_start(j0 + kb)
        with self.prof.section("p_trsm"):
            be.trsm("R", "U", "N", "N", 1.0, f11, A.local[lrb:, lc0:lc0 + kb])
        return piv

    def _gather_panel(self, j0, kb, view):
        """Allgather the active panel rows of the process column into one tall (m - j0) x kb
        array in global row order (every rank of the column gets the same)."""
        A, g, be, xp = self.A, self.g, self.be, self.xp
        P = g.nprow
        starts = [A.local_row_start(j0, pr) for pr in range(P)]
        mrem = [layout.numroc(self.m, A.mb, pr, A.rsrc, P) - starts[pr] for pr in range(P)]
        mx = max(mrem)
        send = be.zeros((mx, kb), A.dtype)
        send[:view.shape[0]] = view
        recv = be.empty((P * mx * kb,), A.dtype)
        self.comms.col.allgather(send, recv)
        R = recv.reshape(P, kb, mx)  # [process row, column, row]
        T = be.empty((self.m - j0, kb), A.dtype)
        for pr in range(P):
            if mrem[pr]:
                put_rows(T, self.rows_of(pr)[starts[pr]:] - j0, R[pr, :, :mrem[pr]].T, xp)
        return T

    def post_panel(self, k, piv):
        """Start the broadcast of panel k (and its pivots) along process rows. Every rank."""
        A, g, be = self.A, self.g, self.be
        j0, kb = k * self.nb, self.width(k)
        pc = A.col_owner(j0)
        lr0 = A.local_row_start(j0)
        lbuf = be.empty((A.local.shape[0] - lr0, kb), A.dtype)
        if g.mycol == pc:
            lc0 = A.local_col_start(j0)
            lbuf[...] = A.local[lr0:, lc0:lc0 + kb]
        reqs = [self.comms.row.ibcast(lbuf, pc)]
        pbuf = None
        if self.pivoting != "none" and be.is_gpu:
            # GPU ranks: the pivots travel with the panel through NCCL. A host MPI Ibcast
            # here deadlocks: its root may block on a stream sync (waiting for NCCL work of
            # a receiver) before MPI progresses the Ibcast the receiver is waiting for.
            pbuf = self.xp.asarray(piv) if g.mycol == pc else \
                self.xp.empty(kb, dtype=np.int64)
            reqs.append(self.comms.row.ibcast(pbuf, pc))
        elif self.pivoting != "none":
            pbuf = np.empty(kb, dtype=np.int64)
            if g.mycol == pc:
                pbuf[:] = piv
            if g.npcol > 1:
                from mpi4py import MPI
                r = g.row_comm.Ibcast([pbuf, MPI.INT64_T], root=pc)
                reqs.append(r)
        return _Panel(k, j0, kb, lbuf, pbuf, [_Wait(r) for r in reqs])

    # ---- the loop -------------------------------------------------------------------------
    def next_panel(self, k):
        with self.prof.section("panel"):
            piv = self.factor_panel(k) if self.g.mycol == self.A.col_owner(k * self.nb) \
                else None
        return self.post_panel(k, piv)

    def run(self) -> np.ndarray:
        if self.nsteps == 0:
            return self.piv
        with self.side.critical():
            panel = self.next_panel(0)
            for k in range(self.nsteps):
                panel = self.step(panel)
                progress.update_columns(self.kmax, (k + 1) * self.nb, 2.0 / 3.0)
            self.side.join()
            if self.pivoting != "none":
                with self.prof.section("swap"):
                    self.swap_left()
        return self.piv

    def swap_left(self):
        """Apply to each factored block column of L the interchanges of all later steps, at
        once (deferred from the loop: L columns are not read again, and one composed
        permutation per block column touches each row once, with cache-friendly locality).
        Collective over each process column (its ranks own the same block columns)."""
        A, g = self.A, self.g
        mine = [k for k in range(self.nsteps - 1) if A.col_owner(k * self.nb) == g.mycol]
        if not mine:
            return

        def cols(k):
            return [slice(A.local_col_start(k * self.nb),
                          A.local_col_start(min(self.n, (k + 1) * self.nb)))]
        if g.nprow == 1 and not self.be.is_gpu:  # laswp with the raw suffix of pivots
            for k in mine:
                start = (k + 1) * self.nb
                self.swap(A.local, self.piv[start:], start, cols(k))
            return
        mine = set(mine)
        for k, dest, src in suffix_moves(self.piv, self.nb, self.m):
            if k in mine:
                permute_rows(A.local, dest, src, mb=A.mb, rsrc=A.rsrc, nprow=g.nprow,
                             myrow=g.myrow, comm=self.comms.col, segs=cols(k), xp=self.xp)
    def step(self, pan: _Panel):
        """Step k: swaps, U12, trailing update (with lookahead: next panel in between).
        Returns the next panel (or None)."""
        A, g, be, prof = self.A, self.g, self.be, self.prof
        k, j0, kb = pan.k, pan.j0, pan.kb
        loc = A.local
        nloc = loc.shape[1]
        with prof.section("bcast"):
            pan.wait()
        self.side.join()  # GPU: the previous step's trailing update (side stream) is done
        pr = A.row_owner(j0)
        lr0 = A.local_row_start(j0)
        lr1 = A.local_row_start(j0 + kb)
        lc1 = A.local_col_start(j0 + kb)
        if pan.piv is not None:  # interchanges on the trailing columns (left ones: at the end)
            self.piv[j0:j0 + kb] = pan.piv
            with prof.section("swap"):
                self.swap(loc, pan.piv, j0, [slice(lc1, nloc)])
        u = be.empty((kb, nloc - lc1), A.dtype)
        with prof.section("trsm"):
            if g.myrow == pr and u.size:
                a12 = loc[lr0:lr0 + kb, lc1:]
                be.trsm("L", "L", "N", "U", 1.0, pan.lbuf[:kb], a12)
                u[...] = a12
        with prof.section("bcast"):
            self.comms.col.bcast(u, pr)
        l21 = pan.lbuf[lr1 - lr0:]
        a22 = loc[lr1:, lc1:]
        tf = self.tf32x3 and l21.size > 0 and u.size > 0
        if tf:  # a22 -= l21 u as one TF32 GEMM of split operands (inner dimension 3 kb)
            with prof.section("update"):
                l21, u = be.split_tf32x3(l21, u)
        nxt = None
        if k + 1 < self.nsteps:
            if self.lookahead:
                # local width of block column k+1 (0 unless my process column owns it)
                w = A.local_col_start(min(self.n, j0 + kb + self.nb)) - lc1
                with prof.section("update"):
                    be.gemm("N", "N", -1.0, l21, u[:, :w], 1.0, a22[:, :w], tf32=tf)
                if self.side.gpu:  # rest of the update on the side stream, panel on main
                    with prof.section("update"), self.side.run(keep=(pan.lbuf, l21, u)):
                        be.gemm("N", "N", -1.0, l21, u[:, w:], 1.0, a22[:, w:], tf32=tf)
                    nxt = self.next_panel(k + 1)
                else:  # CPU: panel first, then the update (polling MPI for its broadcast)
                    nxt = self.next_panel(k + 1)
                    with prof.section("update"):
                        self.update(l21, u[:, w:], a22[:, w:], nxt)
            else:
                with prof.section("update"):
                    be.gemm("N", "N", -1.0, l21, u, 1.0, a22, tf32=tf)
                nxt = self.next_panel(k + 1)
        else:
            with prof.section("update"):
                be.gemm("N", "N", -1.0, l21, u, 1.0, a22, tf32=tf)
        return nxt

    def update(self, l21, u, a22, pending=None):
        """``a22 -= l21 u`` (one GEMM). On CPU ranks with a broadcast in flight, the GEMM is cut
        into a few column chunks and MPI is polled between them, so the next panel's
        broadcast progresses while the update runs (MPI has no progress thread)."""
        be = self.be
        nc = a22.shape[1]
        if pending is None or be.is_gpu or self.g.npcol == 1 or nc < 2 * _POLL_CHUNK:
            be.gemm("N", "N", -1.0, l21, u, 1.0, a22)
            return
        for c in range(0, nc, _POLL_CHUNK):
            be.gemm("N", "N", -1.0, l21, u[:, c:c + _POLL_CHUNK], 1.0,
                    a22[:, c:c + _POLL_CHUNK])
            pending.poll()

    def agree_singular(self):
        """Collective: raise SingularMatrixError(first zero pivot column) on every rank."""
        from mpi4py import MPI
        first = self.kmax
        for j0, kind, val in self.zero_checks:
            if kind == "info":
                info = self.be.info_value(val) if not isinstance(val, int) else val
                if info > 0:
                    first = min(first, j0 + info - 1)
            else:
                z = np.flatnonzero(np.asarray(self.be.to_host(val)) == 0)
                if z.size:
                    first = min(first, j0 + int(z[0]))
        first = self.g.comm.allreduce(first, op=MPI.MIN)
        err = None
        if first < self.kmax:
            err = SingularMatrixError(first) if self.pivoting != "none" else SingularMatrixError(
                first, f"zero pivot at column {first} (0-based) of the LU factorization "
                f"without pivoting: the matrix may be nonsingular but needs pivoting (use "
                f"pivoting='partial' or 'tournament', or method 'gepp', 'calu' or 'rbt')")
        agree(self.g.comm, err)


class _SideStream:
    """GPU only: a second CUDA stream for the trailing GEMM, so the next panel (on the main
    stream) overlaps it. ``critical()`` runs the loop on a high-priority main stream (ordered
    after the caller's stream, which waits for it at the end): the panel's many small kernels
    then get SMs as the GEMM's blocks retire instead of queuing behind them. ``run(keep)``
    enqueues the block on the side stream after the work already queued on the main stream,
    keeping ``keep`` (the buffers the GEMM reads) alive; ``join()`` makes the main stream wait
    for it and releases them. On CPU all are no-ops. GPU-specific (the memory pool may hand
    freed buffers to the main stream only after the join, which orders them after the side
    stream's use)."""

    def __init__(self, backend):
        self.gpu = backend.is_gpu
        self._ev, self._keep = None, None
        if self.gpu:  # pragma: no cover - needs a GPU
            from ..device import gpu_stream
            self._cp = backend.xp
            self._stream = gpu_stream("default")
            self._main = gpu_stream("high")

    @contextlib.contextmanager
    def critical(self):
        if not self.gpu:
            yield
            return
        cp = self._cp  # pragma: no cover - needs a GPU
        caller = cp.cuda.get_current_stream()
        self._main.wait_event(caller.record())
        try:
            with self._main:
                yield
        finally:
            caller.wait_event(self._main.record())

    @contextlib.contextmanager
    def run(self, keep=()):
        if not self.gpu:
            yield
            return
        cp = self._cp  # pragma: no cover - needs a GPU
        main = cp.cuda.get_current_stream()
        self._stream.wait_event(main.record())
        with self._stream:
            yield
        self._ev, self._keep = self._stream.record(), keep

    def join(self):
        if self._ev is not None:  # pragma: no cover - needs a GPU
            self._cp.cuda.get_current_stream().wait_event(self._ev)
            self._ev, self._keep = None, None


class _Wait:
    """Uniform ``wait()`` over distla Requests and mpi4py Requests."""

    def __init__(self, r):
        self.r = r

    def wait(self):
        if self.r is not None:
            r, self.r = self.r, None
            (getattr(r, "Wait", None) or r.wait)()

    def poll(self):
        if self.r is not None and hasattr(self.r, "Test"):
            if self.r.Test():
                self.r = None


# --------------------------------------------------------------------------------------------
def _check_rhs(F, B):
    if not isinstance(F, LUFactor):
        raise TypeError(f"expected an LUFactor from lu_factor, not {type(F).__name__}")
    A = F.lu
    check_compatible(A, B, "lu_solve")
    if A.m != A.n:
        raise ValueError(f"lu_solve needs a square factorization, got {A.shape}")
    if B.m != A.n:
        raise ValueError(f"B has {B.m} rows, the matrix is {A.n} x {A.n}")


def _permute(B, dest, src):
    """Collective: B[dest[t]] = old B[src[t]] (rows; global indices, any order)."""
    o = np.argsort(dest, kind="stable")
    g = B.grid
    permute_rows(B.local, np.asarray(dest)[o], np.asarray(src)[o], mb=B.mb, rsrc=B.rsrc,
                 nprow=g.nprow, myrow=g.myrow, comm=g.comms(B.device).col,
                 segs=[slice(0, B.local.shape[1])], xp=B.xp)


def _norm_trans(trans) -> str:
    """'N', 'T' or 'C' from the accepted spellings (SciPy's 0 / 1 / 2, booleans, letters)."""
    t = {False: "N", True: "T", 0: "N", 1: "T", 2: "C"}.get(trans) \
        if isinstance(trans, (bool, int, np.integer)) else \
        (trans.upper() if isinstance(trans, str) and trans.upper() in ("N", "T", "C") else None)
    if t is None:
        raise ValueError(f"trans must be False/True, 0/1/2 or 'N'/'T'/'C', not {trans!r}")
    return t


def lu_solve(F: LUFactor, B: DistMatrix, trans=False, overwrite_b: bool = False,
             check_finite: bool = True) -> DistMatrix:
    """Solve ``A X = B``, ``A^T X = B`` or ``A^H X = B`` from ``F = lu_factor(A)``.
    ``trans``: ``False``/``0``/``'N'``, ``True``/``1``/``'T'`` (transpose) or ``2``/``'C'``
    (conjugate transpose; the same as ``'T'`` for real matrices), as SciPy's ``lu_solve``.
    Collective over the grid. B: n x nrhs DistMatrix on the same grid, device and dtype, with
    A's row blocking (``mb``, ``rsrc``). Returns X in B's layout (in B's storage if
    ``overwrite_b``). Row interchanges are applied to B by one pairwise exchange along process
    columns, then the unit-lower and upper triangular solves (:func:`distla.pblas.
    triangular_solve`)."""
    with collective(B.grid.comm if isinstance(B, DistMatrix) else None,
                    signature("lu_solve", getattr(F, "lu", F), B, trans=trans)):
        t = _norm_trans(trans)
        _check_rhs(F, B)
    if check_finite:
        check_finite_(("B", B), what="lu_solve")
    A = F.lu
    B0 = B
    if (B.mb, B.rsrc) != (A.mb, A.rsrc):   # work in A's row blocking, answer in B's layout
        B, overwrite_b = B.redistribute(block=(A.mb, B.nb), src=(A.rsrc, B.csrc)), True
    X = B if overwrite_b else B.copy()
    conj = t == "C" and A.dtype.kind == "c"
    trans = t != "N"
    if conj:  # A^H x = b  <=>  A^T conj(x) = conj(b)
        X.local[...] = X.xp.conj(X.local)
    perm = F.perm
    moved = np.flatnonzero(perm != np.arange(A.m))
    if not trans:
        _permute(X, moved, perm[moved])
        X = triangular_solve(A, X, lower=True, unit_diagonal=True, overwrite_b=True)
        X = triangular_solve(A, X, lower=False, overwrite_b=True)
    else:
        X = triangular_solve(A, X, lower=False, trans=True, overwrite_b=True)
        X = triangular_solve(A, X, lower=True, trans=True, unit_diagonal=True, overwrite_b=True)
        _permute(X, perm[moved], moved)
    if conj:
        X.local[...] = X.xp.conj(X.local)
    if not X.same_layout(B0):
        X = X.redistribute(block=B0.block, src=B0.src)
    return X


def solve_lu(A: DistMatrix, B: DistMatrix, pivoting: str = "partial", trans=False,
             overwrite_a: bool = False, overwrite_b: bool = False, check_finite: bool = True,
             check_rcond: bool = True, **kw) -> DistMatrix:
    """Collective: solve ``A X = B`` by :func:`lu_factor` + :func:`lu_solve` (A square).
    Extra keywords (``tree``, ``lookahead``) go to :func:`lu_factor`. ``check_finite``: NaN/Inf
    in A or B raise ValueError first. ``check_rcond``: estimate the condition number from the
    factors (a few O(n^2) solves) and warn with :class:`distla.LinAlgWarning` when
    rcond < eps, like ``scipy.linalg.solve``."""
    with collective(A.grid.comm if isinstance(A, DistMatrix) else None,
                    signature("solve_lu", A, B, pivoting=pivoting, trans=trans, **kw)):
        _check_matrix(A)
        if A.m != A.n:
            raise ValueError(f"solve_lu needs a square matrix, got {A.shape}")
        if not isinstance(B, DistMatrix):
            raise TypeError(f"B must be a DistMatrix, not {type(B).__name__}")
        if B.m != A.n:
            raise ValueError(f"B has {B.m} rows, A is {A.n} x {A.n}")
        if B.dtype != A.dtype or B.device != A.device or B.grid != A.grid:
            raise ValueError("A and B must share grid, device and dtype")
    if check_finite:
        check_finite_(("A", A), ("B", B), what="solve_lu")
    F = lu_factor(A, pivoting=pivoting, overwrite_a=overwrite_a, check_finite=False, **kw)
    X = lu_solve(F, B, trans=trans, overwrite_b=overwrite_b, check_finite=False)
    if check_rcond:
        warn_if_ill_conditioned(F.rcond(), A.dtype, "solve_lu")
    return X
