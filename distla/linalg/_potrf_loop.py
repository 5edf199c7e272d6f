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
# of them on a 1 x 1 grid) in one SYRK + one GEMM, per device (1: one pair per block column)
UPDATE_GROUP = {"cpu": 1, "gpu": 1}


class PotrfLoop:
    """State of one in-place lower Cholesky of ``A`` (every rank builds one, :meth:`run` is
    collective)."""

    def __init__(self, A, lookahead):
        self.A, self.d = A, lookahead
        g = self.g = A.grid
        self.be, self.xp = A.backend, A.xp
        self.comms = g.comms(A.device)
        self.n, self.nb, self.nt = A.n, A.nb, A.nt
        self.P, self.Q = g.nprow, g.npcol
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
        if use_local(self.A, "potrf"):                 # one process: the local library
            with trace("potrf"):
                self.infos.append((0, be.potrf("L", self.A.local)))
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
        """Per panel k: padded segment length cmax, my segment's local row start r0 and
        count, my first local column c0 below the panel. The rows of the full panel buffer
        that match my local columns are ``base[k, owner] + local row index`` (``base[k, p] =
        p * cmax_k - (p's first local row below panel k)``): kept as three small device
        arrays, not one index array per step. On a 1x1 grid they are simply rows 0..ncol."""
        A, P, nb, n, xp = self.A, self.P, self.nb, self.n, self.xp
        mrow = np.array([layout.numroc(n, nb, p, A.rsrc, P) for p in range(P)])
        cols = A.col_indices()
        me = self.g.myrow
        self.plan = []
        base = np.zeros((max(self.nt, 1), P), dtype=np.int64)
        for k in range(self.nt):
            b = min((k + 1) * nb, n)
            ls = np.array([A.local_row_start(b, p) for p in range(P)])
            cnt = mrow - ls
            cmax = int(cnt.max())
            base[k] = np.arange(P) * cmax - ls
            c0 = A.local_col_start(b)
            ncol = int(cols.size - c0)
            sel = slice(0, ncol) if P == 1 and self.Q == 1 else None
            self.plan.append(dict(b=b, cmax=cmax, r0=int(ls[me]), cnt=int(cnt[me]), c0=c0,
                                  ncol=ncol, sel=sel))
        self.base = xp.asarray(base)
        self.col_owner_row = xp.asarray(layout.owner(cols, nb, A.rsrc, P))
        self.col_local_row = xp.asarray(layout.global_to_local(cols, nb, P))

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
        dt = A.dtype
        self.nbuf = nbuf = 1 if self.d == 0 else self.d + 2
        full = max((self.P * p["cmax"] for p in self.plan), default=0)
        ncol = max((p["ncol"] for p in self.plan if p["sel"] is None), default=0)
        self.full_bufs = [be.empty(full * nb, dt) for _ in range(nbuf)]
        self.x_bufs = [be.empty(ncol * nb, dt) for _ in range(nbuf)]
        cmax = max((p["cmax"] for p in self.plan), default=0)
        self.send_buf = be.empty(cmax * nb, dt) if self.P > 1 else None
        self.diag_buf = be.empty(nb * nb, dt) if self.P > 1 else None
        self.panels = {}

    # ---- the three phases -------------------------------------------------------------------
    def start_panel(self, k):
        """Factor block column k (owner potrf, column bcast, trsm, pack, column allgather)
        and start its row broadcast. Collective over the grid (all ranks call it)."""
        A, be, g, nb = self.A, self.be, self.g, self.nb
        p = self.plan[k]
        off, kb = k * nb, min(nb, self.n - k * nb)
        pr, pc = A.tile_owner(k, k)
        cmax, P = p["cmax"], self.P
        full = self.full_bufs[k % self.nbuf][:P * cmax * kb].reshape(P * cmax, kb)
        seg = full[g.myrow * cmax:g.myrow * cmax + p["cnt"]]
        if g.mycol == pc:
            cs, rd = A.local_col_start(off), A.local_row_start(off)
            D = A.local[rd:rd + kb, cs:cs + kb]
            if g.myrow == pr:
                with trace("panel"):
                    self.infos.append((off, be.potrf("L", D)))
            Lkk = D
            if P > 1:
                with trace("bcast"):
                    Lkk = self.diag_buf[:kb * kb].reshape((kb, kb), order="F")
                    if g.myrow == pr:
                        be.copy(Lkk, D)
                    self.comms.col.bcast(Lkk, pr)
            with trace("panel"):
                Pv = A.local[p["r0"]:, cs:cs + kb]
                be.trsm("R", "L", "T", "N", 1.0, Lkk, Pv)
                dst = seg if P == 1 else self.send_buf[:cmax * kb].reshape(cmax, kb)
                be.copy(dst[:p["cnt"]], Pv)
            if P > 1 and full.size:     # cmax is the same on every rank: collective-safe
                with trace("bcast"):
                    self.comms.col.allgather(dst, full)
        req = None
        if self.Q > 1 and full.size:
            with trace("bcast"):
                req = self.comms.row.ibcast(full, pc)
            if self.comms.row.needs_progress:
                self.pending.append(req)
        self.panels[k] = (full, seg, req)

    def finish_panel(self, k):
        """Complete panel k's row broadcast and gather the transposed panel (the panel rows
        matching my local columns). Local (the broadcast was posted by every rank)."""
        full, seg, req = self.panels[k]
        p = self.plan[k]
        if req is not None:
            with trace("wait"):
                req.wait()
        with trace("bcast"):
            kb = full.shape[1]
            if p["sel"] is not None:
                X = full[p["sel"]]
            elif p["ncol"] == 0:
                X = full[:0]
            else:
                X = self.x_bufs[k % self.nbuf][:p["ncol"] * kb].reshape(p["ncol"], kb)
                c0 = p["c0"]
                idx = self.base[k][self.col_owner_row[c0:]] + self.col_local_row[c0:]
                self.be.take(full, idx, X)
        self.panels[k] = (seg, X)

    def update(self, k, js):
        """Apply panel k to my block columns among ``js`` (a range): lower part only. Local.
        Runs of up to ``UPDATE_GROUP[device]`` adjacent columns whose diagonal blocks are all
        here and stacked (every column on a 1 x 1 grid) take one SYRK and one GEMM."""
        seg, X = self.panels[k]
        p, be = self.plan[k], self.be
        r0, c0 = p["r0"], p["c0"]
        lo, hi = bisect.bisect_left(self.my_js, js.start), bisect.bisect_left(self.my_js, js.stop)
        if lo == hi:
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
                if Cd is not None:                       # diagonal block(s) here
                    be.syrk("L", "T", -1.0, LT[:, :w], 1.0, Cd)
                    be.gemm("T", "N", -1.0, LT[:, w:], XT, 1.0, Cb)
                else:
                    be.gemm("T", "N", -1.0, LT, XT, 1.0, C)
                if self.pending:   # let posted host-MPI broadcasts move between GEMMs
                    self.pending = [r for r in self.pending if not r.test()]
                i = max(e, i + 1)

    def _agree_fail(self) -> int:
        """Collective: the first failing global column over all ranks (n if none)."""
        infos = self.be.infos_to_host([info for _, info in self.infos])
        fail = min((off + int(i) - 1 for (off, _), i in zip(self.infos, infos) if i > 0),
                   default=self.n)
        return self.g.allreduce(fail, "min")
