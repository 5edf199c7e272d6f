"""Distributed Cholesky: factor (pdpotrf), solve (pdpotrs / pdposv), log-determinant.

The factorization is ScaLAPACK's right-looking blocked algorithm over the block columns of the
2D block-cyclic layout (lower triangle, square ``nb x nb`` blocks), with lookahead. Step k, for
the diagonal block (k, k) owned by process (pr, pc) = ((rsrc + k) % P, (csrc + k) % Q):

1. panel:  (pr, pc) factors its diagonal block in place (``backend.potrf``);
   the factored block is broadcast down process column pc (``comms.col.bcast``);
   process column pc solves its rows below the diagonal, ``A_ik := A_ik L_kk^-T`` (``trsm``).
2. panel broadcast (two large messages): the ranks of process column pc pack their panel rows
   (transposed, so that every panel row is contiguous) and ``allgather`` them along the
   column; the whole panel (every row below the diagonal, grouped by owning process row,
   padded) is then ``ibcast`` along every process row from column pc. Every rank now holds
   * its own panel rows: the contiguous segment of its process row (no copy), and
   * the panel rows matching its local *columns* (the transposed panel), gathered by index
     from the same buffer (one ``take`` into a preallocated buffer).
3. trailing update: for each local block column j > k, ``A[j*nb:, j] -= L_(j*nb:),k L_j,k^T``
   on the rows at and below the diagonal only: one SYRK on the diagonal block when this rank
   holds it and one GEMM below it (n^3/3 flops overall, no full-square GEMM).

Lookahead (depth d >= 1): the block columns k+1..k+d are updated first, block column k+1 is
factored and its broadcasts started right after its update, and only then the rest of the
trailing matrix is updated; so the panel and its communication overlap the big update. On GPU
ranks the lookahead columns and panels run on a side CUDA stream and the trailing update on the
caller's stream (ordered by events, NCCL on the communicators' own streams); on CPU ranks both
"streams" are the host thread in program order and the row broadcast is a nonblocking MPI
Ibcast, waited for one step later. Panel buffers are preallocated once and reused.

A non-positive leading minor is recorded (GPU: on the device) and the loop runs on unchanged,
so every rank executes the same collectives; the first failing column is agreed once at the
end and raised as :class:`~distla.errors.NotPositiveDefiniteError` on every rank.
"""
from __future__ import annotations

import contextlib
import numbers
import time
from collections import defaultdict

import numpy as np

from .. import layout
from .. import progress
from ..errors import NotPositiveDefiniteError, collective
from ..matrix import DistMatrix, check_compatible
from ..pblas import norm, triangular_solve
from ..validate import check_finite as check_finite_
from ..validate import check_symmetric, signature
from .condition import rcond_estimate, warn_if_ill_conditioned

__all__ = ["cholesky", "cho_factor", "cho_solve", "cho_rcond", "solve_cholesky", "logdet",
           "CholeskyProfile"]

_REAL = (np.dtype(np.float32), np.dtype(np.float64))


# ---------------------------------------------------------------------------------------
# public API
# ---------------------------------------------------------------------------------------
def cholesky(A: DistMatrix, lower: bool = True, overwrite_a: bool = False,
             lookahead: int = 1, profile: "CholeskyProfile | None" = None,
             check_finite: bool = True, check_symmetric: bool = True) -> DistMatrix:
    """Collective: the Cholesky factor of the symmetric positive definite ``A`` (n x n, square
    ``nb x nb`` blocks, float32/float64, CPU or GPU).

    ``lower=True`` returns L with ``A = L L^T`` (only A's lower triangle is read), otherwise U
    with ``A = U^T U`` (only the upper triangle is read; costs two transposes). The factor has
    A's layout and its other triangle is zero. ``overwrite_a`` lets the lower factorization
    work in A's storage (A then holds L). ``lookahead`` is the lookahead depth (0 = none).
    ``profile`` (a :class:`CholeskyProfile`) accumulates the time spent per phase.

    ``check_finite``: NaN/Inf in A raise ValueError first (naming one entry).
    ``check_symmetric``: a matrix that is not symmetric (Hermitian) within ``sqrt(eps)``
    relative to ``||A||_F`` raises ValueError (a cheap probe, :func:`distla.validate.
    check_symmetric`); turn it off when only one triangle holds the matrix on purpose.

    Raises :class:`~distla.errors.NotPositiveDefiniteError` on every rank, with ``.index`` the
    0-based global column of the first non-positive leading minor.
    """
    _check_factor_input(A, lookahead)
    _check_values(A, check_finite, check_symmetric, "cholesky")
    if not lower:  # U = (chol of A's upper triangle, read as the lower one of A^T)^T
        L = A.transpose()
        _potrf_lower(L, int(lookahead), profile)
        _zero_upper(L)
        return L.transpose()
    L = A if overwrite_a else A.copy()
    _potrf_lower(L, int(lookahead), profile)
    _zero_upper(L)
    return L


