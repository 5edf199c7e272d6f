"""Solves with a TLR Cholesky factor: ``A X = B`` via ``L Y = B``, ``L^T X = Y``.

The right-hand side is replicated during the solve (every rank holds all ``n x r`` entries:
``O(n r)`` memory, as the point sets are): tile ``k`` of the solution is computed by the owner
of ``L_kk`` after the partial sums ``sum_j L_kj y_j`` of its tile row have been summed along
its process row (forward) or column (backward), then broadcast to every rank; the owners of
tile column ``k`` (row ``k``) add their low-rank products into their partial sums, batched.
"""
from __future__ import annotations

import numpy as np

from ..errors import agree, collective
from ..matrix import DistMatrix
from .cholesky import TLRCholesky, cholesky
from .matrix import TLRMatrix, compress

__all__ = ["cho_solve", "solve"]


def _tri_solve(L, Bs, trans: bool):
    """In place on the replicated stack ``Bs (nt, nb, r)``: ``L^-1 Bs`` or ``L^-T Bs``."""
    grid, be, xp = L.grid, L.backend, L.xp
    comms = grid.comms(L.device)
    nt, nb, r = Bs.shape
    acc = xp.zeros((len(L.cols) if trans else len(L.rows), nb, r), L.dtype)
    steps = range(nt - 1, -1, -1) if trans else range(nt)
    for k in steps:
        pk, qk = L.prow(k), L.pcol(k)
        owner = grid.myrow == pk and grid.mycol == qk
        if (grid.mycol == qk) if trans else (grid.myrow == pk):
            a = acc[L.col_pos[k] if trans else L.row_pos[k]]
            (comms.col if trans else comms.row).allreduce(a, "sum")
            if owner:
                xk = xp.asfortranarray(Bs[k] - a)
                be.trsm("L", "L", "T" if trans else "N", "N", 1.0, L.D[L.dslot[k]], xk)
        if not owner:
            xk = xp.empty((nb, r), L.dtype, order="F")
        comms.all.bcast(xk, root=grid.rank_of(pk, qk))
        Bs[k] = xk
        if trans:  # tiles (k, j), j < k, on my rank: acc[j] += V_kj (U_kj^T x_k)
            sl = L.row_slots.get(k)
            if sl is not None and sl.size:
                d = xp.asarray(sl)
                cj = xp.asarray(np.array([L.col_pos[int(j)] for j in L.key_cols[sl]]))
                acc[cj] += xp.matmul(L.V[d], xp.matmul(L.U[d].swapaxes(1, 2), xk[None]))
        elif grid.mycol == qk and k in L.col_slots:  # acc[i] += U_ik (V_ik^T y_k)
            s0, s1 = L.col_slots[k]
            ri = xp.asarray(np.array([L.row_pos[int(i)] for i in L.key_rows[s0:s1]]))
            acc[ri] += xp.matmul(L.U[s0:s1], xp.matmul(L.V[s0:s1].swapaxes(1, 2), xk[None]))
    return Bs


def cho_solve(L: TLRCholesky, B):
    """Collective: ``X = A^-1 B`` with the TLR Cholesky factor ``L`` of ``A``.

    ``B`` is either a :class:`~distla.DistMatrix` with ``n`` rows on ``L``'s grid and device
    (any blocking; the result is a DistMatrix in ``B``'s layout; ``B`` is gathered to every
    rank for the solve), or an array of shape ``(n,)`` or ``(n, r)`` replicated on every rank
    (NumPy or CuPy; the result is replicated, same shape, on ``L``'s device).
    """
    with collective(getattr(getattr(L, "grid", None), "comm", None)):
        if not isinstance(L, TLRCholesky):
            raise TypeError(f"cho_solve needs a TLRCholesky factor (distla.tlr.cholesky), "
                            f"got {type(L).__name__}")
        if isinstance(B, DistMatrix):
            if not (B.grid == L.grid):
                raise ValueError("B must live on the factor's process grid")
            if B.m != L.n:
                raise ValueError(f"B has {B.m} rows, the matrix is {L.n} x {L.n}")
            if B.device != L.device:
                raise TypeError(f"B is on {B.device}, the factor on {L.device}")
    if isinstance(B, DistMatrix):
        b = B.to_global(root=None)
        x = _solve_replicated(L, b)
        xh = x.get() if hasattr(x, "get") and not isinstance(x, np.ndarray) else x
        xh = np.asarray(xh, dtype=B.dtype).reshape(L.n, -1)
        loc = xh[np.ix_(B.row_indices(), B.col_indices())]
        return B._like(local=B.backend.asarray(loc))
    return _solve_replicated(L, B)


def _solve_replicated(L, b):
    err, Bs, shape = None, None, None
    try:
        Bs, shape = L._rhs_stack(b)
    except Exception as e:  # noqa: BLE001
        err = e
    agree(L.grid.comm, err)
    _tri_solve(L, Bs, trans=False)
    _tri_solve(L, Bs, trans=True)
    return L._unstack(Bs, shape)


def solve(A, B, *, tol=1e-8, max_rank=None, method="svd", overwrite=False):
    """Collective: ``A^-1 B`` for a TLR matrix ``A`` (or a dense symmetric DistMatrix, which is
    first compressed with ``tol``, ``max_rank``, ``method``); ``B`` as in :func:`cho_solve`.
    ``overwrite`` lets the factorization reuse ``A``'s TLR storage."""
    if isinstance(A, DistMatrix):
        A, overwrite = compress(A, tol=tol, max_rank=max_rank, method=method), True
    elif not isinstance(A, TLRMatrix) or A.factored:
        with collective(getattr(getattr(A, "grid", None), "comm", None)):
            raise TypeError(f"solve needs a TLRMatrix or a DistMatrix, got {type(A).__name__}")
    return cho_solve(cholesky(A, overwrite=overwrite), B)
