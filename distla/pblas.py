"""Distributed BLAS on DistMatrix (the PBLAS routines the solvers need).

* :func:`matmul` — ``C = alpha op(A) op(B) + beta C`` by SUMMA: for every block of the inner
  dimension, the owning process column broadcasts its piece of A along process rows, the owning
  process row broadcasts its piece of B down process columns, every rank does one local GEMM.
  The broadcasts of step k+1 are posted before the GEMM of step k (lookahead 1). With at most
  16 columns in op(B), A stays where it is instead (one local GEMM, one row all-reduce).
* :func:`triangular_solve` — pdtrsm, by a right-looking block substitution.
  :func:`inverted_diagonal_solves` (a context manager) lets the few-column ones on one process
  use inverted diagonal blocks: the condition estimator and refinement's corrections.
* :func:`norm` — 'fro', 1, inf and 'max' norms.

All functions are collective over the operands' grid.
"""
from __future__ import annotations

import contextlib
import contextvars
import functools

import numpy as np

from . import layout
from .errors import SingularMatrixError, collective, signature
from .matrix import DistMatrix, check_compatible
from .validate import check_flags, local_writable, writable_everywhere

__all__ = ["matmul", "triangular_solve", "norm", "normalize_trans", "inverted_diagonal_solves",
           "diagonal_max_abs"]

# the open inverted_diagonal_solves() context's inverses: {(id(A), lower, unit): (A, S)}
_INVERSES: contextvars.ContextVar = contextvars.ContextVar("distla_inverses", default=None)


@contextlib.contextmanager
def inverted_diagonal_solves():
    """Inside, a :func:`triangular_solve` on one process with at most :data:`_FEW_RHS`
    columns, on a backend whose ``inverse_block_solves`` says it pays (GPU ranks), solves
    with the factor's diagonal blocks inverted (once per factor within the context:
    ``Backend.triangular_block_inverses``) and GEMVs that read the factor once
    (``Backend.trsm_inverse_blocks``; docs/condition.md). Explicit inverses are less
    accurate than trsm when diagonal blocks are ill-conditioned, so this is for what
    tolerates that: condition estimates and refinement's corrections (whose errors the
    refinement removes), never a returned solution. The factors must not change inside.
    Local (no communication); nested contexts share the outer one's inverses."""
    if _INVERSES.get() is not None:
        yield
        return
    token = _INVERSES.set({})
    try:
        yield
    finally:
        _INVERSES.reset(token)


# ---------------------------------------------------------------------------------------
# matmul (SUMMA)
# ---------------------------------------------------------------------------------------
def matmul(A: DistMatrix, B: DistMatrix, *, transa: bool = False, transb: bool = False,
           alpha=1.0, beta=0.0, C: DistMatrix | None = None) -> DistMatrix:
    """Collective: ``alpha op(A) op(B) + beta C``; ``transa``/``transb`` as
    :func:`triangular_solve`'s ``trans``: ``False``/``0``/``'N'`` (op = identity),
    ``True``/``1``/``'T'`` (transpose), ``2``/``'C'`` (conjugate transpose; the transpose for
    real matrices).

    The result's rows are blocked like op(A)'s (A's mb, or with ``transa`` A's nb) from A's
    source row, its columns like op(B)'s (B's nb, or with ``transb`` B's mb) from B's source
    column (a transpose keeps the source process); a given ``C`` must have that layout and is
    updated in place and returned (``beta`` is ignored when C is None). As BLAS, ``beta = 0``
    ignores C's values and ``alpha = 0`` does not read A or B (NaN/Inf in them included). If
    A's column blocking differs from B's row blocking, B is redistributed to match first. A
    ``B`` of at most 16 columns (right-hand sides, residuals) takes the A-stationary path: A never
    moves, B is gathered and the products are summed along process rows.
    """
    with collective(_comm_of("matmul", A, B, C), signature(
            "matmul", A, B, C, transa=transa, transb=transb, alpha=alpha, beta=beta)):
        ta, tb = normalize_trans(transa), normalize_trans(transb)
        check_compatible(A, B, "matmul")
        m, k = (A.n, A.m) if ta != "N" else A.shape
        k2, n = (B.n, B.m) if tb != "N" else B.shape
        if k != k2:
            raise ValueError(f"matmul: inner dimensions differ ({m}x{k} @ {k2}x{n})")
        # C's layout on every path: op(A)'s row blocking and op(B)'s column blocking, A's
        # source row and B's source column (a transpose keeps the source, swaps the blocks)
        mb, nb = (A.mb if ta == "N" else A.nb), (B.nb if tb == "N" else B.mb)
        if C is not None:
            check_compatible(A, C, "matmul")
            if C.shape != (m, n):
                raise ValueError(f"matmul: C has shape {C.shape}, expected {(m, n)}")
            if (C.mb, C.rsrc, C.nb, C.csrc) != (mb, A.rsrc, nb, B.csrc):
                raise ValueError(f"matmul: C must have op(A)'s row blocking and op(B)'s "
                                 f"column blocking: block {(mb, nb)}, src "
                                 f"{(A.rsrc, B.csrc)}, not block {C.block}, src {C.src} "
                                 f"(C.redistribute(block=..., src=...) first)")
            if not local_writable(C):
                raise ValueError("matmul: C's local array is read-only (the product is "
                                 "written into C): pass a writable C, or C=None for a new "
                                 "matrix")    # (NumPy refused it on the ranks holding C only)
        alpha = _scalar_for(A, alpha, "alpha", "matmul")
        beta = _scalar_for(A, beta, "beta", "matmul") if C is not None else 0.0
    if alpha == 0:      # BLAS: C = beta C, A and B not read, in the layout the paths give
        if C is None:
            return DistMatrix(A.grid, (m, n), (mb, nb), dtype=A.dtype, device=A.device,
                              src=(A.rsrc, B.csrc))
        C.local[...] = 0 if beta == 0.0 else C.local * beta
        return C
    if C is not None:   # C is overwritten while A and B are read: copy what overlaps it
        a_in_c, b_in_c = _overlaps(C, A, B)
        A, B = (A.copy() if a_in_c else A), (B.copy() if b_in_c else B)
    if tb != "N":
        B = B.transpose(conjugate=tb == "C" and B.dtype.kind == "c")
    few = B.n <= _FEW_RHS       # A stationary: B keeps its layout, only its columns travel
    if ta != "N" and few:       # op(A) B with A where it is (no transpose of all of A);
        # C's rows take op(A)'s row blocking, what A.transpose() would have given: A's nb
        C = _output(C, A, (m, n), A.nb, B, beta)
        _matmul_few_trans(A, B, C, alpha, conj=ta == "C" and A.dtype.kind == "c")
        return C
    if ta != "N":
        A = A.transpose(conjugate=ta == "C" and A.dtype.kind == "c")
    if not few and (B.mb, B.rsrc) != (A.nb, A.csrc % B.grid.nprow):
        B = B.redistribute(block=(A.nb, B.nb), src=(A.csrc % B.grid.nprow, B.csrc))
    C = _output(C, A, (m, n), A.mb, B, beta)
    if few:
        _matmul_few(A, B, C, alpha)
    else:
        _summa(A, B, C, alpha)
    return C