def cho_factor(A: DistMatrix, lower: bool = True, overwrite_a: bool = False,
               lookahead: int = 1, check_finite: bool = True, check_symmetric: bool = True):
    """Collective: ``(factor, lower)`` for :func:`cho_solve` (like scipy.linalg.cho_factor)."""
    return cholesky(A, lower=lower, overwrite_a=overwrite_a, lookahead=lookahead,
                    check_finite=check_finite, check_symmetric=check_symmetric), bool(lower)


def cho_rcond(c_and_lower, anorm: float) -> float:
    """Collective: reciprocal 1-norm condition estimate of A from its Cholesky factor and
    ``anorm = ||A||_1`` (pdpocon): a few :func:`cho_solve` calls on n x 2 blocks."""
    C = c_and_lower[0] if isinstance(c_and_lower, tuple) else c_and_lower
    f = (lambda X: cho_solve(c_and_lower, X, overwrite_b=True, check_finite=False))
    return rcond_estimate(anorm, C, f, f)


def cho_solve(c_and_lower, B: DistMatrix, overwrite_b: bool = False,
              check_finite: bool = True) -> DistMatrix:
    """Collective: solve ``A X = B`` given A's Cholesky factor (pdpotrs).

    ``c_and_lower`` is ``(factor, lower)`` as returned by :func:`cho_factor`, or the lower
    factor L alone. B is n x nrhs on the factor's grid and device, with its dtype; X is
    returned in B's layout (in B's storage when ``overwrite_b`` allows). Two triangular solves
    (:func:`distla.pblas.triangular_solve`).
    """
    if isinstance(c_and_lower, tuple):
        C, lower = c_and_lower
    else:
        C, lower = c_and_lower, True
    if not isinstance(C, DistMatrix):
        raise TypeError(f"cho_solve: the factor must be a DistMatrix, not {type(C).__name__}")
    with collective(C.grid.comm, signature("cho_solve", C, B, lower=lower)):
        _check_rhs(C, B, "cho_solve")
    if check_finite:
        check_finite_(("B", B), what="cho_solve")
    if lower:   # L Y = B, L^T X = Y
        Y = triangular_solve(C, B, lower=True, trans=False, overwrite_b=overwrite_b)
        return triangular_solve(C, Y, lower=True, trans=True, overwrite_b=True)
    # U^T Y = B, U X = Y
    Y = triangular_solve(C, B, lower=False, trans=True, overwrite_b=overwrite_b)
    return triangular_solve(C, Y, lower=False, trans=False, overwrite_b=True)


def solve_cholesky(A: DistMatrix, B: DistMatrix, overwrite_a: bool = False,
                   overwrite_b: bool = False, lookahead: int = 1, check_finite: bool = True,
                   check_symmetric: bool = True, check_rcond: bool = True) -> DistMatrix:
    """Collective: solve ``A X = B`` for symmetric positive definite A (pdposv): Cholesky
    factor, then :func:`cho_solve`. Input errors are raised before any work (``check_finite``,
    ``check_symmetric``: see :func:`cholesky`). ``check_rcond``: estimate the condition number
    from the factor and warn with :class:`distla.LinAlgWarning` when rcond < eps."""
    with collective(A.grid.comm if isinstance(A, DistMatrix) else None,
                    signature("solve_cholesky", A, B, lookahead=lookahead)):
        _validate_factor_input(A, lookahead)
        _check_rhs(A, B, "solve_cholesky")
    _check_values(A, check_finite, check_symmetric, "solve_cholesky")
    if check_finite:
        check_finite_(("B", B), what="solve_cholesky")
    anorm = norm(A, 1) if check_rcond else None
    L = cholesky(A, lower=True, overwrite_a=overwrite_a, lookahead=lookahead,
                 check_finite=False, check_symmetric=False)
    X = cho_solve((L, True), B, overwrite_b=overwrite_b, check_finite=False)
    if check_rcond:
        warn_if_ill_conditioned(cho_rcond((L, True), anorm), A.dtype, "solve_cholesky")
    return X


