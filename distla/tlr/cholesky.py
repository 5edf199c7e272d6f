"""TLR Cholesky: left-looking over tile columns, one compression per tile.

Step ``k`` (every rank runs every step; ``(pk, qk)`` owns the diagonal tile ``k``):

1. Row ``k`` of the factor so far, ``L_kj = U_kj V_kj^T`` for ``j < k``, is broadcast down
   every process column from process row ``pk`` (each column gets the tiles of its own
   tile columns ``j``).
2. Every rank sums the updates of its tile rows ``i >= k`` over its tile columns ``j < k``:
   ``G_i = sum_j U_ij (V_ij^T V_kj) U_kj^T`` -- two batched GEMMs for all ``(i, j)`` and one
   GEMM with inner dimension ``(#j) K`` for the sum, densely (``nb x nb`` per tile row).
3. The ``G_i`` are summed along process rows (skipped when ``Q == 1``); process column ``qk``
   forms the dense panel ``A_ik - G_i`` (``A_ik = U_ik V_ik^T`` from the compressed input)
   and ``(pk, qk)`` factors ``A_kk - G_k`` (``POTRF``). One small host allreduce agrees on
   its status (and any local error); a failure ends the loop on every rank at the same step.
4. ``L_kk`` goes down process column ``qk``; the panel owners compress their dense panel
   tiles at once (:func:`distla.tlr.batched.compress_tiles`, adaptive randomized range finder,
   started at the previous panel's rank plus a margin) to ``delta``, and apply the TRSM to the
   ``V`` factors only: ``A_ik L_kk^-T = U_ik (L_kk^-1 V_ik)^T`` (one TRSM for the panel).
   A second small allreduce agrees on the largest new rank (the width of step 1's buffer).

Right-looking TLR (HiCMA's) recompresses every tile at every step, ``nt^3 / 6`` small
QR + SVD recompressions in all; left-looking compresses each tile once (``nt^2 / 2``) from the
dense sum of all its updates, so the flops are in large GEMMs and the small factorizations are
few and batched (GPU: one CUDA kernel launch per stack, :mod:`distla.tlr._cuda`). Each tile is
truncated once, so the error is ``delta`` per tile, not one ``delta`` per update.

Accuracy: every panel tile is truncated to the matrix's ``delta = tol ||A||_F / nt``
(see :mod:`distla.tlr.matrix`). Observed on st-2D-sqexp (n = 230 .. 4096, tiles 24 .. 256,
tol 1e-4 .. 1e-8, 1 .. 4 ranks): compression error ``||A - A_tlr||_2 / ||A||_2`` ~ 0.2-0.3 tol,
factorization error ``||A - L L^T||_2 / ||A||_2`` ~ 0.3-0.4 tol, log-determinant relative
error <= tol, solve backward error ``||A x - b|| / (||A|| ||x||)`` ~ 0.1 tol; the tests assert
``<= 2 tol``, ``<= tol``, ``<= tol``.

Memory: the dense panel (local tile rows ``i > k`` of column ``k``, ``nb x nb`` each) and the
update sums of step 2, computed in chunks of tile rows of at most ``workspace`` bytes.
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


def _npd_message(L, index, tol):
    knob = (f"a tighter tol (now {tol})" if tol is not None else "")
    if L.max_rank is not None:
        knob += (" or " if knob else "") + f"a larger max_rank (now {L.max_rank})"
    return (f"TLR Cholesky: the compressed matrix is not positive definite: the leading minor "
            f"of order {index + 1} (global column {index}, 0-based) is not positive. Use "
            f"{knob} or a larger nugget (diagonal shift) so that the compression error stays "
            f"below the smallest eigenvalue.")


def cholesky(T: TLRMatrix, *, overwrite: bool = False, workspace: int = 2 ** 30,
             seed: int = 0, profile: bool = False) -> TLRCholesky:
    """Collective: the TLR Cholesky factor of the symmetric positive definite TLR matrix ``T``.

    Returns a :class:`TLRCholesky`. ``overwrite=True`` factors ``T``'s storage in place
    (``T`` must not be used afterwards); otherwise ``T`` is copied first. ``workspace``: bytes
    of scratch for the update sums (tile rows are processed in chunks). ``seed``: the random
    test matrices of the panel compressions. ``profile=True`` records the seconds per phase
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
    nt, nb, dtype = L.nt, L.nb, L.dtype
    from mpi4py import MPI
    err, npd, capped = None, 0, 0
    Kg = 0                                   # largest rank of the factor's tiles so far
    rguess = int(T.ranks.max)                # expected panel rank (for the range finder)
    rng = xp.random.RandomState(seed + 7919 * grid.rank)
    prof = batched.Profile(be) if profile else None
    sec = lambda name: batched._sec(prof, name)  # noqa: E731
    for k in range(nt):
        pk, qk = L.prow(k), L.pcol(k)
        rows_k = [i for i in L.rows if i >= k]
        cols_prev = [j for j in L.cols if j < k]
        G = None
        # 1.-2. row k of the factor down the process columns; local update sums
        if cols_prev and Kg:
            RK = xp.empty((len(cols_prev), 2, nb, Kg), dtype)
            if grid.myrow == pk and err is None:
                try:
                    d = xp.asarray(np.array([L.slot[(k, j)] for j in cols_prev]))
                    w = min(Kg, L.K)
                    RK[:, :, :, w:] = 0
                    RK[:, 0, :, :w] = L.U[d, :, :w]
                    RK[:, 1, :, :w] = L.V[d, :, :w]
                except Exception as e:  # noqa: BLE001 - reported at the next header
                    err = e
            with sec("bcast"):
                comms.col.bcast(RK, root=pk)
            if rows_k and err is None:
                try:
                    with sec("update"):
                        G = _update_sums(L, rows_k, cols_prev, RK, workspace)
                except Exception as e:  # noqa: BLE001
                    err = e
        # 3. sums along process rows to column qk; dense panel; POTRF
        if rows_k and k and Kg and grid.npcol > 1:
            if G is None:
                G = xp.zeros((len(rows_k), nb, nb), dtype)
            with sec("reduce"):
                comms.row.allreduce(G, "sum")
        status, Lkk, panel = 0, None, None
        if grid.mycol == qk and rows_k and err is None:
            try:
                off = 1 if grid.myrow == pk else 0
                if k in L.col_slots:
                    with sec("panel"):
                        s0, s1 = L.col_slots[k]
                        panel = xp.matmul(L.U[s0:s1], L.V[s0:s1].swapaxes(1, 2))
                        if G is not None:
                            panel -= G[off:]
                if off:
                    with sec("potrf"):
                        s = L.dslot[k]
                        Lkk, info = _potrf(be, L.D[s] if G is None else L.D[s] - G[0])
                        if info:
                            status = k * nb + info  # 1-based global column
                        L.D[s] = Lkk
            except Exception as e:  # noqa: BLE001
                err = e
        del G
        npd, failed = _header(grid, status, err, sec)
        if npd or failed:
            break
        if k == nt - 1:
            break
        # 4. L_kk down process column qk; compress the panel, TRSM on its V factors
        kmax = 0
        if grid.mycol == qk:
            buf = Lkk if Lkk is not None else xp.empty((nb, nb), dtype, order="F")
            with sec("bcast"):
                comms.col.bcast(buf, root=pk)
            if panel is not None and err is None:
                try:
                    kmax, c = _compress_panel(L, k, panel, buf, rguess, rng, sec, prof)
                    capped += c
                except Exception as e:  # noqa: BLE001
                    err = e
        del panel
        rguess, failed = _header(grid, kmax, err, sec)
        if failed:
            break
        Kg = max(Kg, rguess)
    if npd:
        raise NotPositiveDefiniteError(npd - 1, _npd_message(L, npd - 1, L.tol))
    agree(grid.comm, err)
    be.synchronize()
    tm = np.array([time.perf_counter() - t0])
    grid.comm.Allreduce(MPI.IN_PLACE, tm, op=MPI.MAX)
    cp = np.array([capped], dtype=np.int64)
    grid.comm.Allreduce(MPI.IN_PLACE, cp, op=MPI.SUM)
    L.info = dict(T.info)
    L.info.update(factor_time=float(tm[0]), factor_capped=int(cp[0]))
    if prof is not None:
        names = ["bcast", "update", "reduce", "panel", "potrf", "header", "compress", "trsm",
                 "store", "range", "residual", "qr", "svd", "assemble"]
        v = np.array([prof.times.get(nm, 0.0) for nm in names])
        grid.comm.Allreduce(MPI.IN_PLACE, v, op=MPI.MAX)
        L.info["profile"] = dict(zip(names, map(float, v)))
        L.info["profile_calls"] = dict(prof.counts)
    L._summarize()
    return L


