"""In-place BLAS/LAPACK on strided column-major views, through SciPy's own BLAS/LAPACK.

SciPy exports its Fortran BLAS and LAPACK as PyCapsules (``scipy.linalg.cython_blas`` and
``cython_lapack``). Calling them by pointer lets local kernels update a sub-block of a rank's
local matrix in place, with its leading dimension, exactly as ScaLAPACK's PBLAS do, instead of
copying the sub-block out and back.
"""
from __future__ import annotations

import ctypes
import functools

import numpy as np

_P = ctypes.c_void_p
_api = ctypes.pythonapi
_api.PyCapsule_GetName.restype = ctypes.c_char_p
_api.PyCapsule_GetName.argtypes = [ctypes.py_object]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]

_NARGS = {"gemm": 13, "gemv": 11, "trsv": 8, "trsm": 11, "syrk": 10, "potrf": 5,
          "getrf": 6, "laswp": 7, "trtri": 6, "lacpy": 7}


@functools.lru_cache(maxsize=None)
def _fn(name: str):
    from scipy.linalg import cython_blas, cython_lapack
    capi = cython_blas.__pyx_capi__ if name in cython_blas.__pyx_capi__ else \
        cython_lapack.__pyx_capi__
    cap = capi[name]
    ptr = _api.PyCapsule_GetPointer(cap, _api.PyCapsule_GetName(cap))
    return ctypes.CFUNCTYPE(None, *[_P] * _NARGS[name[1:]])(ptr)


_PREFIX = {"f": "s", "d": "d", "F": "c", "D": "z"}


def _prefix(dtype) -> str:
    return _PREFIX[dtype.char if isinstance(dtype, np.dtype) else np.dtype(dtype).char]


# Per-call argument objects are cached: building them (ctypes ints, NumPy scalars for alpha
# and beta, C strings) cost ~20 us of a small GEMM's ~30 us. BLAS reads them and never writes.
_INTS: dict = {}
_CHARS: dict = {}
_SCALARS: dict = {}


def _i(x):
    x = int(x)
    r = _INTS.get(x)
    if r is None:
        if len(_INTS) > 4096:
            _INTS.clear()
        r = _INTS[x] = ctypes.byref(ctypes.c_int(x))
    return r


def _c(x):
    r = _CHARS.get(x)
    if r is None:
        r = _CHARS[x] = ctypes.c_char_p(x.encode())
    return r


def _scalar(x, dtype):
    """A pointer to ``x`` as a ``dtype`` scalar (kept alive by the cache)."""
    key = (x, dtype)
    r = _SCALARS.get(key)
    if r is None:
        if len(_SCALARS) > 256:
            _SCALARS.clear()
        a = np.array(x, dtype=dtype)
        r = _SCALARS[key] = (a, a.ctypes.data_as(_P))
    return r[1]


