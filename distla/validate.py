"""Input checks the solvers run before any work (all collective over the matrices' grid).

* :func:`check_finite` -- NaN/Inf anywhere in A or B raises ``ValueError`` on every rank, naming
  the global index of one such entry (like ``scipy.linalg``'s ``check_finite``). The local
  sum (NaN and infinities propagate; one reduction, no temporary) and one small agreement;
  only a rank whose sum is not finite scans its storage in column slabs to locate the entry
  (or to find that finite entries merely overflowed the sum).
* :func:`check_symmetric` -- a matrix that is not symmetric (Hermitian) within ``rtol`` raises
  ``ValueError``. Instead of a distributed transpose (n^2 words moved) it compares the bilinear
  forms ``v_i^T A v_j`` and ``v_j^T A v_i`` for four fixed random vectors: ``M = V^T A V``
  (4 x 4, one local product with ``V``'s rows and columns held here and one all-reduce of 17
  numbers) must equal ``M^H``. For ``E = A - A^H`` and independent Gaussian vectors,
  ``|v_i^T E v_j|`` is of the order of ``||E||_F``, so any asymmetry well above
  ``rtol ||A||_F`` is caught (two independent pairs; a miss needs both forms to fall below the
  threshold by chance). The same pass over A gives its rows' absolute sums: the scale of the
  threshold (``||r||_2 / sqrt(n) <= ||A||_F``, so the test is if anything stricter), A's
  finiteness (``finite=True`` folds :func:`check_finite` of A into it) and ``||A||_inf``, the
  norm a condition estimate needs, so a checked Cholesky solve reads A once before factoring.
* :func:`signature` -- a short text describing a call's arguments, compared across ranks by
  :func:`distla.errors.collective` (``signature=``) so that ranks calling a collective
  function with different arguments get the same clear error instead of a hang.
"""
from __future__ import annotations

import functools

import numpy as np

from . import layout
from .device import get_backend
from .errors import (  # noqa: F401 - re-exported
    DistlaError,
    NonFiniteResultError,
    collective,
    describe,
    signature,
)

__all__ = ["check_finite", "check_finite_result", "check_symmetric", "signature",
           "describe"]

_SLAB = 1 << 24      # elements scanned at a time (a 16 MB boolean mask at most)


def _real_view(a):
    """The contiguous local matrix ``a`` as a real array without a copy (complex: real and
    imaginary parts interleaved), or None when ``a`` is not contiguous."""
    if not (a.flags.f_contiguous or a.flags.c_contiguous):
        return None
    flat = a.ravel(order="F" if a.flags.f_contiguous else "C")     # a view
    return flat.view(np.finfo(a.dtype).dtype) if a.dtype.kind == "c" else flat


def _sum_is_finite(M) -> bool:
    """True when the sum of this rank's local entries is finite, which proves every entry
    finite (NaN and infinities propagate): one reduction, no temporary, one device read.
    False when the sum is not finite (a non-finite entry, or finite ones overflowing) or the
    storage is not contiguous: the caller scans (local)."""
    r = _real_view(M.local)
    if r is None:
        return False
    with np.errstate(over="ignore", invalid="ignore"):   # an overflowing sum only means a scan
        return bool(np.isfinite(M.backend.to_host(r.sum())))