def _comm_of(what: str, *operands):
    """The communicator of the first DistMatrix among ``operands`` (the collective's
    agreement then reports the others' errors on every rank). A rank with none agrees over
    the world communicator, where the other ranks' grid most often is (the block's own
    checks raise its TypeError; raising here, outside the agreement, left the others
    waiting in it). Local."""
    for x in operands:
        if isinstance(x, DistMatrix):
            return x.grid.comm
    from mpi4py import MPI
    return MPI.COMM_WORLD


def _output(C, A, shape, mb: int, B, beta):
    """C ready for ``C += alpha op(A) B``: a new zero matrix of ``shape`` with row blocking
    ``mb`` from A's source row and B's column blocking, or the given C (which must have that
    layout) times beta, with BLAS semantics: beta = 0 ignores C (NaN/Inf included). Local."""
    if C is None:
        return DistMatrix(A.grid, shape, (mb, B.nb), dtype=A.dtype, device=A.device,
                          src=(A.rsrc, B.csrc))
    assert (C.mb, C.rsrc, C.nb, C.csrc) == (mb, A.rsrc, B.nb, B.csrc)   # (matmul checked)
    if beta == 0.0:
        C.local[...] = 0
    elif beta != 1.0:
        C.local *= beta
    return C


def _scalar_for(A, v, name: str, what: str):
    """The scalar ``v`` for products with A's dtype: for a real A, a complex ``v`` (of any
    Python or NumPy kind) with a nonzero imaginary part is a TypeError (it would be dropped),
    one without becomes a float; anything but a number (None, a string, an array) is a
    TypeError. Local (every rank raises alike)."""
    import numbers
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Complex):
        raise TypeError(f"{what}: {name} must be a number, not {v!r}")
    if A.dtype.kind == "c":
        return complex(v)
    if not np.iscomplexobj(v):
        return float(v)
    if np.imag(v) != 0:
        raise TypeError(f"{what}: {name}={v!r} is complex but the matrices are {A.dtype} "
                        f"(convert them with astype(complex) first)")
    return float(np.real(v))


def shares_storage(B, A) -> bool:
    """Collective over B's grid: whether B may share storage with A on some rank (the same
    answer on every rank): a solve that writes its answer over B must then work on a copy,
    or it would overwrite A (its matrix or factor) while reading it."""
    return _overlaps(B, A)[0]


def _overlaps(C, *others) -> list:
    """Collective: for each of ``others``, whether it may share storage with C on some rank
    (the same answer on every rank, so that every rank copies alike)."""
    from mpi4py import MPI
    mine = np.array([X is C or bool(C.xp.may_share_memory(C.local, X.local)) for X in others],
                    dtype=bool)
    if C.grid.size > 1:            # (one process: its answer is everyone's; refinement's
        C.grid.comm.Allreduce(MPI.IN_PLACE, mine, op=MPI.LOR)    # solves ask per apply)
    return mine.tolist()


