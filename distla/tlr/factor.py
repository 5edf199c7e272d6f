"""The TLR Cholesky factor ``L`` (``A ~ L L^T``) and the solves with it: ``A X = B`` via
``L Y = B``, ``L^T X = Y``.

The right-hand side is replicated during the solve (every rank holds all ``n x r`` entries:
``O(n r)`` memory, as the point sets are): tile ``k`` of the solution is computed by the owner
of ``L_kk`` after the partial sums ``sum_j L_kj y_j`` of its tile row have been summed along
its process row (forward) or column (backward), then broadcast to every rank; the owners of
tile column ``k`` (row ``k``) add their low-rank products into their partial sums, batched.

:mod:`distla.tlr.cholesky` computes the factor, :mod:`distla.tlr.solve` holds the public
solve functions; both import this module (and it neither of them).
"""
from __future__ import annotations

import numpy as np

from ..errors import agree, collective, signature
from ..linalg.condition import norm1_estimate, reciprocal_condition
from ..matrix import DistMatrix
from ..trace import trace
from .matrix import TLRMatrix

__all__ = ["TLRCholesky"]


class TLRCholesky(TLRMatrix):
    """The TLR Cholesky factor ``L`` (``A ~ L L^T``): same storage as :class:`TLRMatrix`, with
    the dense diagonal tiles holding ``L_kk`` (upper part zero) and the off-diagonal tiles
    ``L_ik = U_ik V_ik^T``. ``matvec(x)`` / ``matvec(x, trans=True)`` apply ``L`` / ``L^T``."""

    factored = True

    def logdet(self) -> float:
        """Collective: ``log det A ~ 2 sum log diag(L)`` on every rank."""
        from mpi4py import MPI
        xp = self.xp
        v = 0.0
        if self.diag_keys:
            v = 2.0 * float(xp.sum(xp.log(xp.diagonal(self.D, axis1=1, axis2=2))))
        b = np.array([v])
        self.grid.comm.Allreduce(MPI.IN_PLACE, b, op=MPI.SUM)
        return float(b[0])

    def rcond(self, anorm: float | None = None) -> float:
        """Collective: reciprocal 1-norm condition estimate ``1 / (||A||_1 ||A^-1||_1)`` of
        the matrix this factor approximates (``A ~ L L^T``), the same float on every rank;
        cached in ``info['rcond']``. ``||A^-1||_1`` is estimated from solves with the factor
        (block Higham-Tisseur, three solves with n x 2-3 blocks, docs/condition.md);
        ``anorm`` is ``||A||_1`` when known (exact from a dense A), else estimated the same
        way from products with ``L L^T``."""
        with collective(self.grid.comm, signature("TLRCholesky.rcond", anorm=anorm,
                                                  cached="rcond" in self.info)):
            pass        # (anorm on one rank only: the ranks ran different estimates, hung)
        if anorm is None and "rcond" in self.info:
            return self.info["rcond"]
        host = self.backend.to_host
        if anorm is None:
            anorm = self.norm1_estimate()
        mem = self.info.get("mem_solve")        # the estimate's solves are not the user's
        rc = reciprocal_condition(self.n, float(anorm), lambda: norm1_estimate(
            self.n, self.dtype, *(2 * [lambda X: np.asarray(host(_solve_replicated(self, X)))])))
        self.info.pop("mem_solve", None)
        if mem is not None:
            self.info["mem_solve"] = mem
        self.info["rcond"] = rc
        return rc

    def norm1_estimate(self) -> float:
        """Collective: an estimate (lower bound) of ``||L L^T||_1`` from products with the
        factor (three products with n x 2-3 blocks)."""
        host = self.backend.to_host

        def llt(X):
            return np.asarray(host(self.matvec(self.matvec(X, trans=True))))
        return norm1_estimate(self.n, self.dtype, llt, llt)

    def solve(self, B):
        """Collective: ``X = A^-1 B``. ``B`` is either a :class:`~distla.DistMatrix` with ``n``
        rows on this factor's grid and device (any blocking; the result is a DistMatrix in
        ``B``'s layout; ``B`` is gathered to every rank for the solve), or an array of shape
        ``(n,)`` or ``(n, r)`` replicated on every rank (NumPy or CuPy; the result is
        replicated, same shape, on this factor's device; checked to be the same on every
        rank)."""
        with collective(self.grid.comm, _rhs_signature("tlr.solve", B)):
            check_rhs(self, B)
        return _through_replicated(B, lambda b: _solve_replicated(self, b))

    def solve_triangular(self, B, trans: bool = False):
        """Collective: ``L^-1 B`` (``L^-T B`` with ``trans``); ``B`` and the result as in
        :meth:`solve` (a DistMatrix on this factor's grid, or an array replicated on every
        rank). One triangular sweep: half of :meth:`solve`. Column norms of ``L^-1 B`` are
        the quadratic forms ``diag(B^T A^-1 B)`` (kriging variances)."""
        with collective(self.grid.comm, _rhs_signature("tlr.solve_triangular", B,
                                                       trans=trans)):
            check_rhs(self, B)

        def tri(b):
            Bs, shape = self._rhs_stack(b)
            with trace("solve"):
                _tri_solve(self, Bs, trans=bool(trans))
            return self._unstack(Bs, shape)
        return _through_replicated(B, tri)