def _first_nonfinite(M):
    """(global i, global j, value) of this rank's first non-finite entry, or None (local).
    The common all-finite case costs one reduction (:func:`_sum_is_finite`); otherwise the
    storage is scanned slab by slab to locate the entry."""
    a, xp = M.local, M.xp
    if a.size == 0 or _sum_is_finite(M):
        return None
    step = max(1, _SLAB // max(1, a.shape[0]))
    for j0 in range(0, a.shape[1], step):
        blk = a[:, j0:j0 + step]
        bad = ~xp.isfinite(blk)
        if bool(bad.any()):
            jj, ii = (int(v) for v in np.asarray(M.backend.to_host(
                xp.argwhere(bad.T)[0])))          # column-major order: first by column
            return (int(M.row_indices()[ii]), int(M.col_indices()[j0 + jj]),
                    complex(M.backend.to_host(blk[ii, jj])))
    return None


def check_flags(what: str, **flags) -> None:
    """TypeError unless every keyword's value is a bool (``np.bool_`` too): a string such as
    ``'no'`` would otherwise count as True. Local; every rank raises alike."""
    for name, v in flags.items():
        if not isinstance(v, (bool, np.bool_)):
            raise TypeError(f"{what}: {name} must be True or False, not {v!r}")


def local_writable(M) -> bool:
    """Whether this rank's local array of ``M`` may be written (NumPy's ``writeable`` flag;
    CuPy arrays have none and are). Local."""
    flags = getattr(M.local, "flags", None)
    return flags is None or bool(getattr(flags, "writeable", True))


def check_writable(A, what: str) -> None:
    """ValueError unless this rank's local array of ``A`` may be written (``overwrite_a``):
    the kernels write through raw pointers, past NumPy's read-only flag (a read-only
    memory map would fault). Local; call it inside the input agreement, so that one rank's
    read-only array is every rank's error."""
    if not local_writable(A):
        raise ValueError(f"{what}: overwrite_a=True, but A's local array is read-only; "
                         f"pass overwrite_a=False (A is then copied) or a writable array")


def writable_everywhere(M) -> bool:
    """Collective over M's grid: whether every rank's local array of ``M`` may be written.
    ``overwrite_b`` is a permission (scipy's): a B that is read-only on some rank (a
    read-only memory map, ``setflags(write=False)``) is solved in a copy on every rank alike,
    instead of written through its raw pointer (a fault, or read-only memory changed) on
    some ranks and refused by NumPy on others (which then left the rest waiting)."""
    return bool(M.grid.allreduce(int(local_writable(M)), "min"))


def check_finite(*named, what: str = "solve") -> None:
    """Collective: raise ``ValueError`` on every rank if any of the matrices holds NaN or Inf.

    ``named``: ``(name, DistMatrix)`` pairs on one grid, e.g. ``("A", A), ("B", B)``."""
    comm = named[0][1].grid.comm
    with collective(comm):
        for name, M in named:
            hit = _first_nonfinite(M)
            if hit is not None:
                i, j, v = hit
                v = v.real if v.imag == 0 else v
                raise ValueError(
                    f"{what}: {name} contains a non-finite value ({v}) at global index "
                    f"({i}, {j}); pass check_finite=False to skip this check")


def check_finite_result(M, what: str) -> None:
    """Collective: raise :class:`distla.errors.NonFiniteResultError` (a DistlaError) on every
    rank if a computed result M (e.g. factors of a finite matrix) holds NaN or Inf (overflow,
    or underflow into a reciprocal, during the computation)."""
    with collective(M.grid.comm):
        hit = _first_nonfinite(M)
        if hit is not None:
            raise NonFiniteResultError(
                f"{what}: the computation produced a non-finite value at global index "
                f"({hit[0]}, {hit[1]}) from finite input (overflow, or underflow into a "
                f"reciprocal: the matrix is badly scaled, or the element growth of this "
                f"elimination is too large)")


@functools.lru_cache(maxsize=2)
def _probe_vectors(n: int, real: str) -> np.ndarray:
    """Four fixed standard-normal vectors (n x 4, host), the same on every rank; kept for the
    next call (generating them costs ~4 ms at n = 32768, half of a GPU rank's check)."""
    V = np.random.default_rng(0x5EED).standard_normal((n, 4)).astype(real)
    V.flags.writeable = False
    return V


@functools.lru_cache(maxsize=8)
def _probe_rows(device: str, n: int, real: str, block: int, src: int, nprocs: int,
                proc: int):
    """The rows of :func:`_probe_vectors` that process ``proc`` of a block-cyclic
    distribution holds (column-major, on ``device``; read only), kept for the next call."""
    be = get_backend(device)
    idx = layout.local_indices(n, block, proc, src, nprocs)
    V = be.asarray(np.asfortranarray(_probe_vectors(n, real)[idx]))
    if device == "cpu":
        V.flags.writeable = False
    return V


def _probe_blocks(A):
    """``(Vr, Vc)``: the probe vectors' rows at A's local rows and at its local columns."""
    real = np.finfo(A.dtype).dtype.name
    g = A.grid
    return (_probe_rows(A.device, A.n, real, A.mb, A.rsrc, g.nprow, g.myrow),
            _probe_rows(A.device, A.n, real, A.nb, A.csrc, g.npcol, g.mycol))


def _row_abs_sums(M, e: int = 0):
    """``sum_j |2^e m_ij|`` for each of this rank's local rows (local; a device vector), in
    column slabs of at most ``_SLAB`` entries so that no temporary is the local matrix's size
    (used where :meth:`distla.device.base.Backend.gemv_abs` has no kernel: complex A, or a
    scaled A)."""
    a, xp = M.local, M.xp
    out = xp.zeros(a.shape[0], dtype=np.finfo(a.dtype).dtype)
    step = max(1, _SLAB // max(1, a.shape[0]))
    for j0 in range(0, a.shape[1], step):   # 2^e in two halves, each within the range
        t = xp.abs(a[:, j0:j0 + step])      # (2^136 for float32 subnormals is not)
        if e:
            t *= 2.0 ** (e // 2)
            t *= 2.0 ** (e - e // 2)
        out += t.sum(axis=1)
    return out


def check_symmetric(A, rtol: float | None = None, what: str = "cholesky",
                    finite: bool = False, return_gap: bool = False):
    """Collective: raise ``ValueError`` on every rank unless the square A equals ``A^H``
    within ``rtol`` (default ``sqrt(eps)`` of A's precision) relative to
    ``||r||_2 / sqrt(n)``, ``r`` the rows' absolute sums (a lower bound of ``||A||_F``).
    ``finite=True``: also :func:`check_finite` of A, from the same pass (the probe's sums are
    finite when A is; only otherwise is A scanned). Returns ``||A||_inf`` (the largest row
    sum: for a symmetric A also ``||A||_1``, what the condition estimate needs), the same
    float on every rank; with ``return_gap`` ``(||A||_inf, asymmetry)``, the probe's relative
    asymmetry (rounding level, ~n eps, for an exactly symmetric A)."""
    grid = A.grid
    eps = np.finfo(A.dtype).eps
    rtol = float(np.sqrt(eps)) if rtol is None else float(rtol)
    k = 0
    M, scale, anorm = _symmetry_probe(A, k)
    if not (np.isfinite(M).all() and np.isfinite(scale)):
        if finite:
            check_finite(("A", A), what=what)  # raises unless finite entries merely overflowed
        amax = A.norm("max")
        if 0 < amax < np.inf:   # finite entries whose sums overflow: probe 2^-k A instead
            k = int(np.ceil(np.log2(amax)))
            M, scale, anorm = _symmetry_probe(A, k)
    elif 0 < scale < np.finfo(A.dtype).tiny / eps:
        # entries near the subnormal range: the probe's products lost their relative
        # precision, and an exactly symmetric float32 A scaled by 1e-43 read as "asymmetry
        # 2.3e-03"; probe 2^-k A (k < 0: scaled up, exactly) instead
        k = int(np.ceil(np.log2(A.norm("max"))))
        M, scale, anorm = _symmetry_probe(A, k)
    with np.errstate(over="ignore", invalid="ignore"):     # NaN/Inf in A: judged below
        gap = float(np.max(np.abs(M - M.conj().T)))
        anorm = float(np.ldexp(anorm, k))                  # (inf when ||A||_inf overflows)
    with collective(grid.comm):
        if not np.isfinite(gap):       # (finite=True raised above, naming the entry)
            raise ValueError(f"{what}: A holds NaN or Inf entries, so its symmetry cannot be "
                             f"checked (check_finite=False skipped the scan that names them)")
        if gap > rtol * max(scale, np.finfo(np.float64).tiny):
            rel = gap / scale if scale > 0 else np.inf
            raise ValueError(
                f"{what}: A is not {'Hermitian' if A.dtype.kind == 'c' else 'symmetric'} "
                f"(relative asymmetry about {rel:.1e} > {rtol:.1e}); {what} reads only one "
                f"triangle, so pass check_symmetric=False if that is what you mean")
    if return_gap:
        return anorm, (gap / scale if scale > 0 else 0.0)
    return anorm


def _symmetry_probe(A, k: int):
    """Collective: ``(Vr^T (2^-k A) Vc, ||r||_2 / sqrt(n), max_i r_i)`` of check_symmetric's
    probe for ``2^-k A`` (exact: Vc and Vr take one half of the power each, so neither
    falls to subnormal numbers), ``r`` the rows' sums of ``|2^-k A|``; one pass over A (CPU:
    cache-sized tiles; GPU: one kernel) when ``k`` is 0."""
    from mpi4py import MPI
    be, grid = A.backend, A.grid
    Vr, Vc = _probe_blocks(A)
    if k:
        Vr, Vc = Vr * 2.0 ** -(k - k // 2), Vc * 2.0 ** -(k // 2)
    buf = np.zeros(17, dtype=np.complex128)
    rows = np.zeros(A.local_shape[0])
    if A.local.size:
        with np.errstate(over="ignore", invalid="ignore"):   # NaN/Inf in A: judged by caller
            fused = be.gemv_abs(A.local, Vc, absolute=False, rowsums=True) if not k else None
            W = A.local @ Vc if fused is None else fused[0]    # mloc x 4
            buf[:16] = np.asarray(be.to_host(Vr.T @ W)).ravel()
            rows = np.asarray(be.to_host(_row_abs_sums(A, -k) if fused is None else
                                         fused[2][:, 0]), dtype=np.float64)
    grid.row_comm.Allreduce(MPI.IN_PLACE, rows, op=MPI.SUM)       # whole rows' sums
    anorm = grid.allreduce(float(rows.max()) if rows.size else 0.0, "max")
    # ||r||_2 as anorm ||r / anorm||_2: squares of the sums themselves under- or overflow
    # for a matrix scaled by 1e-300 or 1e+300
    unit = anorm if 0 < anorm < np.inf else 1.0
    with np.errstate(over="ignore", invalid="ignore"):
        buf[16] = float(np.dot(rows / unit, rows / unit)) if grid.mycol == 0 else 0.0
    grid.comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
    return buf[:16].reshape(4, 4), unit * float(np.sqrt(buf[16].real / max(A.n, 1))), anorm