def _matmul_few(A, B, C, alpha):
    """C += alpha A B for a B of at most ``_FEW_RHS`` columns, A stationary (collective).

    SUMMA broadcasts every block column of A along its process row: all of A crosses the
    network for a product that is one GEMV per column of B. Here every rank gets B whole
    (n x k, small: one allgather), multiplies its local A by the rows of B at its columns (one
    local GEMM), and the partial products are summed along each process row (one all-reduce
    of ``mloc x k`` words); each rank keeps its columns of C."""
    be, xp = A.backend, A.xp
    full = B.to_global(None)
    mloc, nloc = A.local_shape
    Y = be.zeros((mloc, B.n), A.dtype)
    if mloc and nloc and B.n:
        xc = np.asfortranarray(full[A.col_indices()], dtype=A.dtype)
        be.gemm("N", "N", alpha, A.local, be.asarray(xc), 0.0, Y)
    A.grid.comms(A.device).row.allreduce(Y, "sum")
    if C.local.size:
        C.local[...] += Y[:, xp.asarray(C.col_indices())]


def _matmul_few_trans(A, B, C, alpha, conj: bool):
    """C += alpha op(A) B, ``op(A) = A^T`` (``A^H`` when ``conj``), for a B of at most
    ``_FEW_RHS`` columns, A stationary (collective): every rank gets B whole, multiplies the
    transpose of its local A by the rows of B at its rows (one local GEMM), places the partial
    products at its columns in an n x k block and one all-reduce over the grid sums them
    (ranks of one process column add their rows' parts, other process columns fill other
    rows). Transposing A instead moved all of it (32x the time of ``A x`` for ``A^T x`` at
    n = 4096 on one CPU rank, and ~4x A's memory)."""
    be, xp = A.backend, A.xp
    full = B.to_global(None)
    mloc, nloc = A.local_shape
    Z = be.zeros((A.n, B.n), A.dtype)
    if mloc and nloc and B.n:
        xr = np.asfortranarray(full[A.row_indices()], dtype=A.dtype)
        Y = be.zeros((nloc, B.n), A.dtype)
        be.gemm("C" if conj else "T", "N", alpha, A.local, be.asarray(xr), 0.0, Y)
        Z[xp.asarray(A.col_indices())] = Y
    A.grid.comms(A.device).all.allreduce(Z, "sum")
    if C.local.size:
        C.local[...] += Z[xp.asarray(C.row_indices())][:, xp.asarray(C.col_indices())]


def _summa(A, B, C, alpha):
    grid, be = A.grid, A.backend
    comms = grid.comms(A.device)
    k, kb = A.n, A.nb
    nsteps = layout.num_blocks(k, kb)
    if nsteps == 0:
        return
    ma, nbl = A.local_shape[0], B.local_shape[1]
    bufs = [(be.empty((ma, kb), A.dtype), be.empty((kb, nbl), A.dtype)) for _ in range(2)]

    def post(s):
        """Start the broadcasts of inner block s; return (A piece, B piece, requests)."""
        g0 = s * kb
        w = min(kb, k - g0)
        pc, pr = A.col_owner(g0), B.row_owner(g0)
        abuf, bbuf = bufs[s % 2]
        bpiece = bbuf if w == kb else be.empty((w, nbl), A.dtype)
        if grid.mycol == pc:
            c0 = A.local_col_start(g0)
            apiece = A.local[:, c0:c0 + w]          # contiguous, unless A is a view (sub())
            if not apiece.flags.f_contiguous:       # whose leading dimension is its parent's
                abuf[:, :w] = apiece
                apiece = abuf[:, :w]
        else:
            apiece = abuf[:, :w]
        if grid.myrow == pr:
            r0 = B.local_row_start(g0)
            bpiece[...] = B.local[r0:r0 + w, :]     # a row slice is packed
        reqs = [comms.row.ibcast(apiece, pc), comms.col.ibcast(bpiece, pr)]
        return apiece, bpiece, reqs

    nxt = post(0)
    for s in range(nsteps):
        apiece, bpiece, reqs = nxt
        for r in reqs:
            r.wait()
        if s + 1 < nsteps:
            nxt = post(s + 1)                        # lookahead: next panels in flight
        be.gemm("N", "N", alpha, apiece, bpiece, 1.0, C.local)


# ---------------------------------------------------------------------------------------
# triangular_solve (pdtrsm)
# ---------------------------------------------------------------------------------------
def normalize_trans(trans) -> str:
    """'N', 'T' or 'C' from the accepted spellings (SciPy's 0 / 1 / 2, booleans, letters);
    ValueError for anything else. Local."""
    t = {0: "N", 1: "T", 2: "C"}.get(int(trans)) \
        if isinstance(trans, (bool, np.bool_, int, np.integer)) else \
        (trans.upper() if isinstance(trans, str) and trans.upper() in ("N", "T", "C") else None)
    if t is None:
        raise ValueError(f"trans must be False/True, 0/1/2 or 'N'/'T'/'C', not {trans!r}")
    return t


