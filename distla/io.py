"""Reading and writing matrix files: NumPy ``.npy``, Matrix Market ``.mtx``, HDF5
(``file.h5:/dataset``, through :mod:`distla.h5io`; h5py is the optional extra ``hdf5``).

* ``.npy`` is read and written with MPI-IO, so the matrix is never formed on one rank: reads
  go through a file view (``MPI_Type_create_darray``) that selects exactly a rank's blocks of
  the 2D block-cyclic layout, independent calls a slab at a time (collective with
  ``DISTLA_IO_COLLECTIVE_READ=1``); writes are independent writes of whole columns, a slab of
  block columns at a time, regrouped first where a grid has several process rows and written
  on a writer thread while the next slab is regrouped (``DISTLA_IO_WRITE=sync``: in the
  caller's thread). C- and Fortran-ordered files are read;
  files are written Fortran-ordered (the local storage's order: no transposition); rank 0
  writes the header. The file must be visible to every rank (a shared or parallel file system
  on a cluster). ROMIO's collective buffering and data sieving are off by default (faster on
  local file systems, measured); ``DISTLA_IO_HINTS="key=value,..."`` sets other hints, and
  ``DISTLA_IO=memmap`` (also used for non-native byte order or more than 2^31 elements) reads
  through ``np.load(mmap_mode='r')``.
* ``.mtx`` (Matrix Market; the dense ``array`` format, and ``coordinate`` which is densified)
  is text: rank 0 parses it (``scipy.io.mmread``) and scatters it, so it must fit in rank 0's
  memory. Use it for small and moderate n; convert big matrices to .npy.
* HDF5 (``.h5``/``.hdf5``, a path ``file.h5:/name``): every rank reads its own hyperslabs;
  written rank after rank, or collectively where h5py has MPI (:mod:`distla.h5io`).

:func:`inspect` reads only a file's header (and refuses a .npy whose size does not match it).
:func:`read_matrix` (collective) returns a DistMatrix. :func:`write_npy` (collective) writes a
DistMatrix without gathering it; :func:`write_npy_generated` writes a matrix given by an entry
function a slab of block columns at a time; :func:`write_matrix` gathers to rank 0 and writes
``.npy`` or ``.mtx`` (for solutions). Every write goes through :func:`atomic_output`: a
temporary file beside the target, renamed when every rank succeeded, removed on failure or
SIGTERM/SIGINT. Errors (missing or malformed file, unsupported type) raise
:class:`MatrixFileError` (a ValueError) or OSError with the same message on every rank.
"""
from __future__ import annotations

import os

import numpy as np

from . import h5io
from .errors import agree, collective, on_root, signature
from .filebase import (  # noqa: F401 - re-exported: distla.io is their public home
    MatrixFileError,
    MatrixInfo,
    _check_writable,
    atomic_output,
    check_regular_input,
)
from .grid import check_environment_values, settings

__all__ = ["MatrixFileError", "MatrixInfo", "inspect", "read_matrix", "write_npy",
           "write_matrix", "write_npy_generated", "atomic_output", "FORMATS"]

FORMATS = ("npy", "mtx", "h5")
_NPY_MAGIC = b"\x93NUMPY"
_MM_MAGIC = b"%%MatrixMarket"




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
    hint = ""
    if head.startswith(b"\x89HDF"):
        hint = ("; it is an HDF5 file: name it with an .h5 or .hdf5 suffix and its dataset, "
                "FILE.h5:/NAME")
    raise MatrixFileError(f"{path}: unrecognized matrix file format (expected a NumPy .npy "
                          f"file, a Matrix Market .mtx file or an HDF5 dataset "
                          f"file.h5:/name){hint}")


def inspect(path) -> MatrixInfo:
    """Read and check ``path``'s header only (not collective; cheap). Raises
    FileNotFoundError or :class:`MatrixFileError` with a one-line message."""
    path = os.fspath(path)
    if h5io.is_h5(path):
        return h5io.inspect(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: no such file")
    if os.path.isdir(path):
        raise MatrixFileError(f"{path}: is a directory, not a matrix file")
    check_regular_input(path)               # (before any open: a FIFO would block)
    fmt = _format_of(path)
    return _inspect_npy(path) if fmt == "npy" else _inspect_mtx(path)


def _npy_bytes(offset: int, shape, dtype) -> int:
    """The size of a .npy file with a header of ``offset`` bytes (Python ints: exact for any
    shape, where int64 products overflow)."""
    return offset + int(np.prod(shape, dtype=object)) * np.dtype(dtype).itemsize


def _inspect_npy(path: str) -> MatrixInfo:
    fmt = np.lib.format
    try:
        with open(path, "rb") as f:
            version = fmt.read_magic(f)
            if version not in ((1, 0), (2, 0), (3, 0)):     # (what np.load reads)
                raise ValueError(f"format version {version[0]}.{version[1]}; NumPy writes "
                                 f"1.0, 2.0 and 3.0 only")
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
    if any(int(d) < 0 for d in shape):
        raise MatrixFileError(f"{path}: not a valid .npy file (its header gives the negative "
                              f"shape {tuple(shape)})")
    need = _npy_bytes(offset, shape, dtype)
    have = os.path.getsize(path)
    if have != need:
        raise MatrixFileError(f"{path}: {'truncated' if have < need else 'oversized'} .npy "
                              f"file ({have} bytes; its header announces {need})")
    ndim = len(shape)
    shape2 = (int(shape[0]), 1) if ndim == 1 else (int(shape[0]), int(shape[1]))
    return MatrixInfo(path, "npy", shape2, dtype, ndim, bool(fortran), offset=offset)


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
    """The dtype a file of ``stored`` entries is computed in (``dtype`` when given): its own
    for float32/64 and complex64/128 (either byte order), float32 for float16 and float64
    for integers and booleans (as :meth:`DistMatrix.from_global`); a long-double file needs
    ``dtype`` (ValueError: its extra precision would be lost silently)."""
    if dtype is not None:
        return np.dtype(dtype)
    native = stored.newbyteorder("=")     # a big-endian float32 file stays float32
    if native in (np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.complex64),
                  np.dtype(np.complex128)):
        return native
    if stored.kind in "fc" and stored.itemsize > (8 if stored.kind == "f" else 16):
        raise ValueError(f"the file holds {stored} entries, which distla does not compute "
                         f"in; choose the precision (dtype=float64 or complex128; --dtype on "
                         f"the command line), knowing that the extra digits are dropped")
    if stored.kind == "c":
        return np.dtype(np.complex128)
    if native == np.dtype(np.float16):
        return np.dtype(np.float32)
    return np.dtype(np.float64)  # ints, bools


