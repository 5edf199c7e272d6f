"""The right-looking blocked Cholesky loop with lookahead (see :mod:`distla.linalg.cholesky`
and docs/cholesky.md). One schedule for CPU and GPU ranks:

    start panel 0
    for each step k:
        side:  finish panel k's row broadcast and gather its transposed rows
               update block columns k+1..k+d with panel k; factor panel k+1, start its broadcasts
        main:  update the rest of the trailing matrix with panel k
        (lookahead 0: start panel k+1 after the update)

On GPU ranks ``side`` is a high-priority stream and ``main`` the caller's, ordered by events
(NCCL on its own streams); on CPU ranks both are the host thread in program order, the row
broadcast is a nonblocking MPI operation that the update polls, completed one step later.
Panel buffers are preallocated once and reused round-robin. A non-positive leading minor is
recorded (on the device for GPU ranks) and the loop runs on with the same collectives on every
rank; the first failing column is agreed once at the end.
"""
from __future__ import annotations

import bisect

import numpy as np

from .. import layout, progress
from ..trace import trace
from ._local import use_local

# trailing update: up to this many adjacent block columns with their diagonal blocks here (all
# of them on a 1 x 1 grid) in one SYRK + one GEMM, per device (1: one pair per block column).
# GPU 8: one H200, n = 65536, nb 1024, in place, twice each: 2.112 / 2.111 s against 2.182 /
# 2.189 s for 1 and 2.181 / 2.183 s for 16 (record 2026-11-26-h200-large-sweep.jsonl). CPU 1:
# 8 was no better on 2 x 2 grids of the 2-core machine (n = 4096 faster, 8192 slower).
UPDATE_GROUP = {"cpu": 1, "gpu": 8}
# low-precision trailing update: one GEMM per run of about this many local columns, from the
# run's first diagonal row down (fewer rows above the diagonal computed than by one GEMM over
# all columns: (g + 1) / 2g of the square with g runs), at most LOWP_MAX_RUNS runs
LOWP_RUN_COLS = 4096
LOWP_MAX_RUNS = 8


