"""Reading and writing matrix files: NumPy ``.npy`` and Matrix Market ``.mtx``.

* ``.npy`` is read memory-mapped (``np.load(mmap_mode='r')``): every rank reads only the entries
  of its own blocks, so the matrix is never formed on one rank. The file must be visible to
  every rank (a shared or parallel file system on a cluster).
* ``.mtx`` (Matrix Market; the dense ``array`` format, and ``coordinate`` which is densified)
  is text: rank 0 parses it (``scipy.io.mmread``) and scatters it, so it must fit in rank 0's
  memory. Use it for small and moderate n; convert big matrices to .npy.

:func:`inspect` reads only a file's header. :func:`read_matrix` (collective) returns a
DistMatrix. :func:`write_npy` (collective) writes a DistMatrix into a ``.npy`` without gathering
it (rank 0 creates the file, then each rank writes its blocks into it, one rank at a time);
:func:`write_matrix` gathers to rank 0 and writes ``.npy`` or ``.mtx`` (for solutions).
Errors (missing or malformed file, unsupported type) raise :class:`MatrixFileError` (a
ValueError) or FileNotFoundError with the same message on every rank.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from .errors import agree, on_root

__all__ = ["MatrixFileError", "MatrixInfo", "inspect", "read_matrix", "write_npy",
           "write_matrix", "FORMATS"]

FORMATS = ("npy", "mtx")
_NPY_MAGIC = b"\x93NUMPY"
_MM_MAGIC = b"%%MatrixMarket"


class MatrixFileError(ValueError):
    """A matrix file that cannot be used (malformed, wrong type or shape)."""


@dataclass(frozen=True)
class MatrixInfo:
    """What a matrix file's header says: ``path``, ``format`` ('npy' | 'mtx'), ``shape``
    (m, n) (a 1-D .npy of length n is read as n x 1; ``ndim`` keeps 1), ``dtype`` (the
    stored type), ``fortran_order`` (npy), ``symmetry`` (mtx: general, symmetric, ...)."""
    path: str
    format: str
    shape: tuple[int, int]
    dtype: np.dtype
    ndim: int = 2
    fortran_order: bool = False
    symmetry: str = "general"


def _format_of(path: str) -> str:
    low = path.lower()
    if low.endswith(".npy"):
        return "npy"
    if low.endswith((".mtx", ".mm")):
        return "mtx"
    with open(path, "rb") as f:
        head = f.read(len(_MM_MAGIC))
    if head.startswith(_NPY_MAGIC):
        return "npy"
    if head.lower().startswith(_MM_MAGIC.lower()):
        return "mtx"
    raise MatrixFileError(f"{path}: unrecognized matrix file format (expected a NumPy .npy "
                          f"file or a Matrix Market .mtx file)")


def inspect(path) -> MatrixInfo:
    """Read and check ``path``'s header only (not collective; cheap). Raises
    FileNotFoundError or :class:`MatrixFileError` with a one-line message."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: no such file")
    if os.path.isdir(path):
        raise MatrixFileError(f"{path}: is a directory, not a matrix file")
    fmt = _format_of(path)
    return _inspect_npy(path) if fmt == "npy" else _inspect_mtx(path)


def _inspect_npy(path: str) -> MatrixInfo:
    fmt = np.lib.format
    try:
        with open(path, "rb") as f:
            version = fmt.read_magic(f)
            if version == (1, 0):
                shape, fortran, dtype = fmt.read_array_header_1_0(f)
            else:
                shape, fortran, dtype = fmt.read_array_header_2_0(f)
            offset = f.tell()
    except Exception as e:  # noqa: BLE001 - anything wrong with the header
        raise MatrixFileError(f"{path}: not a valid .npy file ({e})") from None
    dtype = np.dtype(dtype)
    if dtype.kind not in "biufc" or dtype.fields is not None:
        raise MatrixFileError(f"{path}: holds {dtype} data; a matrix must be numeric")
    if len(shape) not in (1, 2):
        raise MatrixFileError(f"{path}: holds a {len(shape)}-D array of shape {shape}; "
                              f"expected a matrix (2-D) or a vector (1-D)")
    need = offset + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    have = os.path.getsize(path)
    if have < need:
        raise MatrixFileError(f"{path}: truncated .npy file ({have} bytes, the header "
                              f"announces {need})")
    ndim = len(shape)
    shape2 = (int(shape[0]), 1) if ndim == 1 else (int(shape[0]), int(shape[1]))
    return MatrixInfo(path, "npy", shape2, dtype, ndim, bool(fortran))


def _inspect_mtx(path: str) -> MatrixInfo:
    import scipy.io
    try:
        rows, cols, _entries, layout, field, symmetry = scipy.io.mminfo(path)
    except Exception as e:  # noqa: BLE001
        raise MatrixFileError(f"{path}: not a valid Matrix Market file ({e})") from None
    dtype = {"real": np.float64, "double": np.float64, "integer": np.float64,
             "pattern": np.float64, "complex": np.complex128}.get(field)
    if dtype is None:
        raise MatrixFileError(f"{path}: unsupported Matrix Market field {field!r}")
    return MatrixInfo(path, "mtx", (int(rows), int(cols)), np.dtype(dtype), 2,
                      symmetry=str(symmetry))


def _result_dtype(stored: np.dtype, dtype=None) -> np.dtype:
    if dtype is not None:
        return np.dtype(dtype)
    if stored in (np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.complex64),
                  np.dtype(np.complex128)):
        return stored
    if stored.kind == "c":
        return np.dtype(np.complex128)
    return np.dtype(np.float64)  # ints, bools, float16