def read_matrix(path, grid, block=(64, 64), *, device="cpu", dtype=None, src=(0, 0),
                info: MatrixInfo | None = None, chunk_rows: int | None = None):
    """Collective: the matrix in ``path`` (.npy or .mtx) as a DistMatrix on ``grid`` with
    blocks ``block`` on ``device``. ``dtype`` defaults to the file's floating type (integers
    and bools become float64, float16 float32; a long-double file needs ``dtype``). A 1-D
    .npy vector of length n becomes n x 1. ``info`` (from
    :func:`inspect`, the same on every rank) skips re-reading the header.

    .npy: each rank reads only its own blocks through an MPI-IO file view
    (:func:`_read_npy_mpiio`); with ``chunk_rows`` (or a dtype MPI cannot describe) it
    memory-maps the file and copies its blocks out ``chunk_rows`` rows at a time.
    .h5: each rank reads its own hyperslabs. .mtx: rank 0 parses the whole file and scatters it.
    A narrower ``dtype`` than the file's (float32 for float64) that turns values into inf
    raises ValueError on every rank.
    """
    comm = grid.comm
    # every rank the same file and layout (ranks naming different files read rank 0's)
    with collective(comm, signature("read_matrix", path=os.fspath(path), block=block,
                                    device=device, dtype=dtype, src=src,
                                    chunk_rows=chunk_rows, settings=settings())):
        check_environment_values()      # (set since the grid was built: validated now)
        if chunk_rows is not None and (isinstance(chunk_rows, bool) or
                                       not isinstance(chunk_rows, (int, np.integer)) or
                                       chunk_rows < 1):
            raise ValueError(f"read_matrix: chunk_rows must be a positive int or None, not "
                             f"{chunk_rows!r}")
    if info is None:
        info = on_root(comm, lambda: inspect(path))
    dt = _result_dtype(info.dtype, dtype)
    if np.dtype(info.dtype).kind == "c" and dt.kind != "c":
        raise TypeError(f"{info.path} holds {np.dtype(info.dtype)} values: reading them as "
                        f"{dt} would drop their imaginary parts (ask for a complex dtype)")
    with np.errstate(over="ignore"):        # an overflowing cast: reported just below
        A = _read(info, grid, block, device, dt, src, chunk_rows)
    _check_narrowing(A, info)
    if dtype is None:
        _check_exact_integers(A, info)
    return A


def _check_exact_integers(A, info) -> None:
    """Collective: ValueError on every rank when a file of integers read in the default
    floating type holds one at or beyond 2^53 (float64; 2^24 for float32), from where that
    type does not represent every integer:
    it was rounded, as a long-double file's extra digits would be (refused alike)."""
    from mpi4py import MPI
    if np.dtype(info.dtype).kind not in "iu" or np.dtype(info.dtype).itemsize < 4:
        return
    exact = 2.0 ** (np.finfo(A.dtype).nmant + 1)
    big = float(A.xp.abs(A.local).max()) if A.local.size else 0.0
    big = A.grid.comm.allreduce(big, op=MPI.MAX)
    if big >= exact:      # (2^53 + 1 reads as 2^53: from there on, rounding is possible)
        raise ValueError(f"{info.path}: holds {np.dtype(info.dtype)} integers of magnitude "
                         f"{big:.17g}, at or beyond {exact:.0f} ({A.dtype} holds every integer "
                         f"exactly only below that): they may have been rounded; pass "
                         f"dtype={A.dtype} (--dtype on the command line) to accept that")


def _read(info, grid, block, device, dt, src, chunk_rows):
    """Collective: read_matrix's reading, by format."""
    from .matrix import DistMatrix
    comm = grid.comm
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
    if info.format == "h5":
        h5io.read_into(info, A)
        return A
    if _mpiio_ok(info.dtype, info.shape) and chunk_rows is None:
        _read_npy_mpiio(info, A)
        return A
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


def _check_narrowing(A, info) -> None:
    """Collective: ValueError on every rank when a file read into a narrower floating type
    (float64 as float32) gave infinite entries: values beyond the narrower type's range
    would otherwise enter the matrix as inf."""
    from mpi4py import MPI
    fdt = np.dtype(info.dtype)
    if fdt.kind not in "fc" or A.dtype.kind not in "fc" or A.dtype.itemsize >= fdt.itemsize:
        return
    bad = bool(A.xp.isinf(A.local).any()) if A.local.size else False
    if A.grid.comm.allreduce(bad, op=MPI.LOR):
        raise ValueError(f"{info.path}: holds values that are infinite as {A.dtype}: beyond "
                         f"its largest value {np.finfo(A.dtype).max:.3g} (read the file as "
                         f"{fdt.name} then), or infinite in the file itself (which no solver "
                         f"accepts)")


# ---------------------------------------------------------------------------------------
# MPI-IO: file view = the block-cyclic distribution
# ---------------------------------------------------------------------------------------
_INT_MAX = 2 ** 31 - 1


def _mpiio_ok(dtype: np.dtype, shape) -> bool:
    """MPI-IO handles native-endian numeric files whose element counts fit MPI's int
    arguments; others (and DISTLA_IO=memmap) use the memory-mapped path."""
    if os.environ.get("DISTLA_IO", "mpiio") == "memmap":
        return False
    if not dtype.isnative or dtype.char not in "fdFDilbBhHqQ?":
        return False
    return shape[0] * shape[1] <= _INT_MAX


def _filetype(A, dtype: np.dtype, fortran: bool):
    """This rank's block-cyclic piece of the global ``A.m x A.n`` array stored in C or Fortran
    order, as an MPI darray type. darray's process grid is row-major with the first block on
    process (0, 0): the source process (rsrc, csrc) and the grid's rank order are folded into
    the ``rank`` argument (this rank's coordinates relative to the source)."""
    from mpi4py import MPI
    g = A.grid
    pr = (g.myrow - A.rsrc) % g.nprow
    pc = (g.mycol - A.csrc) % g.npcol
    base = MPI._typedict[dtype.char]
    # a dimension with one process is not distributed (DISTRIBUTE_NONE): its whole extent is
    # one contiguous piece, which ROMIO writes in one call, where a cyclic type of one process
    # is a run of block-sized pieces (1x1 grid, n = 8192, nb = 128: 0.9 s vs np.save 0.34 s)
    one = (g.nprow == 1, g.npcol == 1)
    t = base.Create_darray(g.nprow * g.npcol, pr * g.npcol + pc, [A.m, A.n],
                           [MPI.DISTRIBUTE_NONE if o else MPI.DISTRIBUTE_CYCLIC for o in one],
                           [MPI.DISTRIBUTE_DFLT_DARG if o else b for o, b in
                            zip(one, (A.mb, A.nb))],
                           [g.nprow, g.npcol], MPI.ORDER_FORTRAN if fortran else MPI.ORDER_C)
    t.Commit()
    return base, t


