"""TLR Cholesky: right-looking over tile columns, panels broadcast as in the dense Cholesky.

Step ``k`` (every rank runs every step; ``(pk, qk)`` owns the diagonal tile ``k``):

1. ``(pk, qk)``: dense ``POTRF`` of ``A_kk`` (``backend.potrf``).
2. All ranks: one small host allreduce agrees on the POTRF status (and any local error of the
   previous step) and on the ranks of the panel tiles ``(i, k)``, ``i > k``; a failure ends the
   loop on every rank at the same step.
3. ``L_kk`` is broadcast down process column ``qk``; the panel owners apply the TRSM to the
   ``V`` factors only: ``A_ik L_kk^-T = U_ik (L_kk^-1 V_ik)^T`` (one TRSM on all panel tiles
   of the rank, side by side).
4. The panel ``(U_ik, V_ik)`` is broadcast along every process row from column ``qk``; then,
   for every process row ``r``, the tiles ``j`` that process column ``q`` needs (``(j, k)``
   with ``j`` owned by row ``r``) are broadcast down process column ``q`` from row ``r``: each
   rank then holds the panel tiles of its tile rows and of its tile columns.
5. Local updates, batched (stacked tiles, :mod:`distla.tlr.batched`):
   diagonal tiles ``A_jj -= U_jk (V_jk^T V_jk) U_jk^T`` (dense, SYRK-like); off-diagonal tiles
   ``A_ij -= U_ik (V_ik^T V_jk) U_jk^T`` by GEMM-LLL with recompression to ``delta``. Tiles
   are grouped by ``rank(A_ij) + rank(A_ik)`` (a short ladder of widths) so padding stays
   small; tiles whose panel factors have rank 0 are skipped.

Accuracy: every recompression truncates to the matrix's ``delta = tol ||A||_F / nt``
(see :mod:`distla.tlr.matrix`). Observed on st-2D-sqexp (n = 230 .. 4096, tiles 24 .. 256,
tol 1e-4 .. 1e-8, 1 .. 4 ranks): compression error ``||A - A_tlr||_2 / ||A||_2`` ~ 0.2-0.3 tol,
factorization error ``||A - L L^T||_2 / ||A||_2`` ~ 0.3-0.4 tol, log-determinant relative
error <= tol (about tol at 1e-4, ~1e-3 tol at 1e-8), solve backward error
``||A x - b|| / (||A|| ||x||)`` ~ 0.1 tol; the tests assert ``<= 2 tol``, ``<= tol``, ``<= tol``.

Device notes: the batched calls are ``xp.matmul`` and, for the recompression,
:func:`distla.tlr.batched.stacked_qr` / ``stacked_svd``. On NumPy the QR is LAPACK per tile
(looped in C, fastest on CPU). On CuPy the QR is the blocked batched Householder QR
(:func:`~distla.tlr.batched.householder_qr`: ~12 stacked launches per column of the stack,
independent of the tile count; CuPy's stacked ``qr`` is two cuSOLVER calls per tile). The core
SVD is ``xp.linalg.svd`` (CuPy: gesvdjBatched for cores <= 32 x 32, one call per tile above);
a batched Jacobi SVD is available (``batched.SVD_METHOD = 'jacobi'``, bench ``--svd jacobi``).
Host synchronizations per step: the POTRF status, the header allreduce, and one read of the
new ranks per recompression group.
"""
from __future__ import annotations

import time

import numpy as np

from ..errors import NotPositiveDefiniteError, agree, collective
from . import batched
from .matrix import TLRMatrix

__all__ = ["TLRCholesky", "cholesky"]


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

    def solve(self, B):
        """Collective: ``A^-1 B`` (see :func:`distla.tlr.cho_solve`)."""
        from .solve import cho_solve
        return cho_solve(self, B)


def _bucket(w: int) -> int:
    """Width ladder 4, 8, 12, 16, 24, 32, 48, 64, 96, ...: the group of width ``w``."""
    if w <= 4:
        return 4
    p = 8
    while True:
        if w <= p:
            return p
        if w <= p + p // 2:
            return p + p // 2
        p *= 2


def _npd_message(L, index, tol):
    return (f"TLR Cholesky: the compressed matrix is not positive definite: the leading minor "
            f"of order {index + 1} (global column {index}, 0-based) is not positive. Use a "
            f"tighter tol (now {tol}) or a larger nugget (diagonal shift) so that the "
            f"compression error stays below the smallest eigenvalue.")


