"""Alpha-beta-gamma models of distla's factorizations, step by step, as the drivers are
written (distla/linalg/_potrf_loop.py, _lu_loop.py, _tslu.py, rbt.py, _butterfly.py;
distla/tlr/cholesky.py).

Every model walks the blocked loop: for each step it computes, for every rank of the P x Q
grid (NumPy arrays of shape (P, Q)), the kernel flops and seconds of the step's work and the
seconds of each message, then advances one clock by the lookahead recurrence (docs/model.md):

    ready(k+1) = la(k) + panel(k+1) + bcast(k+1)          (the lookahead chain)
    done(k)    = max over ranks [ sync(k) + la(k) + rest(k) + (1 - overlap) panel_rank(k+1) ]
    T(k)       = max(ready(k+1), done(k))

``la`` is the update of the next block column, ``rest`` the rest of the trailing update,
``sync`` the step's blocking work (LU: row interchanges, U12 solve and its broadcast),
``overlap`` the machine's fraction of panel work that runs beside the update. Not collective.
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass, field

import numpy as np

from .costs import (
    Topology,
    gemm_flops,
    getrf_flops,
    log2c,
    numroc_v,
    potrf_flops,
    rows_from,
)

__all__ = ["ALGORITHMS", "MAX_RANKS", "MAX_STEPS", "Prediction", "check_inputs", "nominal_flops",
           "predict"]

ALGORITHMS = ("cholesky", "lu", "calu", "genp", "rbt", "tlr")
_ISZ = 8  # float64
#: the most block steps (ceil(n / nb), RBT: of the padded n) one prediction walks (about a
#: millisecond each): beyond, a prediction would run for minutes to days
MAX_STEPS = 1 << 18
#: the most ranks (P Q) one prediction models: it holds several (P, Q) arrays per step
MAX_RANKS = 1 << 20
_OPTS = {"rbt": ("depth", "iterations", "nrhs"), "tlr": ("rank", "oversample")}


def _int_at_least(name, v, lo):
    """``v`` as an int, or ValueError/TypeError naming ``name`` unless an int >= lo."""
    if not isinstance(v, numbers.Integral) or isinstance(v, bool):
        raise TypeError(f"{name} must be an int >= {lo}, not {v!r}")
    if v < lo:
        raise ValueError(f"{name} must be an int >= {lo}, not {v!r}")
    return int(v)


def check_inputs(algo: str, n: int, nb: int, P: int = 1, Q: int = 1, *, lookahead: int = 1,
                 tree: str = "binary", ranks_per_node: int | None = None, order: str = "row",
                 variant: str = "as-written", **opts) -> None:
    """ValueError/TypeError naming the parameter and its value for inputs :func:`predict`
    refuses (it calls this first, before any work): n, nb, P, Q ints >= 1, ``lookahead`` an
    int >= 0, ``ranks_per_node`` None or an int >= 1, RBT ``depth`` (>= 0, 2^depth <=
    max(2n, 4) as :func:`distla.linalg.rbt_solve` requires), ``iterations`` (>= 0), ``nrhs``
    (>= 1), TLR ``rank`` (>= 1), ``oversample`` (>= 0), at most :data:`MAX_STEPS` block steps and
    :data:`MAX_RANKS` ranks. Not collective."""
    if algo not in ALGORITHMS:
        raise ValueError(f"algorithm must be one of {ALGORITHMS}, not {algo!r}")
    for name, v in (("n", n), ("nb", nb), ("P", P), ("Q", Q)):
        if not isinstance(v, numbers.Integral) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name} must be a positive int, not {v!r}")
        if v > 2 ** 52:       # (its index arithmetic is in 64-bit ints and floats)
            raise ValueError(f"{name} = {v} is beyond the model's range (2^52)")
    if P * Q > MAX_RANKS:
        raise ValueError(f"a {P}x{Q} grid is {P * Q} ranks, more than the model holds "
                         f"({MAX_RANKS})")
    if not isinstance(lookahead, bool):
        _int_at_least("lookahead", lookahead, 0)
        if lookahead > 1:      # (it was taken as 1, silently)
            raise ValueError(f"lookahead must be 0 or 1 (the depth the model walks), not "
                             f"{lookahead}")
    if ranks_per_node is not None:
        _int_at_least("ranks_per_node", ranks_per_node, 1)
    if tree not in ("binary", "flat"):
        raise ValueError(f"tree must be 'binary' or 'flat', not {tree!r}")
    if order not in ("row", "col"):
        raise ValueError(f"order must be 'row' or 'col', not {order!r}")
    if variant not in ("as-written", "scalapack"):
        raise ValueError(f"variant must be 'as-written' or 'scalapack', not {variant!r}")
    allowed = _OPTS.get(algo, ())
    for k in opts:
        if k not in allowed:
            raise TypeError(f"predict: {algo} takes no option {k!r}"
                            + (f" (its options: {', '.join(allowed)})" if allowed else ""))
    n_steps = n
    if algo == "rbt":
        depth = _int_at_least("depth", opts.get("depth", 2), 0)
        if depth > 62 or (1 << depth) > max(2 * n, 4):
            raise ValueError(f"depth {depth} is too large for n = {n}: 2^depth must be <= "
                             f"max(2n, 4)")
        _int_at_least("iterations", opts.get("iterations", 2), 0)
        _int_at_least("nrhs", opts.get("nrhs", 1), 1)
        n_steps = -(-n // (1 << depth)) * (1 << depth)
    if algo == "tlr":
        _int_at_least("rank", opts.get("rank", 16), 1)
        _int_at_least("oversample", opts.get("oversample", 12), 0)
    steps = -(-n_steps // min(nb, n))
    if steps > MAX_STEPS:
        raise ValueError(f"n = {n} in blocks of nb = {min(nb, n)} is {steps} block steps, more "
                         f"than the model walks ({MAX_STEPS}, about a millisecond each); use a "
                         f"larger nb")


def nominal_flops(algo: str, n: int) -> float:
    """The flop count the benchmarks divide by (distla.bench.common.flops)."""
    n = float(n)
    if algo in ("cholesky", "tlr"):
        return n ** 3 / 3.0 + n ** 2 / 2.0
    return 2.0 * n ** 3 / 3.0 - n ** 2 / 2.0


@dataclass
class Prediction:
    """The model's answer for one run: ``seconds``, ``tflops`` (nominal flops / seconds; for
    TLR the flops of the compressed factorization, which do not compare with a dense rate),
    ``efficiency`` (tflops over P Q times the GEMM rate at nb), ``terms`` (seconds of the
    critical path by term: update, panel, comm, sync, overhead...), ``flops`` ((P, Q) arrays
    of flops per kernel: the work of each rank), ``bytes`` ((P, Q) arrays of bytes received
    per rank, by message kind), ``messages`` (per rank), ``textbook`` (words received and
    messages per rank of the same algorithm with ScaLAPACK's broadcasts, ``step_words`` per
    step), ``step_bytes`` (bytes received by the busiest rank in each step)."""
    algo: str
    n: int
    nb: int
    P: int
    Q: int
    seconds: float
    tflops: float
    efficiency: float
    terms: dict
    flops: dict = field(default_factory=dict)
    bytes: dict = field(default_factory=dict)
    messages: float = 0.0
    textbook: dict = field(default_factory=dict)
    step_bytes: list = field(default_factory=list)
    notes: str = ""

    @property
    def limiting(self) -> str:
        return max(self.terms, key=self.terms.get) if self.terms else ""

    def total_flops(self) -> float:
        return float(sum(float(v.sum()) for v in self.flops.values()))

    def bytes_per_rank(self) -> float:
        """Largest bytes received by one rank, all message kinds."""
        if not self.bytes:
            return 0.0
        return float(sum(self.bytes.values()).max())

    def row(self) -> dict:
        return dict(algo=self.algo, n=self.n, nb=self.nb, grid=f"{self.P}x{self.Q}",
                    ranks=self.P * self.Q, seconds=self.seconds, tflops=self.tflops,
                    tflops_per_rank=self.tflops / (self.P * self.Q),
                    efficiency=self.efficiency, limiting=self.limiting,
                    gbytes_per_rank=self.bytes_per_rank() / 1e9,
                    textbook_gbytes_per_rank=self.textbook.get("words", 0.0) * _ISZ / 1e9,
                    terms={k: round(v, 6) for k, v in self.terms.items()})


class _Acc:
    """Per-rank tallies (flops per kernel, bytes per message kind) and critical-path terms."""

    def __init__(self, P, Q):
        self.P, self.Q = P, Q
        self.flops, self.bytes, self.terms = {}, {}, {}
        self.msgs = 0.0
        self.snaps = []

    def snap(self):
        """Record the bytes each rank has received so far (one entry per step)."""
        # each rank's bytes so far: a step's bytes are the largest difference (the maximum
        # of the running totals moved from rank to rank and left steps at 0 or doubled)
        self.snaps.append(sum(self.bytes.values()) + np.zeros((self.P, self.Q))
                          if self.bytes else np.zeros((self.P, self.Q)))

    def f(self, kind, val):
        a = self.flops.setdefault(kind, np.zeros((self.P, self.Q)))
        a += val

    def b(self, kind, val):
        a = self.bytes.setdefault(kind, np.zeros((self.P, self.Q)))
        a += val

    def t(self, term, sec):
        self.terms[term] = self.terms.get(term, 0.0) + float(sec)


def _col(P, Q, q, vals):
    """(P, Q) array with ``vals`` (P,) in column q, zero elsewhere."""
    out = np.zeros((P, Q))
    out[:, q] = vals
    return out


def _step(acc, ready_la, panel_comp, panel_comm, bcast, work, panel_rank, overlap,
          lookahead, host=0.0, sync=0.0):
    """One step of the recurrence; returns its seconds and books the limiting terms.
    ``ready_la``: seconds before the next panel can start (its column's sync + lookahead
    update); ``work`` (P, Q): each rank's whole step (sync + la + rest); ``panel_rank`` (P, Q):
    next panel seconds on its column's ranks."""
    pan = panel_comp + panel_comm
    if lookahead:
        ready = ready_la + pan + bcast
        done = float((work + (1.0 - overlap) * panel_rank).max())
    else:
        ready, done = 0.0, float(work.max()) + pan + bcast
    T = max(ready, done, host)
    if host >= max(ready, done):
        acc.t("overhead", host)
    elif ready > done:
        acc.t("sync", min(sync, ready_la))
        acc.t("update", max(ready_la - sync, 0.0))
        acc.t("panel", panel_comp)
        acc.t("comm", panel_comm + bcast)
    else:
        acc.t("sync", sync)
        acc.t("update", (done if lookahead else done - pan - bcast) - sync)
        if not lookahead:
            acc.t("panel", panel_comp)
            acc.t("comm", panel_comm + bcast)
    return T