_DEFAULT_HINTS = ("romio_cb_read=disable,romio_cb_write=disable,"
                  "romio_ds_read=disable,romio_ds_write=disable")


def _hints():
    """MPI-IO hints: DISTLA_IO_HINTS ("key=value,key=value"; empty for the MPI library's own
    defaults), else ROMIO's two-phase collective buffering and data sieving off. Measured on a
    local file system (benchmarks/io_rate.py, 2 ranks, n=8192): read 0.70 -> 0.24 s, write
    2.4 -> 1.0 s; on a parallel file system try DISTLA_IO_HINTS= (the library's tuning)."""
    from mpi4py import MPI
    spec = os.environ.get("DISTLA_IO_HINTS", _DEFAULT_HINTS)
    if not spec:
        return MPI.INFO_NULL
    pairs = _parse_hints(spec)
    info = MPI.Info.Create()
    for k, v in pairs:
        info.Set(k, v)
    return info


#: ROMIO / OMPIO hints whose values are sizes or counts: a bad one makes ROMIO abort the job
_COUNT_HINTS = ("cb_buffer_size", "cb_nodes", "ind_rd_buffer_size", "ind_wr_buffer_size",
                "striping_factor", "striping_unit", "cb_config_list_size")


def _parse_hints(spec: str) -> list:
    """``[(key, value)]`` from DISTLA_IO_HINTS's "key=value,key=value" (empty items, such as
    a trailing comma, skipped); ValueError naming the variable for an item without a key or
    a value, or a size/count hint that is not a positive integer. Local."""
    pairs = []
    for kv in spec.split(","):
        if not kv.strip():
            continue
        k, eq, v = (x.strip() for x in kv.partition("="))
        if not k or not eq or not v:
            raise ValueError(f"DISTLA_IO_HINTS={spec!r}: {kv.strip()!r} is not key=value")
        if k in _COUNT_HINTS and not (v.isdigit() and 0 < int(v) <= _INT_MAX):
            raise ValueError(f"DISTLA_IO_HINTS={spec!r}: {k} must be a positive integer "
                             f"below 2^31, not {v!r}")
        pairs.append((k, v))
    return pairs


READ_SLAB_BYTES = 1 << 26     # per rank: one slab of a read (GPU ranks: two pinned)


def _collective_reads() -> bool:
    """Whether reads are collective (MPI_File_read_all): only when DISTLA_IO_COLLECTIVE_READ=1.
    Independent reads through the same file views were 6-9x faster with Open MPI's OMPIO
    and no slower with ROMIO on the GPU machine's local file system (docs/job.md); a
    parallel file system may prefer collective buffering."""
    return os.environ.get("DISTLA_IO_COLLECTIVE_READ", "0") == "1"