def _rhs_signature(what, B, **kw):
    """The call signature of a solve: a replicated array B by its digest (ranks holding
    different B got a mixture of their solutions, silently), a DistMatrix as usual."""
    from ..covariance import digest_or_type
    return signature(what, B if isinstance(B, DistMatrix) else digest_or_type(B), **kw)


def _through_replicated(B, f):
    """``f(b)`` for a replicated array ``b``; for a DistMatrix B: f of B gathered to every
    rank, returned in B's layout (each rank keeps its own entries). Collective."""
    if not isinstance(B, DistMatrix):
        return f(B)
    x = f(B.to_global(root=None))
    xh = x.get() if hasattr(x, "get") and not isinstance(x, np.ndarray) else x
    xh = np.asarray(xh, dtype=B.dtype).reshape(B.m, B.n)
    loc = np.asfortranarray(xh[np.ix_(B.row_indices(), B.col_indices())])
    return B._like(local=B.backend.asarray(loc))


def check_rhs(A, B) -> None:
    """Local (callers agree on it): ValueError/TypeError unless ``B`` suits a solve with the
    ``n x n`` matrix ``A`` (a TLR matrix or factor, or a dense DistMatrix; its ``grid``, ``n``,
    ``dtype`` and ``device`` are read): a DistMatrix with ``n`` rows on A's grid and device
    of A's dtype, or an array of shape ``(n,)`` or ``(n, r)`` whose dtype casts to A's."""
    n, dtype = A.n, np.dtype(A.dtype)
    if isinstance(B, DistMatrix):
        if not (B.grid == A.grid):
            raise ValueError("B must live on the factor's process grid")
        if B.m != n:
            raise ValueError(f"B has {B.m} rows, the matrix is {n} x {n}")
        if B.device != A.device:
            raise TypeError(f"B is on {B.device}, the factor on {A.device}")
        if B.dtype != dtype:     # as the dense solvers (never truncate complex)
            raise TypeError(f"solve: dtypes differ ({dtype} and {B.dtype}); use astype first")
        return
    b = B if (hasattr(B, "shape") and hasattr(B, "dtype")) else np.asarray(B)
    if len(b.shape) not in (1, 2) or b.shape[0] != n:
        raise ValueError(f"expected an array of {n} rows (1-D or 2-D), got shape "
                         f"{tuple(b.shape)}")
    if not np.can_cast(b.dtype, dtype, "same_kind"):
        raise TypeError(f"a {b.dtype} right-hand side with a {dtype} matrix (it would be "
                        f"truncated); use a matrix of that kind")


def _solve_replicated(L, b):
    """Collective: ``A^-1 b`` for ``b`` replicated (``(n,)`` or ``(n, r)``)."""
    err, Bs, shape = None, None, None
    try:
        Bs, shape = L._rhs_stack(b)
    except Exception as e:  # noqa: BLE001 - agreed on below
        err = e
    agree(L.grid.comm, err)
    with trace("solve"):
        _tri_solve(L, Bs, trans=False)
        _tri_solve(L, Bs, trans=True)
    L.info["mem_solve"] = int(2 * Bs.nbytes)   # the stack and the partial sums
    return L._unstack(Bs, shape)


def _tri_solve(L, Bs, trans: bool):
    """Collective, in place on the replicated stack ``Bs (nt, nb, r)``: ``L^-1 Bs`` or
    ``L^-T Bs``."""
    grid, be, xp = L.grid, L.backend, L.xp
    comms = grid.comms(L.device)
    nt, nb, r = Bs.shape
    acc = xp.zeros((len(L.cols) if trans else len(L.rows), nb, r), L.dtype)
    for k in (range(nt - 1, -1, -1) if trans else range(nt)):
        pk, qk = L.prow(k), L.pcol(k)
        owner = grid.myrow == pk and grid.mycol == qk
        xk = None
        if (grid.mycol == qk) if trans else (grid.myrow == pk):
            a = acc[L.col_pos[k] if trans else L.row_pos[k]]
            (comms.col if trans else comms.row).allreduce(a, "sum")
            if owner:
                xk = xp.asfortranarray(Bs[k] - a)
                be.trsm("L", "L", "T" if trans else "N", "N", 1.0, L.D[L.dslot[k]], xk)
        if xk is None:
            xk = xp.empty((nb, r), L.dtype, order="F")
        comms.all.bcast(xk, root=grid.rank_of(pk, qk))
        Bs[k] = xk
        _accumulate(L, acc, k, xk, trans)
    return Bs


def _accumulate(L, acc, k, xk, trans: bool):
    """Local: add the products of this rank's tiles of row ``k`` (``trans``: ``acc[j] +=
    V_kj (U_kj^T x_k)``) or column ``k`` (``acc[i] += U_ik (V_ik^T y_k)``) into ``acc``."""
    xp = L.xp
    if trans:
        sl = L.row_slots.get(k)
        if sl is not None and sl.size:
            d = xp.asarray(sl)
            cj = xp.asarray(np.array([L.col_pos[int(j)] for j in L.key_cols[sl]]))
            acc[cj] += xp.matmul(L.V[d], xp.matmul(L.U[d].swapaxes(1, 2), xk[None]))
    elif L.grid.mycol == L.pcol(k) and k in L.col_slots:
        s0, s1 = L.col_slots[k]
        ri = xp.asarray(np.array([L.row_pos[int(i)] for i in L.key_rows[s0:s1]]))
        acc[ri] += xp.matmul(L.U[s0:s1], xp.matmul(L.V[s0:s1].swapaxes(1, 2), xk[None]))
