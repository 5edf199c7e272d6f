"""HDF5 matrix files (``file.h5:/group/dataset``; also ``.hdf5``), through h5py (an optional
extra: ``pip install 'distla[hdf5]'``).

A path names a file and a dataset in it: ``A.h5:/A``. Without ``:dataset`` a read takes the
file's only dataset and a write uses ``/data``. A 2-D dataset is an ``m x n`` matrix (HDF5
stores it row-major); a 1-D dataset of length n is read as ``n x 1``. Numeric types only:
float32/64 and complex64/128 are kept, integers and bools become float64.

Reading: every rank selects the whole rows of its row blocks (a union of at most two regular
hyperslabs: its full row blocks and the partial last one) and reads them with one call per slab
of local block rows (about ``slab_bytes`` at a time, bounded memory), then picks its columns in
memory: HDF5 reads whole rows far faster than runs of nb elements per row (the rates are in
benchmarks/results/2026-11-24-cpu-job.jsonl). Writing selects exactly the rank's blocks (row
runs x column runs, at most four regular hyperslabs): rank 0 creates the dataset in a
temporary file (a copy of the target when it exists, so other datasets survive), then the
ranks write their hyperslabs one rank after the other -- or all at once through h5py's MPI
driver when h5py is built with MPI (``h5py.get_config().mpi``; ``DISTLA_H5_MPI=0`` turns
that off); the temporary replaces the target only when every rank succeeded
(:func:`distla.filebase.atomic_output`).

Errors (h5py missing, no such dataset, a group, not 1-D/2-D, unsupported type, unreadable file)
raise :class:`MatrixFileError` (FileNotFoundError for a missing file) with the same message on
every rank of a collective call.
"""
from __future__ import annotations

import os

import numpy as np

from .errors import agree, on_root
from .filebase import (
    MatrixFileError,
    MatrixInfo,
    _check_writable,
    atomic_output,
    check_regular_input,
)

__all__ = ["SUFFIXES", "split_path", "is_h5", "dataset_key", "inspect", "read_into", "write",
           "write_slabs", "DEFAULT_DATASET"]

SUFFIXES = (".h5", ".hdf5")
DEFAULT_DATASET = "/data"


def split_path(path) -> tuple[str, str] | None:
    """``'a.h5:/g/x'`` -> ``('a.h5', '/g/x')``; ``'a.h5'`` -> ``('a.h5', '')``; a path that
    is not HDF5 -> None. Not collective."""
    p = os.fspath(path)
    low = p.lower()
    best = None
    for suf in SUFFIXES:
        i = low.rfind(suf + ":")
        if i >= 0 and (best is None or i > best[0]):
            best = (i, suf)
    if best is not None:
        i, suf = best
        return p[:i + len(suf)], _normalized(p[i + len(suf) + 1:])
    if low.endswith(SUFFIXES):
        return p, ""
    return None


def _normalized(name: str) -> str:
    """A dataset path as HDF5 resolves it: repeated ``/`` and ``.`` components dropped
    (``/g//A`` and ``/g/./A`` are ``/g/A``), so that two spellings of one dataset compare
    equal; ``''`` stays ``''`` (the file's only dataset). Not collective."""
    parts = [c for c in name.split("/") if c not in ("", ".")]
    if ".." in parts:
        raise ValueError(f"HDF5 dataset path {name!r}: '..' is not a parent group in HDF5; "
                         f"name the dataset by its absolute path")
    return "/" + "/".join(parts) if parts else ("/" if name.strip() else "")


def check_output(path) -> None:
    """Raise before any work when the dataset ``path`` (``file.h5:/name``) cannot be written:
    no dataset named, the name taken by a group, or a parent on the way a dataset. The file
    itself is checked by :func:`distla.filebase.check_writable`. Not collective."""
    fpath, dset = split_path(path) or (os.fspath(path), "")
    dset = dset or DEFAULT_DATASET
    if not dset.strip("/"):
        raise MatrixFileError(f"{path}: name a dataset after the ':' (e.g. {fpath}:/A)")
    if not os.path.isfile(fpath):
        return
    h5py = _h5py()
    with _open_existing(fpath, h5py) as f:
        _check_target(f, fpath, dset, h5py)      # what the write itself checks, before work


