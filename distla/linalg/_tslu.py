"""TSLU: tournament pivoting for one panel (the pivot search of CALU, Grigori-Demmel-Xiang).

The panel (``m x b``, its rows spread over one process column) is reduced to ``b`` pivot rows:
every rank runs GEPP on a copy of its own rows and proposes the rows GEPP put on top (their
ORIGINAL values); pairs of candidate sets (``2b x b`` stacks) are reduced by GEPP up a binary
tree, or all candidate sets are gathered and reduced by one GEPP (flat tree). The final GEPP
also gives the factored diagonal block ``L11 \\ U11`` of the selected rows in pivot order.

Why it works: GEPP's ``P R = L U`` with unit ``L`` means the rows it selects span the same row
space as all its input rows, so every tree node keeps the panel's row space, and the final
``b`` rows are nonsingular whenever the panel has full column rank (exact arithmetic), and the
first exactly zero pivot of the final GEPP is the panel's first dependent column. CALU's
worst-case growth bound is larger than GEPP's (Grigori, Demmel and Xiang: 2^(n(H+1)-1) for a
tree of height H, vs 2^(n-1)), but it behaves like GEPP in practice.

Algorithm notes: docs/lu.md (tournament pivoting).
"""
from __future__ import annotations

import numpy as np

from ..trace import trace
from ._pivoting import apply_swaps

__all__ = ["tournament"]

def _gepp_select(stack, kb, backend):
    """GEPP on a copy of ``stack`` (c x kb). Returns (selected row positions in pivot order
    (host, min(c, kb) of them), factored copy, info)."""
    c = stack.shape[0]
    w = backend.xp.array(stack, order="F", copy=True)
    piv, info = backend.getrf(w)
    order = apply_swaps(np.asarray(backend.to_host(piv)), c)
    return order[:min(c, kb)], w, info


def _take(xp, vals, sel):
    return vals[xp.asarray(sel)]


def tournament(panel, grows, kb: int, *, comm, root: int, tree: str, backend):
    """Select the ``kb`` pivot rows of a panel by tournament.

    Collective over the process column: ``panel`` is this rank's local rows of the panel that
    are still active (``mloc x kb`` view, current values), ``grows`` their global row indices
    (host int64, increasing), ``comm`` the data communicator of the process column (all
    messages, values and row indices, go through it), ``root`` the column rank that ends the
    reduction (binary tree), ``tree`` 'binary' or 'flat'. The column must hold at least ``kb``
    active rows in all.

    Returns ``(winners, f11, info)`` on every rank of the column: ``winners`` the ``kb`` global
    rows in pivot order (host int64), ``f11`` the ``kb x kb`` factored block (unit L11 below the
    diagonal, U11 on and above) of those rows in that order, ``info`` LAPACK's info of that
    factorization (> 0: U11[info-1, info-1] is exactly zero). On GPU the local GEPPs run on the
    device and the candidate blocks travel through NCCL; pivots come to the host per GEPP.
    Traced as phases ``p_leaf`` and ``p_tree``.
    """
    with trace("p_leaf"):
        vals, idx, w, info = _leaf(panel, grows, kb, backend)
    f11 = w[:kb] if w is not None and len(idx) == kb else None
    with trace("p_tree"):
        return _reduce(vals, idx, f11, info, kb, comm=comm, root=root, tree=tree,
                       backend=backend)


def _leaf(panel, grows, kb, backend):
    """GEPP on a copy of my rows: (candidate values, their global rows, factored copy, info)."""
    grows = np.asarray(grows, dtype=np.int64)
    if len(grows):
        sel, w, info = _gepp_select(panel, kb, backend)
        return _take(backend.xp, panel, sel), grows[sel], w, info
    return backend.empty((0, kb), panel.dtype), grows[:0], None, 0


def _reduce(vals, idx, f11, info, kb, *, comm, root, tree, backend):
    """The tournament above the leaves (see :func:`tournament`)."""
    xp, dt = backend.xp, vals.dtype
    P, me = comm.size, comm.rank

    def pack(vals, idx):
        """Fixed-size messages: values (kb x kb, zero padded) and [count, rows..., -1...]."""
        buf = backend.zeros((kb, kb), dt)
        buf[:len(idx)] = vals
        ib = np.full(kb + 1, -1, dtype=np.int64)
        ib[0] = len(idx)
        ib[1:1 + len(idx)] = idx
        return buf, xp.asarray(ib)

    def merge(parts):
        """GEPP on the stacked candidate sets [(vals, idx), ...] (in this order)."""
        parts = [(v, i) for v, i in parts if len(i)]
        if not parts:  # a subtree without active rows (late panels, many process rows)
            return backend.empty((0, kb), dt), np.empty(0, dtype=np.int64), None, 0
        stack = xp.concatenate([v for v, _ in parts], axis=0)
        allidx = np.concatenate([i for _, i in parts])
        sel, w, info = _gepp_select(stack, kb, backend)
        return _take(xp, stack, sel), allidx[sel], w[:kb], info

    # Every message (candidate values and their row indices) goes through the data
    # communicator: no host MPI between device collectives (it could deadlock GPU ranks).
    if P == 1:
        winners = idx
    elif tree == "flat":
        buf, ib = pack(vals, idx)
        allbuf = backend.empty((P * kb * kb,), dt)
        comm.allgather(buf, allbuf)
        allib = xp.empty(P * (kb + 1), dtype=np.int64)
        comm.allgather(ib, allib)
        allbuf = allbuf.reshape(P, kb, kb)  # [rank, col, row]: each block is column-major
        allib = np.asarray(backend.to_host(allib)).reshape(P, kb + 1)
        parts = [(allbuf[r].T[:allib[r, 0]], allib[r, 1:1 + allib[r, 0]]) for r in range(P)]
        _, winners, f11, info = merge(parts)
    else:
        r = (me - root) % P
        s = 1
        while s < P:
            if r % (2 * s) == 0:
                if r + s < P:
                    peer = (r + s + root) % P
                    buf = backend.empty((kb, kb), dt)
                    ibd = xp.empty(kb + 1, dtype=np.int64)
                    comm.exchange([], [(peer, buf), (peer, ibd)])
                    ib = np.asarray(backend.to_host(ibd))
                    c = int(ib[0])
                    vals, idx, f11, info = merge([(vals, idx), (buf[:c], ib[1:1 + c])])
            else:  # r % (2 s) == s: hand my candidates to my parent and stop
                peer = (r - s + root) % P
                buf, ibd = pack(vals, idx)
                comm.exchange([(peer, buf), (peer, ibd)], [])
                break
            s *= 2
        out = np.empty(kb + 1, dtype=np.int64)
        if me == root:
            out[0] = backend.info_value(info)
            out[1:] = idx
            f11 = xp.asfortranarray(f11)
        else:
            f11 = backend.empty((kb, kb), dt)
        outd = xp.asarray(out)
        comm.bcast(f11, root)
        comm.bcast(outd, root)
        out = np.asarray(backend.to_host(outd))
        winners, info = out[1:], int(out[0])
    if f11 is None:  # pragma: no cover - P == 1 always has kb local rows
        raise RuntimeError("tournament: fewer active rows than the panel width")
    return np.asarray(winners, dtype=np.int64), xp.asfortranarray(f11), backend.info_value(info)