def ld(a) -> int:
    """Leading dimension of a column-major (unit row stride) 2-D view."""
    it = a.itemsize
    if a.shape[0] <= 1 and a.shape[1] <= 1:
        return 1
    if a.shape[1] <= 1:
        return max(1, a.shape[0])
    if a.shape[0] > 1 and a.strides[0] != it:
        raise ValueError("not a column-major view")
    return max(1, a.strides[1] // it, a.shape[0])


def is_colmajor(a) -> bool:
    if a.ndim != 2:
        return False
    it = a.itemsize
    return (a.shape[0] <= 1 or a.strides[0] == it) and \
        (a.shape[1] <= 1 or (a.strides[1] % it == 0 and a.strides[1] // it >= a.shape[0]))


def colmajor_op(a, trans: str):
    """``(a', trans')`` with ``op'(a') == op(a)`` and ``a'`` column-major where a transpose
    makes it so: a row-major ``a`` becomes ``a.T`` with 'N' and 'T' swapped (no copy). Other
    views (and 'C' on a row-major view) come back unchanged."""
    if trans == "C" or is_colmajor(a) or a.ndim != 2 or not is_colmajor(a.T):
        return a, trans
    return a.T, "T" if trans == "N" else "N"


def _ptr(a):
    return _P(a.ctypes.data)


def gemm(transa, transb, alpha, a, b, beta, c):
    m, n = c.shape
    k = a.shape[1] if transa == "N" else a.shape[0]
    if m == 0 or n == 0:
        return
    dt = c.dtype
    _fn(_prefix(dt) + "gemm")(_c(transa), _c(transb), _i(m), _i(n), _i(k),
                              _scalar(alpha, dt), _ptr(a), _i(ld(a)), _ptr(b), _i(ld(b)),
                              _scalar(beta, dt), _ptr(c), _i(ld(c)))


def gemv(trans, alpha, a, x, beta, y):
    """``y = alpha op(a) x + beta y`` for a column-major ``a`` and 1-D strided ``x``, ``y``
    (element strides of any sign are not supported: positive ones only)."""
    m, n = a.shape
    if m == 0 or n == 0:
        return
    dt, it = y.dtype, y.itemsize
    _fn(_prefix(dt) + "gemv")(_c(trans), _i(m), _i(n), _scalar(alpha, dt), _ptr(a),
                              _i(ld(a)), _ptr(x), _i(x.strides[0] // it), _scalar(beta, dt),
                              _ptr(y), _i(y.strides[0] // it))


def syrk(uplo, trans, alpha, a, beta, c):
    n = c.shape[0]
    k = a.shape[1] if trans == "N" else a.shape[0]
    if n == 0:
        return
    dt = c.dtype
    _fn(_prefix(dt) + "syrk")(_c(uplo), _c(trans), _i(n), _i(k), _scalar(alpha, dt),
                              _ptr(a), _i(ld(a)), _scalar(beta, dt), _ptr(c), _i(ld(c)))


def trsm(side, uplo, transa, diag, alpha, a, b):
    m, n = b.shape
    if m == 0 or n == 0:
        return
    dt = b.dtype
    _fn(_prefix(dt) + "trsm")(_c(side), _c(uplo), _c(transa), _c(diag), _i(m), _i(n),
                              _scalar(alpha, dt), _ptr(a), _i(ld(a)), _ptr(b), _i(ld(b)))


def trsv(uplo, trans, diag, a, x):
    """``x = op(a)^-1 x`` for a column-major triangular ``a`` and a 1-D strided ``x``."""
    n = a.shape[0]
    if n == 0:
        return
    _fn(_prefix(x.dtype) + "trsv")(_c(uplo), _c(trans), _c(diag), _i(n), _ptr(a), _i(ld(a)),
                                   _ptr(x), _i(x.strides[0] // x.itemsize))


def potrf(uplo, a) -> int:
    n = a.shape[0]
    info = ctypes.c_int(0)
    if n:
        _fn(_prefix(a.dtype) + "potrf")(_c(uplo), _i(n), _ptr(a), _i(ld(a)), ctypes.byref(info))
    return info.value


def getrf(a):
    """LU with partial pivoting in place; returns (0-based pivots int64 array, info)."""
    m, n = a.shape
    ipiv = np.zeros(max(1, min(m, n)), dtype=np.int32)
    info = ctypes.c_int(0)
    if m and n:
        _fn(_prefix(a.dtype) + "getrf")(_i(m), _i(n), _ptr(a), _i(ld(a)),
                                        ipiv.ctypes.data_as(_P), ctypes.byref(info))
    return ipiv[:min(m, n)].astype(np.int64) - 1, info.value


def laswp(a, piv, start: int) -> None:
    """LAPACK ``?laswp`` in place on the column-major NumPy view ``a``: row ``start + i`` is
    interchanged with row ``piv[i]`` (0-based rows of ``a``) for i = 0, 1, ...."""
    n, k = a.shape[1], len(piv)
    if n == 0 or k == 0:
        return
    ip = np.empty(start + k, dtype=np.int32)
    ip[start:] = np.asarray(piv, dtype=np.int64) + 1
    _fn(_prefix(a.dtype) + "laswp")(_i(n), _ptr(a), _i(ld(a)), _i(start + 1), _i(start + k),
                                    ip.ctypes.data_as(_P), _i(1))


def swapped_order(piv, n: int) -> np.ndarray:
    """``arange(n)`` after LAPACK-style interchanges ``piv`` (0-based, row ``i`` swapped with
    row ``piv[i] >= i``, i = 0, 1, ...): position ``i`` then holds original row ``order[i]``.
    One dlaswp over the indices as float64 (exact below 2^53), no Python loop."""
    piv = np.asarray(piv, dtype=np.int64).ravel()
    v = np.arange(n, dtype=np.float64)
    if piv.size and n:
        ip = (piv + 1).astype(np.int32)
        _fn("dlaswp")(_i(1), _ptr(v), _i(n), _i(1), _i(piv.size), ip.ctypes.data_as(_P), _i(1))
    return v.astype(np.int64)


def swap_moves(piv, start: int):
    """Net moves of LAPACK-style interchanges: row ``start + i`` swapped with row ``piv[i]``
    (0-based, ``>= start + i``) for i = 0, 1, .... Returns ``(dest, src)`` (int64 NumPy, sorted
    by ``dest``): afterwards row ``dest[t]`` holds the old row ``src[t]``; rows not listed do
    not move. Host index math in O(len(piv)): the touched rows are numbered compactly and
    dlaswp permutes their indices (float64: exact below 2^53), with no Python loop."""
    piv = np.asarray(piv, dtype=np.int64).ravel()
    k = piv.size
    if k == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    rows = np.sort(np.concatenate([np.arange(start, start + k, dtype=np.int64), piv]),
                   kind="stable")   # a sorted run + k values: fast; np.unique is ~10x slower
    rows = rows[np.concatenate(([True], rows[1:] != rows[:-1]))]
    # row start + i is compact row i (every pivot is >= start): the swaps on compact rows
    v = rows[swapped_order(np.searchsorted(rows, piv), rows.size)]
    moved = np.flatnonzero(v != rows)
    return rows[moved], v[moved]