def triangular_solve(A: DistMatrix, B: DistMatrix, *, lower: bool = True, trans=False,
                     unit_diagonal: bool = False, side: str = "left", alpha=1.0,
                     overwrite_b: bool = False) -> DistMatrix:
    """Collective: solve ``op(A) X = alpha B`` (side 'left' or 'L') or ``X op(A) = alpha B``
    (side 'right' or 'R') for X, with A triangular (``lower`` or upper; only that triangle is read).
    ``trans`` as ``scipy.linalg.solve_triangular``: ``False``/``0``/``'N'`` (``op(A) = A``),
    ``True``/``1``/``'T'`` (``A^T``), ``2``/``'C'`` (``A^H``; ``A^T`` for real A). A must be
    square with square blocks. Returns X in B's layout (B itself when ``overwrite_b``, side
    'left' and no redistribution was needed; side 'right' solves the transposed system and
    returns a new matrix). As BLAS, ``alpha = 0`` gives X = 0 without reading B, and
    leading (or trailing) zero rows of B may be skipped: a NaN or Inf of A that multiplies
    only their exact zeros need not reach X (solvers check A first: ``check_finite``).
    """
    given = side
    side = {"l": "left", "r": "right"}.get(side.lower(), side.lower()) \
        if isinstance(side, str) else side          # ScaLAPACK's 'L'/'R' too
    with collective(_comm_of("triangular_solve", A, B), signature(
            "triangular_solve", A, B, lower=lower, trans=trans, unit_diagonal=unit_diagonal,
            side=side, alpha=alpha, overwrite_b=overwrite_b)):
        if side not in ("left", "right"):
            raise ValueError(f"triangular_solve: side must be 'left' or 'right' ('L' or "
                             f"'R'), not {given!r}")
        t = normalize_trans(trans)
        check_flags("triangular_solve", lower=lower, unit_diagonal=unit_diagonal,
                    overwrite_b=overwrite_b)
        check_compatible(A, B, "triangular_solve")
        if A.m != A.n:
            raise ValueError(f"triangular_solve: A must be square, got {A.shape}")
        if A.mb != A.nb:
            raise ValueError(f"triangular_solve: A needs square blocks, got {A.block}")
        alpha = _scalar_for(A, alpha, "alpha", "triangular_solve")
        need = B.m if side == "left" else B.n
        if need != A.n:
            raise ValueError(f"triangular_solve: A is {A.shape} but B is {B.shape} "
                             f"(side={side!r})")
        if not unit_diagonal:
            _check_diagonal(A)
    if overwrite_b:          # X written over B while A is read: never into A's storage,
        overwrite_b = not shares_storage(B, A) and writable_everywhere(B)   # nor read-only
    if alpha == 0:           # BLAS: X = 0, B's values not read (NaN/Inf included)
        X = B if overwrite_b else B.copy()
        X.local[...] = 0
        return X
    if t == "C" and A.dtype.kind == "c":   # A^H X = a B <=> A^T conj(X) = conj(a) conj(B)
        X = B if overwrite_b else B.copy()  # (and X A^H = a B <=> conj(X) A^T = ..., right)
        X.local[...] = X.xp.conj(X.local)
        X = triangular_solve(A, X, lower=lower, trans=True, unit_diagonal=unit_diagonal,
                             side=side, alpha=np.conj(alpha), overwrite_b=True)
        X.local[...] = X.xp.conj(X.local)
        return X
    trans = t != "N"
    if side == "right":  # X op(A) = B  <=>  op(A)^T X^T = B^T
        Xt = triangular_solve(A, B.transpose(), lower=lower, trans=not trans,
                              unit_diagonal=unit_diagonal, side="left", alpha=alpha,
                              overwrite_b=True)
        return Xt.transpose()
    if A.grid.nprow == 1 and A.grid.npcol == 1:   # one process: the local library's solve
        inverses = _INVERSES.get()
        if inverses is not None and A.backend.inverse_block_solves and B.n <= _FEW_RHS:
            return _solve_by_inverses(A, B, inverses, lower, trans, unit_diagonal, alpha,
                                      overwrite_b)
        X = B if overwrite_b else B.copy()
        lo, hi = _nonzero_span(X.local, lower != trans) if A.backend.scan_zero_rows else \
            (0, A.n)
        A.backend.trsm("L", "L" if lower else "U", "T" if trans else "N",
                       "U" if unit_diagonal else "N", alpha, A.local[lo:hi, lo:hi],
                       X.local[lo:hi])
        return X
    if B.n <= _FEW_RHS:
        return _trsv_few(A, B, lower, trans, "U" if unit_diagonal else "N", alpha, overwrite_b)
    X = B
    if (B.mb, B.rsrc) != (A.mb, A.rsrc):
        X = B.redistribute(block=(A.mb, B.nb), src=(A.rsrc, B.csrc))
    elif not overwrite_b:
        X = B.copy()
    if alpha != 1.0:
        X.local *= alpha
    diag = "U" if unit_diagonal else "N"
    if trans:
        _trsm_left_trans(A, X, lower, diag)
    else:
        _trsm_left(A, X, lower, diag)
    if X.block != B.block or X.src != B.src:
        X = X.redistribute(block=B.block, src=B.src)
    return X


