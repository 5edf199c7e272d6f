"""TLR Cholesky: left-looking over tile columns, one compression per tile.

Step ``k`` (every rank runs every step; ``(pk, qk)`` owns the diagonal tile ``k``):

1. Row ``k`` of the factor so far, ``L_kj = U_kj V_kj^T`` for ``j < k``, is broadcast down
   every process column from process row ``pk`` (each column gets the tiles of its own
   tile columns ``j``).
2. Process row ``pk`` sums the updates of the diagonal tile, ``G_k = sum_j L_kj L_kj^T``
   (summed along the process row when ``Q > 1``), and ``(pk, qk)`` factors ``A_kk - G_k``
   (``POTRF``). One small host allreduce agrees on its status (and any local error); a failure
   ends the loop on every rank at the same step.
3. ``L_kk`` goes down process column ``qk``.
4. The panel, in chunks of local tile rows ``i > k`` sized by the workspace: every rank sums
   its updates ``G_i = sum_j U_ij (V_ij^T V_kj) U_kj^T`` (two batched GEMMs for all ``(i, j)``
   and one GEMM with inner dimension ``sum_j rank(L_kj)``), the sums meet on process column
   ``qk``, which forms the dense chunk ``A_ik - G_i``, compresses it
   (:func:`distla.tlr.batched.compress_tiles`, adaptive randomized range finder started at the
   previous panel's rank plus a margin) to ``delta`` and applies the TRSM to the ``V``
   factors only: ``A_ik L_kk^-T = U_ik (L_kk^-1 V_ik)^T``. A second small allreduce agrees on
   the largest new rank (the width of step 1's buffer).

Right-looking TLR (HiCMA's) recompresses every tile at every step, ``nt^3 / 6`` small
QR + SVD recompressions in all; left-looking compresses each tile once (``nt^2 / 2``) from the
dense sum of all its updates, so the flops are in large GEMMs and the small factorizations are
few and batched (GPU: one CUDA kernel launch per stack, :mod:`distla.tlr._cuda`). Each tile is
truncated once, so the error is ``delta`` per tile, not one ``delta`` per update.

Accuracy: every panel tile is truncated to the matrix's ``delta = tol ||A||_F / nt``
(see :mod:`distla.tlr.matrix`). Observed on st-2D-sqexp (n = 230 .. 4096, tiles 24 .. 256,
tol 1e-4 .. 1e-8, 1 .. 4 ranks): compression error ``||A - A_tlr||_2 / ||A||_2`` ~ 0.2-0.3 tol,
factorization error ``||A - L L^T||_2 / ||A||_2`` ~ 0.3-0.4 tol, log-determinant relative
error of order tol (<= tol at n <= 1000; 1.3, 1.6 and 2.3 tol at n = 1500, 2000, 3000, tile
200-256, tol 1e-4, cond ~1e4), solve backward error ``||A x - b|| / (||A|| ||x||)`` ~ 0.1 tol;
the tests assert ``<= 2 tol``, ``<= tol``, ``<= tol`` on their sizes. The log-determinant's
error grows with the condition number and with n (SqExp beta 0.3, nugget 1e-6, n = 400,
tol 1e-10: relative error 1.5e-8 to 2.8e-8 with compression and factorization errors below
tol).

Memory: besides the factor's stacks, one chunk of the panel (dense ``nb x nb`` tiles of the
update sums and the panel) and the update products of step 4, at most ``workspace`` bytes
(default: a quarter of the free memory, agreed over the grid): no dense tile column is ever
formed whole. ``L.info['mem_factor']`` reports the largest footprint (stacks + chunk).

Phases traced (:mod:`distla.trace`): bcast, update, reduce, potrf, header, panel, compress,
trsm, store (and the compression's range, residual, qr, svd, assemble).

Algorithm notes: docs/tlr.md.
"""
from __future__ import annotations

import time
import warnings

import numpy as np

from ..errors import LinAlgWarning, NotPositiveDefiniteError, agree, collective, signature
from ..trace import trace
from . import _args, _memory, batched
from .factor import TLRCholesky
from .matrix import TLRMatrix