def _suffix(val, Q):
    """suf[:, j] = sum of val[:, j'] for j' >= j, j' = j (mod Q); shape (P, nt + Q)."""
    P, nt = val.shape
    suf = np.zeros((P, nt + Q))
    for r in range(min(Q, nt)):
        idx = np.arange(r, nt, Q)
        suf[:, idx] = np.cumsum(val[:, idx][:, ::-1], axis=1)[:, ::-1]
    return suf


def _first_from(k0, q, Q):
    """Smallest j >= k0 with j = q (mod Q), vectorized over q."""
    return k0 + (q - k0) % Q


# ------------------------------------------------------------------------------------------
# Cholesky (distla/linalg/cholesky.py)
# ------------------------------------------------------------------------------------------
def _cholesky(n, nb, P, Q, M, topo, lookahead, variant="as-written"):
    acc = _Acc(P, Q)
    nt = -(-n // nb)
    sh, gpu, ov = topo.share, M.device == "gpu", M.overlap
    rg, rt, rs = M.gemm_rate(nb), M.trsm_rate(nb), M.syrk_rate(nb)
    jj = np.arange(nt)
    w = np.minimum(nb, n - jj * nb).astype(float)
    mrow = numroc_v(n, nb, P)
    R = np.stack([mrow - numroc_v(j * nb, nb, P) for j in range(nt)], axis=1).astype(float)
    own = (jj[None, :] % P) == np.arange(P)[:, None]
    # one block column j updated by one panel (width nb): SYRK on the diagonal block when
    # this process row holds it, one GEMM below (rows at and below j*nb only)
    SY = np.where(own & (R > 0), w * (w + 1) * nb, 0.0)
    GE = np.where(own, 2.0 * nb * w * np.maximum(R - w, 0), 2.0 * nb * w * R)
    calls = (R > 0) * (1.0 + own)
    tcol = (GE / rg + SY / rs) * sh + (0.0 if gpu else calls * M.call)
    sufT, sufG, sufS, sufC = (_suffix(x, Q) for x in (tcol, GE, SY, calls))
    qs = np.arange(Q)
    cols_from = [rows_from(n, j * nb, nb, Q) for j in range(nt + 1)]

    def panel(k):
        """(compute s, comm s, row-bcast s, per-rank compute (P,)) of panel k; books flops."""
        kb = w[k]
        pc = k % Q
        Rb = R[:, k + 1] if k + 1 < nt else np.zeros(P)
        cmax = float(Rb.max())
        t_po = M.potrf_time(kb) * sh
        t_tr = Rb * kb * kb / rt * sh + 2 * Rb * kb * _ISZ / M.mem_bw * sh
        comp = t_po + float(t_tr.max()) + (0 if gpu else 6 * M.call)
        comm = 0.0
        if P > 1:
            comm += Topology.bcast(topo.col, P, kb * kb * _ISZ)
            acc.b("col bcast", _col(P, Q, pc, np.where(np.arange(P) == k % P, 0, kb * kb * _ISZ)))
            acc.msgs += log2c(P)
        bc = 0.0
        # each rank's own panel rows along its process row (both variants) ...
        if Q > 1 and cmax:
            bc += Topology.bcast(topo.row, Q, cmax * kb * _ISZ)
            recv = np.broadcast_to((Rb * kb * _ISZ)[:, None], (P, Q)).copy()
            recv[:, pc] = 0
            acc.b("row bcast", recv)
            acc.msgs += log2c(Q)
        # ... then the transposed pieces (the panel rows matching each rank's local columns)
        # down the process columns: as written, an allgather in which every rank sends its
        # rows that fall in its process column's block columns (about nc / P each); ScaLAPACK
        # broadcasts them
        nc = cols_from[k + 1].astype(float)
        if P > 1 and nc.max() and variant == "scalapack":
            bc += Topology.bcast(topo.col, P, float(nc.max()) * kb * _ISZ)
            acc.b("col bcast", np.broadcast_to(nc * kb * _ISZ * (P - 1) / P, (P, Q)))
            acc.msgs += log2c(P)
        elif P > 1 and nc.max():
            c2 = float(np.ceil(nc.max() / P))
            bc += Topology.allgather(topo.col, P, c2 * kb * _ISZ)
            acc.b("col allgather", np.broadcast_to((P - 1) * np.ceil(nc / P) * kb * _ISZ,
                                                   (P, Q)))
            acc.msgs += P - 1
        acc.f("potrf", _col(P, Q, pc, np.where(np.arange(P) == k % P, potrf_flops(kb), 0)))
        acc.f("trsm", _col(P, Q, pc, Rb * kb * kb))
        return comp, comm, bc, t_po * (np.arange(P) == k % P) + t_tr

    comp, comm, bc, _ = panel(0)
    total = comp + comm + bc
    acc.t("panel", comp)
    acc.t("comm", comm + bc)
    for k in range(nt - 1):
        # gather of the transposed panel (rows matching my local columns)
        ncol = cols_from[k + 1].astype(float)
        take = np.zeros((P, Q)) if P == Q == 1 else \
            np.broadcast_to(2 * ncol * nb * _ISZ / M.mem_bw * sh, (P, Q))
        qla = (k + 1) % Q
        la = np.zeros((P, Q))
        la[:, qla] = tcol[:, k + 1]
        j0 = _first_from(k + 1, qs, Q)               # first block column > k of each q
        allT = np.where(j0 < nt, sufT[:, np.minimum(j0, nt + Q - 1)], 0.0)
        rest = allT - la
        acc.f("gemm", np.where(j0 < nt, sufG[:, np.minimum(j0, nt + Q - 1)], 0.0))
        acc.f("syrk", np.where(j0 < nt, sufS[:, np.minimum(j0, nt + Q - 1)], 0.0))
        host = float(np.where(j0 < nt, sufC[:, np.minimum(j0, nt + Q - 1)], 0.0).max()) \
            * M.call if gpu else 0.0
        acc.snap()      # step k's bytes (panel k's broadcasts) end here: panel k + 1 next
        comp, comm, bc, prank = panel(k + 1)
        ready_la = float((take + la)[:, qla].max())
        work = take + la + rest
        total += _step(acc, ready_la, comp, comm, bc, work, _col(P, Q, qla, prank), ov,
                       lookahead, host)
    acc.snap()          # the last step's
    tb = _textbook_cholesky(n, nb, P, Q)
    return total, acc, tb


def _textbook_cholesky(n, nb, P, Q):
    """ScaLAPACK pdpotrf's words received per rank, per step: the diagonal block down the
    process column, each process row's share of the panel along the row (``m nb / P``) and
    the transposed share down the columns (``m nb / Q``); messages on the critical path
    (binomial trees)."""
    nt = -(-n // nb)
    steps, msgs = [], 0.0
    for k in range(nt):
        m = max(n - (k + 1) * nb, 0)
        steps.append((m * nb / P if Q > 1 else 0) + (m * nb / Q if P > 1 else 0)
                     + (nb * nb if P > 1 else 0))
        if m:
            msgs += log2c(Q) + 2 * log2c(P)
    return dict(words=float(sum(steps)), messages=msgs, step_words=steps)


# ------------------------------------------------------------------------------------------
# LU: partial pivoting, tournament (CALU), none (GENP)  (distla/linalg/lu.py, _tslu.py)
# ------------------------------------------------------------------------------------------
def _lu(n, nb, P, Q, M, topo, lookahead, pivoting, tree="binary"):
    acc = _Acc(P, Q)
    ns = -(-n // nb)
    sh, gpu, ov = topo.share, M.device == "gpu", M.overlap
    rg, rt = M.gemm_rate(nb), M.trsm_rate(nb)
    ps = np.arange(P)
    rows = [rows_from(n, j * nb, nb, P).astype(float) for j in range(ns + 1)]
    cols = [rows_from(n, j * nb, nb, Q).astype(float) for j in range(ns + 1)]
    bw = M.mem_bw / sh
    sbw = M.swap_bw / sh        # row gathers/scatters of column-major storage
    lbw = sbw if gpu else M.mem_bw / 4 / sh     # LAPACK laswp (one process row, CPU)

    def getrf_t(m, kb):
        return M.getrf_time(m, kb, getrf_flops(m, kb)) * sh if m > 0 else 0.0

    def panel(k):
        """(compute s, comm s, row-bcast s, per-rank panel s (P,)) of panel k."""
        j0, kb = k * nb, min(nb, n - k * nb)
        pc, pk = k % Q, k % P
        A_ = rows[k]          # active rows (>= j0) per process row
        B_ = rows[k + 1] if k + 1 <= ns else np.zeros(P)   # rows below the panel
        comp = np.zeros(P)
        comm = 0.0
        fl = np.zeros(P)
        piv = pivoting
        if piv == "tournament" and P == 1:
            piv = "partial"
        if piv == "partial":
            if P == 1:
                comp += getrf_t(A_[0], kb)
                fl += getrf_flops(A_[0], kb)
            else:
                mx = float(A_.max())
                comm += Topology.allgather(topo.col, P, mx * kb * _ISZ)
                acc.b("col allgather", _col(P, Q, pc, np.full(P, (P - 1) * mx * kb * _ISZ)))
                acc.msgs += P - 1
                comp += getrf_t(n - j0, kb) + 3 * (n - j0) * kb * _ISZ / sbw
                fl += getrf_flops(n - j0, kb)       # every rank of the column, redundantly
        elif piv == "tournament":
            comp += np.array([getrf_t(a, kb) for a in A_]) + 2 * A_ * kb * _ISZ / bw
            fl += np.array([getrf_flops(a, kb) for a in A_])
            cand = np.minimum(A_, kb)
            if tree == "flat":
                comm += Topology.allgather(topo.col, P, (kb * kb + kb + 1) * _ISZ) * 2
                tot = float(cand.sum())
                comp += getrf_t(tot, kb)
                fl += getrf_flops(tot, kb)
                acc.b("col allgather", _col(P, Q, pc, np.full(P, (P - 1) * (kb * kb + kb) * _ISZ)))
                acc.msgs += 2 * (P - 1)
            else:
                L = log2c(P)
                a, b = topo.col
                comm += L * (2 * a + (kb * kb + kb + 1) * _ISZ / b)
                # the binary tree as _tslu runs it: at level s the rank r (relative to the
                # root) with r % 2s == 0 merges its candidates with those of r + s
                cand_r = np.roll(cand, -pk)         # candidates by relative rank
                s, merges = 1, np.zeros(P)
                while s < P:
                    lvl = 0.0
                    for r in range(0, P - s, 2 * s):
                        stack = cand_r[r] + cand_r[r + s]
                        if stack > 0:
                            merges[(r + pk) % P] += getrf_flops(stack, kb)
                            lvl = max(lvl, getrf_t(stack, kb))
                        cand_r[r] = min(stack, kb)
                    comp += lvl
                    s *= 2
                fl += merges
                comm += Topology.bcast(topo.col, P, (kb * kb + kb + 1) * _ISZ)
                acc.b("col tree", _col(P, Q, pc, np.full(P, (kb * kb + kb) * _ISZ * (1 + L / P))))
                acc.msgs += 2 * L + 2 * log2c(P)
            # the winners are swapped into place (panel columns only), then L21 = A21 U11^-1
            comm += Topology.exchange(topo.col, min(P - 1, kb), 2 * kb * kb * _ISZ)
            comp += B_ * kb * kb / rt * sh + 4 * kb * kb * _ISZ / bw
            acc.f("trsm", _col(P, Q, pc, B_ * kb * kb))
        else:  # none: diagonal block on its owner, broadcast down the column, L21 solve
            comp += (ps == pk) * getrf_t(kb, kb)
            acc.f("genp", _col(P, Q, pc, (ps == pk) * (2.0 * kb ** 3 / 3 - kb * kb / 2 - kb / 6)))
            if P > 1:
                comm += Topology.bcast(topo.col, P, kb * kb * _ISZ)
                acc.b("col bcast", _col(P, Q, pc, (ps != pk) * kb * kb * _ISZ))
                acc.msgs += log2c(P)
            comp += B_ * kb * kb / rt * sh
            acc.f("trsm", _col(P, Q, pc, B_ * kb * kb))
        if fl.any():
            acc.f("getrf", _col(P, Q, pc, fl))
        comp = comp + (0 if gpu else 8 * M.call)
        bc = 0.0
        if Q > 1:
            bmax = float(A_.max()) * kb * _ISZ
            bc = Topology.bcast(topo.row, Q, bmax) + (topo.row[0] if pivoting != "none" else 0)
            recv = np.broadcast_to((A_ * kb * _ISZ)[:, None], (P, Q)).copy()
            recv[:, pc] = 0
            acc.b("row bcast", recv)
            acc.msgs += log2c(Q) * (2 if pivoting != "none" else 1)
        return float(comp.max()), comm, bc, comp + comm

    comp, comm, bc, _ = panel(0)
    total = comp + comm + bc
    acc.t("panel", comp)
    acc.t("comm", comm + bc)
    qs = np.arange(Q)
    for k in range(ns):
        kb = min(nb, n - k * nb)
        pr = k % P
        Bk = rows[k + 1]                    # rows below the panel (P,)
        Ck = cols[k + 1]                    # trailing columns (Q,)
        # sync: interchanges on the trailing columns, U12 = L11^-1 A12 on pr, U12 down columns
        sync = np.zeros(Q)
        if pivoting != "none":
            if P == 1:
                sync += 4 * kb * Ck * _ISZ / lbw
            else:
                moved = kb * (P - 1) / P
                a, b = topo.col
                sync += min(P - 1, kb) * a + 2 * moved * Ck * _ISZ / b + 4 * kb * Ck * _ISZ / sbw
                # the owner of block row k exchanges the kb rows with the other process rows
                acc.b("col swap", np.where((ps == pr)[:, None], (moved * Ck * _ISZ)[None, :],
                                           (kb / P * Ck * _ISZ)[None, :]))
                acc.msgs += min(P - 1, kb)
        sync += Ck * kb * (kb - 1) / rt * sh + 2 * kb * Ck * _ISZ / bw
        acc.f("trsm", np.where((ps == pr)[:, None], (Ck * kb * (kb - 1))[None, :], 0.0))
        if P > 1:
            sync += np.array([Topology.bcast(topo.col, P, kb * c * _ISZ) for c in Ck])
            acc.b("col bcast", np.where((ps != pr)[:, None], (kb * Ck * _ISZ)[None, :], 0.0))
            acc.msgs += log2c(P)
        upd = gemm_flops(Bk[:, None], Ck[None, :], kb)
        acc.f("gemm", upd)
        calls = 6 + (np.zeros(Q) if Q == 1 else np.ceil(Ck / 512))
        sync = sync + (0 if gpu else calls * M.call)
        if k + 1 < ns:
            qla = (k + 1) % Q
            wla = np.where(qs == qla, min(nb, n - (k + 1) * nb), 0)
            la = gemm_flops(Bk[:, None], wla[None, :], kb) / rg * sh
            rest = upd / rg * sh - la
            acc.snap()  # step k's bytes (its interchanges and U12) end here: panel k + 1 next
            comp, comm, bc, prank = panel(k + 1)
            work = sync[None, :] + la + rest
            ready_la = float((sync[None, :] + la)[:, qla].max())
            host = float(calls.max() + Ck.max() / nb) * M.call if gpu else 0.0
            total += _step(acc, ready_la, comp, comm, bc, work, _col(P, Q, qla, prank), ov,
                           lookahead, host, float(sync.max()))
        else:
            acc.snap()
            t = float((sync[None, :] + upd / rg * sh).max())
            total += t
            acc.t("update", t)
    if pivoting != "none":   # deferred interchanges of the L block columns
        tl = np.zeros((P, Q))
        for k in range(ns - 1):
            q = k % Q
            wk = min(nb, n - k * nb)
            below = rows[k + 1]
            tl[:, q] += 4 * below * wk * _ISZ / (lbw if P == 1 else sbw)
            if P > 1:
                a, b = topo.col
                tl[:, q] += (P - 1) * a + below * wk * _ISZ * (P - 1) / P / b
        t = float(tl.max())
        total += t
        acc.t("sync", t)
    tb = _textbook_lu(n, nb, P, Q, pivoting, tree)
    return total, acc, tb


def _textbook_lu(n, nb, P, Q, pivoting, tree):
    """ScaLAPACK pdgetrf (partial pivoting: one pivot search per column, reductions down the
    process column) or CALU (one tournament per panel): words received per rank per step (L
    panel share along rows, U12 share down columns, interchanged rows) and messages on the
    critical path (binomial trees)."""
    ns = -(-n // nb)
    steps, msgs = [], 0.0
    for k in range(ns):
        m = n - k * nb
        mb_ = max(n - (k + 1) * nb, 0)
        w = (m * nb / P if Q > 1 else 0) + (mb_ * nb / Q if P > 1 else 0)
        if pivoting != "none" and P > 1:
            w += nb * mb_ / Q * (P - 1) / P
        if pivoting == "partial":
            msgs += nb * 2 * log2c(P) + log2c(Q) + log2c(P) + min(P - 1, nb)
        elif pivoting == "tournament":
            w += nb * nb * log2c(P) if tree == "binary" else nb * nb * (P - 1)
            msgs += 2 * log2c(P) + log2c(Q) + log2c(P) + min(P - 1, nb)
        else:
            msgs += 2 * log2c(P) + log2c(Q)
        steps.append(w)
    return dict(words=float(sum(steps)), messages=msgs, step_words=steps)


# ------------------------------------------------------------------------------------------
# RBT solve (distla/linalg/rbt.py, _butterfly.py): transform + GENP + refinement
# ------------------------------------------------------------------------------------------
def _rbt(n, nb, P, Q, M, topo, lookahead, depth=2, iterations=2, nrhs=1):
    check_inputs("rbt", n, nb, P, Q, depth=depth, iterations=iterations, nrhs=nrhs)
    n_pad = -(-n // (1 << depth)) * (1 << depth)
    t_lu, acc, tb = _lu(n_pad, nb, P, Q, M, topo, lookahead, "none")
    sh = topo.share
    mloc = float(numroc_v(n_pad, nb, P).max())
    nloc = float(numroc_v(n_pad, nb, Q).max())
    local = mloc * nloc * _ISZ
    h = n_pad >> depth
    aligned = depth == 0 or (h % (nb * P) == 0 and h % (nb * Q) == 0)
    passes = float(M.extra.get("butterfly_passes", 2 if M.device == "gpu" else 8))
    t_tr = local * 2 / M.mem_bw * sh                     # padded copy of A
    if aligned:
        t_tr += depth * passes * local / M.mem_bw * sh
    else:   # rows then columns mixed level by level, partner rows exchanged
        t_tr += depth * 2 * 5 * local / M.mem_bw * sh
        t_tr += depth * (Topology.exchange(topo.col, 1, local) +
                         Topology.exchange(topo.row, 1, local))
    # refinement: per iteration a residual (local GEMV + allgathers of x + row allreduce) and
    # two fan-in triangular solves (per block: row allreduce, small solve, column bcast)
    nt = -(-n_pad // nb)
    t_res = local / M.mem_bw * sh + Topology.allgather(topo.col, P, mloc * nrhs * _ISZ) \
        + Topology.allgather(topo.row, Q, n_pad * nrhs / Q * _ISZ) \
        + Topology.allreduce(topo.row, Q, mloc * nrhs * _ISZ) + 20 * M.call
    per_blk = (Topology.allreduce(topo.row, Q, nb * nrhs * _ISZ) +
               Topology.bcast(topo.col, P, nb * nrhs * _ISZ) + 3 * M.call)
    t_solve = 2 * (nt * per_blk + local / M.mem_bw * sh) + 30 * M.call
    # the condition estimate of the transformed matrix: ~5 pairs of n x 2 lu_solves
    # (pdtrsm-style: the factor's panels go along process rows)
    t_trs = nt * (Topology.bcast(topo.row, Q, mloc * nb * _ISZ / max(1, nt / P))
                  + Topology.bcast(topo.col, P, nb * 2 * _ISZ) + 4 * M.call) \
        + local / M.mem_bw * sh
    t_rcond = 10 * 2 * t_trs
    t_ref = (iterations + 1) * t_solve + (iterations + 1) * t_res + t_rcond
    acc.t("transform", t_tr)
    acc.t("refine", t_ref)
    return t_lu + t_tr + t_ref, acc, tb


# ------------------------------------------------------------------------------------------
# TLR Cholesky (distla/tlr/cholesky.py): left-looking, one compression per tile
# ------------------------------------------------------------------------------------------
def _tlr(n, nb, P, Q, M, topo, rank=16, oversample=12):
    """Tiles of nb, off-diagonal ranks ``rank`` (the model takes it as an input: it depends on
    the matrix and the tolerance). Small batched kernels run at ``tlr`` x the GEMM rate."""
    acc = _Acc(P, Q)
    nt = -(-n // nb)
    r, K = float(rank), float(rank)
    sh = topo.share
    rate = M.gemm_rate(nb) * M.tlr / sh
    total = 0.0
    for k in range(nt):
        a = (nt - k) / P                   # my tile rows i >= k
        b = k / Q                          # my tile columns j < k
        t = 0.0
        if k and P > 1:
            t += Topology.bcast(topo.col, P, b * 2 * nb * K * _ISZ)
        upd = a * b * (4 * nb * r * K) + 2 * a * nb * nb * b * r
        if k and Q > 1:
            t += Topology.allreduce(topo.row, Q, a * nb * nb * _ISZ)
        panel = a * 2 * nb * nb * r                            # U V^T of the input tiles
        comp = a * 8 * nb * nb * (r + oversample)              # range finder, QR, SVD
        trsm = a * nb * nb * r
        t += (upd + panel + comp + trsm) / rate + M.potrf_time(nb) * sh
        t += 2 * Topology.allreduce(topo.row if Q > 1 else topo.col, P * Q, 16)
        t += 40 * M.call        # batched kernels: a fixed number of calls per step
        acc.f("gemm", np.full((P, Q), upd + panel))
        acc.f("compress", np.full((P, Q), comp + trsm))
        total += t
    acc.t("update", total)
    return total, acc, dict(words=0.0, messages=0.0)


def predict(algo: str, n: int, nb: int, P: int, Q: int, machine, *, lookahead: int = 1,
            tree: str = "binary", ranks_per_node: int | None = None, order: str = "row",
            variant: str = "as-written", checks: bool = True, **opts) -> Prediction:
    """The model's :class:`Prediction` for ``algo`` ('cholesky', 'lu' (partial pivoting),
    'calu', 'genp', 'rbt', 'tlr') on an n x n float64 matrix, blocks nb, grid P x Q, on
    ``machine`` (a :class:`distla.model.Machine`). ``opts``: RBT ``depth``, ``iterations``,
    ``nrhs``; TLR ``rank``. ``order``: rank order of the grid ('row', distla's default, or
    'col'). ``variant``: 'as-written', or for Cholesky 'scalapack' (the transposed panel
    rows broadcast down the process columns instead of allgathered: what
    a change of the driver would give). ``checks``: include the input checks the entry points
    run by default (NaN/Inf scan, symmetry probe, norms: about four passes over the local
    matrix), as the benchmarks time them. Not collective."""
    from .machine import load_machine
    check_inputs(algo, n, nb, P, Q, lookahead=lookahead, tree=tree,
                 ranks_per_node=ranks_per_node, order=order, variant=variant, **opts)
    M = load_machine(machine)
    n, nb, P, Q = int(n), int(min(nb, n)), int(P), int(Q)
    topo = Topology(M, P, Q, ranks_per_node, order)
    la = 1 if lookahead else 0
    if algo == "cholesky":
        t, acc, tb = _cholesky(n, nb, P, Q, M, topo, la, variant)
    elif algo in ("lu", "calu", "genp"):
        piv = {"lu": "partial", "calu": "tournament", "genp": "none"}[algo]
        t, acc, tb = _lu(n, nb, P, Q, M, topo, la, piv, tree)
    elif algo == "rbt":
        t, acc, tb = _rbt(n, nb, P, Q, M, topo, la, **opts)
    else:
        t, acc, tb = _tlr(n, nb, P, Q, M, topo, **opts)
    if checks and algo != "tlr":
        loc = float(numroc_v(n, nb, P).max()) * float(numroc_v(n, nb, Q).max()) * _ISZ
        tc = 4 * loc / M.scan_bw * topo.share + \
            4 * Topology.allreduce(topo.col if P > 1 else topo.row, P * Q, 64) + 20 * M.call
        t += tc
        acc.t("checks", tc)
    # TLR: the flops the compressed factorization does (the dense count over its time gave
    # rates of 13x the machine's peak); the others: the dense count the benchmarks use
    nf = float(sum(float(v.sum()) for v in acc.flops.values())) if algo == "tlr" else \
        nominal_flops(algo, n)
    tf = nf / t / 1e12 if t > 0 else 0.0
    peak = P * Q * M.gemm_rate(nb) / topo.share
    return Prediction(algo=algo, n=n, nb=nb, P=P, Q=Q, seconds=t, tflops=tf,
                      efficiency=nf / t / peak if t > 0 else 0.0, terms=acc.terms,
                      flops=acc.flops, bytes=acc.bytes, messages=acc.msgs, textbook=tb,
                      step_bytes=[float((b - a).max()) for a, b in
                                  zip([np.zeros((P, Q)), *acc.snaps], acc.snaps)],
                      notes=M.name)