def _header(grid, value: int, err, sec):
    """Collective: ``(max of value, whether any rank has an error)`` over the grid (one small
    host allreduce)."""
    from mpi4py import MPI
    hdr = np.array([value, 0 if err is None else 1], dtype=np.int64)
    with sec("header"):
        grid.comm.Allreduce(MPI.IN_PLACE, hdr, op=MPI.MAX)
    return int(hdr[0]), bool(hdr[1])


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


def _update_sums(L, rows_k, cols_prev, RK, workspace):
    """Local: ``G_i = sum_j L_ij L_kj^T`` for the tile rows ``i`` in ``rows_k`` and tile
    columns ``j`` in ``cols_prev`` of this rank, ``(len(rows_k), nb, nb)``; ``RK`` holds
    ``(U_kj, V_kj)`` as ``(len(cols_prev), 2, nb, Kg)``. ``L_ij L_kj^T =
    U_ij (V_ij^T V_kj) U_kj^T``: two batched GEMMs over all ``(i, j)`` of a chunk of rows,
    then one GEMM ``[S_i0 .. S_ib] [U_k0 .. U_kb]^T`` whose inner dimension packs only the
    nonzero columns of the ``U_kj`` (``sum_j rank(L_kj)``, not ``b Kg``)."""
    xp, nb = L.xp, L.nb
    a, b, Kg = len(rows_k), len(cols_prev), RK.shape[3]
    w = min(L.K, Kg)
    G = xp.zeros((a, nb, nb), L.dtype)
    if w == 0:
        return G
    RV = RK[:, 1]
    cols = xp.flatnonzero(xp.any(RK[:, 0] != 0, axis=1).ravel())   # (j, c) with U_kj[:, c]
    if cols.size == 0:
        return G
    jj, cc = cols // Kg, cols % Kg
    RUt = RK[:, 0].transpose(1, 0, 2)[:, jj, cc]                    # (nb, packed)
    slots = np.array([[L.slot[(i, j)] for j in cols_prev] for i in rows_k], dtype=np.int64)
    per_row = 2 * b * nb * (w + Kg) * L.dtype.itemsize
    step = max(1, int(workspace // per_row))
    for r0 in range(0, a, step):
        r1 = min(a, r0 + step)
        d = xp.asarray(slots[r0:r1].ravel())
        Ui = L.U[d, :, :w].reshape(r1 - r0, b, nb, w)
        C = xp.matmul(L.V[d, :, :w].reshape(r1 - r0, b, nb, w).swapaxes(2, 3), RV[None])
        S = xp.matmul(Ui, C)                                   # (rows, b, nb, Kg)
        S2 = S.swapaxes(1, 2)[:, :, jj, cc].reshape((r1 - r0) * nb, cols.size)
        G[r0:r1] = xp.matmul(S2, RUt.T).reshape(r1 - r0, nb, nb)
    return G


def _compress_panel(L, k, panel, Lkk, rguess, rng, sec, prof):
    """Local, on process column ``pcol(k)``: compress the dense panel tiles ``(i, k)``,
    ``i > k`` of this rank (``panel (c, nb, nb)``), apply ``L_kk^-1`` to their ``V``
    factors and store them. Returns (largest new rank, tiles capped by max_rank)."""
    xp, nb = L.xp, L.nb
    r0 = min(nb, max(16, -(-(rguess + 12) // 8) * 8))   # expected rank + oversampling
    with sec("compress"):
        U, V, kh, capped = batched.compress_tiles(panel, L.delta, L.max_rank, "rsvd", rng,
                                                  r0=r0, prof=prof)
    c, _, kk = V.shape
    if kk:
        with sec("trsm"):
            Vp = xp.ascontiguousarray(V.swapaxes(1, 2))            # (c, kk, nb)
            L.backend.trsm("L", "L", "N", "N", 1.0, Lkk, Vp.reshape(c * kk, nb).T)
            V = Vp.swapaxes(1, 2)
    with sec("store"):
        s0, s1 = L.col_slots[k]
        L.set_tiles(np.arange(s0, s1), U, V, kh)
    return (int(kh.max()) if kh.size else 0), capped