def cholesky(T: TLRMatrix, *, overwrite: bool = False, workspace: int = 2 ** 28,
             profile: bool = False) -> TLRCholesky:
    """Collective: the TLR Cholesky factor of the symmetric positive definite TLR matrix ``T``.

    Returns a :class:`TLRCholesky`. ``overwrite=True`` factors ``T``'s storage in place
    (``T`` must not be used afterwards); otherwise ``T`` is copied first. ``workspace``: bytes
    of scratch per batched recompression call. ``profile=True`` records the seconds per phase
    (device synchronized at every phase boundary, so slower) in ``L.info['profile']``
    (maximum over ranks) and the calls per phase in ``L.info['profile_calls']``. Raises
    :class:`distla.NotPositiveDefiniteError` (``.index`` = the global column) on every rank
    when a diagonal tile is not positive definite after compression and updates.
    """
    t0 = time.perf_counter()
    with collective(getattr(getattr(T, "grid", None), "comm", None)):
        if not isinstance(T, TLRMatrix) or T.factored:
            raise TypeError(f"cholesky needs a TLRMatrix (not a factor), got {type(T).__name__}")
    L = T if overwrite else T.copy()
    L.__class__ = TLRCholesky
    grid, be, xp = L.grid, L.backend, L.xp
    comms = grid.comms(L.device)
    nt, nb = L.nt, L.nb
    from mpi4py import MPI
    err, npd, capped = None, 0, 0
    stats = {"updates": 0, "groups": 0}
    prof = batched.Profile(be) if profile else None
    sec = lambda name: batched._sec(prof, name)  # noqa: E731
    for k in range(nt):
        pk, qk = L.prow(k), L.pcol(k)
        # 1. POTRF of the diagonal tile
        Lkk = None
        status = 0
        if k in L.dslot and err is None:
            try:
                with sec("potrf"):
                    s = L.dslot[k]
                    Lkk = xp.asfortranarray(L.D[s])
                    info = be.info_value(be.potrf("L", Lkk))
                    if info:
                        status = k * nb + info  # 1-based global column
                    Lkk = xp.asfortranarray(xp.tril(Lkk))
                    L.D[s] = Lkk
            except Exception as e:  # noqa: BLE001
                err = e
        # 2. agree on status and the panel ranks
        hdr = np.zeros(2 + nt - k - 1, dtype=np.int64)
        hdr[0] = status
        hdr[1] = 0 if err is None else 1
        if k in L.col_slots:
            s0, s1 = L.col_slots[k]
            hdr[2 + L.key_rows[s0:s1] - k - 1] = L.rank[s0:s1]
        with sec("header"):
            grid.comm.Allreduce(MPI.IN_PLACE, hdr, op=MPI.MAX)
        if hdr[0] or hdr[1]:
            npd = int(hdr[0])
            break
        prank = hdr[2:]
        Kp = int(prank.max()) if prank.size else 0
        if Kp == 0:
            continue  # the panel is zero: nothing to solve or update
        mine = k in L.col_slots and grid.mycol == qk
        # 3. L_kk down process column qk, TRSM on the V factors of the panel
        if grid.mycol == qk:
            buf = Lkk if (grid.myrow == pk and Lkk is not None) else \
                xp.empty((nb, nb), L.dtype, order="F")
            with sec("bcast"):
                comms.col.bcast(buf, root=pk)
            if mine and err is None:
                try:
                    with sec("trsm"):
                        s0, s1 = L.col_slots[k]
                        kk = min(Kp, L.K)  # this rank's panel tiles have rank <= kk
                        Vp = xp.ascontiguousarray(L.V[s0:s1, :, :kk].swapaxes(1, 2))
                        be.trsm("L", "L", "N", "N", 1.0, buf,
                                Vp.reshape((s1 - s0) * kk, nb).T)
                        L.V[s0:s1, :, :kk] = Vp.swapaxes(1, 2)
                except Exception as e:  # noqa: BLE001
                    err = e
        # 4. panel along process rows, then the transposed panel down process columns
        with sec("bcast"):
            RP, rpos, CP, cpos, e = _broadcast_panel(L, k, Kp, mine, comms)
        err = err or e
        # 5. trailing updates (local, batched)
        if err is None:
            try:
                capped += _update(L, k, prank, RP, rpos, CP, cpos, workspace, stats, prof)
            except Exception as e:  # noqa: BLE001
                err = e
    if npd:
        raise NotPositiveDefiniteError(npd - 1, _npd_message(L, npd - 1, L.tol))
    agree(grid.comm, err)
    be.synchronize()
    tm = np.array([time.perf_counter() - t0])
    grid.comm.Allreduce(MPI.IN_PLACE, tm, op=MPI.MAX)
    cp = np.array([capped], dtype=np.int64)
    grid.comm.Allreduce(MPI.IN_PLACE, cp, op=MPI.SUM)
    L.info = dict(T.info)
    L.info.update(factor_time=float(tm[0]), factor_capped=int(cp[0]),
                  local_updates=stats["updates"], local_groups=stats["groups"])
    if prof is not None:
        names = ["potrf", "header", "bcast", "trsm", "diag", "stack", "qr", "svd", "assemble",
                 "store"]
        v = np.array([prof.times.get(nm, 0.0) for nm in names])
        grid.comm.Allreduce(MPI.IN_PLACE, v, op=MPI.MAX)
        L.info["profile"] = dict(zip(names, map(float, v)))
        L.info["profile_calls"] = dict(prof.counts)
    L._summarize()
    return L


