"""The blocked right-looking LU loop shared by the three pivoting modes (see
:mod:`distla.linalg.lu` and docs/lu.md). One schedule for CPU and GPU ranks:

    panel 0
    for each step k:
        finish the previous trailing update (side stream) and panel k's broadcast
        apply panel k's interchanges to the trailing columns
        U12 = L11^-1 A12 on the owning process row, broadcast down process columns
        update block column k+1 (lookahead)
        queue the rest of A22 -= L21 U12 on the side stream
        factor panel k+1 and start its broadcast

On GPU ranks the loop runs on a high-priority stream and the deferred update on a second
stream, so the next panel overlaps the big GEMM; on CPU ranks the deferred update runs when the
next step joins it, after the next panel has been factored and its broadcast posted (the update
then polls MPI so that broadcast moves). Zero pivots are recorded and agreed once at the end.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from .. import layout, progress
from ..errors import SingularMatrixError, agree
from ..trace import trace
from ._local import use_local
from ._pivoting import permute_rows, suffix_moves, swap_rows, winners_to_ipiv
from ._tslu import tournament

_POLL_CHUNK = 512  # CPU update: columns per GEMM between MPI progress polls
_NBUF = 3          # panel / U12 buffers in flight: step k's, the lookahead panel's, spare
# partial-pivoting panels: 0 = one library getrf per panel; w > 0 = recursive halving down to
# leaves of at most w columns (Backend.getrf_recursive; on GPU ranks distla's leaf kernel), for
# panels of at least PANEL_MIN_ROWS rows, per device (docs/perf.md, "Recursive panels": on one
# H100 the recursive panel beats cuSOLVER's getrf from ~24576 rows; shorter panels keep getrf)
PANEL_LEAF = {"cpu": 0, "gpu": 32}
PANEL_MIN_ROWS = {"cpu": 0, "gpu": 24576}


class Panel:
    """Panel k as every rank sees it after the row broadcast: ``lbuf`` = this process row's
    active rows (global >= j0) of the factored panel (contiguous), ``piv`` its global pivots
    (host after :meth:`wait`; None for GENP)."""

    def __init__(self, k, j0, kb, lbuf, piv, reqs, backend):
        self.k, self.j0, self.kb, self.lbuf, self.piv = k, j0, kb, lbuf, piv
        self._reqs, self._be = reqs, backend

    def wait(self):
        for r in self._reqs:
            r.wait()
        self._reqs = []
        if self.piv is not None:
            self.piv = np.asarray(self._be.to_host(self.piv), dtype=np.int64)

    def poll(self):
        """Let MPI progress the broadcasts (cheap, non-blocking)."""
        self._reqs = [r for r in self._reqs if not r.test()]


class LULoop:
    """One factorization ``P A = L U`` in A's storage (every rank builds one and calls
    :meth:`run`, which is collective)."""

    def __init__(self, A, pivoting, tree, lookahead, compute="native"):
        self.A, self.pivoting, self.tree, self.lookahead = A, pivoting, tree, lookahead
        self.compute = compute   # trailing-update GEMM mode (Backend.gemm_lowp)
        g = self.g = A.grid
        self.be, self.xp = A.backend, A.xp
        self.comms = g.comms(A.device)
        self.m, self.n = A.shape
        self.nb = A.nb
        self.kmax = min(self.m, self.n)
        self.nsteps = layout.num_blocks(self.kmax, self.nb)
        self.piv = np.arange(self.kmax, dtype=np.int64)
        self.rows = A.row_indices()  # my global rows, local order (host)
        self._rows_dev = {}
        self.zero_checks = []  # (j0, 'info' | 'diag', value) for panels this rank factored
        self.inflight = None   # the panel whose broadcast the deferred update polls
        self._ws = {}          # workspace: allocated at first (largest) use, then reused
        # low-precision modes on tensor cores: U12 = L11^-1 A12 as an inverse and a GEMM
        self.inverse_panel = self.be.inverse_panel(compute, "lu")
        self.panel_tf32 = compute in ("tf32", "fp16", "bf16")
        # layout lookups, memoized (the same few offsets recur every step)
        memo = functools.lru_cache(maxsize=None)
        self.lrow, self.lcol = memo(A.local_row_start), memo(A.local_col_start)
        self.rown, self.cown = memo(A.row_owner), memo(A.col_owner)
        self.mrows = [layout.numroc(self.m, A.mb, pr, A.rsrc, g.nprow) for pr in range(g.nprow)]

    # ---- the loop ------------------------------------------------------------------------
    def run(self) -> np.ndarray:
        """Factor; return LAPACK's ipiv (0-based, global, host). Collective."""
        if self.nsteps == 0:
            return self.piv
        be = self.be
        # one process: the local library (it has no tensor-core update modes)
        local = be.computes_in_fp32(self.compute) and use_local(self.A, "getrf")
        if self.pivoting != "none" and local:
            with trace("getrf"):
                piv, info = be.getrf(self.A.local)
                self.zero_checks.append((0, "info", info))
                self.piv[:] = be.to_host(piv)
            progress.update_columns(self.kmax, self.kmax, 2.0 / 3.0)   # one call: all at once
            return self.piv
        caller, main, side = be.current_stream(), be.stream("high"), be.stream()
        main.wait_for(caller)
        with main:
            panel = self.next_panel(0)
            for k in range(self.nsteps):
                with trace("step"):
                    panel = self.step(panel, side)
                progress.update_columns(self.kmax, (k + 1) * self.nb, 2.0 / 3.0)
            side.join()
            if self.pivoting != "none":
                with trace("swap"):
                    self.swap_left()
        caller.wait_for(main)
        return self.piv

    def step(self, pan: Panel, side):
        """Step k (see the module docstring). Returns panel k+1 (or None)."""
        A = self.A
        j0, kb = pan.j0, pan.kb
        side.join()                                        # previous trailing update
        with trace("bcast"):
            pan.wait()
        lr1, lc1 = self.lrow(j0 + kb), self.lcol(j0 + kb)
        if pan.piv is not None:                            # trailing interchanges
            self.piv[j0:j0 + kb] = pan.piv
            with trace("swap"):
                self.swap(A.local, pan.piv, j0, [slice(lc1, A.local.shape[1])])
        u = self.u12(pan, lc1)
        l21, a22 = pan.lbuf[lr1 - self.lrow(j0):], A.local[lr1:, lc1:]
        l21, u, sc = self.gemm_operands(l21, u)
        last = pan.k + 1 == self.nsteps
        w = 0 if last or not self.lookahead else \
            self.lcol(min(self.n, j0 + kb + self.nb)) - lc1
        with trace("update"):                              # lookahead column
            self.gemm(l21, u[:, :w], a22[:, :w], sc)
        side.defer(self.update, l21, u[:, w:], a22[:, w:], sc)   # the rest, beside the panel
        if last:
            return None
        if not self.lookahead:
            side.join()
        self.inflight = self.next_panel(pan.k + 1)
        return self.inflight

    # ---- steps -----------------------------------------------------------------------------
    def next_panel(self, k) -> Panel:
        """Factor panel k on its process column and start its row broadcast. Every rank."""
        with trace("panel"):
            piv = self.factor_panel(k) if self.g.mycol == self.cown(k * self.nb) \
                else None
        return self.post_panel(k, piv)

    def u12(self, pan, lc1):
        """``U12 = L11^-1 A12`` on the process row owning block row k, broadcast down every
        process column; returns this rank's copy (kb x local trailing columns)."""
        A, be = self.A, self.be
        pr, lr0 = self.rown(pan.j0), self.lrow(pan.j0)
        u = self.work("u12", pan.k, (pan.kb, A.local.shape[1] - lc1))
        with trace("trsm"):
            if self.g.myrow == pr and u.size:
                a12, l11 = A.local[lr0:lr0 + pan.kb, lc1:], pan.lbuf[:pan.kb]
                if self.inverse_panel:    # tensor-core modes: L11^-1 once, then a GEMM
                    inv = self.work("inv", pan.k, (pan.kb, pan.kb))
                    be.triangular_inverse(l11, inv, diag="U")
                    be.gemm("N", "N", 1.0, inv, a12, 0.0, u, tf32=self.panel_tf32)
                    be.copy(a12, u)
                else:
                    be.trsm("L", "L", "N", "U", 1.0, l11, a12)
                    be.copy(u, a12)
        with trace("bcast"):
            self.comms.col.bcast(u, pr)
        return u

    def gemm_operands(self, l21, u):
        """``(l21, u, scale)``: the update's operands, prepared once per step for the
        low-precision modes (split for 3xTF32, scaled casts for fp16/bf16)."""
        if self.compute != "native" and l21.size and u.size:
            with trace("update"):
                return self.be.lowp_operands(l21, u, self.compute)
        return l21, u, None

    def gemm(self, l21, u, a22, scale):
        """``a22 -= l21 u`` in the update's mode."""
        if self.compute == "native":
            self.be.gemm("N", "N", -1.0, l21, u, 1.0, a22)
        else:
            self.be.gemm_lowp("N", "N", -1.0, l21, u, 1.0, a22, self.compute, scale)

    def update(self, l21, u, a22, scale=None):
        """``a22 -= l21 u``. While a host-MPI broadcast is in flight the GEMM is cut into
        column chunks with MPI polled between them (MPI has no progress thread)."""
        pending = self.inflight
        nc = a22.shape[1]
        with trace("update"):
            if pending is None or not self.comms.row.needs_progress or nc < 2 * _POLL_CHUNK:
                self.gemm(l21, u, a22, scale)
                return
            for c in range(0, nc, _POLL_CHUNK):
                self.gemm(l21, u[:, c:c + _POLL_CHUNK], a22[:, c:c + _POLL_CHUNK], scale)
                pending.poll()

    def swap(self, local, piv, j0, segs):
        """Apply panel swaps ``piv`` (global, from row j0) to columns ``segs`` of ``local``;
        collective over my process column."""
        A, g = self.A, self.g
        swap_rows(local, piv, j0, mb=A.mb, rsrc=A.rsrc, nprow=g.nprow, myrow=g.myrow,
                  comm=self.comms.col, segs=segs, backend=self.be, work=self._swap_work)

    def swap_left(self):
        """Apply to each factored block column of L the interchanges of all later steps at once
        (deferred from the loop: one composed permutation per block column moves each row
        once). Collective over each process column (its ranks own the same block columns)."""
        A, g = self.A, self.g
        mine = [k for k in range(self.nsteps - 1) if self.cown(k * self.nb) == g.mycol]

        def cols(k):
            return [slice(self.lcol(k * self.nb),
                          self.lcol(min(self.n, (k + 1) * self.nb)))]
        if not mine:
            return
        mine = set(mine)
        for k, dest, src in suffix_moves(self.piv, self.nb, self.m):
            if k in mine:
                permute_rows(A.local, dest, src, mb=A.mb, rsrc=A.rsrc, nprow=g.nprow,
                             myrow=g.myrow, comm=self.comms.col, segs=cols(k), backend=self.be)

    # ---- panel factorization (ranks of process column pcol(k) only) --------------------------
    def factor_panel(self, k):
        """Factor panel k in place on the ranks of its process column; returns the panel's
        global pivots (on this device), None for GENP. Collective over that process column."""
        A, g = self.A, self.g
        j0, kb = k * self.nb, min(self.nb, self.kmax - k * self.nb)
        lc0, lr0 = self.lcol(j0), self.lrow(j0)
        view = A.local[lr0:, lc0:lc0 + kb]
        # One process row: TSLU's tree has a single leaf, whose GEPP IS the panel factorization
        # (same pivots), so tournament pivoting takes the partial-pivoting path.
        if self.pivoting == "partial" or (self.pivoting == "tournament" and g.nprow == 1):
            return self._panel_gepp(j0, kb, lr0, view)
        if self.pivoting == "tournament":
            f11, piv = self._panel_tournament(j0, kb, lc0, lr0, view)
        else:
            f11, piv = self._panel_genp(j0, kb, lc0, lr0), None
        if g.myrow == self.rown(j0):
            A.local[lr0:lr0 + kb, lc0:lc0 + kb] = f11
        with trace("p_trsm"):   # L21 = A21 U11^-1
            self.be.trsm("R", "U", "N", "N", 1.0, f11,
                         A.local[self.lrow(j0 + kb):, lc0:lc0 + kb])
        return piv

    def _panel_gepp(self, j0, kb, lr0, view):
        be = self.be
        leaf = PANEL_LEAF.get(self.A.device, 0)
        tall = PANEL_MIN_ROWS.get(self.A.device, 0)

        def getrf(x):
            return be.getrf_recursive(x, leaf) if leaf > 0 and len(x) >= tall else be.getrf(x)
        if self.g.nprow == 1:  # all active rows are mine, in order: factor in place
            with trace("p_getrf"):
                piv, info = getrf(view)
        else:
            with trace("p_gather"):
                T = self._gather_panel(j0, kb, view)
            with trace("p_getrf"):
                piv, info = getrf(T)
                be.take_rows(T, self.rows_of(self.g.myrow)[lr0:] - j0, view)
        self.zero_checks.append((j0, "info", info))
        return piv + j0

    def _panel_tournament(self, j0, kb, lc0, lr0, view):
        A, g = self.A, self.g
        pk = self.rown(j0)
        winners, f11, info = tournament(view, self.rows[lr0:], kb, comm=self.comms.col,
                                        root=pk, tree=self.tree, backend=self.be)
        if g.myrow == pk:
            self.zero_checks.append((j0, "info", info))
        piv = winners_to_ipiv(winners, j0)
        with trace("p_swap"):
            self.swap(A.local, piv, j0, [slice(lc0, lc0 + kb)])
        return f11, piv

    def _panel_genp(self, j0, kb, lc0, lr0):
        """Factor the diagonal block without pivoting; broadcast it down the process column."""
        A, be, pk = self.A, self.be, self.rown(j0)
        if self.g.myrow == pk:
            f11 = self.xp.array(A.local[lr0:lr0 + kb, lc0:lc0 + kb], order="F", copy=True)
            be.getrf_nopiv(f11)
            self.zero_checks.append((j0, "diag", self.xp.diagonal(f11).copy()))
        else:
            f11 = be.empty((kb, kb), A.dtype)
        self.comms.col.bcast(f11, pk)
        return f11

    def _gather_panel(self, j0, kb, view):
        """Allgather the active panel rows of the process column into one tall (m - j0) x kb
        array in global row order (every rank of the column gets the same)."""
        g, be = self.g, self.be
        P = g.nprow
        starts = [self.lrow(j0, pr) for pr in range(P)]
        mrem = [self.mrows[pr] - starts[pr] for pr in range(P)]
        mx = max(mrem)
        send = self.work("send", 0, (mx, kb))     # rows beyond mine: padding, never read
        be.copy(send[:view.shape[0]], view)
        recv = self.work("recv", 0, (P * mx * kb,))
        self.comms.col.allgather(send, recv)
        R = recv.reshape(P, kb, mx)  # [process row, column, row]
        T = self.work("panel", 0, (self.m - j0, kb))
        for pr in range(P):
            if mrem[pr]:
                be.put_rows(T, self.rows_of(pr)[starts[pr]:] - j0, R[pr, :, :mrem[pr]].T)
        return T

    def post_panel(self, k, piv) -> Panel:
        """Start the broadcast of panel k and its pivots along process rows. Every rank."""
        A, g, be = self.A, self.g, self.be
        j0, kb = k * self.nb, min(self.nb, self.kmax - k * self.nb)
        pc = self.cown(j0)
        lr0 = self.lrow(j0)
        lbuf = self.work("lbuf", k, (A.local.shape[0] - lr0, kb))
        if g.mycol == pc:
            lc0 = self.lcol(j0)
            be.copy(lbuf, A.local[lr0:, lc0:lc0 + kb])
        reqs = [self.comms.row.ibcast(lbuf, pc)]
        pbuf = None
        if self.pivoting != "none":
            # the pivots travel with the panel, through the same communicator (on GPU ranks
            # NCCL: a host MPI Ibcast here deadlocks when its root blocks on a stream sync
            # that waits for NCCL work of a receiver still waiting in MPI)
            pbuf = be.asarray(piv, dtype=np.int64) if g.mycol == pc else \
                be.empty(kb, np.int64)
            reqs.append(self.comms.row.ibcast(pbuf, pc))
        return Panel(k, j0, kb, lbuf, pbuf, reqs, be)

    # ---- helpers and the end ---------------------------------------------------------------
    def _swap_work(self, name, shape):
        return self.work(("swap", name), 0, shape)

    def work(self, name, k, shape):
        """A column-major ``shape`` view (A's dtype) of workspace ``name``, copy ``k % 3``:
        allocated at its first use (the largest: the active part shrinks) and reused, so the
        loop allocates nothing per step and holds O((m + n) nb) extra memory."""
        key, size = (name, k % _NBUF), math.prod(shape)
        buf = self._ws.get(key)
        if buf is None or buf.size < size:
            buf = self._ws[key] = self.be.empty(size, self.A.dtype)
        return buf[:size].reshape(shape, order="F")

    def rows_of(self, pr):
        """Global rows of process row ``pr`` in local order, on the device (cached)."""
        r = self._rows_dev.get(pr)
        if r is None:
            A = self.A
            r = self._rows_dev[pr] = self.xp.asarray(
                layout.local_indices(self.m, A.mb, pr, A.rsrc, self.g.nprow))
        return r

    def agree_singular(self):
        """Collective: raise SingularMatrixError(first zero pivot column) on every rank."""
        first = self.kmax
        infos = [(j0, v) for j0, kind, v in self.zero_checks if kind == "info"]
        for (j0, _), info in zip(infos, self.be.infos_to_host([v for _, v in infos])):
            if info > 0:
                first = min(first, j0 + int(info) - 1)
        for j0, kind, val in self.zero_checks:
            if kind == "diag":
                z = np.flatnonzero(np.asarray(self.be.to_host(val)) == 0)
                if z.size:
                    first = min(first, j0 + int(z[0]))
        first = self.g.allreduce(first, "min")
        err = None
        if first < self.kmax:
            err = SingularMatrixError(first) if self.pivoting != "none" else SingularMatrixError(
                first, f"zero pivot at column {first} (0-based) of the LU factorization "
                f"without pivoting: the matrix may be nonsingular but needs pivoting (use "
                f"pivoting='partial' or 'tournament', or method 'gepp', 'calu' or 'rbt')")
        agree(self.g.comm, err)