def _read_npy_mpiio(info: MatrixInfo, A, slab_bytes: int | None = None) -> None:
    """Collective: fill A from the .npy described by ``info`` with MPI-IO.

    One file view (the block-cyclic darray of A, set collectively once) whose data are A's
    local array in the file's order, so a slab of local columns (Fortran file) or rows (C
    file) is one range of the view, read with an independent ``MPI_File_read_at`` (collective
    ``read_at_all`` with DISTLA_IO_COLLECTIVE_READ=1) about ``slab_bytes`` per rank at a time
    (default ``READ_SLAB_BYTES``). Each slab reaches A through :meth:`Backend.staging`: on
    CPU ranks straight into A's storage where dtype and layout agree, on GPU ranks through
    pinned buffers whose copies to the device overlap the next slab's read. No rank holds a
    host copy of its whole local matrix. Nothing collective runs between the view and the
    final agreement on errors (but the collective reads, which a failed rank keeps joining
    with nothing to read), so a rank that fails part-way never leaves the others waiting."""
    from mpi4py import MPI

    from .layout import numroc
    comm, g = A.grid.comm, A.grid
    fdt = np.dtype(info.dtype)
    order = "F" if info.fortran_order else "C"
    slab_bytes = READ_SLAB_BYTES if slab_bytes is None else slab_bytes
    coll_reads = _collective_reads()
    mloc, nloc = A.local_shape
    # the slow axis (global extent, block, grid dimension, my coordinate, source), my length
    # across it, and the most any rank holds across it (the same slab count on every rank)
    if info.fortran_order:
        ext, blk, nprocs, me, src, across = A.n, A.nb, g.npcol, g.mycol, A.csrc, mloc
        most = numroc(A.m, A.mb, A.rsrc, A.rsrc, g.nprow)
    else:
        ext, blk, nprocs, me, src, across = A.m, A.mb, g.nprow, g.myrow, A.rsrc, nloc
        most = numroc(A.n, A.nb, A.csrc, A.csrc, g.npcol)
    width = blk * nprocs * max(1, min(ext, slab_bytes // max(1, most * blk * fdt.itemsize)))
    def failed(e):
        if isinstance(e, MPI.Exception):
            return MatrixFileError(f"{info.path}: cannot read ({e.Get_error_string()})")
        return e

    with collective(comm):   # (MPI's open failing for one rank said "[rank 0] Other I/O
        if not os.access(info.path, os.R_OK):          # error" on a rank that had the file)
            why = "permission denied" if os.path.exists(info.path) else "no such file"
            raise MatrixFileError(f"{info.path}: cannot read it on this rank ({why}); every "
                                  f"rank must see the same file (a shared file system)")
    err, fh, ftype = None, None, None
    try:
        fh = MPI.File.Open(comm, info.path, MPI.MODE_RDONLY, _hints())
        etype, ftype = _filetype(A, fdt, info.fortran_order)
        fh.Set_view(info.offset, etype, ftype)
        _check_size(info, fh.Get_size())
    except MPI.Exception as e:
        err = failed(e)
    except MatrixFileError as e:
        err = e
    if comm.allreduce(err is None, op=MPI.LAND):
        read = fh.Read_at_all if coll_reads else fh.Read_at
        slabs = range(0, ext, width)
        joins = 0                # collective reads this rank took part in
        try:
            with A.backend.staging() as put:
                for k0 in slabs:
                    l0 = numroc(k0, blk, me, src, nprocs)
                    l1 = l0 + numroc(min(width, ext - k0), blk, (me - src) % nprocs, 0,
                                     nprocs)

                    def fill(buf, at=l0 * across):
                        nonlocal joins
                        joins += 1
                        status = MPI.Status()
                        read(at, [buf, etype], status)
                        got = status.Get_count(etype)
                        if got != buf.size:     # the file shrank after its header was read
                            raise MatrixFileError(
                                f"{info.path}: read {got} of {buf.size} entries: the file "
                                f"is shorter than its header says (changed while being read?)")
                    try:
                        if err is None:
                            put(A.local[:, l0:l1] if info.fortran_order else
                                A.local[l0:l1, :], fill, fdt, order)
                    except Exception as e:  # noqa: BLE001 - agreed on below
                        err = failed(e)
        except Exception as e:  # noqa: BLE001 - the staging itself (agreed on below)
            err = err or failed(e)
        # a rank that failed joins the collective reads it missed, with nothing to read
        for _ in range(len(slabs) - joins if coll_reads else 0):
            read(0, [np.empty(0, fdt), etype])
        if err is None:      # a file that shrank during the read left parts unread (MPI-IO
            try:             # need not report short reads through a file view)
                _check_size(info, fh.Get_size())
            except MatrixFileError as e:
                err = e
    if ftype is not None:
        ftype.Free()
    if fh is not None:
        fh.Close()
    agree(comm, err)


def _check_size(info, size: int) -> None:
    """MatrixFileError when the .npy file holds fewer bytes than its header (read by
    :func:`inspect`) promises: it changed since (truncated or being rewritten). Local."""
    need = _npy_bytes(info.offset, info.shape, info.dtype)
    if size < need:
        raise MatrixFileError(f"{info.path}: holds {size} bytes but its header promises "
                              f"{need}: the file changed after its header was read "
                              f"(truncated or being rewritten?)")


def _npy_header(shape, dtype: np.dtype, fortran: bool) -> bytes:
    """The .npy (version 1.0) header for an array of ``shape`` and ``dtype``."""
    import io as _io
    f = _io.BytesIO()
    np.lib.format.write_array_header_1_0(f, {"descr": np.lib.format.dtype_to_descr(dtype),
                                             "fortran_order": fortran, "shape": tuple(shape)})
    return f.getvalue()


WRITE_SLAB_BYTES = 1 << 26    # per rank: the slabs of a write regrouped into whole columns


def _write_mode() -> str:
    """How a slab's writes overlap the next slab's regrouping: 'thread' (the default: blocking
    ``MPI_File_write_at`` calls on one writer thread; needs MPI_THREAD_MULTIPLE, which mpi4py
    asks for, else 'sync') or 'sync' (DISTLA_IO_WRITE=sync: in the caller's thread, no
    overlap). Nonblocking ``MPI_File_iwrite_at`` was measured too and lost on 16 ranks (one
    H200 machine, 16 cores, n = 16384: 1.27 s against 0.75 s), and so did one writer per node
    fed through MPI shared memory (2-core machine: docs/job.md)."""
    from mpi4py import MPI
    mode = os.environ.get("DISTLA_IO_WRITE", "thread")
    if mode not in ("thread", "sync"):
        raise ValueError(f"DISTLA_IO_WRITE={mode!r}: expected 'thread' or 'sync'")
    if mode == "thread" and MPI.Query_thread() < MPI.THREAD_MULTIPLE:
        return "sync"
    return mode


def _column_slabs(A):
    """``[(first global column, S), ...]``: A in slabs of block columns (about
    ``WRITE_SLAB_BYTES`` per rank), each S holding whole columns on its ranks. With one
    process row S is a view of A; otherwise each slab is regrouped onto the 1 x (P Q) grid
    by an all-to-all (:func:`distla.redistribute.remap`) into one of two reused matrices
    taken in turn, so that a slab can still be in writing while the next one is regrouped.
    A generator: collective over A's grid at each step."""
    from .matrix import DistMatrix
    from .redistribute import remap
    comm, item = A.grid.comm, A.dtype.itemsize
    per = max(1, WRITE_SLAB_BYTES // max(1, A.m * A.nb * item))   # block columns per rank
    step = per * comm.Get_size()
    if A.grid.nprow == 1:
        for j0 in range(0, A.nt, step):
            yield j0 * A.nb, A.sub(0, A.mt, j0, min(A.nt, j0 + step))
        return
    flat, bufs, work = A.grid.flat(), [None, None], {}    # fresh ones page-fault each time
    for i, j0 in enumerate(range(0, A.nt, step)):
        S = A.sub(0, A.mt, j0, min(A.nt, j0 + step))
        F = bufs[i % 2]
        # block column j goes to flat rank (S.csrc + j) mod PQ: on a row-ordered grid a rank
        # of the process column that holds it, so only the P ranks of each column exchange
        if F is None or F.shape != S.shape:
            with collective(comm):    # (out of memory on one rank: before any message)
                F = bufs[i % 2] = DistMatrix(flat, S.shape, A.block, dtype=A.dtype,
                                             device=A.device, src=(0, S.csrc))
        remap(S, F, work=work)
        yield j0 * A.nb, F


def _column_runs(S):
    """``[(global column, local column, width), ...]`` of S's local columns (whole columns:
    one process row), adjacent ones merged when they are adjacent in the file too. Local."""
    runs = []
    for j, cs, w in S.my_block_cols():
        c = j * S.nb
        if runs and runs[-1][0] + runs[-1][2] == c and runs[-1][1] + runs[-1][2] == cs:
            runs[-1] = (runs[-1][0], runs[-1][1], runs[-1][2] + w)
        else:
            runs.append((c, cs, w))
    return runs


class _SlabWriter:
    """Independent writes of one slab at a time, on a writer thread while the caller regroups
    the next (``mode``: :func:`_write_mode`). ``start(chunks)`` issues ``[(offset, array)]``;
    ``wait()`` completes them and returns this rank's first error (``None`` if none). Not
    collective; every array must stay untouched until ``wait`` returns."""

    def __init__(self, fh, mode):
        self.fh, self.pending, self.err, self.pool = fh, None, None, None
        if mode == "thread":
            from concurrent.futures import ThreadPoolExecutor
            self.pool = ThreadPoolExecutor(1, thread_name_prefix="distla-write")

    def _write(self, chunks):
        for off, a in chunks:
            self.fh.Write_at(off, a)

    def start(self, chunks):
        try:
            if self.pool is not None:
                self.pending = self.pool.submit(self._write, chunks)
            else:
                self._write(chunks)
        except Exception as e:  # noqa: BLE001 - returned by wait, agreed on by the caller
            self.err = e

    def wait(self):
        pending, self.pending = self.pending, None
        try:
            if pending is not None:
                pending.result()
        except Exception as e:  # noqa: BLE001
            self.err = self.err or e
        return self.err

    def close(self):
        err = self.wait()
        if self.pool is not None:
            self.pool.shutdown()
        return err


def _write_columns(fh, at, column_bytes, slabs, comm):
    """Collective over ``comm``: write each ``(first global column, S)`` of ``slabs`` (S holds
    whole columns: one process row) into the open file ``fh``, global column c at byte
    ``at + c * column_bytes``, one independent write per run of S's local block columns, a
    slab's writes overlapping the next slab's making (:class:`_SlabWriter`). The ranks agree
    after each slab, so a failure on one stops all at the same slab; returns this rank's
    error (``None`` if none)."""
    from mpi4py import MPI
    writer, err = _SlabWriter(fh, _write_mode()), None
    try:
        for c0, S in slabs:
            err = writer.wait()                 # the previous slab (its buffer is reused)
            if not comm.allreduce(err is None, op=MPI.LAND):   # all stop together
                break
            if S.local.size:
                host = np.asfortranarray(S.backend.to_host(S.local))
                writer.start([(at + (c0 + c) * column_bytes, host[:, cs:cs + w])
                              for c, cs, w in _column_runs(S)])
    finally:
        err = writer.close() or err
    return err


def _write_npy_mpiio(path: str, A, shape) -> None:
    """Collective: write A as a Fortran-ordered .npy (no transposition) with MPI-IO.

    Each rank's part of the file is written as whole columns (:func:`_write_columns`), a
    slab of block columns (``WRITE_SLAB_BYTES`` per rank) at a time. With one process row a
    rank's columns are already whole. With more, a rank's part of a column is ``mb``-element
    pieces between the other process rows' (1 KB at mb = 128: on 4 ranks of the 2-core
    machine 0.41 GB/s against np.save's 2.15), so each slab is first regrouped onto a
    1 x (P Q) grid (:func:`_column_slabs`) while the previous one is being written
    (benchmarks/io_rate.py, docs/job.md)."""
    _write_npy_columns(path, A.grid.comm, shape, A.dtype,
                       _column_slabs(A) if A.m and A.n else ())


def _write_npy_columns(path: str, comm, shape, dtype, slabs) -> None:
    """Collective: create the Fortran-ordered .npy ``path`` of ``shape`` and ``dtype`` (rank 0
    writes the header) and write ``slabs`` into it (:func:`_write_columns`); an error on any
    rank is raised on every rank."""
    from mpi4py import MPI
    header = comm.bcast(_npy_header(shape, dtype, True) if comm.Get_rank() == 0 else None,
                        root=0)
    err, fh = None, None
    try:
        fh = MPI.File.Open(comm, path, MPI.MODE_WRONLY | MPI.MODE_CREATE, _hints())
        fh.Set_size(len(header) + int(np.prod(shape)) * dtype.itemsize)
        if comm.Get_rank() == 0:
            fh.Write_at(0, header)
    except MPI.Exception as e:
        err = e
    if comm.allreduce(err is None, op=MPI.LAND):
        err = _write_columns(fh, len(header), shape[0] * dtype.itemsize, slabs, comm)
    if fh is not None:
        fh.Close()
    if isinstance(err, MPI.Exception):
        # (MPICH's is an error stack: its last line says why)
        why = err.Get_error_string().strip().splitlines() or [""]
        why = why[-1].split(": ", 1)[-1].strip()
        if why.startswith("Other I/O error") and why[len("Other I/O error"):].strip():
            why = why[len("Other I/O error"):].strip(" ,")   # (MPI's class name: the OS's
        err = OSError(f"{path}: cannot write ({why})")     # reason follows)
    agree(comm, err)


def write_npy_generated(path, grid, shape, block, fn, *, dtype=np.float64,
                        slab_bytes: int = 1 << 28, progress=None, row_sums: bool = False):
    """Collective: write the ``m x n`` matrix with entries ``fn(I, J)`` (global index arrays,
    as for :meth:`DistMatrix.from_function`) to the .npy ``path`` without ever holding it:
    a slab of block columns at a time (about ``slab_bytes`` per rank), each generated by its
    owners and written as whole columns at its place in the Fortran-ordered file (MPI-IO,
    :func:`_write_columns`: a slab is written while the next one is generated).
    ``progress(columns_done)`` is called after each slab (on every rank). With ``row_sums``
    returns ``A @ ones`` as an ``m x 1`` DistMatrix (block ``block``)."""
    from mpi4py import MPI

    from .matrix import DistMatrix
    comm = grid.comm
    path = os.fspath(path)
    m, n = shape
    mb, nb = block
    dtype = np.dtype(dtype)
    on_root(comm, lambda: _check_writable(h5io.split_path(path)[0] if h5io.is_h5(path)
                                          else path))
    from .layout import numroc
    rows_max = max(1, numroc(m, mb, 0, 0, grid.nprow))
    unit = nb * grid.npcol                       # slabs start on process column 0
    width = unit * max(1, slab_bytes // max(1, rows_max * nb * dtype.itemsize))
    # (float32 sums accumulate in float64: more accurate, and rounded once, nearly
    # independent of the layout's summation order)
    acc = np.float64 if dtype == np.float32 else dtype
    sums = np.zeros(numroc(m, mb, grid.myrow, 0, grid.nprow), dtype=acc) if row_sums \
        else None

    def slabs():
        for c0 in range(0, n, width):
            w = min(width, n - c0)
            S = DistMatrix.from_function(grid, (m, w), (mb, nb),
                                         lambda I, J: fn(I, J + c0), dtype=dtype)
            if sums is not None and S.local.size:
                sums[...] += S.local.sum(axis=1, dtype=acc)
            yield c0, S
            if progress is not None:
                progress(c0 + w)

    def whole_columns():     # each generated slab as whole columns per rank
        for c0, S in slabs():
            for c1, T in _column_slabs(S):
                yield c0 + c1, T
    if h5io.is_h5(path):
        h5io.write_slabs(path, grid, (m, n), dtype, slabs)
    else:
        atomic_output(path, comm, lambda tmp: _write_npy_columns(
            tmp, comm, (m, n), dtype, whole_columns()))
    if sums is None:
        return None
    grid.row_comm.Allreduce(MPI.IN_PLACE, sums, op=MPI.SUM)
    b = DistMatrix.zeros(grid, (m, 1), (mb, nb), dtype=dtype)
    if b.local.size:
        b.local[:, 0] = sums.astype(dtype)
    return b


def _check_mtx_values(path: str, layout: str, field: str, data: bytes) -> None:
    """MatrixFileError naming the line when a data line of the Matrix Market file ``path``
    is not what its header says: SciPy's reader takes a number's prefix, so ``4,5`` read as
    4, ``0x10`` as 0 and ``4 junk`` as 4 -- a wrong matrix, silently. Every data line must be
    exactly its indices (coordinate) and value(s) (none for pattern, two for complex), each a
    plain decimal number (integers for indices and integer fields). Local (rank 0).

    The data are checked vectorized over the bytes (:func:`_mtx_plain_numbers`); only a
    file that does not pass that (one with a wrong line, or spelled-out ``nan``/``inf``)
    takes the line-by-line check, which names the line (it took 5 s for n = 2048, 11x
    SciPy's parse)."""
    values = {"pattern": 0, "complex": 2}.get(field, 1)
    want = values + (2 if layout == "coordinate" else 0)
    ints = 2 if layout == "coordinate" else 0
    if _mtx_plain_numbers(data, want, ints, field == "integer"):
        return
    _check_mtx_lines(path, layout, field, want, ints)


def _check_mtx_count(path: str, m: int, n: int, entries: int, layout: str, symmetry: str,
                     data: bytes) -> None:
    """MatrixFileError when the Matrix Market file ``path`` has fewer or more data lines than
    its header promises (an array stores ``m n`` values, ``n (n + 1) / 2`` for a symmetric or
    Hermitian one, ``n (n - 1) / 2`` for a skew-symmetric one; coordinate ``entries``): SciPy
    fills a short symmetric array body with zeros, silently. Local (rank 0)."""
    _check_mtx_comments(path, data)
    if layout == "coordinate":
        want = entries
    else:
        want = {"symmetric": n * (n + 1) // 2, "hermitian": n * (n + 1) // 2,
                "skew-symmetric": n * (n - 1) // 2}.get(symmetry, m * n)
    got = _mtx_data_lines(data)
    if got != want:
        what = "truncated" if got < want else "longer than its header says"
        raise MatrixFileError(f"{path}: Matrix Market file is {what}: {got} data lines, its "
                              f"header ({m} x {n} {layout} {symmetry}) needs {want}")


def _check_mtx_comments(path: str, data: bytes) -> None:
    """MatrixFileError naming the line of a comment (``%``) among the data lines of the
    Matrix Market text ``data``: the format allows comments before the size line only (SciPy
    stops at one with 'Invalid integer value', and the line count would count it as data).
    Vectorized over the bytes. Local (rank 0)."""
    pos = _mtx_body(data)
    hit = data.find(b"\n%", max(pos - 1, 0))
    if hit < 0:
        return
    line = data.count(b"\n", 0, hit + 1) + 1
    raise MatrixFileError(f"{path}: line {line}: a comment among the data lines; Matrix Market "
                          f"allows comments only before the size line")


def _check_mtx_symmetry(path: str, a: np.ndarray, layout: str, symmetry: str,
                        data: bytes) -> None:
    """MatrixFileError when a symmetric, skew-symmetric or Hermitian Matrix Market file
    holds what its symmetry cannot (SciPy mirrors every entry and keeps the rest: a wrong
    matrix, silently): both (i, j) and (j, i) of a coordinate file (the pair is summed after
    mirroring: a file that lists both triangles doubles its off-diagonal), a nonzero diagonal
    entry of a skew-symmetric matrix, a diagonal entry with a nonzero imaginary part of a
    Hermitian one. ``a`` is SciPy's dense result. Local (rank 0)."""
    if symmetry == "general":
        return
    d = np.diagonal(a)
    bad = np.flatnonzero(d != 0) if symmetry == "skew-symmetric" else \
        np.flatnonzero(np.imag(d) != 0) if symmetry == "hermitian" else []
    if len(bad):
        i = int(bad[0]) + 1
        what = "a nonzero diagonal entry" if symmetry == "skew-symmetric" else \
            "a diagonal entry with a nonzero imaginary part"
        raise MatrixFileError(f"{path}: {symmetry} Matrix Market file with {what} at ({i}, "
                              f"{i}): a {symmetry} matrix cannot have one")
    if layout != "coordinate":
        return
    import io as _io
    body = data[_mtx_body(data):]
    ij = np.loadtxt(_io.BytesIO(body), usecols=(0, 1), dtype=np.int64, ndmin=2)
    if not len(ij):
        return
    i, j = ij[:, 0], ij[:, 1]
    n = int(max(i.max(), j.max())) + 1
    low = i * n + j                                       # entries below the diagonal
    up = j * n + i                                        # ... and above, as their mirror
    both = np.intersect1d(low[i > j], up[i < j])
    if both.size:
        r, c = divmod(int(both[0]), n)
        raise MatrixFileError(f"{path}: {symmetry} Matrix Market file lists both ({r}, {c}) "
                              f"and ({c}, {r}): it stores one triangle (the entries are "
                              f"mirrored, so the pair would be summed)")


def _mtx_data_lines(data: bytes) -> int:
    """Non-blank lines of the Matrix Market text ``data`` after its comments and size line
    (vectorized over the bytes)."""
    pos = _mtx_body(data)
    if pos >= len(data):
        return 0
    b = np.frombuffer(data, np.uint8, len(data) - pos, pos)
    content = ~np.isin(b, np.frombuffer(b" \t\r\n", np.uint8))
    starts = np.concatenate([[0], np.flatnonzero(b == 10) + 1])
    starts = starts[starts < b.size]
    return int(np.count_nonzero(np.add.reduceat(content.astype(np.int64), starts)))


def _mtx_body(data: bytes) -> int:
    """Offset in the Matrix Market text ``data`` of its first data line: past the comment
    lines and the size line (``len(data)`` when there is none)."""
    pos = 0
    while pos < len(data):
        nl = data.find(b"\n", pos)
        end = len(data) if nl < 0 else nl
        line = data[pos:end].strip()
        pos = end + 1
        if line and not line.startswith(b"%"):
            return min(pos, len(data))
    return len(data)


def _check_mtx_lines(path: str, layout: str, field: str, want: int, ints: int) -> None:
    """:func:`_check_mtx_values` line by line in Python (exact; names the first bad line)."""
    with open(path) as f:
        seen_size = False
        for k, line in enumerate(f, start=1):
            text = line.strip()
            if not text or text.startswith("%"):
                continue
            if not seen_size:
                seen_size = True
                continue
            tokens = text.split()
            try:
                if len(tokens) != want:
                    raise ValueError(f"{len(tokens)} fields, expected {want}")
                for t in tokens:      # (Python reads '1_0' as 10 and other scripts' digits)
                    if "_" in t or not t.isascii():
                        raise ValueError(f"{t!r} is not a plain decimal number")
                for t in tokens[:ints] + (tokens[ints:] if field == "integer" else []):
                    int(t)
                for t in tokens[ints:]:
                    float(t)
            except ValueError as e:
                raise MatrixFileError(f"{path}: line {k} ({text[:60]!r}) is not an entry of "
                                      f"a Matrix Market file of format '{layout} {field}' "
                                      f"({e})") from None


_MTX_CHUNK = 1 << 23        # bytes of data lines checked at once (NumPy temporaries ~20x)


def _mtx_plain_numbers(data: bytes, want: int, ints: int, all_int: bool) -> bool:
    """Whether every data line of the Matrix Market text ``data`` (after the comments and
    the size line) is blank or exactly ``want`` tokens, each ``[+-]digits[.digits][(e|E)
    [+-]digits]`` (a mantissa digit on either side of the point), the first ``ints`` (all,
    with ``all_int``) ``[+-]digits``. Vectorized over the bytes, a chunk of whole lines at a
    time. False means: not certainly so (a bad line, or text such as ``nan``): the caller
    checks line by line."""
    pos = _mtx_body(data)
    while pos < len(data):
        end = data.find(b"\n", min(len(data), pos + _MTX_CHUNK))
        end = len(data) if end < 0 else end + 1
        if not _plain_chunk(np.frombuffer(data, np.uint8, end - pos, pos), want, ints,
                            all_int):
            return False
        pos = end
    return True


# byte classes of Matrix Market number text: blank, newline, digit, sign, point, exponent;
# 6 for anything else
_BL, _NL, _DG, _SG, _PT, _EX, _OTHER = range(7)


def _byte_classes() -> np.ndarray:
    lut = np.full(256, _OTHER, np.uint8)
    lut[[32, 9, 13]] = _BL
    lut[10] = _NL
    lut[48:58] = _DG
    lut[[43, 45]] = _SG
    lut[46] = _PT
    lut[[101, 69]] = _EX
    return lut


def _bad_triples() -> np.ndarray:
    """``bad[a * 49 + b * 7 + c]``: byte classes a, b, c in a row that no well-formed token
    sequence has around b (``[+-]digits[.digits][(e|E)[+-]digits]``, a mantissa digit on
    either side of the point)."""
    bad = np.zeros(7 ** 3, bool)
    end = (_BL, _NL)
    for a in range(7):
        for b in range(7):
            for c in range(7):
                bad[a * 49 + b * 7 + c] = _OTHER in (a, b, c) or (
                    b == _SG and (a not in end + (_EX,) or c not in (_DG, _PT)
                                  or (a == _EX and c != _DG))) or (
                    b == _EX and (a not in (_DG, _PT) or c not in (_DG, _SG))) or (
                    b == _PT and a != _DG and c not in (_DG,)) or (
                    b == _PT and c == _SG)
    return bad


_CLASSES, _BAD = _byte_classes(), _bad_triples()


def _plain_chunk(b: np.ndarray, want: int, ints: int, all_int: bool) -> bool:
    """:func:`_mtx_plain_numbers` for whole lines ``b`` (uint8): every byte with its two
    neighbours against a table of the bad triples, then per token from the positions of its
    starts, points and exponents only (no integer array per byte)."""
    cls = np.empty(b.size + 2, np.uint8)
    cls[0] = cls[-1] = _NL
    np.take(_CLASSES, b, out=cls[1:-1])
    code = cls[:-2].astype(np.uint16)         # a * 49 + b * 7 + c < 343
    code *= 49
    code += cls[1:-1] * np.uint16(7)
    code += cls[2:]
    if _BAD[code].any():
        return False
    c = cls[1:-1]
    blank = c <= _NL
    starts = np.flatnonzero(~blank & (cls[:-2] <= _NL))
    if not starts.size:
        return True
    p_at, e_at = np.flatnonzero(c == _PT), np.flatnonzero(c == _EX)
    p_tok = np.searchsorted(starts, p_at, side="right") - 1
    e_tok = np.searchsorted(starts, e_at, side="right") - 1
    if np.any(p_tok[1:] == p_tok[:-1]) or np.any(e_tok[1:] == e_tok[:-1]):
        return False                   # two points, or two exponents, in one token
    e_of = np.full(starts.size, b.size)
    e_of[e_tok] = e_at
    if np.any(p_at > e_of[p_tok]):
        return False                   # a point in the exponent
    tok_line = np.searchsorted(np.flatnonzero(c == _NL), starts)   # line of each token
    per_line = np.bincount(tok_line)
    if np.any((per_line != 0) & (per_line != want)):
        return False
    if not (all_int or ints):
        return True
    fractional = np.zeros(starts.size, bool)
    fractional[p_tok] = True
    fractional[e_tok] = True
    if all_int:
        return not fractional.any()
    ordinal = np.arange(starts.size) - (np.cumsum(per_line) - per_line)[tok_line]
    return not np.any(fractional & (ordinal < ints))


def _read_mtx(path: str) -> np.ndarray:
    import scipy.io
    info = _inspect_mtx(path)
    if 0 in info.shape:    # (scipy.io.mmread of a 0-row file died with SIGFPE in SciPy 1.17)
        return np.zeros(info.shape, dtype=info.dtype)
    m, n, entries, layout, field, symmetry = scipy.io.mminfo(path)
    with open(path, "rb") as f:
        data = f.read()
    _check_mtx_values(path, layout, field, data)
    _check_mtx_count(path, m, n, entries, layout, symmetry, data)
    try:
        a = scipy.io.mmread(path)
    except Exception as e:  # noqa: BLE001
        raise MatrixFileError(f"{path}: cannot parse Matrix Market file ({e})") from None
    if hasattr(a, "toarray"):
        a = a.toarray()
    a = np.asarray(a)
    _check_mtx_symmetry(path, a, layout, symmetry, data)
    del data
    if a.ndim == 1:
        a = a.reshape(-1, 1)
    return a


def check_writable(path, comm=None) -> None:
    """Raise (on every rank of ``comm`` if given: collective) if ``path`` cannot be created
    (missing or read-only directory; for HDF5 ``file.h5:/name`` also a name that a group
    holds or that has a dataset on its way, :func:`distla.h5io.check_output`). Checked on
    rank 0."""
    from .filebase import check_writable as _cw
    path = os.fspath(path)
    if not h5io.is_h5(path):
        _cw(path, comm)
        return

    def check():
        _cw(h5io.split_path(path)[0])
        h5io.check_output(path)
    check() if comm is None else on_root(comm, check)


def _check_file_name(path: str, what: str) -> None:
    """MatrixFileError for a target that cannot name a .npy file: empty, ending with a
    separator (a directory), or an HDF5 ``file.h5:/dataset`` (or ``file.h5:``). Local."""
    if not path or path.endswith(tuple(s for s in (os.sep, os.altsep) if s)):
        raise MatrixFileError(f"{what}: {path!r} is not a file name (empty, or a directory)")
    low = path.lower()
    if h5io.is_h5(path) or ".h5:" in low or ".hdf5:" in low:
        raise MatrixFileError(f"{what}: {path} is an HDF5 target; write it with write_matrix "
                              f"or distla.h5io.write")


def write_npy(path, A, *, vector: bool = False) -> None:
    """Collective: write the DistMatrix ``A`` to the ``.npy`` file ``path`` without gathering
    it: MPI-IO, each rank writing whole columns a slab at a time (:func:`_write_npy_mpiio`),
    into a Fortran-ordered .npy (``np.load`` reads it as usual); rank 0 writes the header.
    The file appears under ``path`` only once every rank succeeded (:func:`atomic_output`).
    ``vector=True`` writes an n x 1 matrix as a 1-D array."""
    from .matrix import DistMatrix
    if not isinstance(A, DistMatrix):     # (every rank passing it raises alike)
        raise TypeError(f"write_npy: A must be a DistMatrix, not {type(A).__name__} (for "
                        f"an array on one rank use numpy.save)")
    comm = A.grid.comm
    path = os.fsdecode(os.fspath(path))
    with collective(comm, signature("write_npy", A, path=path, vector=vector,
                                    settings=settings())):
        check_environment_values()
        _check_file_name(path, "write_npy")
    shape = (A.m,) if vector and A.n == 1 else A.shape
    on_root(comm, lambda: _check_writable(path))
    if _mpiio_ok(A.dtype, A.shape):
        atomic_output(path, comm, lambda tmp: _write_npy_mpiio(tmp, A, shape))
    else:
        atomic_output(path, comm, lambda tmp: _write_npy_memmap(tmp, A, shape))


def _write_npy_memmap(path, A, shape) -> None:
    """Collective fallback: rank 0 creates the file, the ranks write their blocks into a
    memory map one after another."""
    from numpy.lib.format import open_memmap
    comm = A.grid.comm
    on_root(comm, lambda: open_memmap(path, mode="w+", dtype=A.dtype, shape=shape).flush())
    host = A.backend.to_host(A.local)
    rows, cols = A.row_indices(), A.col_indices()
    err = None
    for r in range(comm.Get_size()):
        if r == comm.Get_rank() and err is None and host.size:
            try:
                mm = open_memmap(path, mode="r+")
                view = mm.reshape(-1, 1) if mm.ndim == 1 else mm
                view[np.ix_(rows, cols)] = host
                mm.flush()
                del mm, view
            except OSError as e:
                err = _cannot_write(path, e)
            except Exception as e:  # noqa: BLE001
                err = e
        comm.Barrier()
    agree(comm, err)


def write_matrix(path, A, *, vector: bool = False, root: int = 0) -> None:
    """Collective: gather the DistMatrix ``A`` to ``root`` and write it there as ``.npy``
    (``np.save``) or, for a ``.mtx``/``.mm`` path, Matrix Market dense array format; an HDF5
    path (``file.h5:/name``) is written without gathering (:func:`distla.h5io.write`).
    ``vector=True`` writes an n x 1 matrix as a 1-D array (npy, h5)."""
    comm = A.grid.comm
    path = os.fspath(path)
    with collective(comm, signature("write_matrix", A, path=path, vector=vector, root=root,
                                    settings=settings())):
        check_environment_values()  # (ranks naming different files wrote rank 0's)
    low = path.lower()
    if h5io.is_h5(path):
        h5io.write(path, A, vector=vector)
        return
    if not low.endswith((".mtx", ".mm", ".npy")):
        raise MatrixFileError(f"{path}: unknown extension; write .npy, .mtx or "
                              f".h5:/dataset")
    a = A.to_global(root=root)

    def write(tmp):
        if comm.Get_rank() != root:
            return
        _check_writable(path)
        try:
            save(tmp)
        except OSError as e:           # (a full disk: named, with the system's reason)
            raise _cannot_write(path, e) from None

    def save(tmp):
        if low.endswith((".mtx", ".mm")):
            import scipy.io
            field = "complex" if a.dtype.kind == "c" else "real"
            with open(tmp, "wb") as f:
                if a.size == 0:     # (SciPy's mmwrite never returns for an empty complex array)
                    f.write(f"%%MatrixMarket matrix array {field} general\n"
                            f"{a.shape[0]} {a.shape[1]}\n".encode())
                else:
                    scipy.io.mmwrite(f, a, field=field)
        else:
            with open(tmp, "wb") as f:    # a file object: np.save adds no extension
                # (through .write: ndarray.tofile's short write says only 'N requested and
                # M written', without the system's reason)
                np.save(_Stream(f), a[:, 0] if vector and a.shape[1] == 1 else a)
    atomic_output(path, comm, write)


class _Stream:
    """A file object that NumPy does not recognize as one: np.save then writes through
    ``write`` (an OSError with errno and reason) rather than ``ndarray.tofile``."""

    def __init__(self, f):
        self.write = f.write


def _cannot_write(path: str, e: OSError) -> OSError:
    """``path: cannot write (reason)`` for the OSError ``e`` (errno kept)."""
    reason = e.strerror or str(e)
    if not e.errno and "requested and" in str(e):        # ndarray.tofile's short write
        reason = f"short write: {e}; is the file system full?"
    out = OSError(f"{path}: cannot write ({reason})")
    out.errno = e.errno
    return out