class PotrfLoop:
    """State of one in-place lower Cholesky of ``A`` (every rank builds one, :meth:`run` is
    collective)."""

    def __init__(self, A, lookahead, compute="native"):
        self.A, self.d = A, lookahead
        self.compute = compute   # trailing-update GEMM mode (Backend.gemm_lowp)
        g = self.g = A.grid
        self.be, self.xp = A.backend, A.xp
        self.comms = g.comms(A.device)
        self.n, self.nb, self.nt = A.n, A.nb, A.nt
        self.P, self.Q = g.nprow, g.npcol
        # complex A (Hermitian, A = L L^H): the panel's solve and the update conjugate
        self.complex = A.dtype.kind == "c"
        self.op_h = "C" if self.complex else "T"
        self._columns()
        self._plan()
        self._alloc()
        self.infos = []     # (global column offset, potrf info) of the panels factored here
        self.pending = []   # posted host-MPI broadcasts, polled during updates

    # ---- the loop ------------------------------------------------------------------------
    def run(self) -> int:
        """Factor; return the first failing global column agreed by all ranks (n if none)."""
        nt, be = self.nt, self.be
        if nt == 0:
            return self.n
        # one process: the local library (it has no tensor-core update modes)
        if be.computes_in_fp32(self.compute) and use_local(self.A, "potrf"):
            with trace("potrf"):
                self.infos.append((0, be.potrf("L", self.A.local)))
            progress.update_columns(self.n, self.n, 1.0 / 3.0)   # one call: all at once
            return self._agree_fail()
        main, side = be.current_stream(), be.stream("high")
        side.wait_for(main)      # the caller's writes to A
        ready, col_ready, free = {}, {}, {}
        with side:
            self.start_panel(0)
        for k in range(nt):
            with trace("step"):
                self.step(k, main, side, ready, col_ready, free)
            progress.update_columns(self.n, (k + 1) * self.nb, 1.0 / 3.0)
        main.wait_for(side)
        return self._agree_fail()

    def step(self, k, main, side, ready, col_ready, free):
        """Step k: finish panel k, lookahead on ``side``, trailing update on ``main``."""
        with side:
            self.finish_panel(k)
            ready[k] = side.record()
            if self.d and k + 1 < self.nt:
                self.lookahead(k, side, col_ready, free)
        with main:
            main.wait(ready.pop(k))
            self.trailing(k, main, col_ready)
            free[k] = main.record()
        if not self.d and k + 1 < self.nt:
            with side:
                side.wait_for(main)
                self.start_panel(k + 1)
        self.panels.pop(k)

    def lookahead(self, k, side, col_ready, free):
        """On the side stream: apply panel k to block columns k+1..k+d, factor panel k+1 right
        after its column is up to date and start its broadcasts."""
        d, nt = self.d, self.nt
        side.wait(free.pop(k + 1 - self.nbuf, None))   # the buffers panel k+1 reuses
        for c in range(k + 1, min(k + d, nt - 1) + 1):
            if c == k + d:                             # main applied panel k-1 to it first
                side.wait(col_ready.pop(k - 1, None))
            self.update(k, range(c, c + 1))
            if c == k + 1:
                self.start_panel(k + 1)

    def trailing(self, k, main, col_ready):
        """On the main stream: apply panel k to the block columns beyond the lookahead."""
        lo = k + self.d + 1
        if lo < self.nt:
            self.update(k, range(lo, lo + 1))
            col_ready[k] = main.record()
            self.update(k, range(lo + 1, self.nt))

    # ---- host index math, once -----------------------------------------------------------
    def _plan(self):
        """Per panel k: my panel segment (local rows r0.. of count cnt, the same in my process
        row), my first local column c0 below the panel, and for the column gather: cmax2 (the
        most rows any rank of my process column sends), the first of my packed rows t (into
        ``self.pack_rows``) and ``base[k, p]``, so that the gathered row matching my local
        column c is ``base[k, owner_row(c)] + cum[c]`` (``cum[c]``: my columns before c with
        the same owner row). Small device arrays, not one index array per step."""
        A, P, nb, n, xp = self.A, self.P, self.nb, self.n, self.xp
        cols = A.col_indices()
        own = layout.owner(cols, nb, A.rsrc, P)
        cum = np.zeros(cols.size, dtype=np.int64)
        for p in range(P):
            sel = own == p
            cum[sel] = np.arange(int(sel.sum()))
        rows = A.row_indices()
        pack = np.flatnonzero(layout.owner(rows, nb, A.csrc, self.Q) == self.g.mycol)
        self.plan = []
        base = np.zeros((max(self.nt, 1), P), dtype=np.int64)
        for k in range(self.nt):
            b = min((k + 1) * nb, n)
            r0, c0 = A.local_row_start(b), A.local_col_start(b)
            counts = np.bincount(own[c0:], minlength=P)
            cmax2 = int(counts.max()) if P > 1 else 0
            base[k] = np.arange(P) * cmax2 - np.bincount(own[:c0], minlength=P)[:P]
            sel = slice(0, cols.size - c0) if P == 1 and self.Q == 1 else None
            self.plan.append(dict(r0=r0, cnt=int(rows.size - r0), c0=c0,
                                  ncol=int(cols.size - c0), cmax2=cmax2,
                                  t=int(np.searchsorted(pack, r0)), sel=sel))
        self.base = xp.asarray(base)
        self.col_owner_row = xp.asarray(own)
        self.cum = xp.asarray(cum)
        self.pack_rows = xp.asarray(pack)

    def _columns(self):
        """My block columns (sorted ``my_js``) and, for each, ``(cs, w, rs, C, Cd, Cb)``: local
        column start and width, local row of its diagonal, the view of it at and below the
        diagonal, and when this rank holds the diagonal block that block and the rest below."""
        A = self.A
        self.my_js, self.cols = [], []
        for j, cs, w in A.my_block_cols():
            rs = A.local_row_start(j * A.nb)
            C = A.local[rs:, cs:cs + w]
            if C.size == 0:
                continue
            diag = A.row_owner(j * A.nb) == self.g.myrow
            self.my_js.append(j)
            self.cols.append((cs, w, rs, C, C[:w] if diag else None, C[w:] if diag else None))
        # run_end[i]: the last column of the run from i on whose diagonal blocks are here and
        # stacked (the next column starts where this one's diagonal block ends, in both)
        self.run_end = list(range(len(self.cols)))
        for i in range(len(self.cols) - 2, -1, -1):
            (cs, w, rs, _, d, _), (cs2, _, rs2, _, d2, _) = self.cols[i], self.cols[i + 1]
            if d is not None and d2 is not None and cs2 == cs + w and rs2 == rs + w:
                self.run_end[i] = self.run_end[i + 1]

    def _alloc(self):
        A, be, nb = self.A, self.be, self.nb
        dt, mloc = A.dtype, A.local_shape[0]
        self.nbuf = nbuf = 1 if self.d == 0 else self.d + 2
        gat = max((self.P * p["cmax2"] for p in self.plan), default=0)
        ncol = max((p["ncol"] for p in self.plan if p["sel"] is None), default=0)
        self.seg_bufs = [be.empty(mloc * nb, dt) for _ in range(nbuf)]
        self.gat_bufs = [be.empty(gat * nb, dt) for _ in range(nbuf)]
        self.x_bufs = [be.empty(ncol * nb, dt) for _ in range(nbuf)]
        cmax2 = max((p["cmax2"] for p in self.plan), default=0)
        self.send_buf = be.empty(cmax2 * nb, dt)
        self.diag_buf = be.empty(nb * nb, dt) if self.P > 1 else None
        # low-precision modes on tensor cores: the panel's trsm as an inverse and a GEMM
        self.inverse_panel = be.inverse_panel(self.compute, "cholesky") and \
            np.dtype(dt).kind != "c"     # (the GEMM below is Lkk^-1 A21^T: no conjugate)
        self.panel_tf32 = self.compute in ("tf32", "fp16", "bf16")
        if self.inverse_panel:
            self.inv_buf = be.empty(nb * nb, dt)
        # the low-precision update's operands (casts, splits), made once per step on the side
        # stream and read on both: one workspace per panel buffer slot
        ncol_all = max((p["ncol"] for p in self.plan), default=0)
        self.lowp_bufs = [be.lowp_buffers(self.compute, mloc, nb, ncol_all)
                          if self.compute != "native" else None for _ in range(nbuf)]
        self.panels = {}

    # ---- the three phases -------------------------------------------------------------------
    def start_panel(self, k):
        """Factor block column k (owner potrf, column bcast, trsm) and start the row broadcast
        of each process row's own panel rows. Collective over the grid (all ranks call it)."""
        A, be, g, nb = self.A, self.be, self.g, self.nb
        p = self.plan[k]
        off, kb = k * nb, min(nb, self.n - k * nb)
        pr, pc = A.tile_owner(k, k)
        r0, cnt = p["r0"], p["cnt"]
        rows = self.seg_bufs[k % self.nbuf][:A.local_shape[0] * kb].reshape(-1, kb)
        seg = rows[r0:r0 + cnt]                  # my panel rows, contiguous
        if g.mycol == pc:
            cs, rd = A.local_col_start(off), A.local_row_start(off)
            D = A.local[rd:rd + kb, cs:cs + kb]
            if g.myrow == pr:
                with trace("panel"):
                    self.infos.append((off, be.potrf("L", D)))
            Lkk = D
            if self.P > 1:
                with trace("bcast"):
                    Lkk = self.diag_buf[:kb * kb].reshape((kb, kb), order="F")
                    if g.myrow == pr:
                        be.copy(Lkk, D)
                    self.comms.col.bcast(Lkk, pr)
            with trace("panel"):
                Pv = A.local[r0:, cs:cs + kb]
                if self.inverse_panel:   # L21 = A21 Lkk^-T as one GEMM (docs/mixed.md)
                    if seg.size:         # seg^T = Lkk^-1 A21^T: seg is row-major
                        inv = self.inv_buf[:kb * kb].reshape((kb, kb), order="F")
                        be.triangular_inverse(Lkk, inv)
                        be.gemm("N", "T", 1.0, inv, Pv, 0.0, seg.T, tf32=self.panel_tf32)
                        be.copy(Pv, seg)
                else:
                    be.trsm("R", "L", self.op_h, "N", 1.0, Lkk, Pv)   # A21 Lkk^-H
                    be.copy(seg, Pv)
        req = None
        if self.Q > 1 and seg.size:              # cnt is the same along my process row
            with trace("bcast"):
                req = self.comms.row.ibcast(seg, pc)
            if self.comms.row.needs_progress:
                self.pending.append(req)
        self.panels[k] = (rows, seg, req)

    def finish_panel(self, k):
        """Complete panel k's row broadcast, then gather the transposed panel (the panel rows
        matching my local columns) along my process column: each rank sends only its rows
        that lie in this process column's block columns, so a rank receives about
        ``m nb / Q`` words here and ``m nb / P`` in the row broadcast, as in ScaLAPACK.
        Collective over my process column (every rank calls it for every k in order)."""
        rows, seg, req = self.panels[k]
        p = self.plan[k]
        if req is not None:
            with trace("wait"):
                req.wait()
        with trace("bcast"):
            kb, ncol = seg.shape[1], p["ncol"]
            if p["sel"] is not None:             # 1 x 1: my columns are my rows
                X = seg[p["sel"]]
            else:
                X = self.x_bufs[k % self.nbuf][:ncol * kb].reshape(ncol, kb)
                self.transposed_rows(k, rows, X)
            if self.complex and X.size:   # the update subtracts L21 L21^H: conj(L) rows
                X = self.xp.conj(X) if p["sel"] is not None else self.xp.conj(X, out=X)
        ops = None
        if self.compute != "native" and seg.size and X.size:
            with trace("update"):    # the update's operands, once for every GEMM of step k
                ops = self.be.lowp_operands(seg, X.T, self.compute,
                                            out=self.lowp_bufs[k % self.nbuf])
        self.panels[k] = (seg, X, ops)

    def transposed_rows(self, k, rows, X):
        """``X`` = the panel rows matching my local columns below panel k, from my process
        column: my own packed rows on one process row, else the all-gather of every rank's."""
        p, be, t = self.plan[k], self.be, self.plan[k]["t"]
        if self.P == 1:
            be.take(rows, self.pack_rows[t:], X)
        elif p["cmax2"]:                         # the same on every rank of my column
            c2, kb = p["cmax2"], X.shape[1]
            send = self.send_buf[:c2 * kb].reshape(c2, kb)
            be.take(rows, self.pack_rows[t:], send[:self.pack_rows.size - t])
            gat = self.gat_bufs[k % self.nbuf][:self.P * c2 * kb].reshape(-1, kb)
            self.comms.col.allgather(send, gat)
            c0 = p["c0"]
            be.take(gat, self.base[k][self.col_owner_row[c0:]] + self.cum[c0:], X)

    def update(self, k, js):
        """Apply panel k to my block columns among ``js`` (a range): lower part only. Local.
        Runs of up to ``UPDATE_GROUP[device]`` adjacent columns whose diagonal blocks are all
        here and stacked (every column on a 1 x 1 grid) take one SYRK and one GEMM."""
        seg, X, _ = self.panels[k]
        p, be = self.plan[k], self.be
        r0, c0 = p["r0"], p["c0"]
        lo, hi = bisect.bisect_left(self.my_js, js.start), bisect.bisect_left(self.my_js, js.stop)
        if lo == hi:
            return
        if self.compute != "native":
            with trace("update"):
                self.update_lowp(k, lo, hi)
            return
        group = max(1, UPDATE_GROUP.get(self.A.device, 1))
        with trace("update"):
            i = lo
            while i < hi:
                cs, w, rs, C, Cd, Cb = self.cols[i]
                e = min(hi, i + group, self.run_end[i] + 1)
                if e - i > 1:                            # columns i..e-1 at once
                    cl, wl = self.cols[e - 1][:2]
                    w = cl + wl - cs
                    C = self.A.local[rs:, cs:cs + w]
                    Cd, Cb = C[:w], C[w:]
                LT = seg[rs - r0:].T                     # kb x rows, column-major
                XT = X[cs - c0:cs - c0 + w].T            # kb x w
                if Cd is not None and not self.complex:  # diagonal block(s) here
                    be.syrk("L", "T", -1.0, LT[:, :w], 1.0, Cd)
                    be.gemm("T", "N", -1.0, LT[:, w:], XT, 1.0, Cb)
                else:
                    be.gemm("T", "N", -1.0, LT, XT, 1.0, C)
                if self.pending:   # let posted host-MPI broadcasts move between GEMMs
                    self.pending = [r for r in self.pending if not r.test()]
                i = max(e, i + 1)

    def update_lowp(self, k, lo, hi):
        """Apply panel k to my block columns ``self.cols[lo:hi]`` in the low-precision mode:
        a few tensor-core GEMMs ``C -= seg X^T``, one per run of adjacent columns
        (:meth:`runs`), each from its first column's diagonal row down, with the operands
        prepared once per step (:meth:`finish_panel`). They also update some blocks above the
        diagonal: the lower factorization never reads them and the driver zeroes the upper
        triangle at the end; the extra flops cost far less on tensor cores than one launch
        per block column. Local."""
        seg, X, ops = self.panels[k]
        if ops is None:
            return
        a, b, scale = ops
        r0, c0 = self.plan[k]["r0"], self.plan[k]["c0"]
        for i, e in self.runs(lo, hi):
            cs, _, rs = self.cols[i][:3]
            ce = sum(self.cols[e - 1][:2])
            self.be.gemm_lowp("N", "N", -1.0, a[rs - r0:], b[:, cs - c0:ce - c0], 1.0,
                              self.A.local[rs:, cs:ce], self.compute, scale)

    def runs(self, lo, hi):
        """``[(i, e), ...]``: my block columns ``lo..hi-1`` cut into at most
        ``LOWP_MAX_RUNS`` runs of about equal width, each at least ``LOWP_RUN_COLS`` local
        columns wide (one run when there are fewer)."""
        cols = self.cols
        width = sum(cols[hi - 1][:2]) - cols[lo][0]
        g = max(1, min(LOWP_MAX_RUNS, width // max(1, LOWP_RUN_COLS)))
        out, i = [], lo
        for e in range(lo + 1, hi + 1):
            if e == hi or (len(out) < g - 1 and
                           cols[e][0] - cols[lo][0] >= (len(out) + 1) * width / g):
                out.append((i, e))
                i = e
        return out

    def _agree_fail(self) -> int:
        """Collective: the first failing global column over all ranks (n if none)."""
        infos = self.be.infos_to_host([info for _, info in self.infos])
        fail = min((off + int(i) - 1 for (off, _), i in zip(self.infos, infos) if i > 0),
                   default=self.n)
        return self.g.allreduce(fail, "min")