__all__ = ["TLRCholesky", "cholesky"]


def cholesky(T: TLRMatrix, *, overwrite: bool = False, workspace: int | None = None,
             seed: int = 0) -> TLRCholesky:
    """Collective: the TLR Cholesky factor of the symmetric positive definite TLR matrix ``T``.

    Returns a :class:`TLRCholesky`. ``overwrite=True`` factors ``T``'s storage in place
    (``T`` must not be used afterwards); otherwise ``T`` is copied first. ``workspace``: bytes
    of scratch for one chunk of the panel (default: a quarter of the free memory; the same on
    every rank). ``seed``: the random test matrices of the panel compressions. Raises
    :class:`distla.NotPositiveDefiniteError` (``.index`` = the global column) on every rank
    when a diagonal tile is not positive definite after compression and updates, and
    :class:`distla.DistlaError` on every rank when the factor will not fit in memory.
    Phases are timed by an active :class:`distla.trace.Tracer`.
    """
    t0 = time.perf_counter()
    L = _start(T, overwrite, signature("tlr.cholesky", overwrite=overwrite,
                                       workspace=workspace, seed=seed),
               check=lambda: (_args.check_seed(seed), _args.check_workspace(workspace)))
    st = _Loop(L, workspace, seed, rank_guess=int(T.ranks.max))
    for k in range(L.nt):
        RK = st.row_of_factor(k)             # 1. L_kj (j < k) down every process column
        Lkk = st.diagonal(k, RK)             # 2. A_kk - sum_j L_kj L_kj^T = L_kk L_kk^T
        if st.agree_pivot() or k == L.nt - 1:
            break
        Lkk = st.diagonal_down(k, Lkk)       # 3. L_kk down process column k
        st.panel(k, RK, Lkk)                 # 4. L_ik = (A_ik - sum_j L_ij L_kj^T) L_kk^-T
        if st.agree_ranks():
            break
    return _finish(st, T, t0)


def _start(T, overwrite, sig=None, check=None):
    """Collective: check ``T`` and the other arguments (``check()``, which raises on a bad
    one; and that every rank called with the same arguments, ``sig``), check that a copy (and
    the workspace) fits, return the factor's storage (``T`` itself with ``overwrite``)."""
    with collective(getattr(getattr(T, "grid", None), "comm", None), sig):
        if not isinstance(T, TLRMatrix) or T.factored:
            raise TypeError(f"cholesky needs a TLRMatrix (not a factor), got {type(T).__name__}")
        if check is not None:
            check()
    if not overwrite:
        own = T.D.nbytes + T.U.nbytes + T.V.nbytes
        _memory.require(T.grid.comm, own, _memory.available(T.device),
                        "Cholesky (a copy of the matrix; pass overwrite=True to factor in "
                        "place)", T.n)
    L = T if overwrite else T.copy()
    L.__class__ = TLRCholesky
    return L