def _check_diagonal(A) -> None:
    """SingularMatrixError when A's diagonal holds an exact zero (as LAPACK's xTRTRS and
    ``scipy.linalg.solve_triangular``): the solve would return inf/NaN. Local (each rank its
    own diagonal entries, O(n / p)); callers agree on the outcome. Inside
    :func:`inverted_diagonal_solves`, whose factors do not change, once per factor (the
    refinement's dozens of solves read the diagonal for each: 0.6 ms a solve at n = 65536
    on one H200)."""
    seen = _INVERSES.get()
    key = ("diagonal checked", id(A))
    if seen is not None and seen.get(key, (None,))[0] is A:
        return
    idx, d = _diagonal_here(A)
    zero = np.flatnonzero(d == 0)
    if seen is not None and not zero.size:
        seen[key] = (A, None)
    if zero.size:
        j = int(idx[zero[0]])
        raise SingularMatrixError(j, f"triangular_solve: A is singular: A[{j}, {j}] is "
                                     f"exactly zero (0-based); the solve would divide by it")


def diagonal_max_abs(A: DistMatrix) -> float:
    """Collective: ``max_i |a_ii|`` over A's global diagonal (NaN if one is NaN; 0 for an
    empty A), reading only the O(n / p) diagonal entries each rank holds."""
    _, d = _diagonal_here(A)
    return A.grid.allreduce(float(np.max(np.abs(d))) if d.size else 0.0, "max")


def _diagonal_here(A):
    """``(global indices, values on the host)`` of the diagonal entries this rank holds.
    Local."""
    g = A.grid
    idx, li, lj = _local_diagonal(A.m, A.n, A.mb, A.nb, A.rsrc, A.csrc, g.nprow, g.npcol,
                                  g.myrow, g.mycol)
    if not idx.size:
        return idx, np.zeros(0, A.dtype)
    be = A.backend
    if not be.is_gpu:
        return idx, np.asarray(A.local[li, lj])
    dli, dlj = _device_diagonal(A.m, A.n, A.mb, A.nb, A.rsrc, A.csrc, g.nprow, g.npcol,
                                g.myrow, g.mycol, be.device_id())
    return idx, np.asarray(be.to_host(A.local[dli, dlj]))


@functools.lru_cache(maxsize=8)
def _device_diagonal(m, n, mb, nb, rsrc, csrc, nprow, npcol, myrow, mycol, device_id):
    """:func:`_local_diagonal`'s local rows and columns as device arrays (cached: copying
    them to the device for every solve took longer than reading the diagonal)."""
    from .device import get_backend
    _, li, lj = _local_diagonal(m, n, mb, nb, rsrc, csrc, nprow, npcol, myrow, mycol)
    be = get_backend("gpu")
    return be.asarray(li), be.asarray(lj)


@functools.lru_cache(maxsize=64)
def _local_diagonal(m, n, mb, nb, rsrc, csrc, nprow, npcol, myrow, mycol):
    """``(global index, local row, local column)`` arrays of the diagonal entries stored on
    the process at (myrow, mycol) of a block-cyclic layout (cached: the same per layout)."""
    rows = layout.local_indices(m, mb, myrow, rsrc, nprow)
    cols = layout.local_indices(n, nb, mycol, csrc, npcol)
    return np.intersect1d(rows, cols, assume_unique=True, return_indices=True)


def _solve_by_inverses(A, B, inverses, lower, trans, unit, alpha, overwrite_b):
    """One process: ``op(A)^-1 alpha B`` with A's inverted diagonal blocks (made once per
    context, :func:`inverted_diagonal_solves`)."""
    be, key = A.backend, (id(A), bool(lower), bool(unit))
    nbi = be.inverse_block_size(A.n, A.nb)
    if key not in inverses:
        inverses[key] = (A, be.triangular_block_inverses(A.local, nbi, lower, unit))
    X = B if overwrite_b else B.copy()
    if X.local.size:
        if alpha != 1.0:
            X.local *= alpha
        # X.local becomes the partial sums, then holds x
        X.local[...] = be.trsm_inverse_blocks(A.local, inverses[key][1], nbi, lower, trans,
                                              X.local)
    return X


def _trsm_left(A, X, lower, diag):
    """X := A^-1 X, A lower or upper triangular, rows of X aligned with A's (collective)."""
    grid, be = A.grid, A.backend
    comms = grid.comms(A.device)
    n, nb = A.n, A.nb
    nblk = layout.num_blocks(n, nb)
    nrhs_loc = X.local_shape[1]
    order = range(nblk) if lower else range(nblk - 1, -1, -1)
    for kb in order:
        g0, w = kb * nb, min(nb, n - kb * nb)
        pr, pc = A.row_owner(g0), A.col_owner(g0)
        # rows of op-panel still to update, and the diagonal block: lower -> rows >= g0
        lo = A.local_row_start(g0) if lower else 0
        hi = A.local_row_start(g0 + w) if not lower else A.local_shape[0]
        # 1. the owning process column broadcasts its piece of block column kb along rows
        panel = be.empty((hi - lo, w), A.dtype)
        if grid.mycol == pc:
            c0 = A.local_col_start(g0)
            panel[...] = A.local[lo:hi, c0:c0 + w]
        comms.row.bcast(panel, pc)
        # 2. the owning process row solves its block row with the diagonal block
        xk = be.empty((w, nrhs_loc), A.dtype)
        if grid.myrow == pr:
            r0 = X.local_row_start(g0)
            d0 = r0 - lo
            be.trsm("L", "L" if lower else "U", "N", diag, 1.0, panel[d0:d0 + w, :],
                    X.local[r0:r0 + w, :])
            xk[...] = X.local[r0:r0 + w, :]
        # 3. the solved block row goes down the process columns; everyone updates
        comms.col.bcast(xk, pr)
        if lower:
            u0, u1 = X.local_row_start(g0 + w), X.local_shape[0]
            p0 = u0 - lo
        else:
            u0, u1 = 0, X.local_row_start(g0)
            p0 = 0
        if u1 > u0 and nrhs_loc:
            be.gemm("N", "N", -1.0, panel[p0:p0 + (u1 - u0), :], xk, 1.0, X.local[u0:u1, :])