def read_matrix(path, grid, block=(64, 64), *, device="cpu", dtype=None, src=(0, 0),
                info: MatrixInfo | None = None, chunk_rows: int | None = None):
    """Collective: the matrix in ``path`` (.npy or .mtx) as a DistMatrix on ``grid`` with
    blocks ``block`` on ``device``. ``dtype`` defaults to the file's floating type (integers
    and bools become float64). A 1-D .npy vector of length n becomes n x 1. ``info`` (from
    :func:`inspect`, the same on every rank) skips re-reading the header.

    .npy: each rank memory-maps the file and copies out only its own blocks, one block row
    (``chunk_rows`` rows, default the row block size) at a time.
    .mtx: rank 0 parses the whole file and scatters it.
    """
    from .matrix import DistMatrix
    comm = grid.comm
    if info is None:
        info = on_root(comm, lambda: inspect(path))
    dt = _result_dtype(info.dtype, dtype)
    if info.format == "mtx":
        a, err = None, None
        if comm.Get_rank() == 0:
            try:
                a = _read_mtx(info.path)
            except Exception as e:  # noqa: BLE001
                err = e
        err = comm.bcast(err, root=0)
        if err is not None:
            raise err
        return DistMatrix.from_global(grid, a, shape=info.shape, block=block, device=device,
                                      src=src, dtype=dt)
    A = DistMatrix.zeros(grid, info.shape, block, dtype=dt, device=device, src=src)
    err = None
    try:
        mm = np.load(info.path, mmap_mode="r")
        if mm.ndim == 1:
            mm = mm.reshape(-1, 1)
        if mm.shape != info.shape:
            raise MatrixFileError(f"{info.path}: changed while being read "
                                  f"(shape {mm.shape}, expected {info.shape})")
        rows, cols = A.row_indices(), A.col_indices()
        step = max(1, chunk_rows or A.mb)
        be = A.backend
        for i0 in range(0, rows.size, step):
            r = rows[i0:i0 + step]
            piece = np.asarray(mm[np.ix_(r, cols)], dtype=dt)
            A.local[i0:i0 + r.size, :] = be.asarray(piece) if be.is_gpu else piece
        del mm
    except MemoryError:
        raise
    except OSError as e:
        err = MatrixFileError(f"{info.path}: cannot read ({e})")
    except Exception as e:  # noqa: BLE001
        err = e
    agree(comm, err)
    return A


def _read_mtx(path: str) -> np.ndarray:
    import scipy.io
    try:
        a = scipy.io.mmread(path)
    except Exception as e:  # noqa: BLE001
        raise MatrixFileError(f"{path}: cannot parse Matrix Market file ({e})") from None
    if hasattr(a, "toarray"):
        a = a.toarray()
    a = np.asarray(a)
    if a.ndim == 1:
        a = a.reshape(-1, 1)
    return a


def _check_writable(path: str) -> None:
    d = os.path.dirname(os.path.abspath(path)) or "."
    if not os.path.isdir(d):
        raise FileNotFoundError(f"{path}: directory {d} does not exist")
    if not os.access(d, os.W_OK):
        raise PermissionError(f"{path}: directory {d} is not writable")
    if os.path.isdir(path):
        raise MatrixFileError(f"{path}: is a directory")


def check_writable(path, comm=None) -> None:
    """Raise (on every rank of ``comm`` if given: collective) if ``path`` cannot be created
    (missing or read-only directory). Checked on rank 0."""
    if comm is None:
        _check_writable(os.fspath(path))
    else:
        on_root(comm, lambda: _check_writable(os.fspath(path)))


def write_npy(path, A, *, vector: bool = False) -> None:
    """Collective: write the DistMatrix ``A`` to the ``.npy`` file ``path`` without gathering
    it: rank 0 creates the file (``np.lib.format.open_memmap``, C order), then the ranks write
    their blocks into it one after another (each flushes before the next starts, which keeps
    it correct on network file systems). ``vector=True`` writes an n x 1 matrix as a 1-D
    array."""
    from numpy.lib.format import open_memmap
    comm = A.grid.comm
    path = os.fspath(path)
    shape = (A.m,) if vector and A.n == 1 else A.shape

    def create():
        _check_writable(path)
        mm = open_memmap(path, mode="w+", dtype=A.dtype, shape=shape)
        del mm
    on_root(comm, create)
    host = A.backend.to_host(A.local)
    rows, cols = A.row_indices(), A.col_indices()
    err = None
    for r in range(comm.Get_size()):
        if r == comm.Get_rank() and err is None and host.size:
            try:
                mm = open_memmap(path, mode="r+")
                view = mm.reshape(-1, 1) if mm.ndim == 1 else mm
                step = max(1, A.mb)
                for i0 in range(0, rows.size, step):
                    rr = rows[i0:i0 + step]
                    view[np.ix_(rr, cols)] = host[i0:i0 + rr.size, :]
                mm.flush()
                del mm, view
            except Exception as e:  # noqa: BLE001
                err = e
        comm.Barrier()
    agree(comm, err)


def write_matrix(path, A, *, vector: bool = False, root: int = 0) -> None:
    """Collective: gather the DistMatrix ``A`` to ``root`` and write it there as ``.npy``
    (``np.save``) or, for a ``.mtx``/``.mm`` path, Matrix Market dense array format.
    ``vector=True`` writes an n x 1 matrix as a 1-D array (npy)."""
    comm = A.grid.comm
    path = os.fspath(path)
    a = A.to_global(root=root)
    err = None
    if comm.Get_rank() == root:
        try:
            _check_writable(path)
            if path.lower().endswith((".mtx", ".mm")):
                import scipy.io
                scipy.io.mmwrite(path, a, field="complex" if a.dtype.kind == "c" else "real")
            else:
                np.save(path, a[:, 0] if vector and a.shape[1] == 1 else a)
        except Exception as e:  # noqa: BLE001
            err = e
    agree(comm, err)