def logdet(L: DistMatrix) -> float:
    """Collective: ``log det A = 2 sum_i log L[i, i]`` from a Cholesky factor of A (lower or
    upper: only the diagonal is read). A float on every rank."""
    from mpi4py import MPI
    with collective(L.grid.comm if isinstance(L, DistMatrix) else None):
        if not isinstance(L, DistMatrix):
            raise TypeError(f"logdet needs a DistMatrix factor, not {type(L).__name__}")
        if L.m != L.n or L.mb != L.nb:
            raise ValueError(f"logdet: the factor must be square with square blocks, got "
                             f"shape {L.shape}, blocks {L.block}")
    xp = L.xp
    total = xp.zeros((), dtype=np.float64)
    for j, cs, w, rs in _my_block_cols(L):
        if L.row_owner(j * L.nb) == L.grid.myrow:
            d = xp.diagonal(L.local[rs:rs + w, cs:cs + w])
            total = total + xp.sum(xp.log(d.astype(np.float64)))
    loc = np.array(float(L.backend.to_host(total)))
    L.grid.comm.Allreduce(MPI.IN_PLACE, loc, op=MPI.SUM)
    return 2.0 * float(loc)


class CholeskyProfile:
    """Time per phase of :func:`cholesky`: ``seconds['panel']`` (potrf + trsm + packing),
    ``['bcast']`` (diagonal-block broadcast, panel allgather, posting the row broadcast,
    gather of the transposed panel), ``['wait']`` (completing the row broadcast: on CPU the
    time a rank sits idle waiting for a panel), ``['update']`` (lookahead-column and
    trailing SYRK/GEMM).

    CPU: host wall time. GPU: CUDA events on the stream each phase runs on (side or main),
    read by :meth:`finalize`; phases on different streams overlap, so the sum can exceed the
    wall time. Not collective."""

    def __init__(self):
        self.seconds = defaultdict(float)
        self.calls = defaultdict(int)
        self._events = []

    @contextlib.contextmanager
    def section(self, name: str, backend):
        self.calls[name] += 1
        if backend.is_gpu:
            s = backend.xp.cuda.get_current_stream()
            e0 = s.record()
            yield
            self._events.append((name, e0, s.record()))
        else:
            t = time.perf_counter()
            yield
            self.seconds[name] += time.perf_counter() - t

    def finalize(self) -> dict:
        """Resolve pending GPU events (synchronizes); return ``dict(seconds)``."""
        if self._events:
            import cupy
            for name, e0, e1 in self._events:
                e1.synchronize()
                self.seconds[name] += cupy.cuda.get_elapsed_time(e0, e1) / 1e3
            self._events = []
        return dict(self.seconds)


# ---------------------------------------------------------------------------------------
# input checks
# ---------------------------------------------------------------------------------------
def _validate_factor_input(A, lookahead):
    if not isinstance(A, DistMatrix):
        raise TypeError(f"cholesky needs a DistMatrix, not {type(A).__name__}")
    if A.m != A.n:
        raise ValueError(f"cholesky needs a square matrix, got shape {A.shape}")
    if A.mb != A.nb:
        raise ValueError(f"cholesky needs square blocks (mb == nb), got {A.block}; "
                         f"redistribute(block=({A.nb}, {A.nb})) first")
    if A.dtype not in _REAL:
        raise TypeError(f"cholesky supports float32 and float64, not {A.dtype}")
    if not isinstance(lookahead, numbers.Integral) or isinstance(lookahead, bool) \
            or lookahead < 0:
        raise ValueError(f"lookahead must be a non-negative int, not {lookahead!r}")