def _open_existing(fpath: str, h5py):
    """The existing HDF5 file ``fpath`` opened read-only; MatrixFileError if it is not one."""
    try:
        return h5py.File(fpath, "r")
    except OSError as e:
        raise MatrixFileError(f"{fpath}: exists and is not a readable HDF5 file ({e}); "
                              f"remove it or write elsewhere") from None


def resolve(path) -> tuple[str, str]:
    """``(absolute file, dataset)`` that a written ``file.h5:/name`` lands in: through an
    existing external link, the other file's dataset (a write follows links). Not
    collective."""
    fpath, dset = split_path(path) or (os.fspath(path), "")
    dset = dset or DEFAULT_DATASET
    if os.path.isfile(fpath):
        try:
            import h5py
            with h5py.File(fpath, "r") as f:
                obj = f.get(dset)
                if obj is not None:
                    return os.path.realpath(obj.file.filename), obj.name
        except (ImportError, OSError):
            pass
    return os.path.realpath(fpath), dset


def dataset_key(path, dataset=None):
    """The identity of the existing dataset that ``path`` (``file.h5:/name``, or the file
    and ``dataset``) names: ``(real path of the file holding it, object address)`` -- equal
    for two names of one dataset however they reach it (soft, hard or external links);
    None when the file or the dataset does not exist (or h5py is missing). Not
    collective."""
    if dataset is None:
        fpath, dataset = split_path(path) or (os.fspath(path), "")
    else:
        fpath = os.fspath(path)
    dataset = dataset or DEFAULT_DATASET
    if not os.path.isfile(fpath):
        return None
    try:
        import h5py
        with h5py.File(fpath, "r") as f:
            obj = f.get(dataset)
            if not isinstance(obj, h5py.Dataset):
                return None
            info = h5py.h5o.get_info(obj.id)
            addr = getattr(info, "token", None) or getattr(info, "addr", None)
            return os.path.realpath(obj.file.filename), addr
    except (ImportError, OSError, KeyError, ValueError):
        return None


def is_h5(path) -> bool:
    """Whether ``path`` names an HDF5 file (by its suffix). Not collective."""
    return split_path(path) is not None


def _h5py():
    try:
        import h5py
    except ImportError:
        raise MatrixFileError("HDF5 files need h5py, which is not installed: "
                              "pip install 'distla[hdf5]' (or pip install h5py)") from None
    return h5py


def _datasets(f, h5py) -> list[str]:
    names = []
    f.visititems(lambda name, obj: names.append(obj.name)     # absolute, also in a group
                 if isinstance(obj, h5py.Dataset) else None)
    return names


def _listing(names) -> str:
    if not names:
        return "it holds no dataset"
    more = f", ... ({len(names)} in all)" if len(names) > 6 else ""
    return "its datasets: " + ", ".join(names[:6]) + more


