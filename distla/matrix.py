"""DistMatrix: a dense matrix in 2D block-cyclic layout over a ProcessGrid.

Storage follows ScaLAPACK's descriptor semantics: global ``m x n``, blocks ``mb x nb``, block
(0, 0) on process (``rsrc``, ``csrc``). Each rank holds its local array ``local``
(``mloc x nloc``, column-major, leading dimension ``lld = max(1, mloc)``) as a NumPy array on
'cpu' ranks or a CuPy array on 'gpu' ranks. Every constructor and method here is collective
over the grid unless its docstring says otherwise.
"""
from __future__ import annotations

import numbers

import numpy as np

from . import layout
from .device import _lapack, array_device, get_backend
from .errors import agree, collective, signature
from .grid import ProcessGrid

__all__ = ["DistMatrix", "check_compatible"]

_DTYPES = (np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.complex64),
           np.dtype(np.complex128))


def _check_dtype(dtype, device: str | None = None) -> np.dtype:
    dt = np.dtype(dtype)
    if not dt.isnative and dt.kind in "fc":   # '>f8': the same numbers, stored natively
        dt = dt.newbyteorder("=")
    if dt not in _DTYPES:
        raise TypeError(f"dtype must be float32, float64, complex64 or complex128, not {dt}")
    if device == "gpu" and dt.kind == "c":
        raise TypeError(f"{dt} matrices are not supported on GPU ranks (their kernels are "
                        f"real cuBLAS/cuSOLVER calls); use device='cpu'")
    return dt


def _pair(x, name: str) -> tuple[int, int]:
    def whole(v):     # an int, not a bool (True would silently be 1)
        return isinstance(v, numbers.Integral) and not isinstance(v, (bool, np.bool_))
    if whole(x):
        x = (x, x)
    try:
        a, b = x
        if not (whole(a) and whole(b)):
            raise TypeError
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be an int or a pair of ints, not {x!r}") from None
    return int(a), int(b)


def _check_layout(grid, shape, block, src):
    if not isinstance(grid, ProcessGrid):
        raise TypeError(f"grid must be a ProcessGrid, not {type(grid).__name__}")
    m, n = _pair(shape, "shape")
    mb, nb = _pair(block, "block")
    rsrc, csrc = _pair(src, "src")
    if m < 0 or n < 0:
        raise ValueError(f"shape must be non-negative, got {(m, n)}")
    if mb <= 0 or nb <= 0:
        raise ValueError(f"block sizes must be positive, got {(mb, nb)}")
    if not (0 <= rsrc < grid.nprow and 0 <= csrc < grid.npcol):
        raise ValueError(f"source process {(rsrc, csrc)} is outside the "
                         f"{grid.nprow} x {grid.npcol} grid")
    return (m, n), (mb, nb), (rsrc, csrc)


def _same_ranks(c1, c2) -> bool:
    """True when two mpi4py communicators hold the same ranks in the same order (local)."""
    from mpi4py import MPI
    g1, g2 = c1.Get_group(), c2.Get_group()
    try:
        return MPI.Group.Compare(g1, g2) == MPI.IDENT
    finally:
        g1.Free()
        g2.Free()


def check_compatible(A, B, what: str) -> None:
    """Raise (locally, no communication) unless A and B are DistMatrix objects on the same
    grid, device and dtype: TypeError / ValueError naming ``what``."""
    for X in (A, B):
        if not isinstance(X, DistMatrix):
            raise TypeError(f"{what}: operands must be DistMatrix, not {type(X).__name__}")
    if A.grid != B.grid:
        raise ValueError(f"{what}: operands live on different grids")
    if A.device != B.device:
        raise TypeError(f"{what}: operands are on {A.device} and {B.device}")
    if A.dtype != B.dtype:
        raise TypeError(f"{what}: dtypes differ ({A.dtype} and {B.dtype}); use astype first")


# column slabs of DistMatrix.from_function: at most this many entries and 1/32 of the local
# matrix each, so that generators (random, problems) peak near 1x the local matrix. On CPU
# ranks a slab stays cache-sized (2 MiB of float64): the hash generators make many passes over
# it; slabs of 32 MiB made `random` 2x and `problems.spd_matrix` 3-6x slower (n=4096), and
# the in-place symmetric hash of spd_matrix runs best near 2^18 entries (n=8192)
_SLAB_ELEMS = {"cpu": 1 << 18, "gpu": 1 << 25}
_MIN_SLAB_ELEMS = 1 << 16