class _Loop:
    """One rank's state of the left-looking loop: the factor, the first local error (after
    it the rank computes nothing but still takes part in every collective, so nothing
    hangs), the agreed widths and the workspace."""

    def __init__(self, L, workspace, seed, rank_guess):
        self.L, self.grid, self.xp = L, L.grid, L.xp
        self.comms = L.grid.comms(L.device)
        self.err, self.status, self.npd, self.capped = None, 0, 0, 0
        self.Kg = 0                  # largest rank of the factor's tiles so far (agreed)
        self.rguess = rank_guess     # expected panel rank (for the range finder)
        self.kmax = 0                # largest rank of this rank's current panel
        self.cols_prev: list = []
        self.rng = _args.rank_rng(L.xp, seed, L.grid.rank)
        self.work = _memory.workspace(L.device, L.grid.comm, workspace)
        self.peak = 0                # bytes of the largest chunk of scratch

    def guard(self, fn, *args, default=None):
        """Run local work unless this rank already failed; record its exception."""
        if self.err is not None:
            return default
        try:
            return fn(*args)
        except Exception as e:  # noqa: BLE001 - agreed on at the next header
            self.err = _memory.explained(e, "Cholesky", self.L.n)
            return default

    # ---- step 1 -----------------------------------------------------------------------
    def row_of_factor(self, k):
        """Collective over process columns: ``(U_kj, V_kj)`` for this rank's tile columns
        ``j < k`` as ``(#j, 2, nb, Kg)``, from process row ``pk`` (None if nothing to send)."""
        L = self.L
        self.cols_prev = [j for j in L.cols if j < k]
        if not (self.cols_prev and self.Kg):
            return None
        RK = self.xp.zeros((len(self.cols_prev), 2, L.nb, self.Kg), L.dtype)
        if self.grid.myrow == L.prow(k):
            self.guard(_pack_row, L, k, self.cols_prev, RK)
        with trace("bcast"):
            self.comms.col.bcast(RK, root=L.prow(k))
        return RK

    # ---- steps 2 and 4: update sums ---------------------------------------------------
    def sums(self, rows, k, RK):
        """Collective over the process row: ``G_i = sum_{j<k} L_ij L_kj^T`` for the local
        tile rows ``rows``, ``(len(rows), nb, nb)``, or None when there is nothing to add."""
        L = self.L
        if not (k and self.Kg):
            return None
        G = None
        if RK is not None:
            with trace("update"):
                G = self.guard(_update_sums, L, rows, self.cols_prev, RK)
        if self.grid.npcol > 1:
            if G is None:
                G = self.xp.zeros((len(rows), L.nb, L.nb), L.dtype)
            with trace("reduce"):
                self.comms.row.allreduce(G, "sum")
        return G

    # ---- step 2 -----------------------------------------------------------------------
    def diagonal(self, k, RK):
        """Process row ``pk``: the diagonal tile's update; ``(pk, qk)`` factors it."""
        L = self.L
        self.status = 0
        if self.grid.myrow != L.prow(k):
            return None
        G = self.sums([k], k, RK)
        if self.grid.mycol != L.pcol(k):
            return None
        return self.guard(self._potrf, k, G)

    def _potrf(self, k, G):
        L = self.L
        s = L.dslot[k]
        with trace("potrf"):
            Lkk, info = _potrf(L.backend, L.D[s] if G is None else L.D[s] - G[0])
            L.D[s] = Lkk
        if info:
            self.status = k * L.nb + info    # 1-based global column
        return Lkk

    def agree_pivot(self) -> bool:
        """Collective: did any rank meet a non-positive pivot or an error?"""
        self.npd, failed = _header(self.grid, self.status, self.err)
        return bool(self.npd) or failed

    # ---- step 3 -----------------------------------------------------------------------
    def diagonal_down(self, k, Lkk):
        """Collective over process column ``qk``: ``L_kk`` from ``(pk, qk)``."""
        L = self.L
        if self.grid.mycol != L.pcol(k):
            return None
        buf = Lkk if Lkk is not None else self.xp.empty((L.nb, L.nb), L.dtype, order="F")
        with trace("bcast"):
            self.comms.col.bcast(buf, root=L.prow(k))
        return buf

    # ---- step 4 -----------------------------------------------------------------------
    def panel(self, k, RK, Lkk):
        """Collective over process rows: tile column ``k`` below the diagonal, chunk by
        chunk (the same chunks on every rank of a process row)."""
        L = self.L
        rows = [i for i in L.rows if i > k]
        self.kmax = 0
        step = self._rows_per_chunk(k)
        for c0 in range(0, len(rows), step):
            G = self.sums(rows[c0:c0 + step], k, RK)
            if self.grid.mycol == L.pcol(k):
                self.guard(self._compress_chunk, k, c0, len(rows[c0:c0 + step]), G, Lkk)

    def _rows_per_chunk(self, k):
        """Tile rows per chunk, from quantities every rank of a process row agrees on."""
        L = self.L
        b = -(-k // self.grid.npcol)         # most local tile columns j < k on any rank
        per_row = (3 * L.nb * L.nb + 4 * b * L.nb * self.Kg) * L.dtype.itemsize
        step = max(1, int(self.work // max(1, per_row)))
        self.peak = max(self.peak, min(step, len(L.rows)) * per_row)
        return step

    def _compress_chunk(self, k, c0, count, G, Lkk):
        L, xp = self.L, self.xp
        s0 = L.col_slots[k][0] + c0
        sl = slice(s0, s0 + count)
        with trace("panel"):
            P = xp.matmul(L.U[sl], L.V[sl].swapaxes(1, 2))
            if G is not None:
                P -= G
        kmax, capped = _compress_panel(L, sl, P, Lkk, self.rguess, self.rng)
        self.kmax, self.capped = max(self.kmax, kmax), self.capped + capped

    def agree_ranks(self) -> bool:
        """Collective: the largest new rank (step 1's width); did any rank fail?"""
        self.rguess, failed = _header(self.grid, self.kmax, self.err)
        self.Kg = max(self.Kg, self.rguess)
        return failed


def _finish(st, T, t0):
    """Collective: raise the agreed failure, or record times, counters and memory."""
    L, grid = st.L, st.grid
    from mpi4py import MPI
    agree(grid.comm, st.err)
    if st.npd:
        raise NotPositiveDefiniteError(st.npd - 1, _npd_message(L, st.npd - 1, L.tol))
    L.backend.synchronize()
    own = L.D.nbytes + L.U.nbytes + L.V.nbytes
    v = np.array([time.perf_counter() - t0, float(own + st.peak)])
    grid.comm.Allreduce(MPI.IN_PLACE, v, op=MPI.MAX)
    cp = np.array([st.capped], dtype=np.int64)
    grid.comm.Allreduce(MPI.IN_PLACE, cp, op=MPI.SUM)
    L.info = dict(T.info)
    L.info.update(factor_time=float(v[0]), factor_capped=int(cp[0]), mem_factor=int(v[1]),
                  workspace=int(st.work))
    L._summarize()
    if L.info["factor_capped"] and L.tol is not None:   # (summed: the same on every rank)
        warnings.warn(f"tlr.cholesky: max_rank={L.max_rank} capped the ranks of "
                      f"{L.info['factor_capped']} tile(s) of the factor below what their share "
                      f"of tol={L.tol:g} needs: the factorization error may exceed tol, and "
                      f"solves and log-determinants may be far less accurate than tol; raise "
                      f"max_rank (or leave it None) or loosen tol", LinAlgWarning, stacklevel=3)
    return L


def _npd_message(L, index, tol):
    if index < L.nb:   # the first diagonal tile is dense and exact: no compression touched it
        return (f"TLR Cholesky: the matrix is not positive definite: its leading {index + 1} x "
                f"{index + 1} block (in the first diagonal tile, stored exactly) is not "
                f"(global column {index}, 0-based); no tolerance can fix that: check the "
                f"kernel, its parameters and the nugget")
    knob = (f"a tighter tol (now {tol})" if tol is not None else "")
    if L.max_rank is not None:
        knob += (" or " if knob else "") + f"a larger max_rank (now {L.max_rank})"
    return (f"TLR Cholesky: the compressed matrix is not positive definite: the leading minor "
            f"of order {index + 1} (global column {index}, 0-based) is not positive. Either the "
            f"matrix itself is not positive definite, or the compression error exceeds its "
            f"smallest eigenvalue: then use {knob} or a larger nugget (diagonal shift).")


def _header(grid, value: int, err):
    """Collective: ``(max of value, whether any rank has an error)`` over the grid (one small
    host allreduce)."""
    from mpi4py import MPI
    hdr = np.array([value, 0 if err is None else 1], dtype=np.int64)
    with trace("header"):
        grid.comm.Allreduce(MPI.IN_PLACE, hdr, op=MPI.MAX)
    return int(hdr[0]), bool(hdr[1])


def _pack_row(L, k, cols_prev, RK):
    """Local: this rank's ``(U_kj, V_kj)`` into the broadcast buffer ``RK``."""
    xp = L.xp
    d = xp.asarray(np.array([L.slot[(k, j)] for j in cols_prev]))
    w = min(RK.shape[3], L.K)
    RK[:, 0, :, :w] = L.U[d, :, :w]
    RK[:, 1, :, :w] = L.V[d, :, :w]


def _potrf(be, D):
    """``(tril(chol(D)) Fortran-ordered, LAPACK info)``. On NumPy ranks NumPy's own LAPACK is
    tried first: the TLR updates run in NumPy's BLAS (``matmul``), and the backend's LAPACK
    (SciPy's, a second OpenBLAS with its own threads) then waits ~0.1 s per call for the
    first library's spinning threads on a 2-core machine; the backend reports the failing
    column when NumPy's raises."""
    xp = be.xp
    if xp is np:
        try:
            return np.asfortranarray(np.linalg.cholesky(D)), 0
        except np.linalg.LinAlgError:
            pass
    Lkk = xp.asfortranarray(D)
    info = be.info_value(be.potrf("L", Lkk))
    return xp.asfortranarray(xp.tril(Lkk)), info


def _update_sums(L, rows, cols_prev, RK):
    """Local: ``G_i = sum_j L_ij L_kj^T`` for the tile rows ``i`` in ``rows`` and tile columns
    ``j`` in ``cols_prev`` of this rank, ``(len(rows), nb, nb)``; ``RK`` holds ``(U_kj, V_kj)``
    as ``(len(cols_prev), 2, nb, Kg)``. ``L_ij L_kj^T = U_ij (V_ij^T V_kj) U_kj^T``: two
    batched GEMMs over all ``(i, j)``, then one GEMM ``[S_i0 .. S_ib] [U_k0 .. U_kb]^T`` whose
    inner dimension packs only the nonzero columns of the ``U_kj`` (``sum_j rank(L_kj)``)."""
    xp, nb = L.xp, L.nb
    a, b, Kg = len(rows), len(cols_prev), RK.shape[3]
    w = min(L.K, Kg)
    G = xp.zeros((a, nb, nb), L.dtype)
    cols = xp.flatnonzero(xp.any(RK[:, 0] != 0, axis=1).ravel()) if w else xp.zeros(0)
    if cols.size == 0:
        return G
    jj, cc = cols // Kg, cols % Kg
    RUt = RK[:, 0].transpose(1, 0, 2)[:, jj, cc]                    # (nb, packed)
    d = xp.asarray(np.array([[L.slot[(i, j)] for j in cols_prev] for i in rows]).ravel())
    C = xp.matmul(L.V[d, :, :w].reshape(a, b, nb, w).swapaxes(2, 3), RK[:, 1][None])
    S = xp.matmul(L.U[d, :, :w].reshape(a, b, nb, w), C)           # (a, b, nb, Kg)
    S2 = S.swapaxes(1, 2)[:, :, jj, cc].reshape(a * nb, cols.size)
    G[...] = xp.matmul(S2, RUt.T).reshape(a, nb, nb)
    return G


def _compress_panel(L, sl, panel, Lkk, rguess, rng):
    """Local, on process column ``pcol(k)``: compress the dense panel tiles of the slots
    ``sl`` (``panel (c, nb, nb)``), apply ``L_kk^-1`` to their ``V`` factors and store them.
    Returns (largest new rank, tiles capped by max_rank)."""
    xp, nb = L.xp, L.nb
    r0 = min(nb, max(16, -(-(rguess + 12) // 8) * 8))   # expected rank + oversampling
    with trace("compress"):
        U, V, kh, capped = batched.compress_tiles(panel, L.delta, L.max_rank, "rsvd", rng,
                                                  r0=r0)
    c, _, kk = V.shape
    if kk:
        with trace("trsm"):
            Vp = xp.ascontiguousarray(V.swapaxes(1, 2))            # (c, kk, nb)
            L.backend.trsm("L", "L", "N", "N", 1.0, Lkk, Vp.reshape(c * kk, nb).T)
            V = Vp.swapaxes(1, 2)
    with trace("store"):
        L.set_tiles(np.arange(sl.start, sl.stop), U, V, kh)
    return (int(kh.max()) if kh.size else 0), capped