def inspect(path) -> MatrixInfo:
    """The header of the dataset ``path`` names (not collective; reads no data). Raises
    FileNotFoundError or :class:`MatrixFileError` with a one-line message."""
    fpath, dset = split_path(path) or (os.fspath(path), "")
    h5py = _h5py()
    if not os.path.exists(fpath):
        raise FileNotFoundError(f"{fpath}: no such file")
    if os.path.isdir(fpath):
        raise MatrixFileError(f"{fpath}: is a directory, not an HDF5 file")
    check_regular_input(fpath)              # (before any open: a FIFO would block)
    try:
        f = h5py.File(fpath, "r")
    except OSError as e:
        raise MatrixFileError(f"{fpath}: not a readable HDF5 file ({e})") from None
    with f:
        if not dset:
            names = _datasets(f, h5py)
            if len(names) != 1:
                raise MatrixFileError(f"{fpath}: name the dataset ({fpath}:/NAME); "
                                      f"{_listing(names)}")
            dset = names[0]
        obj = f.get(dset)
        if obj is None:
            raise MatrixFileError(f"{fpath}: no dataset {dset!r}; "
                                  f"{_listing(_datasets(f, h5py))}")
        if not isinstance(obj, h5py.Dataset):
            raise MatrixFileError(f"{fpath}:{dset} is a group, not a dataset; "
                                  f"{_listing(_datasets(obj, h5py))}")
        dtype, shape = obj.dtype, obj.shape
        name = obj.name
        _check_virtual_sources(obj, fpath)
        # an external link leads to a dataset of another file: its name is in that file
        target = os.path.abspath(obj.file.filename)
        if target != os.path.abspath(fpath):
            fpath = target
    if dtype.fields is not None or dtype.kind not in "biufc":
        raise MatrixFileError(f"{fpath}:{name} holds {dtype} data; a matrix must be numeric "
                              f"(float32/64, complex64/128, integers)")
    if shape is None or len(shape) not in (1, 2):
        nd = 0 if shape is None else len(shape)
        raise MatrixFileError(f"{fpath}:{name} is a {nd}-D dataset of shape {shape}; "
                              f"expected a matrix (2-D) or a vector (1-D)")
    ndim = len(shape)
    shape2 = (int(shape[0]), 1) if ndim == 1 else (int(shape[0]), int(shape[1]))
    return MatrixInfo(fpath, "h5", shape2, np.dtype(dtype), ndim, dataset=name)


def _check_virtual_sources(ds, fpath: str) -> None:
    """MatrixFileError when the virtual dataset ``ds`` maps a source file that does not
    exist: HDF5 reads its part as the fill value (a matrix of zeros, silently). Source files
    are found as HDF5 finds them: ``.`` is the file itself, a relative name is looked up
    beside the virtual dataset's file, then in the working directory. Local."""
    if not getattr(ds, "is_virtual", False):
        return
    here = os.path.dirname(os.path.abspath(ds.file.filename))
    for vs in ds.virtual_sources():
        src = vs.file_name
        if src == "." or os.path.isabs(src) and os.path.exists(src):
            continue
        if not os.path.isabs(src) and (os.path.exists(os.path.join(here, src))
                                       or os.path.exists(src)):
            continue
        raise MatrixFileError(f"{fpath}:{ds.name} is a virtual dataset whose source file "
                              f"{src!r} is missing: HDF5 would read that part as its fill "
                              f"value")