def _slab_width(mloc: int, nloc: int, device: str) -> int:
    """Local columns per slab of a pass over a local matrix: at most ``_SLAB_ELEMS`` entries
    and a 32nd of the columns (temporaries stay a fraction of the matrix), but at least
    ``_MIN_SLAB_ELEMS`` entries (a 64 x 64 matrix took 32 slabs of ~8 NumPy calls each: its
    Frobenius norm cost 170x NumPy's)."""
    rows = max(1, mloc)
    return max(1, min(nloc, _SLAB_ELEMS[device] // rows,
                      max(-(-nloc // 32), _MIN_SLAB_ELEMS // rows)))


def _operand_error(op: str, other) -> TypeError:
    return TypeError(f"DistMatrix {op} {type(other).__name__}: both operands must be "
                     f"DistMatrix objects of the same layout (DistMatrix.from_global makes one "
                     f"from an array; scalars multiply: alpha * A)")


def _scalar(alpha):
    """``alpha`` as a scalar NumPy multiplies arrays by without changing their kind: Python
    and NumPy numbers as they are, other real / complex numbers (``fractions.Fraction``) as
    float / complex; None for anything else (``decimal.Decimal``, which is no complex number,
    arrays, strings): the operator then raises TypeError on every rank alike."""
    if isinstance(alpha, (int, float, complex, np.number, np.bool_)):
        return alpha
    if isinstance(alpha, numbers.Real):
        return float(alpha)
    if isinstance(alpha, numbers.Complex):
        return complex(alpha)
    return None


def _float_kind(dtype) -> np.dtype:
    """The matrix dtype for an array of ``dtype``: integers and bools as float64, float16 as
    float32 (as scipy.linalg converts them), others unchanged (then checked)."""
    dtype = np.dtype(dtype)
    if dtype.kind in "biu":
        return np.dtype(np.float64)
    return np.dtype(np.float32) if dtype == np.float16 else dtype


def _check_conversion(a: np.ndarray, dt: np.dtype, explicit: bool) -> None:
    """ValueError (local: the root's array) when converting ``a`` to ``dt`` would change
    values silently: finite entries beyond ``dt``'s range (float64 1e300 as float32 is inf),
    or, unless ``dt`` was asked for (``explicit``), integers at or beyond 2^53 (2^24 for
    float32), from where ``dt`` does not hold every integer -- as
    :func:`distla.io.read_matrix` refuses the same data in a file."""
    if not a.size or dt.kind not in "fc":
        return
    if a.dtype.kind in "iu" and a.dtype.itemsize >= 4 and not explicit:
        exact = 2 ** (np.finfo(dt).nmant + 1)
        big = max(abs(int(a.max())), abs(int(a.min())))
        if big >= exact:
            raise ValueError(f"from_global: {a.dtype} integers of magnitude {big}, at "
                             f"or beyond {exact} ({dt} holds every integer exactly only "
                             f"below that), would be rounded; pass dtype={dt} to accept that")
    top = float(np.finfo(dt).max)
    if a.dtype.kind in "fc" and float(np.finfo(a.dtype).max) > top:
        with np.errstate(invalid="ignore"):
            big = float(np.max(np.abs(a), initial=0.0, where=np.isfinite(a)))
        if big > top:
            raise ValueError(f"from_global: entries of magnitude {big:.3g} are beyond {dt}'s "
                             f"range ({np.finfo(dt).max:.3g}): they would become inf")


def _dtype_name(dtype) -> str:
    """``dtype``'s name for a call signature (never raises: the call checks it)."""
    try:
        return "None" if dtype is None else str(np.dtype(dtype))
    except Exception:  # noqa: BLE001
        return repr(dtype)


class DistMatrix:
    """A 2D block-cyclic distributed matrix.

    Attributes: ``grid``, ``shape`` (m, n), ``block`` (mb, nb), ``src`` (rsrc, csrc), ``dtype``,
    ``device`` ('cpu' | 'gpu'), ``local`` (this rank's column-major mloc x nloc array),
    ``desc`` (a :class:`distla.layout.Descriptor`). Use the class-method constructors; the
    bare constructor wraps an existing local array without communication.
    """

    __array_priority__ = 1000
    __array_ufunc__ = None     # A * ndarray: a TypeError, not an object array of copies of A

    def __init__(self, grid, shape, block, *, dtype=None, device="cpu", src=(0, 0),
                 local=None):
        (m, n), (mb, nb), (rsrc, csrc) = _check_layout(grid, shape, block, src)
        self.grid = grid
        self.shape = (m, n)
        self.block = (mb, nb)
        self.src = (rsrc, csrc)
        self.device = device
        if local is not None and dtype is not None and np.dtype(dtype) != local.dtype:
            raise TypeError(f"dtype={np.dtype(dtype)} but the local array holds "
                            f"{local.dtype}: pass local.astype(dtype), or leave dtype out")
        self.dtype = _check_dtype((np.float64 if dtype is None else dtype) if local is None
                                  else local.dtype, device)
        self.backend = get_backend(device)
        lshape = self.local_shape
        if local is None:
            local = self.backend.zeros(lshape, self.dtype)
        else:
            if array_device(local) != device:
                raise TypeError(f"local array is on {array_device(local)}, "
                                f"but device={device!r}")
            if tuple(local.shape) != lshape:
                raise ValueError(f"local array has shape {tuple(local.shape)}, but this rank "
                                 f"owns {lshape} of a {m} x {n} matrix in {mb} x {nb} blocks")
        self.local = local

    # ---- layout -------------------------------------------------------------------------
    m = property(lambda self: self.shape[0])
    n = property(lambda self: self.shape[1])
    mb = property(lambda self: self.block[0])
    nb = property(lambda self: self.block[1])
    rsrc = property(lambda self: self.src[0])
    csrc = property(lambda self: self.src[1])
    xp = property(lambda self: self.backend.xp)
    ndim = 2

    @property
    def local_shape(self) -> tuple[int, int]:
        """(mloc, nloc) stored on this rank (not collective)."""
        g = self.grid
        return (layout.numroc(self.m, self.mb, g.myrow, self.rsrc, g.nprow),
                layout.numroc(self.n, self.nb, g.mycol, self.csrc, g.npcol))

    @property
    def desc(self) -> layout.Descriptor:
        """ScaLAPACK descriptor of this matrix on this rank (``.to_scalapack()`` for DESC).
        LLD is the local array's leading dimension: its column stride when it is
        column-major (a view's, e.g. :meth:`sub`'s or a padded ``from_descriptor`` array's,
        is its parent's), else the local rows."""
        a, lld = self.local, max(1, self.local_shape[0])
        if getattr(a, "ndim", 0) == 2 and a.shape[1] > 1 and \
                (a.shape[0] <= 1 or a.strides[0] == a.itemsize) and a.strides[1] > 0:
            lld = max(lld, a.strides[1] // a.itemsize)
        return layout.Descriptor(self.m, self.n, self.mb, self.nb, self.rsrc, self.csrc, lld)

    def row_indices(self, prow: int | None = None) -> np.ndarray:
        """Global row indices stored on process row ``prow`` (default: mine), in local order."""
        g = self.grid
        return layout.local_indices(self.m, self.mb, g.myrow if prow is None else prow,
                                    self.rsrc, g.nprow)

    def col_indices(self, pcol: int | None = None) -> np.ndarray:
        """Global column indices stored on process column ``pcol`` (default: mine)."""
        g = self.grid
        return layout.local_indices(self.n, self.nb, g.mycol if pcol is None else pcol,
                                    self.csrc, g.npcol)

    def local_row_start(self, g: int, prow: int | None = None) -> int:
        """Local offset of global row ``g`` (first local row with global index >= g)."""
        gr = self.grid
        return layout.local_start(g, self.mb, gr.myrow if prow is None else prow, self.rsrc,
                                  gr.nprow)

    def local_col_start(self, g: int, pcol: int | None = None) -> int:
        """Local offset of global column ``g`` (first local column with index >= g)."""
        gr = self.grid
        return layout.local_start(g, self.nb, gr.mycol if pcol is None else pcol, self.csrc,
                                  gr.npcol)

    def row_owner(self, g: int) -> int:
        """Process row owning global row ``g``."""
        return int(layout.owner(g, self.mb, self.rsrc, self.grid.nprow))

    def col_owner(self, g: int) -> int:
        """Process column owning global column ``g``."""
        return int(layout.owner(g, self.nb, self.csrc, self.grid.npcol))

    # ---- block-level views (SLATE's mt/nt, tile owners, submatrices) ----------------------
    mt = property(lambda self: layout.num_blocks(self.m, self.mb),
                  doc="Number of block rows (the last may be short).")
    nt = property(lambda self: layout.num_blocks(self.n, self.nb),
                  doc="Number of block columns (the last may be short).")

    def tile_owner(self, i: int, j: int) -> tuple[int, int]:
        """(process row, process column) owning block (i, j). Not collective."""
        return self.row_owner(i * self.mb), self.col_owner(j * self.nb)

    def my_block_cols(self, j0: int = 0):
        """``[(j, local column start, width)]`` for the block columns ``j >= j0`` stored on this
        rank, in local order. Not collective."""
        g, n, nb = self.grid, self.n, self.nb
        first = (g.mycol - self.csrc) % g.npcol
        out = []
        for b, j in enumerate(range(first, self.nt, g.npcol)):
            if j >= j0:
                out.append((j, b * nb, min(nb, n - j * nb)))
        return out

    def sub(self, i0: int, i1: int, j0: int, j1: int) -> "DistMatrix":
        """The block-aligned submatrix of block rows ``i0:i1`` and block columns ``j0:j1`` (like
        SLATE's ``A.sub`` and ScaLAPACK's IA/JA offsets at block boundaries), sharing this
        matrix's storage: its ``local`` is a view whose leading dimension is the parent's.
        Not collective."""
        for v in (i0, i1, j0, j1):     # (True would silently be 1)
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Integral):
                raise TypeError(f"sub: block indices must be ints, not {v!r}")
        if not (0 <= i0 <= i1 <= self.mt and 0 <= j0 <= j1 <= self.nt):
            raise IndexError(f"sub({i0}, {i1}, {j0}, {j1}) is outside the {self.mt} x "
                             f"{self.nt} blocks of this matrix")
        r0, r1 = min(i0 * self.mb, self.m), min(i1 * self.mb, self.m)   # i0 == mt: empty
        c0, c1 = min(j0 * self.nb, self.n), min(j1 * self.nb, self.n)
        g = self.grid
        local = self.local[self.local_row_start(r0):self.local_row_start(r1),
                           self.local_col_start(c0):self.local_col_start(c1)]
        return DistMatrix(g, (r1 - r0, c1 - c0), self.block, dtype=self.dtype,
                          device=self.device, local=local,
                          src=((self.rsrc + i0) % g.nprow, (self.csrc + j0) % g.npcol))

    def same_layout(self, other: "DistMatrix") -> bool:
        return (isinstance(other, DistMatrix) and other.grid == self.grid
                and other.shape == self.shape and other.block == self.block
                and other.src == self.src)

    def _like(self, local=None, shape=None, block=None, dtype=None, src=None):
        """A matrix on the same grid and device (no communication, no checks); with ``local``
        its dtype is the local array's."""
        if local is None and dtype is None:
            dtype = self.dtype
        return DistMatrix(self.grid, self.shape if shape is None else shape,
                          self.block if block is None else block,
                          dtype=dtype, device=self.device,
                          src=self.src if src is None else src, local=local)

    def __repr__(self) -> str:
        return (f"DistMatrix(shape={self.shape}, block={self.block}, src={self.src}, "
                f"dtype={self.dtype}, device={self.device!r}, grid={self.grid.nprow}x"
                f"{self.grid.npcol})")

    # ---- constructors -------------------------------------------------------------------
    @classmethod
    def zeros(cls, grid, shape, block=(64, 64), dtype=np.float64, device="cpu", src=(0, 0)):
        """Collective: an all-zero matrix."""
        with collective(grid.comm if isinstance(grid, ProcessGrid) else None,
                        signature("DistMatrix", shape=shape, block=block, src=src,
                                  dtype=_dtype_name(dtype), device=device)):
            _check_layout(grid, shape, block, src)
            _check_dtype(dtype, device)
            get_backend(device, grid.comm)
        return cls(grid, shape, block, dtype=dtype, device=device, src=src)

    @classmethod
    def from_function(cls, grid, shape, block, fn, dtype=np.float64, device="cpu",
                      src=(0, 0)):
        """Collective: entries ``fn(I, J)`` where ``I`` (mloc x 1) and ``J`` (1 x w) are the
        global row and column indices of this rank's entries, as integer arrays of the
        device's namespace (NumPy or CuPy). ``fn`` returns the mloc x w values (any array
        broadcastable to that shape); it is called on slabs of ``w`` local columns so that its
        temporaries stay a fraction of the local matrix (entries must not depend on the slab).
        The global matrix is never formed."""
        A = cls.zeros(grid, shape, block, dtype=dtype, device=device, src=src)
        xp = A.xp
        err = None
        try:
            I = xp.asarray(A.row_indices()).reshape(-1, 1)
            J = xp.asarray(A.col_indices()).reshape(1, -1)
            mloc, nloc = A.local_shape
            w = _slab_width(mloc, nloc, device)
            for c in range(0, max(nloc, 1), w):   # fn runs at least once, even on no columns
                vals = fn(I, J[:, c:c + w])
                if isinstance(vals, np.ma.MaskedArray):
                    raise TypeError("from_function: fn returned a masked array (the data "
                                    "under its mask would be used); return a plain array")
                vals = A.backend.asarray(vals)
                if vals.dtype.kind == "c" and A.dtype.kind != "c":
                    raise TypeError(f"fn returned complex values for a {A.dtype} matrix")
                want = (mloc, min(w, nloc - c))
                if vals.ndim > 2 or any(v not in (1, k) for v, k in
                                        zip(vals.shape[::-1], want[::-1])):
                    raise ValueError(f"fn(I, J) must return values broadcastable to the "
                                     f"shape of I and J's broadcast, {want} here; it "
                                     f"returned shape {tuple(vals.shape)}")
                A.local[:, c:c + w] = xp.broadcast_to(vals, (mloc, min(w, nloc - c)))
                del vals
        except BaseException as e:  # noqa: BLE001 - agreed on below (fn may sys.exit())
            err = e
        agree(grid.comm, err)
        return A

    @classmethod
    def eye(cls, grid, n, block=(64, 64), dtype=np.float64, device="cpu", src=(0, 0), m=None):
        """Collective: the identity (``m x n``, default square)."""
        shape = (n if m is None else m, n)
        return cls.from_function(grid, shape, block, lambda I, J: (I == J), dtype=dtype,
                                 device=device, src=src)

    @classmethod
    def random(cls, grid, shape, block=(64, 64), seed=0, dtype=np.float64, device="cpu",
               src=(0, 0), distribution="normal"):
        """Collective: entries from a counter-based generator of (seed, i, j): the same matrix
        whatever the grid, block size, source process or device. ``distribution`` is
        'normal' (standard normal) or 'uniform' ([0, 1)); a complex ``dtype`` gets these real
        values (zero imaginary parts)."""
        with collective(grid.comm if isinstance(grid, ProcessGrid) else None,
                        signature("DistMatrix.random", seed=seed, distribution=distribution)):
            if distribution not in ("normal", "uniform"):
                raise ValueError("distribution must be 'normal' or 'uniform'")
            if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, numbers.Integral) \
                    or not 0 <= seed < 2 ** 64:     # (the hash takes 64 bits: 2^64 + 5 was 5)
                raise TypeError(f"DistMatrix.random: seed must be a non-negative int below "
                                f"2^64 (the same "
                                f"on every rank), not {seed!r}")
        seed = int(seed)                      # (a NumPy integer overflowed in the hash)
        from .random import hashed_normal, hashed_uniform
        f = hashed_normal if distribution == "normal" else hashed_uniform
        return cls.from_function(grid, shape, block, lambda I, J: f(seed, I, J), dtype=dtype,
                                 device=device, src=src)

    @classmethod
    def from_global(cls, grid, a, shape=None, block=(64, 64), root=0, device="cpu",
                    src=(0, 0), dtype=None):
        """Collective: scatter the global array ``a`` (needed on ``root`` only; other ranks may
        pass None) into block-cyclic layout. ``shape``/``dtype`` default to ``a``'s (an
        integer or bool ``a`` gives float64, a float16 one float32, as scipy.linalg's solvers
        convert them)."""
        with collective(grid.comm if isinstance(grid, ProcessGrid) else None,
                        signature("DistMatrix.from_global", block=block, root=root, src=src,
                                  device=device, dtype=_dtype_name(dtype))):
            _check_layout(grid, (0, 0), block, src)
            if not (isinstance(root, numbers.Integral) and not isinstance(root, bool)
                    and 0 <= root < grid.size):
                raise ValueError(f"root {root!r} is not a rank of the {grid.size}-rank grid")
        comm = grid.comm
        meta, err = None, None
        if comm.Get_rank() == root:
            try:
                if a is None:
                    raise ValueError(f"from_global needs the array on root rank {root}")
                if isinstance(a, np.ma.MaskedArray):   # (np.asarray would use the data
                    raise TypeError("from_global: masked arrays are not supported (the "  # under
                                    "masked entries would be used); pass a.filled(value)")  # it)
                if type(a).__module__.split(".")[0] == "cupy":
                    a = a.get()
                a = np.asarray(a)
                if a.ndim == 1:
                    a = a.reshape(-1, 1)
                if a.ndim != 2:
                    raise ValueError(f"from_global needs a 2-D array, got {a.ndim}-D")
                if shape is not None and tuple(_pair(shape, "shape")) != a.shape:
                    raise ValueError(f"shape {tuple(_pair(shape, 'shape'))} does not match the "
                                     f"array's {a.shape}")
                if not a.dtype.isnative:        # big-endian data (from a file): native
                    a = a.astype(a.dtype.newbyteorder("="))
                if dtype is None and a.dtype.kind in "fc" and a.dtype.char in "gG":
                    raise TypeError(f"from_global: {a.dtype} arrays are not supported; pass "
                                    f"dtype={'complex128' if a.dtype.kind == 'c' else 'float64'}"
                                    f" to round them")
                dt = _check_dtype(_float_kind(a.dtype) if dtype is None else dtype, device)
                if dt.kind != "c" and a.dtype.kind == "c":
                    raise TypeError(f"complex array for a {dt} matrix")
                if a.dtype.kind in "OSUV":      # (converted here: a failure on the root
                    a = np.asarray(a, dtype=dt)  # alone left the others in the scatter)
                _check_conversion(a, dt, explicit=dtype is not None)
                meta = (a.shape, dt.str)
            except Exception as e:  # noqa: BLE001
                err = e
        agree(comm, err)
        shape, dts = comm.bcast(meta, root=root)
        A = cls.zeros(grid, shape, block, dtype=np.dtype(dts), device=device, src=src)
        if grid.size == 1:        # one rank: the local matrix is the array (no buffers)
            if A.local.size:
                A.local[...] = A.backend.asarray(np.asarray(a, dtype=A.dtype))
            return A
        shapes = A._local_shapes()
        counts = np.array([p * q for p, q in shapes], dtype=np.int64)
        displs = np.concatenate([[0], np.cumsum(counts)[:-1]])
        sendbuf = None
        if comm.Get_rank() == root:
            sendbuf = np.empty(int(counts.sum()), dtype=A.dtype)
            for r, (pr, pc) in enumerate(map(grid.coords, range(grid.size))):
                piece = sendbuf[displs[r]:displs[r] + counts[r]].reshape(shapes[r], order="F")
                for gv, lv in layout.block_cyclic_views(a, piece, A.block, (pr, pc), A.src,
                                                        grid.shape):
                    lv[...] = gv            # strided copies, no index arrays
        recv = np.empty(int(counts[grid.rank]), dtype=A.dtype)
        from mpi4py import MPI
        mt = MPI._typedict[A.dtype.char]
        comm.Scatterv([sendbuf, (counts, displs), mt] if sendbuf is not None else None,
                      [recv, mt], root=root)
        A.local[...] = A.backend.asarray(recv.reshape(A.local_shape, order="F"))
        return A

    @classmethod
    def from_local(cls, grid, local, shape, block, src=(0, 0)):
        """Collective: wrap this rank's existing local array (e.g. from a ScaLAPACK code, with
        the layout of its descriptor). The device is the array's. A column-major array (or a
        column-major view with a leading dimension larger than its row count, as ScaLAPACK's
        LLD) is used in place, without a copy; other arrays are copied to column-major."""
        with collective(grid.comm, signature("DistMatrix.from_local", shape=shape,
                                             block=block, src=src)):
            device = array_device(local)
            _check_layout(grid, shape, block, src)
            if not _lapack.is_colmajor(local) and not (local.ndim == 2 and 0 in local.shape):
                local = get_backend(device).asarray(local)
            A = cls(grid, shape, block, dtype=local.dtype, device=device, src=src, local=local)
        # valid on each rank, but the ranks' arrays must also agree with each other
        with collective(grid.comm, signature("DistMatrix.from_local: the local arrays",
                                             dtype=str(A.dtype), device=A.device)):
            pass
        return A

    @classmethod
    def from_descriptor(cls, grid, local, desc):
        """Collective: wrap a local array described by a ScaLAPACK DESC (9 ints) or
        :class:`~distla.layout.Descriptor`. ``local`` may have ``lld >= mloc`` rows (ScaLAPACK's
        local leading dimension): the matrix then uses its first ``mloc`` rows in place when
        ``local`` is column-major (as ScaLAPACK's); another layout is copied, as
        :meth:`from_local` does, and writes to the matrix do not reach ``local``."""
        d, err = None, None
        try:
            d = desc if isinstance(desc, layout.Descriptor) else \
                layout.Descriptor.from_scalapack(desc)
            mloc = layout.numroc(d.m, d.mb, grid.myrow, d.rsrc, grid.nprow)
            if d.lld < max(1, mloc):     # as ScaLAPACK's DESCINIT (INFO = -9)
                raise ValueError(f"from_descriptor: LLD = {d.lld} < max(1, {mloc}), the "
                                 f"local rows of this rank (process row {grid.myrow})")
        except Exception as e:  # noqa: BLE001 - a bad DESC on one rank must not hang the rest
            err = e
        agree(grid.comm, err)
        if d is not None and getattr(local, "ndim", 0) == 2:
            mloc = layout.numroc(d.m, d.mb, grid.myrow, d.rsrc, grid.nprow)
            if local.shape[0] != mloc and local.shape[0] == max(d.lld, 1) >= mloc:
                local = local[:mloc]
        return cls.from_local(grid, local, (d.m, d.n), (d.mb, d.nb), (d.rsrc, d.csrc))

    # ---- conversions --------------------------------------------------------------------
    #: what the values are, set by the factorizations: ``cholesky_lower`` (True: cholesky's
    #: lower factor L, False: its upper factor U) and ``lu_factor`` (lu_factor's LU matrix),
    #: so that cho_solve, rcond and logdet refuse a factor used as another. Copies that keep
    #: the values (copy, astype, redistribute, to) keep them; a transpose turns L into U
    #: (a complex factor's plain transpose is marked ``"transpose"``: no factor of A).
    FACTOR_MARKS = ("cholesky_lower", "lu_factor")

    def _marked_as(self, other: "DistMatrix") -> "DistMatrix":
        """``self`` with ``other``'s factor marks (:data:`FACTOR_MARKS`). Local."""
        for name in self.FACTOR_MARKS:
            if name in other.__dict__:
                setattr(self, name, other.__dict__[name])
        return self

    def copy(self) -> "DistMatrix":
        """A deep copy (local, no communication)."""
        return self._like(local=self.local.copy(order="F"))._marked_as(self)

    def astype(self, dtype) -> "DistMatrix":
        """A copy converted to ``dtype`` (local, no communication). Complex to real is a
        TypeError (it would drop the imaginary parts). As NumPy's ``astype``, values beyond a
        narrower type's range become inf (with NumPy's RuntimeWarning on the ranks holding
        them; the solvers' ``check_finite`` then refuses the matrix); ``from_global(...,
        dtype=)`` and ``read_matrix(..., dtype=)`` refuse such values on every rank."""
        dt = _check_dtype(dtype, self.device)
        if self.dtype.kind == "c" and dt.kind != "c":
            raise TypeError(f"astype: {self.dtype} to {dt} would drop the imaginary parts; "
                            f"convert the real part explicitly (e.g. from the local arrays' "
                            f".real) if that is what you mean")
        # through the C-ordered transpose: CuPy's elementwise kernels walk C order, so an
        # F-to-F cast of a 2-D array reads and writes with a stride of the column length
        # (float64 to float32, n = 32768 on one H100: 28.9 ms that way, 5.2 ms this way;
        # record 2026-11-26-h100-mixed-lowp-before-after.jsonl)
        return self._like(local=self.local.T.astype(dt, order="C").T, dtype=dt)._marked_as(self)

    def to(self, device: str) -> "DistMatrix":
        """Collective: this matrix on ``device`` ('cpu' or 'gpu'); ``self`` if already there."""
        with collective(self.grid.comm, signature("DistMatrix.to", device=device)):
            pass      # (one rank returning early left the others waiting in the agreement)
        if device == self.device:
            return self
        with collective(self.grid.comm):
            be = get_backend(device, self.grid.comm)
        return DistMatrix(self.grid, self.shape, self.block, dtype=self.dtype, device=device,
                          src=self.src, local=be.asarray(self.backend.to_host(self.local))
                          )._marked_as(self)

    def _local_shapes(self) -> list:
        """The local matrix shape of every rank of the grid, in rank order. Local."""
        g = self.grid
        return [(layout.numroc(self.m, self.mb, pr, self.rsrc, g.nprow),
                 layout.numroc(self.n, self.nb, pc, self.csrc, g.npcol))
                for pr, pc in map(g.coords, range(g.size))]

    def to_global(self, root: int | None = 0):
        """Collective: the global ndarray (NumPy) on ``root``, None elsewhere; every rank gets
        it when ``root`` is None."""
        from mpi4py import MPI
        grid, comm = self.grid, self.grid.comm
        with collective(comm, signature("to_global", self, root=root)):
            if root is not None and not (isinstance(root, numbers.Integral) and
                                         not isinstance(root, bool) and 0 <= root < grid.size):
                raise ValueError(f"root {root!r} is not a rank of the {grid.size}-rank grid "
                                 f"(an int, or None for every rank)")
        if grid.size == 1:        # one rank: the local matrix is the array (no buffers)
            out = np.empty(self.shape, dtype=self.dtype)
            out[...] = self.backend.to_host(self.local)
            return out
        mine = np.asarray(self.backend.to_host(self.local), order="F").ravel(order="F")
        shapes = self._local_shapes()
        counts = np.array([a * b for a, b in shapes], dtype=np.int64)
        displs = np.concatenate([[0], np.cumsum(counts)[:-1]])
        mt = MPI._typedict[self.dtype.char]
        gets = root is None or comm.Get_rank() == root
        with collective(comm):     # (the gathering ranks' memory: agreed before any message)
            buf = np.empty(int(counts.sum()), dtype=self.dtype) if gets else None
            out = np.empty(self.shape, dtype=self.dtype) if gets else None
        if root is None:
            comm.Allgatherv([mine, mt], [buf, (counts, displs), mt])
        else:
            comm.Gatherv([mine, mt], [buf, (counts, displs), mt] if gets else None, root=root)
        if not gets:
            return None
        for r, (pr, pc) in enumerate(map(grid.coords, range(grid.size))):
            piece = buf[displs[r]:displs[r] + counts[r]].reshape(shapes[r], order="F")
            for gv, lv in layout.block_cyclic_views(out, piece, self.block, (pr, pc), self.src,
                                                    grid.shape):
                gv[...] = lv                # strided copies, no index arrays
        return out

    # ---- data movement ------------------------------------------------------------------
    def redistribute(self, grid=None, block=None, src=None) -> "DistMatrix":
        """Collective: this matrix in another layout (pdgemr2d): new ``grid`` (over the same
        communicator), ``block`` and/or ``src``; by direct all-to-all exchange, never
        gathered. ``src`` defaults to the current source process when it lies on the new
        grid, else (0, 0)."""
        from .redistribute import remap
        grid = self.grid if grid is None else grid
        if src is None:
            fits = self.rsrc < grid.nprow and self.csrc < grid.npcol
            src = self.src if fits else (0, 0)
        with collective(self.grid.comm, signature(
                "redistribute", self, f"{grid.nprow}x{grid.npcol}", block=block, src=src)):
            if grid.comm is not self.grid.comm and not _same_ranks(grid.comm, self.grid.comm):
                raise ValueError("redistribute needs a grid over the same communicator "
                                 "(the same ranks in the same order)")
            _check_layout(grid, self.shape, self.block if block is None else block,
                          self.src if src is None else src)
        out = DistMatrix(grid, self.shape, self.block if block is None else block,
                         dtype=self.dtype, device=self.device,
                         src=self.src if src is None else src)
        remap(self, out, transpose=False)
        return out._marked_as(self)

    def transpose(self, conjugate: bool = False) -> "DistMatrix":
        """Collective: the (conjugate) transpose, an ``n x m`` matrix with blocks
        ``(nb, mb)`` and source ``(rsrc, csrc)`` on the same grid."""
        from .redistribute import remap
        with collective(self.grid.comm, signature("DistMatrix.transpose", self,
                                                  conjugate=bool(conjugate))):
            pass        # (ranks asking for different transposes exchanged mismatched pieces)
        out = DistMatrix(self.grid, (self.n, self.m), (self.nb, self.mb), dtype=self.dtype,
                         device=self.device, src=self.src)
        remap(self, out, transpose=True, conjugate=conjugate)
        low = self.__dict__.get("cholesky_lower")
        if isinstance(low, bool):
            # L^H (L^T of a real L) is the other factor; a complex L's plain transpose is no
            # factor of A at all (A = L L^H): marked so that cho_solve and rcond refuse it
            out.cholesky_lower = (not low) if conjugate or self.dtype.kind != "c" \
                else "transpose"
        elif low == "transpose" and self.dtype.kind == "c" and not conjugate:
            out.cholesky_lower = "transpose"   # (L^T)^T = L: but which, is lost: refuse
        return out

    @property
    def T(self) -> "DistMatrix":
        return self.transpose()

    @property
    def H(self) -> "DistMatrix":
        return self.transpose(conjugate=True)

    # ---- arithmetic (elementwise ones are local) ----------------------------------------
    def _check_same(self, other, op):
        if not self.same_layout(other):
            raise ValueError(f"{op}: operands must share grid, shape, block and source "
                             f"({self!r} vs {other!r}); use redistribute() first")
        if other.device != self.device:
            raise TypeError(f"{op}: operands are on {self.device} and {other.device}")

    def _elementwise(self, ufunc, other):
        """``ufunc(self.local, other)`` (other: a local array or a scalar) into new
        column-major storage. Local. (CuPy writes an elementwise result in C order unless
        told otherwise; a C-ordered local array made the kernels that read it later slower:
        GENP of ``A + 4 I`` took 0.205 s against 0.112 s at n = 16384 on one H200.)"""
        a = self.local
        probe = other[:0, :0] if getattr(other, "ndim", 0) == 2 else other
        out = self.xp.empty(a.shape, ufunc(a[:0, :0], probe).dtype, order="F")
        return self._like(local=ufunc(a, other, out=out))

    def __add__(self, other):
        if isinstance(other, DistMatrix):
            self._check_same(other, "+")
            return self._elementwise(self.xp.add, other.local)
        raise _operand_error("+", other)

    def __sub__(self, other):
        if isinstance(other, DistMatrix):
            self._check_same(other, "-")
            return self._elementwise(self.xp.subtract, other.local)
        raise _operand_error("-", other)

    def __radd__(self, other):
        raise _operand_error("+", other)

    def __rsub__(self, other):
        raise _operand_error("-", other)

    def __mul__(self, alpha):
        alpha = _scalar(alpha)
        if alpha is None:
            return NotImplemented
        return self._elementwise(self.xp.multiply, alpha)

    __rmul__ = __mul__

    def __truediv__(self, alpha):
        alpha = _scalar(alpha)
        if alpha is None:
            return NotImplemented
        return self._elementwise(self.xp.true_divide, alpha)

    def __neg__(self):
        return self._elementwise(self.xp.multiply, -1)

    # In place, as NumPy's: a view (sub()) writes through to its parent's storage. Local.
    def __iadd__(self, other):
        if not isinstance(other, DistMatrix):
            raise _operand_error("+=", other)
        self._check_same(other, "+=")
        self._keeps_dtype(other.dtype, "+=")
        self.local += other.local
        return self

    def __isub__(self, other):
        if not isinstance(other, DistMatrix):
            raise _operand_error("-=", other)
        self._check_same(other, "-=")
        self._keeps_dtype(other.dtype, "-=")
        self.local -= other.local
        return self

    def __imul__(self, alpha):
        alpha = _scalar(alpha)
        if alpha is None:
            return NotImplemented
        self._keeps_dtype(np.result_type(alpha), "*=")
        self.local *= alpha
        return self

    def __itruediv__(self, alpha):
        alpha = _scalar(alpha)
        if alpha is None:
            return NotImplemented
        self._keeps_dtype(np.result_type(alpha), "/=")
        self.local /= alpha
        return self

    def _keeps_dtype(self, other, op: str) -> None:
        """TypeError if ``op`` in place would need a complex result in a real matrix (its
        imaginary part would be dropped). Local (every rank alike)."""
        if np.dtype(other).kind == "c" and self.dtype.kind != "c":
            raise TypeError(f"{op}: a complex operand for the {self.dtype} matrix would drop "
                            f"its imaginary part; convert with astype(complex) first")

    _matmul = None   # distla.pblas.matmul, installed by distla.pblas (a higher layer)

    def __matmul__(self, other):
        """Collective: ``distla.pblas.matmul(self, other)`` (SUMMA)."""
        if DistMatrix._matmul is None:
            raise RuntimeError("import distla (or distla.pblas) to multiply DistMatrix objects")
        return DistMatrix._matmul(self, other)

    def add(self, other: "DistMatrix", alpha=1.0, beta=1.0) -> "DistMatrix":
        """``alpha * self + beta * other`` (pdgeadd; same layout; local)."""
        self._check_same(other, "add")
        a, b = _scalar(alpha), _scalar(beta)
        if a is None or b is None:
            raise TypeError(f"add: alpha and beta must be numbers, not {alpha!r} and {beta!r}")
        xp = self.xp
        dt = (a * self.local[:0, :0] + b * other.local[:0, :0]).dtype
        out = xp.multiply(self.local, a, out=xp.empty(self.local.shape, dt, order="F"))
        out += b * other.local           # (column-major storage: see _elementwise)
        return self._like(local=out)

    def norm(self, ord="fro"):
        """Collective: 'fro' (or None), 1, inf (np.inf or 'inf') or 'max' norm, as a Python
        float on every rank (NaN anywhere gives NaN on every rank). A tuple of those (e.g.
        ``(1, 'max')``) gives a tuple of floats: 1 and 'max' from one pass over the local
        matrix, 'fro' and inf from another."""
        with collective(self.grid.comm, signature("norm", self, ord=ord)):
            pass                  # ranks asking for different norms would not meet
        with np.errstate(over="ignore"):    # a norm beyond float's range is inf, no warning
            if isinstance(ord, tuple):
                return self._norms(ord)
            return self._norms((ord,))[0]

    def _norms(self, asked):
        # None: 'fro' (NumPy's and SciPy's default for a matrix); a norm asked twice is
        # computed once (each copy was accumulated: sqrt(2) or 2 times too large)
        asked = tuple("fro" if o is None else np.inf if o in ("inf", "Inf") else o
                      for o in asked)
        for o in asked:
            if isinstance(o, (bool, np.bool_)) or o not in ("fro", 1, np.inf, "max"):
                raise ValueError(f"norm: ord must be 'fro', 1, inf or 'max', not {o!r}")
        ords = tuple(dict.fromkeys(asked))
        got = dict(zip(ords, self._unique_norms(ords)))
        return tuple(got[o] for o in asked)

    def _unique_norms(self, ords):
        xp, be = self.xp, self.backend
        mloc, nloc = self.local.shape
        acc = dict.fromkeys(ords)
        parts = []
        # float32 sums of |a| overflow beyond 3.4e38 on one rank where the same matrix on
        # more ranks did not (the ranks' sums are added in float64): they go through the
        # slabs below, in float64
        wide = np.finfo(self.dtype).dtype == np.float64
        if (1 in ords and wide) or "max" in ords:   # one pass: each column's sum and max
            sums, maxes = be.column_abs_stats(self.local)
            if 1 in ords and wide:
                parts.append(sums)
            if "max" in ords and maxes.size:
                acc["max"] = maxes.max()
        rest = [o for o in ords if o in ("fro", np.inf) or (o == 1 and not wide)]
        fused = be.gemv_abs(self.local, xp.zeros((nloc, 0), self.dtype), absolute=False,
                            rowsums=True) if rest == [np.inf] and self.local.size and \
            wide else None
        if fused is not None:     # the row sums in one pass, no temporaries
            acc[np.inf] = fused[2][:, 0]
        # column slabs: the temporaries stay a fraction of the local matrix
        w = _slab_width(mloc, nloc, self.device)
        for c in range(0, nloc, w) if rest and fused is None else ():
            # |A| of the slab's transpose: a walk in memory order (row j of absA: column j)
            absA = xp.abs(self.local[:, c:c + w].T)
            for o in rest:
                if o == "fro":   # (scale, sum of (|a| / scale)^2), as LAPACK's dlassq: the
                    # squares themselves overflow from 1e154 (float32: 1e19) and underflow
                    a = absA.astype(np.float64, copy=False)
                    if not a.size:
                        continue
                    scale, ssq = acc[o] if acc[o] is not None else (xp.zeros(()), xp.zeros(()))
                    new = xp.maximum(scale, a.max())        # NaN in A: NaN
                    unit = xp.where((new > 0) & (new < np.inf), new, 1.0)
                    with np.errstate(invalid="ignore", over="ignore"):
                        acc[o] = (new, ssq * (scale / unit) ** 2 + xp.sum((a / unit) ** 2))
                    continue
                if o == 1:       # this slab's column sums (float32 A: in float64)
                    parts.append(absA.sum(axis=1, dtype=np.float64))
                    continue
                v = absA.sum(axis=0, dtype=np.float64)
                acc[o] = v if acc[o] is None else acc[o] + v
            del absA
        return tuple(self._reduce_norm(o, acc[o], parts, mloc) for o in ords)

    def _reduce_norm(self, ord, acc, parts, mloc):
        """Collective: one norm from this rank's partial results (:meth:`_norms`)."""
        grid, xp, be = self.grid, self.xp, self.backend
        if ord == "fro":   # acc: (scale, ssq) with ||local||_F = scale sqrt(ssq)
            scale, ssq = (float(be.to_host(v)) for v in acc) if acc is not None else (0.0, 0.0)
            top = grid.allreduce(scale, "max")     # NaN when A holds one (on any rank)
            if not 0 < top < np.inf:       # zero, an infinite entry, or NaN
                return float(top)
            return float(top * np.sqrt(grid.allreduce(ssq * (scale / top) ** 2, "sum")))
        if ord == "max":
            return grid.allreduce(float(be.to_host(acc)) if acc is not None else 0.0, "max")
        from mpi4py import MPI
        if ord == 1:
            sums = xp.concatenate(parts) if parts else xp.zeros(0)
            sub = grid.col_comm
        else:
            sums = acc if acc is not None else xp.zeros(mloc)
            sub = grid.row_comm
        sums = np.ascontiguousarray(np.asarray(be.to_host(sums)).astype(np.float64))
        sub.Allreduce(MPI.IN_PLACE, sums, op=MPI.SUM)
        return grid.allreduce(float(sums.max()) if sums.size else 0.0, "max")