_FEW_RHS = 16   # up to this many right-hand sides, A stays put and only X travels
_FAN_IN_ONLY = False   # True: always the fan-in form (the old behaviour; for measurements)


def _nonzero_span(b, forward: bool):
    """``(lo, hi)``: the rows of a triangular solve with right-hand sides ``b`` (host, n x k)
    that can be nonzero: from b's first nonzero row on (forward sweep) or up to its last
    (backward); outside them x = 0. For the condition estimator's unit vectors."""
    nz = np.flatnonzero(np.any(b != 0, axis=1))
    if not nz.size:
        return (0, 0)
    return (int(nz[0]), b.shape[0]) if forward else (0, int(nz[-1]) + 1)


def _trsv_few(A, B, lower, trans, diag, alpha, overwrite_b):
    """op(A) X = alpha B for a few right-hand sides (collective), A stationary (as pdtrsv).

    The sweep moving A's block columns (:func:`_trsm_left`) broadcasts O(n nb) words per
    step, far more than a few right-hand sides need. Here A stays put and only X travels:
    step k, the owner of the diagonal block solves ``x[k]`` from ``b[k]`` minus the partial
    sums ``sum_j op(A)[k, j] x[j]`` over the solved blocks j, added up along a process row or
    column, and broadcasts ``x[k]`` to every rank (``nb x k`` words). Two ways to form the
    partial sums:

    * "dot" (fan-in): the ranks holding block row k of op(A) multiply it by the solved
      ``x[j]`` when block k is next (for op = N that is the process row of block k: Q ranks
      work; for op = T, its process column: P ranks);
    * "axpy" (fan-out, op = N only): right after ``x[k]`` is known, the ranks holding block
      column k of A (its process column, P ranks) add ``A[j, k] x[k]`` into their sums for
      every unsolved j; op = N takes it when P >= Q, so that the larger grid dimension
      shares the work of every step.

    Access to A's column-major local storage decides the speed (the sweep reads A once and
    does little else). op = T always takes the dot form: block column k of A, read whole
    columns at a time; and each rank computes the sums of its *next* block column as soon
    as its current step is done, over every row solved by then (:class:`_ColumnPartials`),
    so that at that block's step only the few rows solved since remain: the process columns
    compute ahead while another one solves, instead of one process column working per step.
    The dot form with op = N reads block *rows* (nb-element pieces, one per column, at a
    fraction of the memory bandwidth); it runs on chunks of :data:`_CHUNK_ROWS` local rows
    (:class:`_RowChunks`): the partial sums of the next chunk's row blocks at once, later
    only the columns solved since.

    Per step: one sub-communicator all-reduce and one broadcast of ``nb x k`` words. A is
    never transposed or moved."""
    grid, be, xp = A.grid, A.backend, A.xp
    comms = grid.comms(A.device)
    n, nb, k = A.n, A.nb, B.n
    rows, cols = A.row_indices(), A.col_indices()
    full = B.to_global(None)                                   # n x k, small
    if alpha != 1.0:
        full = full * alpha
    xr = be.asarray(np.asfortranarray(full[rows]))             # b, becoming x, at my rows
    # X's rows are mine when B is blocked like A's rows: X comes from xr, else from every
    # solved block replicated (xs)
    mine = B.mb == A.mb and B.rsrc == A.rsrc
    xs = None if mine else be.zeros((n, k), A.dtype)
    ta = "T" if trans else "N"
    # op(A) lower  <=>  (lower and not trans) or (upper and trans): forward sweep
    forward = lower != trans
    # dot form: the partial sums of step k are formed by Q (op = N) or P (op = T) ranks;
    # op = T always (block columns of A, each computed ahead: _ColumnPartials)
    dot = _FAN_IN_ONLY or trans or grid.npcol > grid.nprow
    acc = None if dot else be.zeros((len(rows), k), A.dtype)   # fan-out sums, my rows
    # blocks of b that are zero before the first nonzero row (forward) or after the last
    # (backward) have x = 0 there: the sweep starts at the first (last) nonzero block
    nblk = layout.num_blocks(n, nb)
    lo, hi = _nonzero_span(full, forward)
    kfirst, klast = (lo // nb, (hi - 1) // nb) if hi > lo else (nblk, -1)
    g_lo, g_hi = (kfirst * nb, n) if forward else (0, min(n, (klast + 1) * nb))
    zone_c = (A.local_col_start(g_lo), A.local_col_start(g_hi))
    zone_r = (A.local_row_start(g_lo), A.local_row_start(g_hi))
    # x at my columns, once solved: read only by the row chunks' partial sums
    xc = be.zeros((len(cols), k), A.dtype) if dot and not trans else None
    chunks = _RowChunks(A, xc, forward, zone_c) if dot and not trans else None
    ahead = _ColumnPartials(A, xr, forward, zone_r) if trans else None
    # one step buffer for the whole sweep (each step overwrites what it reads: the partial
    # sums, or the broadcast's receive; on GPU ranks stream order keeps the reuse safe)
    step_buf = be.empty(nb * k, A.dtype)
    for kb in (range(kfirst, nblk) if forward else range(klast, -1, -1)):
        g0, w = kb * nb, min(nb, n - kb * nb)
        pr, pc = A.row_owner(g0), A.col_owner(g0)
        r0, c0 = A.local_row_start(g0), A.local_col_start(g0)
        r1, c1 = A.local_row_start(g0 + w), A.local_col_start(g0 + w)
        part = step_buf[:w * k].reshape((w, k), order="F")      # contiguous
        if not dot:                               # sums already formed, add them up
            if grid.myrow == pr:
                part[...] = acc[r0:r1]
                comms.row.allreduce(part, "sum")
        elif not trans and grid.myrow == pr:      # block row k of A, solved columns
            chunks.partial_sums(r0, r1, c0 if forward else c1, part)
            comms.row.allreduce(part, "sum")
        elif trans and grid.mycol == pc:          # block column k of A, solved rows
            ahead.partial_sums(c0, c1, r0 if forward else r1, part)
            comms.col.allreduce(part, "sum")
        if grid.myrow == pr and grid.mycol == pc:
            xp.subtract(xr[r0:r1], part, out=part)
            be.trsm("L", "L" if lower else "U", ta, diag, 1.0, A.local[r0:r1, c0:c1], part)
        comms.all.bcast(part, grid.rank_of(pr, pc))
        if grid.myrow == pr:
            xr[r0:r1] = part
        if xc is not None and grid.mycol == pc:
            xc[c0:c1] = part
        if xs is not None:
            xs[g0:g0 + w] = part
        if trans:                                 # my next block column's sums, ahead
            ahead.compute_next(c1 if forward else c0, r1 if forward else r0)
        if dot:
            continue
        if grid.mycol == pc:                      # block column k of A, unsolved rows
            u0, u1 = (r1, len(rows)) if forward else (0, r0)
            if u1 > u0:
                be.gemm("N", "N", 1.0, A.local[u0:u1, c0:c1], part, 1.0, acc[u0:u1])
    X = B if overwrite_b else B.copy()
    if X.local.size:
        sol, at = (xr, slice(None)) if xs is None else (xs, xp.asarray(X.row_indices()))
        X.local[...] = sol[at][:, xp.asarray(X.col_indices())]
    return X


_CHUNK_ROWS = 1024   # local rows per chunk of the row-oriented sweeps (8 KB per column)


class _RowChunks:
    """The dot form's partial sums ``A[rows, solved] x[solved]`` for op = N, a chunk of
    local rows at a time (local; :func:`_trsv_few`). ``forward``: solved columns are a
    prefix ``[0, c)`` of my local columns (else a suffix ``[c, ncols)``)."""

    def __init__(self, A, xc, forward: bool, zone=None):
        self.A, self.xc, self.forward = A, xc, forward
        self.lo = self.hi = self.done = 0
        self.sums = None
        # local columns outside [z0, z1) hold x = 0 (zero blocks of b skipped): never read
        self.z0, self.z1 = zone if zone is not None else (0, A.local_shape[1])

    def partial_sums(self, r0, r1, c, out):
        """``out = A[r0:r1, solved] x[solved]`` with the solved columns up to ``c``."""
        A, xc, be = self.A, self.xc, self.A.backend
        nloc = A.local_shape[1]
        if self.sums is None or r0 < self.lo or r1 > self.hi:
            mloc, ch = A.local_shape[0], max(_CHUNK_ROWS, r1 - r0)
            self.lo, self.hi = (r0, min(mloc, r0 + ch)) if self.forward else (max(0, r1 - ch), r1)
            self.sums = be.zeros((self.hi - self.lo, out.shape[1]), A.dtype)
            self.done = c
            s0, s1 = (self.z0, c) if self.forward else (c, min(nloc, self.z1))
            if s1 > s0:
                be.gemm("N", "N", 1.0, A.local[self.lo:self.hi, s0:s1], xc[s0:s1], 0.0,
                        self.sums)
        out[...] = self.sums[r0 - self.lo:r1 - self.lo]
        s0, s1 = (self.done, c) if self.forward else (c, self.done)   # solved since
        if s1 > s0:
            be.gemm("N", "N", 1.0, A.local[r0:r1, s0:s1], xc[s0:s1], 1.0, out)


class _ColumnPartials:
    """The dot form's partial sums ``A[solved, cols]^T x[solved]`` for op = T, each block
    column's computed ahead (local; :func:`_trsv_few`): right after a step, over the rows
    solved so far, for this rank's next block column; at that block's step only the rows
    solved since are added. ``forward``: solved rows are a prefix ``[0, r)`` of my local
    rows (else a suffix ``[r, mloc)``)."""

    def __init__(self, A, xr, forward: bool, zone=None):
        self.A, self.xr, self.forward = A, xr, forward
        self.c0 = -1                       # local column start of the block computed ahead
        self.done, self.sums = 0, None
        # local rows outside [z0, z1) hold x = 0 (zero blocks of b skipped): never read
        self.z0, self.z1 = zone if zone is not None else (0, A.local_shape[0])

    def _rows(self, r):
        return (self.z0, r) if self.forward else (r, self.z1)

    def compute_next(self, c, r):
        """After a step: my next block column starts (forward) or ends (backward) at local
        column ``c``; rows up to ``r`` are solved. Computes its sums unless already done."""
        nb, nloc = self.A.nb, self.A.local_shape[1]
        c0, c1 = (c, min(c + nb, nloc)) if self.forward else (max(0, c - nb), c)
        if c1 <= c0 or c0 == self.c0:
            return
        be = self.A.backend
        self.c0, self.done = c0, r
        self.sums = be.zeros((c1 - c0, self.xr.shape[1]), self.A.dtype)
        s0, s1 = self._rows(r)
        if s1 > s0:
            be.gemm("T", "N", 1.0, self.A.local[s0:s1, c0:c1], self.xr[s0:s1], 0.0, self.sums)

    def partial_sums(self, c0, c1, r, out):
        """``out = A[solved, c0:c1]^T x[solved]``, the solved rows up to ``r``."""
        be = self.A.backend
        if self.c0 == c0 and self.sums is not None and self.sums.shape[0] == c1 - c0:
            out[...] = self.sums
            s0, s1 = (self.done, r) if self.forward else (r, self.done)   # solved since
            beta = 1.0
        else:
            s0, s1 = self._rows(r)
            beta = 0.0
            if s1 <= s0:                    # nothing solved yet: no sums
                out[...] = 0
        if s1 > s0:
            be.gemm("T", "N", 1.0, self.A.local[s0:s1, c0:c1], self.xr[s0:s1], beta, out)


def _trsm_left_trans(A, X, lower, diag):
    """X := A^-T X without transposing A (collective): a column-oriented sweep, as pdtrsm.

    ``A^T`` of a lower A is upper, so block rows are solved last to first (first to last for
    an upper A). Step k: the process column owning block column k broadcasts its piece of it
    along process rows; every rank forms ``A[j, k]^T X[j]`` over its already solved rows j
    (below block k for lower A, above for upper) and the partial sums are added up along
    process columns; the owning process row subtracts them and solves with ``A[k, k]^T``. Per
    step: one row broadcast and one column all-reduce of ``nb x nrhs``, as the non-transposed
    sweep."""
    grid, be = A.grid, A.backend
    comms = grid.comms(A.device)
    n, nb = A.n, A.nb
    nblk = layout.num_blocks(n, nb)
    nrhs_loc = X.local_shape[1]
    order = range(nblk - 1, -1, -1) if lower else range(nblk)
    for kb in order:
        g0, w = kb * nb, min(nb, n - kb * nb)
        pr, pc = A.row_owner(g0), A.col_owner(g0)
        # solved rows: below block k (lower A) or above it (upper A), plus the diagonal block
        lo = A.local_row_start(g0) if lower else 0
        hi = A.local_row_start(g0 + w) if not lower else A.local_shape[0]
        panel = be.empty((hi - lo, w), A.dtype)
        if grid.mycol == pc:
            c0 = A.local_col_start(g0)
            panel[...] = A.local[lo:hi, c0:c0 + w]
        comms.row.bcast(panel, pc)
        if lower:
            s0, s1 = A.local_row_start(g0 + w), A.local_shape[0]
        else:
            s0, s1 = 0, A.local_row_start(g0)
        part = be.zeros((w, nrhs_loc), A.dtype)
        if s1 > s0 and nrhs_loc:
            be.gemm("T", "N", 1.0, panel[s0 - lo:s1 - lo, :], X.local[s0:s1, :], 0.0, part)
        comms.col.allreduce(part, "sum")
        if grid.myrow == pr and nrhs_loc:
            r0 = X.local_row_start(g0)
            xk = X.local[r0:r0 + w, :]
            xk -= part
            be.trsm("L", "L" if lower else "U", "T", diag, 1.0, panel[r0 - lo:r0 - lo + w, :],
                    xk)


# ---------------------------------------------------------------------------------------
# norms
# ---------------------------------------------------------------------------------------
def norm(A: DistMatrix, ord="fro") -> float:
    """Collective: the 'fro', 1, inf ('inf' or np.inf) or 'max' norm of A, the same float on
    every rank (:meth:`DistMatrix.norm`)."""
    return A.norm(ord)


# ``A @ B`` on DistMatrix is this module's SUMMA; the matrix layer sits below the PBLAS, so
# the PBLAS plug their product into it rather than the matrix importing them.
DistMatrix._matmul = staticmethod(matmul)