def _check_factor_input(A, lookahead):
    if not isinstance(A, DistMatrix):
        raise TypeError(f"cholesky needs a DistMatrix, not {type(A).__name__}")
    with collective(A.grid.comm, signature("cholesky", A, lookahead=lookahead)):
        _validate_factor_input(A, lookahead)


def _check_values(A, finite: bool, symmetric: bool, what: str) -> None:
    """Collective: the NaN/Inf scan and the symmetry probe, as asked."""
    if finite:
        check_finite_(("A", A), what=what)
    if symmetric and A.n:
        check_symmetric(A, what=what)


def _check_rhs(C, B, what):
    check_compatible(C, B, what)
    if C.m != C.n or C.mb != C.nb:
        raise ValueError(f"{what}: the matrix must be square with square blocks, got shape "
                         f"{C.shape}, blocks {C.block}")
    if B.m != C.n:
        raise ValueError(f"{what}: B has {B.m} rows, the matrix is {C.shape}")


# ---------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------
def _my_block_cols(A):
    """(global block j, local col start, width, local row start of global row j*nb) for every
    block column of A stored on this rank, in order. Not collective."""
    n, nb, g = A.n, A.nb, A.grid
    first = (g.mycol - A.csrc) % g.npcol
    out = []
    for b, j in enumerate(range(first, -(-n // nb), g.npcol)):
        out.append((j, b * nb, min(nb, n - j * nb), A.local_row_start(j * nb)))
    return out


def _zero_upper(L):
    """Zero the strict upper triangle of L (local, no communication)."""
    xp = L.xp
    for j, cs, w, rs in _my_block_cols(L):
        L.local[:rs, cs:cs + w] = 0
        if L.row_owner(j * L.nb) == L.grid.myrow:
            blk = L.local[rs:rs + w, cs:cs + w]
            blk[...] = xp.tril(blk)


class _Streams:
    """Two in-order queues: ``side`` (lookahead columns and panels) and ``main`` (trailing
    update). On GPU: a side CUDA stream and the caller's current stream, ordered by events.
    On CPU: the host thread for both (program order), events are None. GPU-specific."""

    def __init__(self, backend):
        self.gpu = backend.is_gpu
        if self.gpu:
            cp = backend.xp
            self._cp = cp
            self._main = cp.cuda.get_current_stream()
            from ..device import gpu_stream
            self._side = gpu_stream("high")  # keeps the panel ahead of the big GEMMs

    def fork(self):
        """Make the side stream wait for everything queued on the main stream so far (the
        caller's writes to A, our buffers and index arrays)."""
        if self.gpu:
            self._side.wait_event(self._main.record())

    def side(self):
        return self._side if self.gpu else contextlib.nullcontext()

    def main(self):
        return self._main if self.gpu else contextlib.nullcontext()

    def record(self):
        return self._cp.cuda.get_current_stream().record() if self.gpu else None

    def wait(self, ev):
        if self.gpu and ev is not None:
            self._cp.cuda.get_current_stream().wait_event(ev)

    def join(self):
        """Make the main stream wait for everything queued on the side stream."""
        if self.gpu:
            self._main.wait_event(self._side.record())


class _Factorization:
    """State of one in-place lower Cholesky of ``A`` (see the module docstring)."""

    def __init__(self, A, lookahead, profile):
        self.A, self.d, self.prof = A, lookahead, profile
        g = self.g = A.grid
        self.be, self.xp = A.backend, A.xp
        self.comms = g.comms(A.device)
        self.n, self.nb = A.n, A.nb
        self.nt = -(-self.n // self.nb)
        self.P, self.Q = g.nprow, g.npcol
        self.mine = {j: (cs, w, rs) for j, cs, w, rs in _my_block_cols(A)}
        self.streams = _Streams(self.be)
        self._plan()
        self._alloc()
        xp = self.xp
        self.fail_dev = xp.full((), self.n, dtype=np.int64) if self.be.is_gpu else None
        self.fail = self.n
        self.pending = []   # CPU: posted row broadcasts, poked by _progress()

    # ---- host index math, once ------------------------------------------------------
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
            ls = np.array([layout.local_start(b, nb, p, A.rsrc, P) for p in range(P)])
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

    def _alloc(self):
        A, be, nb = self.A, self.be, self.nb
        dt = A.dtype
        nbuf = 1 if self.d == 0 else (2 if not be.is_gpu else self.d + 2)
        self.nbuf = nbuf
        full = max((self.P * p["cmax"] for p in self.plan), default=0)
        ncol = max((p["ncol"] for p in self.plan if p["sel"] is None), default=0)
        self.full_bufs = [be.empty(full * nb, dt) for _ in range(nbuf)]
        self.x_bufs = [be.empty(ncol * nb, dt) for _ in range(nbuf)]
        cmax = max((p["cmax"] for p in self.plan), default=0)
        self.send_buf = be.empty(cmax * nb, dt) if self.P > 1 else None
        self.diag_buf = be.empty(nb * nb, dt) if self.P > 1 else None
        self.panels = {}

    def _sec(self, name):
        return self.prof.section(name, self.be) if self.prof is not None else \
            contextlib.nullcontext()

    # ---- the three phases -------------------------------------------------------------
    def start_panel(self, k):
        """Factor block column k (owner potrf, column bcast, trsm, pack, column allgather)
        and start its row broadcast. Collective over the grid (all ranks call it)."""
        A, be, g, nb = self.A, self.be, self.g, self.nb
        p = self.plan[k]
        off, kb = k * nb, min(nb, self.n - k * nb)
        pr, pc = A.row_owner(off), A.col_owner(off)
        cmax, P = p["cmax"], self.P
        slot = k % self.nbuf
        full = self.full_bufs[slot][:P * cmax * kb].reshape(P * cmax, kb)
        seg = full[g.myrow * cmax:g.myrow * cmax + p["cnt"]]
        if g.mycol == pc:
            cs = A.local_col_start(off)
            rd = A.local_row_start(off)
            D = A.local[rd:rd + kb, cs:cs + kb]
            if g.myrow == pr:
                with self._sec("panel"):
                    self._record_fail(off, be.potrf("L", D))
            Lkk = D
            if P > 1:
                with self._sec("bcast"):
                    Lkk = self.diag_buf[:kb * kb].reshape((kb, kb), order="F")
                    if g.myrow == pr:
                        Lkk[...] = D
                    self.comms.col.bcast(Lkk, pr)
            with self._sec("panel"):
                Pv = A.local[p["r0"]:, cs:cs + kb]
                be.trsm("R", "L", "T", "N", 1.0, Lkk, Pv)
                dst = seg if P == 1 else self.send_buf[:cmax * kb].reshape(cmax, kb)
                dst[:p["cnt"]] = Pv
            if P > 1 and full.size:     # cmax is the same on every rank: collective-safe
                with self._sec("bcast"):
                    self.comms.col.allgather(dst, full)
        req = None
        if self.Q > 1 and full.size:
            with self._sec("bcast"):
                req = self.comms.row.ibcast(full, pc)
            if not self.be.is_gpu:
                self.pending.append(req)
        self.panels[k] = (full, seg, req)

    def finish_panel(self, k):
        """Complete panel k's row broadcast and gather the transposed panel (the panel rows
        matching my local columns). Local (the broadcast was posted by every rank)."""
        full, seg, req = self.panels[k]
        p = self.plan[k]
        if req is not None:
            with self._sec("wait"):
                req.wait()
        with self._sec("bcast"):
            kb = full.shape[1]
            if p["sel"] is not None:
                X = full[p["sel"]]
            elif p["ncol"] == 0:
                X = full[:0]
            else:
                X = self.x_bufs[k % self.nbuf][:p["ncol"] * kb].reshape(p["ncol"], kb)
                c0 = p["c0"]
                idx = self.base[k][self.col_owner_row[c0:]] + self.col_local_row[c0:]
                if self.be.is_gpu:
                    self.xp.take(full, idx, axis=0, out=X)
                else:
                    np.take(full, idx, axis=0, out=X, mode="clip")
        self.panels[k] = (seg, X)

    def update(self, k, js):
        """Apply panel k to my block columns among ``js``: lower part only. Local."""
        seg, X = self.panels[k]
        p, be = self.plan[k], self.be
        r0, c0 = p["r0"], p["c0"]
        with self._sec("update"):
            for j in js:
                if j not in self.mine:
                    continue
                cs, w, rs = self.mine[j]
                C = self.A.local[rs:, cs:cs + w]
                if C.size == 0:
                    continue
                LT = seg[rs - r0:].T                     # kb x rows, column-major
                XT = X[cs - c0:cs - c0 + w].T            # kb x w
                if self.A.row_owner(j * self.nb) == self.g.myrow:   # diagonal block here
                    be.syrk("L", "T", -1.0, LT[:, :w], 1.0, C[:w])
                    be.gemm("T", "N", -1.0, LT[:, w:], XT, 1.0, C[w:])
                else:
                    be.gemm("T", "N", -1.0, LT, XT, 1.0, C)
                self._progress()

    def _progress(self):
        """CPU: let posted broadcasts move while we compute (MPI progresses large messages
        only inside MPI calls, so the root and the receivers poke it between GEMMs)."""
        if self.pending:
            self.pending = [r for r in self.pending if not r.test()]

    def _record_fail(self, off, info):
        if self.be.is_gpu:
            xp = self.xp
            cand = xp.where(info > 0, off + info.astype(np.int64) - 1, self.n)
            xp.minimum(self.fail_dev, cand, out=self.fail_dev)
        elif info > 0:
            self.fail = min(self.fail, off + int(info) - 1)

    # ---- the loop -----------------------------------------------------------------------
    def run(self) -> int:
        """Factor; return the first failing global column agreed by all ranks (n if none).
        Collective."""
        nt, d, S = self.nt, self.d, self.streams
        gpu = self.be.is_gpu
        if nt == 0:
            return self.n
        S.fork()
        if d == 0:
            for k in range(nt):
                self.start_panel(k)
                self.finish_panel(k)
                self.update(k, range(k + 1, nt))
                del self.panels[k]
                progress.update_columns(self.n, (k + 1) * self.nb, 1.0 / 3.0)
        else:
            ready, col_ready, free = {}, {}, {}
            with S.side():
                self.start_panel(0)
                if gpu:
                    self.finish_panel(0)
                ready[0] = S.record()
            for k in range(nt):
                if not gpu:
                    self.finish_panel(k)        # CPU: wait for panel k's broadcast now
                if k + 1 < nt:
                    with S.side():              # lookahead: columns k+1..k+d, panel k+1
                        S.wait(free.pop(k + 1 - self.nbuf, None))
                        for c in range(k + 1, min(k + d, nt - 1) + 1):
                            if c == k + d:      # main applied panel k-1 to it first
                                S.wait(col_ready.pop(k - 1, None))
                            self.update(k, [c])
                            if c == k + 1:
                                self.start_panel(k + 1)
                                if gpu:
                                    self.finish_panel(k + 1)
                                ready[k + 1] = S.record()
                with S.main():                  # the rest of the trailing update
                    S.wait(ready.pop(k))
                    lo = k + d + 1
                    if lo < nt:
                        self.update(k, [lo])
                        col_ready[k] = S.record()
                        self.update(k, range(lo + 1, nt))
                    free[k] = S.record()
                self.panels.pop(k)
                progress.update_columns(self.n, (k + 1) * self.nb, 1.0 / 3.0)
            S.join()
        return self._agree_fail()

    def _agree_fail(self) -> int:
        from mpi4py import MPI
        fail = self.fail
        if self.be.is_gpu:
            fail = int(self.fail_dev.get())     # the one device read of the status
        return int(self.g.comm.allreduce(fail, op=MPI.MIN))


def _potrf_lower(A: DistMatrix, lookahead: int, profile) -> None:
    """In-place lower Cholesky of A's storage (upper triangle: garbage). Collective; raises
    NotPositiveDefiniteError on every rank on failure."""
    fail = _Factorization(A, lookahead, profile).run()
    if profile is not None:
        profile.finalize()
    if fail < A.n:
        raise NotPositiveDefiniteError(fail)