# ---------------------------------------------------------------------------------------
# hyperslabs of the block-cyclic layout
# ---------------------------------------------------------------------------------------
def _runs(N: int, b: int, p: int, P: int, i0: int = 0, i1: int | None = None):
    """The global indices of local blocks ``i0 <= i < i1`` of the process at coordinate ``p``
    (relative to the source) along a dimension of length ``N``, blocks ``b``, ``P``
    processes: ``[(start, stride, count, block)]``, at most two runs (the full blocks, and
    the partial last block when this process owns it)."""
    nfull = N // b
    nblocks = -(-N // b)
    if P == 1:                                       # one process: a single contiguous run
        i1 = nblocks if i1 is None else min(i1, nblocks)
        lo, hi = i0 * b, min(N, i1 * b)
        return [(lo, hi - lo, 1, hi - lo)] if hi > lo else []
    mine = max(0, -(-(nblocks - p) // P))
    full_mine = max(0, -(-(nfull - p) // P))
    i1 = mine if i1 is None else min(i1, mine)
    out = []
    f1 = min(i1, full_mine)
    if f1 > i0:
        out.append(((p + i0 * P) * b, P * b, f1 - i0, b))
    if full_mine < mine and i0 <= full_mine < i1:
        out.append((nfull * b, N - nfull * b, 1, N - nfull * b))
    return out


def _select(space, rows, cols, h5s) -> None:
    """Select the union of the products of row runs and column runs in ``space``."""
    op = h5s.SELECT_SET
    for r in rows:
        for c in cols:
            if c is None:                                     # a 1-D dataset
                space.select_hyperslab((r[0],), (r[2],), stride=(r[1],), block=(r[3],),
                                       op=op)
            else:
                space.select_hyperslab((r[0], c[0]), (r[2], c[2]), stride=(r[1], c[1]),
                                       block=(r[3], c[3]), op=op)
            op = h5s.SELECT_OR


def _chunks(M, row_bytes: int, slab_bytes: int):
    """``(lr0, lr1, row_runs)`` for slabs of M's local block rows of about ``slab_bytes``
    (``row_bytes`` per row of the buffer)."""
    g = M.grid
    p = (g.myrow - M.rsrc) % g.nprow
    nloc_blocks = -(-M.local_shape[0] // M.mb)
    per = max(1, slab_bytes // max(1, M.mb * row_bytes))
    for i0 in range(0, nloc_blocks, per):
        i1 = min(nloc_blocks, i0 + per)
        lr1 = min(M.local_shape[0], i1 * M.mb)
        yield i0 * M.mb, lr1, _runs(M.m, M.mb, p, g.nprow, i0, i1)


def _col_runs(M, c0: int, ndim: int):
    g = M.grid
    if ndim == 1:
        return [None]
    q = (g.mycol - M.csrc) % g.npcol
    return [(s + c0, st, cnt, b) for s, st, cnt, b in _runs(M.n, M.nb, q, g.npcol)]


def _copy(dst: np.ndarray, src: np.ndarray, step: int = 64) -> None:
    """``dst[...] = src`` between C and Fortran order (HDF5 rows <-> local columns) in strips
    of ``step`` rows or columns: one assignment of a whole slab walks the source across more
    cache lines than fit (n = 8192: 2.1 s per 512 MB as one slab of 2048 rows, 0.49 s in
    strips of 64)."""
    if dst.ndim != 2 or src.ndim != 2 or min(dst.shape) <= step:
        dst[...] = src
    elif dst.strides[0] < dst.strides[1] and src.strides[0] > src.strides[1]:   # C -> F
        for r in range(0, dst.shape[0], step):
            dst[r:r + step] = src[r:r + step]
    elif dst.strides[0] > dst.strides[1] and src.strides[0] < src.strides[1]:   # F -> C
        for c in range(0, dst.shape[1], step):
            dst[:, c:c + step] = src[:, c:c + step]
    else:
        dst[...] = src


# ---------------------------------------------------------------------------------------
# read
# ---------------------------------------------------------------------------------------
def read_into(info: MatrixInfo, A, slab_bytes: int = 1 << 27) -> None:
    """Collective: fill the DistMatrix ``A`` (shape ``info.shape``, any layout and device)
    from the dataset ``info`` describes (from :func:`inspect`, the same on every rank). Each
    rank reads only its own hyperslabs, a slab of local block rows at a time, into one reused
    host buffer (C order, the file's type) and copies it into place."""
    err = None
    try:
        h5py = _h5py()
        from h5py import h5s
        mloc, nloc = A.local_shape
        fdt = info.dtype.newbyteorder("=")
        if mloc and nloc:
            # whole rows (one contiguous run per row block), local columns picked in memory:
            # HDF5 reads runs of nb elements per row far slower than whole rows
            ncols = 1 if info.ndim == 1 else info.shape[1]
            cols = [None] if info.ndim == 1 else [(0, ncols, 1, ncols)]
            pick = None if nloc == ncols else np.asarray(A.col_indices())
            buf = None
            with h5py.File(info.path, "r") as f:
                ds = f[info.dataset]
                if ds.shape != ((info.shape[0],) if info.ndim == 1 else info.shape):
                    raise MatrixFileError(f"{info.path}:{info.dataset} changed while being "
                                          f"read (shape {ds.shape}, expected {info.shape})")
                for lr0, lr1, rows in _chunks(A, fdt.itemsize * ncols, slab_bytes):
                    shape = (lr1 - lr0,) if info.ndim == 1 else (lr1 - lr0, ncols)
                    if buf is None or buf.shape != shape:
                        buf = np.empty(shape, dtype=fdt)
                    fs = ds.id.get_space()
                    _select(fs, rows, cols, h5s)
                    ds.id.read(h5s.create_simple(shape), fs, buf)
                    piece = buf.reshape(lr1 - lr0, ncols)
                    piece = (piece if pick is None else piece[:, pick]).astype(A.dtype,
                                                                              copy=False)
                    if A.backend.is_gpu:
                        A.local[lr0:lr1, :] = A.backend.asarray(piece)
                    else:
                        _copy(A.local[lr0:lr1, :], piece)
    except MatrixFileError as e:
        err = e
    except (OSError, KeyError, ValueError, TypeError) as e:
        err = MatrixFileError(f"{info.path}:{info.dataset}: cannot read ({e})")
    except Exception as e:  # noqa: BLE001 - out of memory, ...: agreed like the rest
        err = e
    agree(A.grid.comm, err)


# ---------------------------------------------------------------------------------------
# write
# ---------------------------------------------------------------------------------------
def _reserve(path: str) -> None:
    """Allocate the disk blocks of the file ``path`` up to its size (Linux ``fallocate``,
    which keeps the contents): OSError (ENOSPC, EDQUOT, ...) if they cannot all be had. A
    file system without ``fallocate`` reserves nothing (no error). Not collective."""
    import ctypes
    import errno
    size = os.path.getsize(path)
    if size == 0:
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fallocate = libc.fallocate
    except (OSError, AttributeError):      # not Linux/glibc
        return
    fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    fallocate.restype = ctypes.c_int
    fd = os.open(path, os.O_RDWR)
    try:
        if fallocate(fd, 0, 0, size) != 0:
            code = ctypes.get_errno()
            if code in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO):
                raise OSError(code, os.strerror(code), path)
    finally:
        os.close(fd)


def _land():
    from mpi4py import MPI
    return MPI.LAND


def _use_mpi(h5py) -> bool:
    return bool(h5py.get_config().mpi) and os.environ.get("DISTLA_H5_MPI", "1") != "0"


def _keep_forever(obj) -> None:
    """One more reference to ``obj`` that nothing releases, not even the interpreter's
    shutdown (which freed the h5py objects of a failed write, and HDF5 crashed)."""
    import ctypes
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(obj))


def _write_or_error(f, dset: str, S, c0: int, ndim: int, slab_bytes: int, failed):
    """:func:`_write_local` into the open file ``f``; returns None, or ``failed(e)`` for the
    error it raised. After a failed write HDF5 can neither close the file nor free the
    write's objects (closing crashed the process; freeing raised in h5py's deallocators), so
    the error's traceback, which holds them, is kept (:func:`_keep_forever`), as ``f``."""
    try:
        _write_local(f[dset], S, c0, ndim, slab_bytes)
    except Exception as e:  # noqa: BLE001 - the caller agrees on it
        _keep_forever(e)
        return failed(e)
    return None


def _write_local(ds, S, c0: int, ndim: int, slab_bytes: int) -> None:
    """Write this rank's part of the slab S (its columns start at global column ``c0``)."""
    from h5py import h5s
    mloc, nloc = S.local_shape
    if not (mloc and nloc):
        return
    cols = _col_runs(S, c0, ndim)
    for lr0, lr1, rows in _chunks(S, S.dtype.itemsize * nloc, slab_bytes):
        src = S.backend.to_host(S.local[lr0:lr1, :])
        host = np.empty(src.shape, dtype=src.dtype)
        _copy(host, src)
        if ndim == 1:
            host = host.reshape(-1)
        fs = ds.id.get_space()
        _select(fs, rows, cols, h5s)
        ds.id.write(h5s.create_simple(host.shape), fs, host)


def _copy_except(src, dst, dset: str) -> list:
    """Copy every object of the open file ``src`` into ``dst`` except the dataset ``dset``
    (which is about to be rewritten; copying the whole file and deleting it would leave its
    old space in the file, growing it at every rewrite), keeping the file's structure: soft
    and external links stay links (a dangling one too), an object reachable by several hard
    links is copied once and linked again, attributes come along. Returns the other paths
    that are hard links to ``dset``'s object: the caller links them to the new dataset, as
    rewriting it in place would have shown them the new values."""
    import h5py
    for k, v in src.attrs.items():
        dst.attrs[k] = v
    want = "/" + dset.strip("/")
    old = src.get(want)
    target = old.id if isinstance(old, h5py.Dataset) else None
    seen, aliases = {}, []

    def walk(g_src, g_dst, prefix):
        for name in g_src:                    # names only: no link is followed here
            path = f"{prefix}/{name}"
            if path == want:
                continue
            link = g_src.get(name, getlink=True)
            if isinstance(link, h5py.SoftLink):
                g_dst[name] = h5py.SoftLink(link.path)
                continue
            if isinstance(link, h5py.ExternalLink):
                g_dst[name] = h5py.ExternalLink(link.filename, link.path)
                continue
            obj = g_src[name]
            if target is not None and obj.id == target:
                aliases.append(path)
            elif obj.id in seen:              # another hard link to an object copied
                g_dst[name] = g_dst.file[seen[obj.id]]
            elif isinstance(obj, h5py.Group):
                seen[obj.id] = path
                sub = g_dst.create_group(name)
                for k, v in obj.attrs.items():
                    sub.attrs[k] = v
                walk(obj, sub, path)
            else:
                seen[obj.id] = path
                g_src.copy(obj, g_dst, name=name)
    walk(src, dst, "")
    return aliases


def _check_target(old, fpath, dset, h5py) -> None:
    """The dataset ``dset`` may replace a dataset of the existing file ``old``, never a
    group (its contents would go), and needs groups, not datasets, above it."""
    parts = dset.strip("/").split("/")
    for i in range(1, len(parts)):
        above = "/" + "/".join(parts[:i])
        if above in old and not isinstance(old[above], h5py.Group):
            raise MatrixFileError(f"{fpath}:{above} is a dataset, not a group: it cannot hold "
                                  f"/{dset.strip('/')}")
    name = "/" + "/".join(parts)
    if name in old and isinstance(old[name], h5py.Group):
        raise MatrixFileError(f"{fpath}:{name} is a group (holding {len(old[name])} "
                              f"object(s)): writing the matrix there would delete them; "
                              f"choose a dataset name")


def write_slabs(path, grid, shape, dtype, slabs, *, slab_bytes: int = 1 << 27) -> None:
    """Collective: write the dataset ``path`` (``file.h5:/name``) of global ``shape`` (1-D
    or 2-D) and ``dtype`` from ``slabs()``, an iterator (called once, on every rank) of
    ``(c0, S)``: S a DistMatrix on ``grid`` holding global columns ``c0 .. c0 + S.n`` (c0 a
    multiple of ``S.nb * npcol`` when S's source column is 0). Nothing appears under the file's
    name until every rank wrote its part; an existing file keeps its other datasets."""
    comm = grid.comm
    fpath, dset = split_path(path) or (os.fspath(path), "")
    dset = dset or DEFAULT_DATASET
    dtype = np.dtype(dtype)
    if not dset.strip("/"):
        raise MatrixFileError(f"{path}: name a dataset after the ':' (e.g. {fpath}:/A)")
    err = None
    try:
        _h5py()
    except MatrixFileError as e:
        err = e
    agree(comm, err)
    on_root(comm, lambda: _check_writable(fpath))
    import h5py
    ndim = len(shape)
    rank, size = comm.Get_rank(), comm.Get_size()

    def create(tmp):
        with h5py.File(tmp, "w") as f:
            keep = {}                         # the rewritten dataset's attributes
            if os.path.exists(fpath):
                with _open_existing(fpath, h5py) as old:
                    _check_target(old, fpath, dset, h5py)
                    aliases = _copy_except(old, f, dset)
                    prev = old.get("/" + dset.strip("/"))
                    if isinstance(prev, h5py.Dataset):
                        keep = dict(prev.attrs)
            else:
                aliases = []
            # its space allocated now (contiguous, never filled): the file's size is final,
            # and the ranks' writes only overwrite it
            dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
            dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
            dcpl.set_fill_time(h5py.h5d.FILL_TIME_NEVER)
            f.create_dataset(dset, shape=tuple(shape), dtype=dtype, dcpl=dcpl)
            for k, v in keep.items():
                f[dset].attrs[k] = v
            for alias in aliases:             # other hard links to the rewritten dataset
                f[alias] = f[dset]
        # a full disk found now, in a clean error: HDF5 cannot recover from a write that
        # fails for want of space (closing the file then crashed the process)
        _reserve(tmp)

    def failed(e) -> Exception:
        """``e`` as the error this write raises: named by the target (the OS's reason
        kept), and without its traceback, which holds h5py objects of a file whose write
        failed (freeing them later, elsewhere, crashed HDF5)."""
        if isinstance(e, MatrixFileError):
            return e.with_traceback(None)
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        out = OSError(f"{fpath}:{dset}: cannot write ({reason})")
        out.errno = getattr(e, "errno", None)
        return out

    def make(tmp):
        try:
            create(tmp)
        except Exception as e:  # noqa: BLE001 - raised on every rank by on_root
            raise failed(e) from None

    def write(tmp):
        on_root(comm, lambda: make(tmp))
        mpi = _use_mpi(h5py)
        err = None
        for c0, S in slabs():
            if mpi:
                try:
                    with h5py.File(tmp, "r+", driver="mpio", comm=comm) as f:
                        err = _write_or_error(f, dset, S, c0, ndim, slab_bytes, failed)
                except Exception as e:  # noqa: BLE001 - agreed on below
                    err = err or failed(e)
                if not comm.allreduce(err is None, op=_land()):   # all stop together
                    break
                continue
            # one rank after the other; after a failed write (a full disk leaves the file
            # inconsistent) no rank opens the file again: every rank learns of it at once
            for r in range(size):
                if r == rank:
                    try:
                        f = h5py.File(tmp, "r+")
                        err = _write_or_error(f, dset, S, c0, ndim, slab_bytes, failed)
                        if err is None:
                            f.close()
                        else:       # HDF5 cannot close a file whose write failed: closing
                            _keep_forever(f)         # it crashed the process; left open
                    except Exception as e:  # noqa: BLE001 - agreed on below
                        err = err or failed(e)
                if comm.bcast(err is not None if r == rank else None, root=r):
                    break
            if not comm.allreduce(err is None, op=_land()):
                break
        agree(comm, err)
    atomic_output(fpath, comm, write)


def write(path, A, *, vector: bool = False) -> None:
    """Collective: write the DistMatrix ``A`` to ``path`` (``file.h5:/name``) without
    gathering it; ``vector=True`` writes an n x 1 matrix as a 1-D dataset."""
    shape = (A.m,) if vector and A.n == 1 else A.shape
    write_slabs(path, A.grid, shape, A.dtype, lambda: iter([(0, A)]))