def _broadcast_panel(L, k, Kp, mine, comms):
    """Collective over the grid: every rank gets the panel tiles ``(i, k)`` of its tile rows
    (``RP``, ``(len(rows), 2, nb, Kp)``: U and V, rows ``rpos``) and of its tile columns
    (``CP``, columns ``cpos``). One broadcast along each process row from column ``qk``, then
    one broadcast down each process column per process row that owns needed tiles. A local
    failure while packing is returned (last item), not raised: the broadcasts go on."""
    grid, xp, nb = L.grid, L.xp, L.nb
    qk = L.pcol(k)
    rows_after = [i for i in L.rows if i > k]
    rpos = {i: a for a, i in enumerate(rows_after)}
    RP = xp.empty((len(rows_after), 2, nb, Kp), L.dtype)
    err = None
    if rows_after:
        if mine:
            try:
                s0, s1 = L.col_slots[k]
                kk = min(Kp, L.K)
                RP[:, :, :, kk:] = 0
                RP[:, 0, :, :kk] = L.U[s0:s1, :, :kk]
                RP[:, 1, :, :kk] = L.V[s0:s1, :, :kk]
            except Exception as e:  # noqa: BLE001 - reported at the next header
                err = e
        comms.row.bcast(RP, root=qk)
    cols_after = [j for j in L.cols if j > k]
    CP = xp.empty((len(cols_after), 2, nb, Kp), L.dtype)
    cpos, off = {}, 0
    for r in range(grid.nprow):
        S = [j for j in cols_after if L.prow(j) == r]
        if not S:
            continue
        part = CP[off:off + len(S)]
        if grid.myrow == r and err is None:
            try:
                part[...] = RP[xp.asarray(np.array([rpos[j] for j in S]))]
            except Exception as e:  # noqa: BLE001
                err = e
        comms.col.bcast(part, root=r)
        for a, j in enumerate(S):
            cpos[j] = off + a
        off += len(S)
    return RP, rpos, CP, cpos, err


def _update(L, k, prank, RP, rpos, CP, cpos, workspace, stats, prof=None) -> int:
    """Local trailing update of step ``k`` (see the module docstring). Returns the number of
    tiles whose rank was cut by ``max_rank``."""
    xp = L.xp
    nb = L.nb
    # diagonal tiles: D_j -= U_jk (V_jk^T V_jk) U_jk^T
    dj = [j for j in L.diag_keys if j > k and prank[j - k - 1] > 0]
    if dj:
        with batched._sec(prof, "diag"):
            ds = xp.asarray(np.array([L.dslot[j] for j in dj]))
            ri = xp.asarray(np.array([rpos[j] for j in dj]))
            D = L.D[ds]
            batched.lr_gram_update(D, RP[ri, 0], RP[ri, 1], alpha=-1.0)
            L.D[ds] = D
    # off-diagonal tiles (i, j), i > j > k: GEMM-LLL with recompression
    slots = []
    for j in cpos:
        if j not in L.col_slots or prank[j - k - 1] == 0:
            continue
        s0, s1 = L.col_slots[j]
        for s in range(s0, s1):
            if prank[int(L.key_rows[s]) - k - 1]:
                slots.append(s)
    if not slots:
        return 0
    slots = np.array(slots, dtype=np.int64)
    I, J = L.key_rows[slots], L.key_cols[slots]
    ra, rb = prank[I - k - 1], prank[J - k - 1]
    rc = L.rank[slots]
    keys = np.array([_bucket(int(w)) for w in rc + ra])
    capped = 0
    itemsize = L.dtype.itemsize
    for b in np.unique(keys):
        g = np.flatnonzero(keys == b)
        step = max(1, int(workspace // (12 * nb * int(b) * itemsize)))
        for c0 in range(0, g.size, step):
            sel = g[c0:c0 + step]
            sl = slots[sel]
            Kc, Ka, Kb = int(rc[sel].max()), int(ra[sel].max()), int(rb[sel].max())
            d = xp.asarray(sl)
            ri = xp.asarray(np.array([rpos[int(i)] for i in I[sel]]))
            ci = xp.asarray(np.array([cpos[int(j)] for j in J[sel]]))
            U, V, kh, c = batched.gemm_lll(
                L.U[d, :, :Kc], L.V[d, :, :Kc],
                RP[ri, 0, :, :Ka], RP[ri, 1, :, :Ka],   # A_ik = U_ik V_ik^T
                CP[ci, 1, :, :Kb], CP[ci, 0, :, :Kb],   # A_jk^T = V_jk U_jk^T
                L.delta, L.max_rank, alpha=-1.0, beta=1.0, prof=prof)
            with batched._sec(prof, "store"):
                L.set_tiles(sl, U, V, kh)
            capped += c
            stats["groups"] += 1
    stats["updates"] += int(slots.size)
    return capped
