"""distla.io (matrix files), distla.progress and the helpers of distla.bench.common.

Serial tests check headers, parsers, formatting; the mpi-marked ones read and write files on
every grid shape of the communicator (both rank orders, nonzero source process, blocks that
do not divide n) and compare with NumPy.
"""
from __future__ import annotations

import io as _io
import os

import numpy as np
import pytest

from distla import io
from distla.bench import common
from distla.progress import Progress, Timings, format_rate, format_seconds


# ---------------------------------------------------------------------------------------
# serial: headers and formats
# ---------------------------------------------------------------------------------------
def test_inspect_npy(tmp_path):
    a = np.arange(12.0).reshape(3, 4)
    np.save(tmp_path / "a.npy", a)
    info = io.inspect(tmp_path / "a.npy")
    assert (info.format, info.shape, info.dtype, info.ndim) == ("npy", (3, 4), a.dtype, 2)
    np.save(tmp_path / "v.npy", np.arange(5, dtype=np.int32))
    info = io.inspect(tmp_path / "v.npy")
    assert info.shape == (5, 1) and info.ndim == 1
    np.save(tmp_path / "f.npy", np.asfortranarray(a))
    assert io.inspect(tmp_path / "f.npy").fortran_order


@pytest.mark.parametrize("content, needle", [
    (b"\x93NUMPY\x01\x00", "not a valid .npy"),
    (b"hello world", "unrecognized"),
])
def test_inspect_rejects_garbage(tmp_path, content, needle):
    f = tmp_path / "x.bin"
    f.write_bytes(content)
    with pytest.raises(io.MatrixFileError, match=needle):
        io.inspect(f if needle == "unrecognized" else f.rename(tmp_path / "x.npy"))


def test_inspect_rejects_truncated_and_bad_types(tmp_path):
    np.save(tmp_path / "t.npy", np.ones((50, 50)))
    data = (tmp_path / "t.npy").read_bytes()
    (tmp_path / "t.npy").write_bytes(data[:-100])
    with pytest.raises(io.MatrixFileError, match="truncated"):
        io.inspect(tmp_path / "t.npy")
    np.save(tmp_path / "s.npy", np.array([["a", "b"]]))
    with pytest.raises(io.MatrixFileError, match="numeric"):
        io.inspect(tmp_path / "s.npy")
    np.save(tmp_path / "c.npy", np.ones((2, 2, 2)))
    with pytest.raises(io.MatrixFileError, match="3-D"):
        io.inspect(tmp_path / "c.npy")
    with pytest.raises(FileNotFoundError, match="no such file"):
        io.inspect(tmp_path / "missing.npy")
    with pytest.raises(io.MatrixFileError, match="directory"):
        io.inspect(tmp_path)


def test_read_mtx_without_rows(tmp_path):
    """A Matrix Market file with no rows reads as an empty matrix (SciPy's mmread of one
    killed the process with SIGFPE, so distla does not call it for empty files)."""
    import scipy.io
    for shape in ((0, 3), (4, 0)):
        f = tmp_path / f"empty{shape[0]}{shape[1]}.mtx"
        with open(f, "w") as out:
            out.write(f"%%MatrixMarket matrix array real general\n{shape[0]} {shape[1]}\n")
        assert scipy.io.mminfo(str(f))[:2] == shape
        a = io._read_mtx(str(f))
        assert a.shape == shape and a.dtype == np.float64


@pytest.mark.parametrize("symmetry", ["general", "symmetric", "skew-symmetric", "hermitian"])
def test_read_mtx_refuses_a_short_or_long_body(tmp_path, symmetry):
    """SciPy fills a short symmetric, skew-symmetric or Hermitian array body with zeros (a
    wrong matrix, silently): every array and coordinate file must have exactly the data lines
    its header promises; whole files read exactly."""
    import scipy.io
    import scipy.sparse as sp
    rng = np.random.default_rng(1)
    a = rng.standard_normal((9, 9)) + (1j * rng.standard_normal((9, 9))
                                       if symmetry == "hermitian" else 0)
    a = {"general": a, "symmetric": a + a.T, "skew-symmetric": a - a.T,
         "hermitian": a + a.conj().T}[symmetry]
    whole = tmp_path / "whole.mtx"
    scipy.io.mmwrite(whole, a, symmetry=symmetry)
    np.testing.assert_array_equal(io._read_mtx(str(whole)), a)
    lines = whole.read_text().splitlines()
    for name, body in (("short", lines[:-2]), ("long", lines + [lines[-1]])):
        f = tmp_path / f"{name}.mtx"
        f.write_text("\n".join(body) + "\n")
        with pytest.raises(io.MatrixFileError, match="truncated" if name == "short" else
                           "longer than its header"):
            io._read_mtx(str(f))
    coo = tmp_path / "coo.mtx"
    scipy.io.mmwrite(coo, sp.random(12, 7, density=0.3, random_state=2))
    short = tmp_path / "coo_short.mtx"
    short.write_text("\n".join(coo.read_text().splitlines()[:-1]) + "\n")
    with pytest.raises(io.MatrixFileError):
        io._read_mtx(str(short))


@pytest.mark.parametrize("symmetry", ["symmetric", "skew-symmetric", "hermitian"])
def test_read_mtx_refuses_what_its_symmetry_cannot_hold(tmp_path, symmetry):
    """SciPy mirrors every entry of a symmetric, skew-symmetric or Hermitian file and keeps
    the rest, silently: a coordinate file listing both triangles read with its off-diagonal
    doubled, a skew-symmetric one kept a nonzero diagonal, a Hermitian one an imaginary
    diagonal. Those are refused, naming the entry; a well-formed file (coordinate, one
    triangle) reads exactly."""
    import scipy.io
    import scipy.sparse as sp
    field = "complex" if symmetry == "hermitian" else "real"
    val = (lambda v: f"{v} 0") if field == "complex" else str
    head = f"%%MatrixMarket matrix coordinate {field} {symmetry}\n3 3 "
    diag = [] if symmetry == "skew-symmetric" else [f"1 1 {val(4)}", f"3 3 {val(4)}"]
    good = diag + [f"2 1 {val(1)}", f"3 2 {val(2)}"]
    f = tmp_path / "good.mtx"
    f.write_text(head + f"{len(good)}\n" + "\n".join(good) + "\n")
    a = io._read_mtx(str(f))
    want = scipy.io.mmread(str(f))
    np.testing.assert_array_equal(a, want.toarray() if sp.issparse(want) else want)
    assert a[1, 0] == 1 and abs(a[0, 1]) == 1
    both = good + [f"1 2 {val(1)}"]
    f.write_text(head + f"{len(both)}\n" + "\n".join(both) + "\n")
    with pytest.raises(io.MatrixFileError, match=r"both \(2, 1\) and \(1, 2\)"):
        io._read_mtx(str(f))
    bad = good + (["2 2 9"] if symmetry == "skew-symmetric" else
                  ["2 2 1 5"] if symmetry == "hermitian" else [])
    if len(bad) > len(good):
        f.write_text(head + f"{len(bad)}\n" + "\n".join(bad) + "\n")
        with pytest.raises(io.MatrixFileError, match=r"diagonal .* at \(2, 2\)"):
            io._read_mtx(str(f))


def test_read_mtx_names_a_comment_among_the_data_and_an_hdf5_file_without_suffix(tmp_path):
    f = tmp_path / "c.mtx"
    f.write_text("%%MatrixMarket matrix coordinate real general\n% fine here\n3 3 2\n"
                 "1 1 1\n% not here\n2 2 2\n")
    with pytest.raises(io.MatrixFileError, match="line 5: a comment among the data"):
        io._read_mtx(str(f))
    h5py = pytest.importorskip("h5py")
    with h5py.File(tmp_path / "m.dat", "w") as h:
        h["A"] = np.eye(2)
    with pytest.raises(io.MatrixFileError, match="it is an HDF5 file"):
        io.inspect(str(tmp_path / "m.dat"))


def test_inspect_mtx(tmp_path):
    import scipy.io
    a = np.arange(6.0).reshape(2, 3)
    scipy.io.mmwrite(tmp_path / "a.mtx", a)
    info = io.inspect(tmp_path / "a.mtx")
    assert (info.format, info.shape) == ("mtx", (2, 3))
    f = tmp_path / "sym.mtx"  # symmetric array format: lower triangle, column by column
    f.write_text("%%MatrixMarket matrix array real symmetric\n% comment\n2 2\n4\n1\n3\n")
    assert io.inspect(f).symmetry == "symmetric"
    np.testing.assert_array_equal(io._read_mtx(str(f)), [[4, 1], [1, 3]])
    g = tmp_path / "bad.mtx"
    g.write_text("%%MatrixMarket matrix array real general\n2 2\n1\n2\n")
    with pytest.raises(io.MatrixFileError):
        io._read_mtx(str(g))


def test_check_writable(tmp_path):
    io.check_writable(tmp_path / "x.npy")
    with pytest.raises(FileNotFoundError):
        io.check_writable(tmp_path / "nodir" / "x.npy")


# ---------------------------------------------------------------------------------------
# serial: bench.common helpers and progress
# ---------------------------------------------------------------------------------------
def test_parse_grid_and_sizes():
    assert common.parse_grid("2x3") == (2, 3)
    assert common.parse_grid(" 4X1 ") == (4, 1)
    assert common.parse_grid(None) is None and common.parse_grid("auto") is None
    for bad in ("2", "0x2", "axb", "2x"):
        with pytest.raises(ValueError):
            common.parse_grid(bad)
    assert common.parse_sizes(["1000", "2k,4096"]) == [1000, 2048, 4096]
    with pytest.raises(ValueError):
        common.parse_sizes(["-3"])


def test_flops_and_table():
    assert common.flops("gemm", 10) == 2000
    assert common.flops("cholesky", 3) == pytest.approx(9 + 4.5)
    assert common.flops("solve", 10, 2) == 400
    rec = common.record("x", "distla", n=100, seconds=2.0, nflops=4e12, grid="2x2")
    assert rec["tflops"] == 2.0 and list(rec)[:3] == ["bench", "impl", "n"]
    t = common.format_table([rec, {"bench": "x", "impl": "numpy", "n": 100, "tflops": 1e-5}])
    lines = t.splitlines()
    assert len(lines) == 4 and "grid" in lines[0] and "1.000e-05" in lines[3]
    assert len({len(ln) for ln in lines}) == 1  # aligned


def test_default_nb():
    assert common.default_nb(1000, "cpu") == 128
    assert common.default_nb(2048, "cpu") == 128
    assert common.default_nb(8192, "cpu") == 256        # large local matrices: nb 256

    class Grid:
        nprow, npcol = 1, 2
    assert common.default_nb(8192, "cpu", Grid) == 256  # local 4096
    assert common.default_nb(4096, "cpu", Grid) == 128  # local 2048
    assert common.default_nb(1000, "gpu") == 512
    assert common.default_nb(32768, "gpu") == 1024      # large local matrices: nb 1024
    assert common.default_nb(65536, "gpu") == 2048      # larger: 2048
    assert common.default_nb(120000, "gpu") == 1024     # (room for LU's workspace)
    assert common.default_nb(16384, "gpu") == 512
    assert common.default_nb(5, "cpu") == 5


def test_formatting():
    assert format_seconds(9.44) == "9.4s" and format_seconds(75) == "1:15"
    assert format_seconds(3725) == "1:02:05"
    assert format_rate(1.5e12) == "1.5 TFLOP/s" and format_rate(2e9) == "2 GFLOP/s"


def test_progress_tty_and_plain():
    s = _io.StringIO()
    p = Progress(1e9, "chol", stream=s, tty=True, interval=0)
    p.start()
    assert "running" in p.line()
    p.update(5e8)
    line = p.line()
    assert "50.0%" in line and "[" in line and "ETA" in line and line.startswith("chol: ")
    p.close()
    plain = Progress(100, stream=s, tty=False)
    plain.start()
    plain.advance(25)
    assert "25.0%" in plain.line() and "#" not in plain.line()
    plain.close()


def test_progress_thread_prints_plain_lines():
    import distla.progress as pr
    s = _io.StringIO()
    with Progress(100, "lu", stream=s, tty=False, interval=0.02):
        pr.update(40)
        import time
        time.sleep(0.15)
    pr.update(1)  # no active progress: a no-op
    lines = s.getvalue().splitlines()
    assert lines and all(ln.startswith("lu: ") for ln in lines)
    assert any("40.0%" in ln for ln in lines)


def test_progress_disabled_prints_nothing():
    s = _io.StringIO()
    with Progress(100, stream=s, tty=True, interval=0.01, enabled=False) as p:
        p.update(50)
        import time
        time.sleep(0.05)
    assert s.getvalue() == ""


def test_timings_nested_phases_are_traced():
    """Timings keeps the job's phases (nested ones as outer/inner) and an active Tracer sees
    each of them as a phase too."""
    from distla.trace import Tracer
    t = Timings()
    with Tracer() as tr:
        with t.phase("solve"):
            with t.phase("factor"):
                pass
            with t.phase("factor"):
                pass
        with t.phase("write"):
            pass
    assert list(t.seconds) == ["solve/factor", "solve", "write"]
    table = t.table()
    assert "  factor" in table and table.splitlines()[-1].startswith("total")
    assert tr.counts()["factor"] == 2 and tr.counts()["solve"] == 1
    assert tr.host_seconds()["solve"] >= tr.host_seconds()["factor"]


# ---------------------------------------------------------------------------------------
# mpi: reading and writing on every grid
# ---------------------------------------------------------------------------------------
@pytest.mark.mpi
def test_read_file_dtypes_as_from_global(comm, mpi_tmp_path):
    """A file's entries compute in the dtype from_global gives the same array (float16 ->
    float32, integers -> float64); a long-double file needs dtype= (its digits would be lost
    silently), on every rank alike."""
    from distla import DistMatrix, ProcessGrid
    g = ProcessGrid(comm=comm)
    a = np.arange(30.0).reshape(6, 5) / 7
    cases = {"h": a.astype(np.float16), "i": (a * 7).astype(np.int32),
             "g": a.astype(np.longdouble)}
    if comm.rank == 0:
        for k, v in cases.items():
            np.save(mpi_tmp_path / f"{k}.npy", v)
    comm.Barrier()
    for k in ("h", "i"):
        A = io.read_matrix(mpi_tmp_path / f"{k}.npy", g, (2, 2))
        ref = DistMatrix.from_global(g, cases[k], block=(2, 2))
        assert A.dtype == ref.dtype == {"h": np.float32, "i": np.float64}[k]
        np.testing.assert_array_equal(A.to_global(None), ref.to_global(None))
    if np.dtype(np.longdouble).itemsize > 8:          # (platforms with a real long double)
        with pytest.raises(ValueError, match="choose the precision"):
            io.read_matrix(mpi_tmp_path / "g.npy", g, (2, 2))
        A = io.read_matrix(mpi_tmp_path / "g.npy", g, (2, 2), dtype=np.float64)
        np.testing.assert_allclose(A.to_global(None), a, rtol=1e-15)


@pytest.mark.mpi
@pytest.mark.parametrize("fortran", [False, True])
def test_read_npy_every_grid(comm, mpi_tmp_path, fortran):
    from distla import ProcessGrid
    from distla.testing import grid_shapes
    rng = np.random.default_rng(7)
    a = rng.standard_normal((37, 29))
    path = mpi_tmp_path / f"a{int(fortran)}.npy"
    if comm.rank == 0:
        np.save(path, np.asfortranarray(a) if fortran else a)
    comm.Barrier()
    for p, q in grid_shapes(comm.size):
        for order in ("row", "col"):
            grid = ProcessGrid(p, q, comm=comm, order=order)
            for block, src in (((5, 4), (0, 0)), ((8, 8), (p - 1, q - 1)), ((40, 3), (0, 0))):
                for chunk in (3, None):      # memory map; MPI-IO collective read
                    A = io.read_matrix(path, grid, block, src=src, chunk_rows=chunk)
                    assert A.shape == (37, 29) and A.block == block and A.src == src
                    np.testing.assert_array_equal(
                        A.local, a[np.ix_(A.row_indices(), A.col_indices())])


@pytest.mark.mpi
def test_read_vector_int_and_mtx(comm, mpi_tmp_path):
    import scipy.io

    from distla import ProcessGrid
    v = np.arange(23, dtype=np.int16)
    m = np.arange(30.0).reshape(6, 5)
    if comm.rank == 0:
        np.save(mpi_tmp_path / "v.npy", v)
        scipy.io.mmwrite(mpi_tmp_path / "m.mtx", m)
    comm.Barrier()
    grid = ProcessGrid(comm=comm)
    V = io.read_matrix(mpi_tmp_path / "v.npy", grid, (4, 4))
    assert V.shape == (23, 1) and V.dtype == np.float64
    np.testing.assert_array_equal(V.to_global(root=None)[:, 0], v)
    M = io.read_matrix(mpi_tmp_path / "m.mtx", grid, (2, 2), dtype=np.float32)
    assert M.dtype == np.float32
    np.testing.assert_array_equal(M.to_global(root=None), m)


@pytest.mark.mpi
@pytest.mark.parametrize("name", ["c.npy", "c.mtx"])
def test_complex_file_is_never_read_as_real(comm, mpi_tmp_path, name):
    """A complex file asked for as a real dtype raises TypeError on every rank before
    reading (its imaginary parts would be dropped); as a complex dtype it reads whole."""
    import scipy.io

    from distla import ProcessGrid
    a = np.arange(12.0).reshape(3, 4) + 1j * np.arange(12.0, 0, -1).reshape(3, 4)
    path = mpi_tmp_path / name
    if comm.rank == 0:
        np.save(path, a) if name.endswith(".npy") else scipy.io.mmwrite(path, a)
    comm.Barrier()
    grid = ProcessGrid(comm=comm)
    for real in (np.float64, np.float32):
        with pytest.raises(TypeError, match="imaginary"):
            io.read_matrix(path, grid, (2, 2), dtype=real)
    C = io.read_matrix(path, grid, (2, 2), dtype=np.complex64)
    assert C.dtype == np.complex64
    np.testing.assert_array_equal(C.to_global(root=None), a.astype(np.complex64))


@pytest.mark.mpi
@pytest.mark.parametrize("name", ["big.npy", "big.mtx", "big.h5:/a", "bigc.npy"])
def test_narrowing_read_that_overflows_raises(comm, mpi_tmp_path, name):
    """A float64 file with a value beyond float32's range, read as float32 (complex128 as
    complex64), raises ValueError on every rank naming the range, whichever rank holds
    the value (it became inf silently); in range it reads as the rounded values."""
    import scipy.io

    from distla import ProcessGrid
    if name.endswith(".h5:/a"):
        pytest.importorskip("h5py")
    a = np.arange(30.0).reshape(5, 6) / 7
    a[3, 4] = 1e300
    if name.startswith("bigc"):
        a = a + 0.5j
    path, file = str(mpi_tmp_path / name), mpi_tmp_path / name.split(":")[0]
    if comm.rank == 0:
        if name.endswith(".npy"):
            np.save(file, a)
        elif name.endswith(".mtx"):
            scipy.io.mmwrite(file, a)
        else:
            import h5py
            with h5py.File(file, "w") as f:
                f["a"] = a
    comm.Barrier()
    grid = ProcessGrid(comm=comm)
    small = np.complex64 if a.dtype.kind == "c" else np.float32
    with pytest.raises(ValueError, match="infinite as|beyond float32's range"):
        io.read_matrix(path, grid, (2, 2), dtype=small, src=(grid.nprow - 1, 0))
    A = io.read_matrix(path, grid, (2, 2))
    np.testing.assert_array_equal(A.to_global(None), a)


@pytest.mark.mpi
def test_read_errors_on_every_rank(comm, mpi_tmp_path):
    from distla import ProcessGrid
    grid = ProcessGrid(comm=comm)
    with pytest.raises(FileNotFoundError):
        io.read_matrix(mpi_tmp_path / "missing.npy", grid, (4, 4))
    if comm.rank == 0:
        (mpi_tmp_path / "junk.npy").write_bytes(b"\x93NUMPY\x01\x00")
    comm.Barrier()
    with pytest.raises(io.MatrixFileError, match="not a valid"):
        io.read_matrix(mpi_tmp_path / "junk.npy", grid, (4, 4))


@pytest.mark.mpi
@pytest.mark.parametrize("where", ["slab", "staging"])
@pytest.mark.parametrize("collective", ["0", "1"])
def test_read_failing_on_one_rank_raises_everywhere(comm, mpi_tmp_path, monkeypatch,
                                                    collective, where):
    """A read that fails on one rank part-way (an MPI error in its second slab) or before
    its first slab (its staging buffers cannot be made) raises on every rank; no rank is
    left waiting, with independent or collective reads (the failed rank keeps joining the
    collective ones)."""
    import contextlib

    from mpi4py import MPI

    from distla import DistMatrix, ProcessGrid
    monkeypatch.setenv("DISTLA_IO_COLLECTIVE_READ", collective)
    a = np.arange(40 * 30, dtype=np.float64).reshape(40, 30)
    path = mpi_tmp_path / f"fail{collective}.npy"
    if comm.rank == 0:
        np.save(path, np.asfortranarray(a))
    comm.Barrier()
    A = DistMatrix.zeros(ProcessGrid(comm=comm), a.shape, (4, 3))
    be, real = A.backend, A.backend.staging

    @contextlib.contextmanager
    def flaky():
        if where == "staging" and comm.rank == comm.size - 1:
            raise MemoryError("no pinned memory")
        with real() as put:
            calls = [0]

            def failing_put(*args):
                calls[0] += 1
                if comm.rank == comm.size - 1 and calls[0] == 2:
                    raise MPI.Exception(MPI.ERR_IO)
                put(*args)
            yield failing_put
    monkeypatch.setattr(be, "staging", flaky)
    with pytest.raises(io.MatrixFileError if where == "slab" else MemoryError,
                       match="cannot read" if where == "slab" else "pinned"):
        io._read_npy_mpiio(io.inspect(path), A, slab_bytes=1)
    monkeypatch.undo()
    io._read_npy_mpiio(io.inspect(path), A, slab_bytes=1)     # the file itself is fine
    np.testing.assert_array_equal(A.local, a[np.ix_(A.row_indices(), A.col_indices())])


@pytest.mark.mpi
def test_write_roundtrip_every_grid(comm, mpi_tmp_path):
    from distla import DistMatrix, ProcessGrid
    from distla.testing import grid_shapes
    for p, q in grid_shapes(comm.size):
        for order in ("row", "col"):
            grid = ProcessGrid(p, q, comm=comm, order=order)
            A = DistMatrix.random(grid, (19, 13), (4, 3), seed=5, src=(p - 1, 0))
            ref = A.to_global(root=None)
            f = mpi_tmp_path / f"w{p}{q}{order}.npy"
            io.write_npy(f, A)
            got = np.load(f)
            np.testing.assert_array_equal(got, ref)
            x = DistMatrix.random(grid, (11, 1), (3, 3), seed=6)
            io.write_npy(mpi_tmp_path / f"x{p}{q}{order}.npy", x, vector=True)
            io.write_matrix(mpi_tmp_path / f"y{p}{q}{order}.mtx", x)
            comm.Barrier()
            xv = np.load(mpi_tmp_path / f"x{p}{q}{order}.npy")
            assert xv.shape == (11,)
            np.testing.assert_array_equal(xv, x.to_global(root=None)[:, 0])
            import scipy.io
            np.testing.assert_allclose(
                np.asarray(scipy.io.mmread(mpi_tmp_path / f"y{p}{q}{order}.mtx")),
                x.to_global(root=None), rtol=1e-15)
            comm.Barrier()


@pytest.mark.mpi
@pytest.mark.parametrize("mode", ["thread", "sync"])
@pytest.mark.parametrize("slab_bytes", [1, 300, 1 << 26])
def test_write_in_regrouped_slabs_every_grid(comm, mpi_tmp_path, monkeypatch, slab_bytes,
                                             mode):
    """Writes go in slabs of block columns (io.WRITE_SLAB_BYTES per rank: one block column,
    a few, all at once), regrouped onto a 1 x P Q grid where there are several process rows,
    each slab written while the next is regrouped (DISTLA_IO_WRITE=thread) or not (sync):
    the file is exact for sizes the blocks do not divide, any source process, both orders,
    complex data and a 1-column matrix."""
    from distla import DistMatrix, ProcessGrid
    from distla.testing import grid_shapes
    monkeypatch.setattr(io, "WRITE_SLAB_BYTES", slab_bytes)
    monkeypatch.setenv("DISTLA_IO_WRITE", mode)
    for p, q in grid_shapes(comm.size):
        for order in ("row", "col"):
            grid = ProcessGrid(p, q, comm=comm, order=order)
            for shape, block, dt in (((29, 23), (4, 3), np.float64),
                                     ((17, 9), (5, 2), np.complex128), ((13, 1), (3, 3),
                                                                       np.float32)):
                A = DistMatrix.random(grid, shape, block, seed=7, src=(p - 1, q - 1))
                A = A.astype(dt)
                if np.dtype(dt).kind == "c":
                    A.local[...] = A.local - 2j * A.local[::-1]
                ref = A.to_global(root=None)
                f = mpi_tmp_path / f"s{p}{q}{order}{np.dtype(dt).char}.npy"
                io.write_npy(f, A)
                np.testing.assert_array_equal(np.load(f), ref)
                comm.Barrier()


@pytest.mark.mpi
def test_problems_grid_independent(comm):
    from distla import ProcessGrid
    from distla.testing import grid_shapes
    ref = None
    for p, q in grid_shapes(comm.size):
        grid = ProcessGrid(p, q, comm=comm)
        mats = [common.make_problem(k, grid, 21, 4, seed=2).to_global(root=None)
                for k in common.PROBLEM_KINDS]
        if ref is None:
            ref = mats
            spd, gen, cov = mats
            np.testing.assert_array_equal(spd, spd.T)
            assert np.linalg.eigvalsh(spd).min() > 0
            np.testing.assert_allclose(cov, cov.T, rtol=1e-15)
            assert np.linalg.eigvalsh(cov).min() > 0
        for a, b in zip(ref, mats):
            np.testing.assert_array_equal(a, b)


@pytest.mark.mpi
def test_timed_and_reference_rank0(comm):
    t = common.timed(lambda: sum(range(1000)), "cpu", comm, reps=2)
    assert t == comm.bcast(t) and t >= 0
    assert common.reference_rank0(lambda: comm.rank * 10 + 1, comm) == 1

    def boom():
        raise ValueError("reference failed")
    with pytest.raises(ValueError, match="reference failed"):
        common.reference_rank0(boom, comm)


def test_plot_records(tmp_path):
    pytest.importorskip("matplotlib")
    from distla.bench import load_records, plot_records
    f = tmp_path / "r.jsonl"
    recs = [common.record("matmul", "distla", n=n, seconds=1.0, nflops=n ** 3, ranks=p)
            for n in (100, 200) for p in (1, 2, 4)]
    recs += [common.record("matmul", "numpy", n=n, seconds=1.0, nflops=n ** 3, threads=4)
             for n in (100, 200)]
    import json
    f.write_text("".join(json.dumps(r) + "\n" for r in recs) + "not json\n\n")
    assert len(load_records(f, "matmul")) == 8 and load_records(f, "lu") == []
    plot_records(load_records(f), str(tmp_path / "p.png"), "matmul")
    assert (tmp_path / "p.png").stat().st_size > 1000


@pytest.mark.mpi
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
def test_mpiio_roundtrip_dtypes_layouts(comm, mpi_tmp_path, dtype):
    """write_npy (MPI-IO, Fortran-ordered file) then read_matrix into another layout."""
    from distla import DistMatrix, ProcessGrid
    from distla.testing import grid_shapes
    for i, (p, q) in enumerate(grid_shapes(comm.size)):
        grid = ProcessGrid(p, q, comm=comm, order=("row", "col")[i % 2])
        A = DistMatrix.random(grid, (23, 17), (5, 4), seed=9, src=(p - 1, q - 1)).astype(dtype)
        if np.dtype(dtype).kind == "c":
            A.local[...] = A.local + 1j * A.local[::-1]
        ref = A.to_global(root=None)
        f = mpi_tmp_path / f"r{p}{q}{np.dtype(dtype).char}.npy"
        io.write_npy(f, A)
        got = np.load(f)
        assert got.dtype == dtype and got.flags.f_contiguous
        np.testing.assert_array_equal(got, ref)
        for block, src in (((3, 3), (0, 0)), ((7, 2), (p - 1, 0))):
            B = io.read_matrix(f, grid, block, src=src)
            assert B.dtype == dtype
            np.testing.assert_array_equal(B.to_global(root=None), ref)
        comm.Barrier()


@pytest.mark.mpi
def test_failed_write_leaves_no_file(comm, mpi_tmp_path):
    from distla import DistMatrix, ProcessGrid
    grid = ProcessGrid(comm=comm)
    A = DistMatrix.random(grid, (9, 9), (4, 4), seed=1)
    target = mpi_tmp_path / "never.npy"

    def fails_on_last_rank(tmp):
        with open(tmp, "wb") if comm.rank == 0 else open(os.devnull, "wb") as f:
            f.write(b"partial")
        comm.Barrier()
        if comm.rank == comm.size - 1:
            raise OSError("disk full (simulated)")
    with pytest.raises(OSError, match="disk full"):
        io.atomic_output(str(target), comm, fails_on_last_rank)
    comm.Barrier()
    assert not target.exists()
    assert not [p for p in os.listdir(mpi_tmp_path) if p.startswith(".never")]
    comm.Barrier()   # (the write below probes the directory: not while a rank still lists it)
    io.write_npy(target, A)
    np.testing.assert_array_equal(np.load(target), A.to_global(root=None))


@pytest.mark.mpi
def test_failed_write_names_the_target_not_the_temporary(comm, mpi_tmp_path):
    """Errors raised while writing the temporary name the file the user asked for."""
    import errno
    target = str(mpi_tmp_path / "named.npy")

    def enospc(tmp):
        raise OSError(errno.ENOSPC, "No space left on device", tmp)

    def mentions(tmp):
        raise ValueError(f"{tmp}: cannot write (simulated)")
    for write in (enospc, mentions):
        with pytest.raises((OSError, ValueError)) as ei:
            io.atomic_output(target, comm, write)
        assert target in str(ei.value) and ".partial" not in str(ei.value)
    assert not os.path.exists(target)


@pytest.mark.mpi
@pytest.mark.parametrize("mode", ["thread", "sync"])
def test_write_failing_on_one_rank_mid_file(comm, mpi_tmp_path, monkeypatch, mode):
    """A write that fails on the last rank in its second slab stops every rank at that slab
    (no hang), raises the same OSError everywhere and leaves no file; the next write works."""
    from distla import DistMatrix, ProcessGrid
    from distla.testing import grid_shapes
    monkeypatch.setenv("DISTLA_IO_WRITE", mode)
    monkeypatch.setattr(io, "WRITE_SLAB_BYTES", 1)       # one block column per rank and slab
    real = io._SlabWriter._write
    for p, q in grid_shapes(comm.size):
        grid = ProcessGrid(p, q, comm=comm)
        A = DistMatrix.random(grid, (23, 40), (3, 4), seed=2)
        calls = []

        def write(self, chunks):
            calls.append(len(chunks))
            if comm.rank == comm.size - 1 and len(calls) == 2:
                raise OSError("disk full (simulated)")
            real(self, chunks)
        monkeypatch.setattr(io._SlabWriter, "_write", write)
        target = mpi_tmp_path / f"fail{p}{q}{mode}.npy"
        with pytest.raises(OSError, match="disk full"):
            io.write_npy(target, A)
        comm.Barrier()
        assert not target.exists()
        assert not [f for f in os.listdir(mpi_tmp_path) if f.startswith(f".fail{p}{q}")]
        comm.Barrier()   # (the write below probes the directory: not while a rank lists it)
        monkeypatch.setattr(io._SlabWriter, "_write", real)
        io.write_npy(target, A)
        np.testing.assert_array_equal(np.load(target), A.to_global(root=None))
        comm.Barrier()


def test_write_mode_must_be_known(monkeypatch):
    monkeypatch.setenv("DISTLA_IO_WRITE", "async")
    with pytest.raises(ValueError, match="DISTLA_IO_WRITE='async'"):
        io._write_mode()


def test_interrupted_write_leaves_no_file(tmp_path):
    """SIGTERM during a write: the temporary goes away, nothing under the final name."""
    import signal
    import subprocess
    import sys
    import time
    script = tmp_path / "slow.py"
    script.write_text(
        "import sys, time\nfrom mpi4py import MPI\nfrom distla import io\n"
        "def write(tmp):\n    open(tmp, 'wb').write(b'x' * 100)\n"
        "    print('writing', flush=True)\n    time.sleep(60)\n"
        "io.atomic_output(sys.argv[1], MPI.COMM_WORLD, write)\n")
    out = tmp_path / "out.npy"
    p = subprocess.Popen([sys.executable, str(script), str(out)], stdout=subprocess.PIPE,
                         text=True)
    assert p.stdout.readline().strip() == "writing"
    assert [f for f in os.listdir(tmp_path) if f.endswith(".partial")]
    p.send_signal(signal.SIGTERM)
    p.wait(timeout=60)
    assert p.returncode != 0
    time.sleep(0.1)
    assert not out.exists()
    assert not [f for f in os.listdir(tmp_path) if f.endswith(".partial")]


def test_interrupted_write_blocked_in_mpi_ends(tmp_path):
    """SIGTERM while the writing rank is blocked inside an MPI call (a receive that never
    completes: where Python runs no signal handler, the process ran on until SIGKILL): the
    watch thread removes the temporary and ends the process (128 + SIGTERM) within its
    grace period; nothing under the final name. SIGINT likewise. (Under load the Python
    handler sometimes runs first, as the CI machine showed: the same cleanup, then the
    signal's own exit status.)"""
    import signal
    import subprocess
    import sys
    import time
    script = tmp_path / "stuck.py"
    script.write_text(
        "import sys\nimport numpy as np\nfrom mpi4py import MPI\nfrom distla import io\n"
        "def write(tmp):\n    open(tmp, 'wb').write(b'x' * 100)\n"
        "    print('writing', flush=True)\n"
        "    MPI.COMM_SELF.Recv(np.empty(1), source=0, tag=7)   # never sent\n"
        "io.atomic_output(sys.argv[1], MPI.COMM_WORLD, write)\n")
    for sig in (signal.SIGTERM, signal.SIGINT):
        out = tmp_path / f"out{int(sig)}.npy"
        p = subprocess.Popen([sys.executable, str(script), str(out)], stdout=subprocess.PIPE,
                             text=True)
        try:
            assert p.stdout.readline().strip() == "writing"
            assert [f for f in os.listdir(tmp_path) if f.endswith(".partial")]
            t = time.monotonic()
            p.send_signal(sig)
            p.wait(timeout=30)
        finally:
            if p.poll() is None:
                p.kill()
        # the watch thread's exit (128 + sig), or, where the blocked call let the Python
        # handler run first, its re-raise of the signal after the cleanup (-sig): both end
        # the process with the temporary removed
        assert p.returncode in (128 + int(sig), -int(sig)), p.returncode
        assert time.monotonic() - t < 20
        assert not out.exists()
        assert not [f for f in os.listdir(tmp_path) if f.endswith(".partial")]


def test_npy_size_must_match_header(tmp_path):
    a = np.arange(12.0).reshape(3, 4)
    np.save(tmp_path / "a.npy", a)
    with open(tmp_path / "a.npy", "ab") as f:
        f.write(b"\0" * 8)
    with pytest.raises(io.MatrixFileError, match=r"oversized .npy file \(\d+ bytes; its "
                       r"header announces \d+\)"):
        io.inspect(tmp_path / "a.npy")


@pytest.mark.mpi
@pytest.mark.parametrize("kind", ["spd", "general", "covariance"])
def test_generated_slabs_equal_the_problem(comm, mpi_tmp_path, kind):
    """write_npy_generated (a few block columns at a time) writes make_problem's matrix."""
    from distla import ProcessGrid
    from distla.testing import grid_shapes
    n = 45
    ref = None
    for p, q in grid_shapes(comm.size):
        grid = ProcessGrid(p, q, comm=comm)
        if ref is None:
            ref = common.make_problem(kind, grid, n, 4, seed=3).to_global(None)
        f = mpi_tmp_path / f"gen{kind}{p}{q}.npy"
        seen = []
        b = io.write_npy_generated(f, grid, (n, n), (4, 4),
                                   common.problem_entries(kind, n, seed=3),
                                   slab_bytes=1, progress=seen.append, row_sums=True)
        assert seen[-1] == n and len(seen) > 1          # several slabs
        np.testing.assert_allclose(np.load(f), ref, rtol=1e-15, atol=1e-15)
        np.testing.assert_allclose(b.to_global(None)[:, 0], ref.sum(axis=1), rtol=1e-12)
        comm.Barrier()


@pytest.mark.mpi
def test_generated_float32_rhs_is_the_same_on_every_layout(comm, mpi_tmp_path):
    """b = A 1 of a float32 matrix was summed in float32 by each rank's part of the rows, so
    its last bits changed with the grid and block size (3.7e-4 apart at n = 301); it is
    accumulated in float64 and rounded once: the same b for every layout here."""
    from distla import ProcessGrid
    from distla.testing import grid_shapes
    n = 61
    fn = common.problem_entries("general", n, seed=4)
    a = None
    for p, q in grid_shapes(comm.size):
        for nb in (4, 7):
            grid = ProcessGrid(p, q, comm=comm)
            f = mpi_tmp_path / f"gen32_{p}{q}_{nb}.npy"
            b = io.write_npy_generated(f, grid, (n, n), (nb, nb), fn, dtype=np.float32,
                                       slab_bytes=1, row_sums=True).to_global(None)[:, 0]
            a = np.load(f) if a is None else a
            assert b.dtype == np.float32
            np.testing.assert_array_equal(b, a.astype(np.float64).sum(axis=1).astype(
                np.float32))
            comm.Barrier()


def test_interrupt_is_one_line_and_exit_130(monkeypatch, capsys):
    """Ctrl-C (or mpiexec forwarding SIGINT) during start-up printed a traceback through
    mpi4py's import; the command says 'interrupted' and exits 130."""
    from distla import cli

    def interrupted(argv):
        raise KeyboardInterrupt
    monkeypatch.setattr(cli, "_main", interrupted)
    with pytest.raises(SystemExit) as e:
        cli.main(["info"])
    assert e.value.code == 130
    assert capsys.readouterr().err == "distla: interrupted\n"


def test_random_rhs_never_repeats_a_generated_matrix():
    from distla.cli import rhs_seed
    from distla.random import hashed_normal
    I = np.arange(50).reshape(-1, 1)
    for s in range(4):
        b = hashed_normal(rhs_seed(s), I, np.zeros((1, 1), dtype=np.int64))
        for t in range(8):
            a0 = hashed_normal(t, I, np.zeros((1, 1), dtype=np.int64))
            assert not np.allclose(a0, b)


@pytest.mark.mpi
@pytest.mark.parametrize("device", ["cpu", pytest.param("gpu", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("slab_bytes, collective", [(1, "0"), (300, "0"), (300, "1")])
@pytest.mark.parametrize("fortran", [True, False])
def test_mpiio_read_by_slabs(comm, mpi_tmp_path, monkeypatch, fortran, slab_bytes, collective,
                             device):
    """Files are read a few blocks of their slow axis at a time (block columns of a Fortran
    file, block rows of a C file): one block per process here (slab_bytes 1) or a few (300),
    through Backend.staging (GPU ranks: pinned buffers, copies overlapping the next read),
    into A's dtype (float32 file, float32 and float64 A); independent reads by default,
    collective ones with DISTLA_IO_COLLECTIVE_READ=1 (ranks with nothing to read take
    part in both)."""
    monkeypatch.setenv("DISTLA_IO_COLLECTIVE_READ", collective)
    from distla import DistMatrix, ProcessGrid
    from distla.testing import grid_shapes
    a = np.random.default_rng(5).standard_normal((31, 27)).astype(np.float32)
    path = mpi_tmp_path / f"slab{int(fortran)}.npy"
    if comm.rank == 0:
        np.save(path, np.asfortranarray(a) if fortran else a)
    comm.Barrier()
    info = io.inspect(path)
    for p, q in grid_shapes(comm.size):
        grid = ProcessGrid(p, q, comm=comm, order="col")
        for block, src, dt in (((4, 3), (p - 1, q - 1), np.float32), ((5, 5), (0, 0), np.float64)):
            A = DistMatrix.zeros(grid, a.shape, block, dtype=dt, src=src, device=device)
            io._read_npy_mpiio(info, A, slab_bytes=slab_bytes)
            np.testing.assert_array_equal(A.backend.to_host(A.local),
                                          a[np.ix_(A.row_indices(), A.col_indices())]
                                          .astype(dt))


@pytest.mark.mpi
@pytest.mark.parametrize("collective", ["0", "1"])
def test_file_truncated_after_its_header_was_read(comm, mpi_tmp_path, monkeypatch,
                                                  collective):
    """A .npy that shrinks between inspect() and the read (another job rewriting it) was read
    as garbage (uninitialized memory, no error: MPI-IO does not report short reads through a
    file view); now the same MatrixFileError on every rank naming both sizes."""
    from distla import ProcessGrid
    monkeypatch.setenv("DISTLA_IO_COLLECTIVE_READ", collective)
    p = mpi_tmp_path / f"shrink{collective}.npy"
    if comm.rank == 0:
        np.save(p, np.arange(1.0, 101.0).reshape(10, 10))
    comm.Barrier()
    info = io.inspect(p)
    comm.Barrier()
    if comm.rank == 0:
        os.truncate(p, info.offset + 8 * 50)
    comm.Barrier()
    with pytest.raises(io.MatrixFileError, match=r"holds \d+ bytes but its header promises"):
        io.read_matrix(p, ProcessGrid(comm=comm), (3, 3), info=info)


def test_npy_header_with_negative_or_huge_shape(tmp_path):
    """A header with a negative shape passed the size check (the solve banner printed '-5 x
    -5'); one whose element count overflows int64 defeated it. Both are now refused by
    inspect, naming the file."""
    for shape, needle in (((-5, -5), "negative shape"), ((2 ** 32, 2 ** 32), "truncated")):
        f = tmp_path / f"h{abs(shape[0])}.npy"
        with open(f, "wb") as fh:
            np.lib.format.write_array_header_1_0(
                fh, {"descr": "<f8", "fortran_order": False, "shape": shape})
        with pytest.raises(io.MatrixFileError, match=needle) as e:
            io.inspect(f)
        assert str(f) in str(e.value)


@pytest.mark.parametrize("layout, field, line", [
    ("array", "real", "4,5"), ("array", "real", "0x10"), ("array", "real", "4 junk"),
    ("array", "real", "1 2"), ("coordinate", "real", "1 1 1,25"),
    ("coordinate", "real", "1.5 1 3"), ("coordinate", "real", "1 1"),
    ("coordinate", "integer", "1 1 2.5"), ("coordinate", "pattern", "1 1 7"),
    ("array", "complex", "1.0"), ("array", "real", "1_0"), ("coordinate", "real", "1 1_0 2"),
    ("array", "real", "1e5.5"), ("array", "real", "+.e3"),
])
def test_matrix_market_entries_are_parsed_strictly(tmp_path, layout, field, line):
    """SciPy's reader takes a number's prefix ('4,5' read as 4, '0x10' as 0, '4 junk' as 4):
    a wrong matrix that solved and passed. Every data line must be exactly its fields;
    otherwise a MatrixFileError names the line. Well-formed files read as SciPy reads them."""
    import scipy.io
    from mpi4py import MPI

    from distla import ProcessGrid
    grid = ProcessGrid(comm=MPI.COMM_SELF)
    good = {"array": {"real": "2.5", "complex": "2.5 -1"},
            "coordinate": {"real": "2 2 2.5", "integer": "2 2 3", "pattern": "2 2"}}
    for k, bad in enumerate((line, None)):
        f = tmp_path / f"m{k}.mtx"
        if layout == "array":
            body = ["2 2"] + [good[layout][field]] * 3 + [bad or good[layout][field]]
        else:
            body = ["2 2 2", bad or good[layout][field], "1 1" + ("" if field == "pattern"
                                                                 else " 1")]
        f.write_text(f"%%MatrixMarket matrix {layout} {field} general\n% c\n"
                     + "\n".join(body) + "\n")
        if bad is not None:
            with pytest.raises(io.MatrixFileError, match=r"line \d+ .* is not an entry"):
                io.read_matrix(f, grid, (2, 2))
        else:
            want = scipy.io.mmread(f)
            want = want.toarray() if hasattr(want, "toarray") else np.asarray(want)
            np.testing.assert_array_equal(io.read_matrix(f, grid, (2, 2)).to_global(), want)


def test_symbolic_links_as_outputs(tmp_path):
    """An output path that is a symbolic link is written through (the link was replaced by a
    file, unlike np.save); a dangling one is refused before work with a message saying so
    (it was called 'a device, FIFO or socket')."""
    from mpi4py import MPI

    from distla import DistMatrix, ProcessGrid
    real = tmp_path / "real.npy"
    np.save(real, np.zeros(2))
    link = tmp_path / "link.npy"
    link.symlink_to(real)
    A = DistMatrix.from_global(ProcessGrid(comm=MPI.COMM_SELF), np.eye(3), block=2)
    io.check_writable(link)
    io.write_npy(link, A)
    assert link.is_symlink() and os.readlink(link) == str(real)
    np.testing.assert_array_equal(np.load(real), np.eye(3))
    dangling = tmp_path / "dangling.npy"
    dangling.symlink_to(tmp_path / "nowhere" / "x.npy")
    with pytest.raises(io.MatrixFileError, match="dangling symbolic link"):
        io.check_writable(dangling)


@pytest.mark.parametrize("spec, ok", [
    ("romio_cb_write=disable,", [("romio_cb_write", "disable")]),
    (" a = b ,, c=d", [("a", "b"), ("c", "d")]),
    ("cb_buffer_size=-5", "positive integer"), ("cb_nodes=x", "positive integer"),
    ("cb_buffer_size=99999999999999999999", "below 2\\^31"),
    ("=v", "not key=value"), ("k", "not key=value"), ("k=", "not key=value"),
])
def test_io_hints_are_parsed_strictly(spec, ok):
    """DISTLA_IO_HINTS with a trailing comma failed as 'A.npy: cannot read (Invalid key)',
    blaming the file; a negative cb_buffer_size made ROMIO abort the job."""
    if isinstance(ok, list):
        assert io._parse_hints(spec) == ok
    else:
        with pytest.raises(ValueError, match=f"DISTLA_IO_HINTS=.*{ok}"):
            io._parse_hints(spec)


def test_matrix_market_vectorized_check_agrees_with_the_line_check(tmp_path):
    """The byte-level check (io._mtx_plain_numbers) accepts exactly what the line-by-line
    check accepts, on random lines of number characters (valid and not): it decides for
    well-formed files, the line check names the line otherwise."""
    from distla.io import MatrixFileError, _check_mtx_lines, _mtx_plain_numbers
    rng = np.random.default_rng(9)
    words = ["1", "-2", "3.5", "+.5", "6.", "1e5", "-2.5E-3", "007", "0", "5.e3", ".5e-2"]
    kinds = [("array", "real", 1, 0), ("coordinate", "real", 3, 2),
             ("coordinate", "integer", 3, 2), ("array", "complex", 2, 0),
             ("coordinate", "pattern", 2, 2)]
    f = tmp_path / "f.mtx"
    for _ in range(1500):
        layout, field, want, ints = kinds[rng.integers(len(kinds))]
        lines = [f"%%MatrixMarket matrix {layout} {field} general", "% c", "3 3"]
        for _ in range(rng.integers(1, 5)):
            k = want if rng.random() < 0.8 else int(rng.integers(0, 4))
            toks = [words[rng.integers(len(words))] if rng.random() < 0.5 else
                    "".join(rng.choice(list("0123456789+-.eE"), rng.integers(1, 5)))
                    for _ in range(k)]
            lines.append(" " * int(rng.integers(0, 2)) + "\t ".join(toks)
                         + ("\r" if rng.random() < 0.1 else ""))
        text = "\n".join(lines) + "\n"
        f.write_text(text)
        try:
            _check_mtx_lines(str(f), layout, field, want, ints)
            ok = True
        except MatrixFileError:
            ok = False
        assert _mtx_plain_numbers(text.encode(), want, ints, field == "integer") == ok, text


@pytest.mark.mpi
@pytest.mark.parametrize("name", ["x.npy", "x.mtx"])
def test_full_disk_error_names_the_file_and_the_reason(comm, mpi_tmp_path, monkeypatch, name):
    """A full disk while writing a gathered .npy said only '600000 requested and 262128
    written' (ndarray.tofile), a .mtx '[Errno 28] No space left on device' (no path). Both
    now say 'PATH: cannot write (No space left on device)', on every rank, and leave
    nothing behind."""
    import errno

    import scipy.io

    from distla import DistMatrix, ProcessGrid

    def no_space(*a, **k):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    class Full:
        def __init__(self, f):
            self.write = no_space
    monkeypatch.setattr(io, "_Stream", Full)
    monkeypatch.setattr(scipy.io, "mmwrite", no_space)
    X = DistMatrix.random(ProcessGrid(comm=comm), (12, 3), (4, 4), seed=0)
    path = mpi_tmp_path / name
    with pytest.raises(OSError, match=rf"{name}: cannot write \(No space left on device\)"):
        io.write_matrix(path, X)
    comm.Barrier()
    assert [p for p in os.listdir(mpi_tmp_path) if name in p] == []
    comm.Barrier()


def test_writable_checks_try_for_real(tmp_path):
    """os.access says yes to root for any directory, /proc included: `--out /proc/x.npy`
    failed only after the solve. A file is now really created (and removed) in the target's
    directory; an existing JSON-lines file is opened for appending."""
    io.check_writable(tmp_path / "ok.npy")
    assert os.listdir(tmp_path) == []                 # the probe is gone
    if os.path.isdir("/proc/self"):
        with pytest.raises(OSError, match="cannot create a file in /proc"):
            io.check_writable("/proc/x.npy")
    from distla.filebase import check_jsonl
    log = tmp_path / "log.jsonl"
    log.write_text('{"a": 1}\n')
    check_jsonl(log)
    log.chmod(0o444)
    try:
        if os.access(log, os.W_OK):                   # root: writes anyway
            pytest.skip("running as root: a read-only file is still appendable")
        with pytest.raises(OSError, match="exists and cannot be appended to"):
            check_jsonl(log)
    finally:
        log.chmod(0o644)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs")
def test_pipes_and_devices_are_refused_without_opening_them(tmp_path):
    """A FIFO as --matrix with no writer blocked every rank in open(); one with a writer (or
    `<(cat A.npy)`) was consumed by the format sniffing and then called 'not a valid .npy
    file'. Refused by stat, before any open, for .npy, .mtx and HDF5 names alike."""
    for name in ("ff.npy", "ff.mtx", "ff.h5"):
        os.mkfifo(tmp_path / name)
        with pytest.raises(io.MatrixFileError, match="is a pipe/FIFO, not a regular file"):
            io.inspect(str(tmp_path / name) + (":/A" if name.endswith(".h5") else ""))
    if os.path.exists("/dev/null"):
        with pytest.raises(io.MatrixFileError, match="is a character device"):
            io.inspect("/dev/null")


@pytest.mark.mpi
def test_npy_versions_numpy_refuses_are_refused(comm, mpi_tmp_path):
    """Format versions other than 1.0, 2.0 and 3.0 were read (np.load refuses them)."""
    from distla import ProcessGrid
    from distla.filebase import MatrixFileError
    a = np.arange(6.0).reshape(2, 3)
    good = mpi_tmp_path / "v2.npy"
    if comm.rank == 0:
        with open(good, "wb") as f:
            np.lib.format.write_array(f, a, version=(2, 0))
        raw = (mpi_tmp_path / "v2.npy").read_bytes()
        for v in ((0, 0), (9, 0), (1, 1)):
            (mpi_tmp_path / f"v{v[0]}{v[1]}.npy").write_bytes(raw[:6] + bytes(v) + raw[8:])
    comm.Barrier()
    g = ProcessGrid(comm=comm)
    np.testing.assert_array_equal(io.read_matrix(good, g, 1).to_global(None), a)
    for v in ("00", "90", "11"):
        with pytest.raises(MatrixFileError, match="format version"):
            io.read_matrix(mpi_tmp_path / f"v{v}.npy", g, 1)


@pytest.mark.mpi
def test_write_npy_refuses_names_that_are_no_npy_file(comm, mpi_tmp_path):
    """A directory-like, empty or HDF5 target was written in full to a temporary, then failed
    at the rename naming the temporary (or wrote a .npy literally named 'y.h5:')."""
    from distla import DistMatrix, ProcessGrid
    from distla.filebase import MatrixFileError
    A = DistMatrix.from_global(ProcessGrid(comm=comm), np.ones((3, 2)), block=1)
    for bad in (f"{mpi_tmp_path}/new.npy/", "", f"{mpi_tmp_path}/y.h5:/A",
                f"{mpi_tmp_path}/y.h5:"):
        with pytest.raises(MatrixFileError, match="not a file name|HDF5 target"):
            io.write_npy(bad, A)
    comm.Barrier()
    assert sorted(p.name for p in mpi_tmp_path.iterdir()) == []


@pytest.mark.mpi
def test_ranks_naming_different_files_or_bad_chunks_fail_together(comm, mpi_tmp_path):
    """Ranks passing different paths read or wrote rank 0's file silently; chunk_rows=-1 was
    taken as 1."""
    from distla import DistMatrix, ProcessGrid
    g = ProcessGrid(comm=comm)
    f = mpi_tmp_path / "a.npy"
    if comm.rank == 0:
        np.save(f, np.ones((4, 3)))
    comm.Barrier()
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="chunk_rows must be a positive int"):
            io.read_matrix(f, g, 2, chunk_rows=bad)
    assert io.read_matrix(f, g, 2, chunk_rows=1).to_global(None).sum() == 12
    if comm.size > 1:
        mine = mpi_tmp_path / f"b{comm.rank}.npy"
        with pytest.raises(ValueError, match="different arguments"):
            io.read_matrix(f if comm.rank == 0 else mine, g, 2)
        A = DistMatrix.from_global(g, np.ones((4, 3)), block=2)
        for write in (io.write_npy, io.write_matrix):
            with pytest.raises(ValueError, match="different arguments"):
                write(mine, A)


@pytest.mark.mpi
def test_integers_float64_cannot_hold_are_refused(comm, mpi_tmp_path):
    """int64 entries above 2^53 were rounded silently (a long-double file is refused for the
    same reason); with dtype given, the rounding is accepted."""
    from distla import ProcessGrid
    g = ProcessGrid(comm=comm)
    f, ok = mpi_tmp_path / "big.npy", mpi_tmp_path / "ok.npy"
    if comm.rank == 0:
        a = np.arange(6, dtype=np.int64).reshape(2, 3)
        np.save(ok, a * 2**40)
        a[1, 2] = 2**53 + 1
        np.save(f, a)
    comm.Barrier()
    with pytest.raises(ValueError, match="at or beyond 9007199254740992"):
        io.read_matrix(f, g, 1)
    assert io.read_matrix(f, g, 1, dtype=np.float64).to_global(None)[1, 2] == 2.0**53
    np.testing.assert_array_equal(io.read_matrix(ok, g, 1).to_global(None),
                                  np.arange(6.0).reshape(2, 3) * 2**40)


@pytest.mark.mpi
def test_a_file_missing_on_one_rank_says_so(grids, mpi_tmp_path, monkeypatch):
    """Ranks that do not share a file system (here: each in its own directory, the same
    relative name): MPI's open failed with "[rank 0] ... Other I/O error", naming a rank that
    had the file. It is now the rank that cannot read it, and why."""
    import os
    g = grids[0]
    comm = g.comm
    if comm.size < 2:
        pytest.skip("needs two ranks")
    d = os.path.join(str(mpi_tmp_path), f"rank{comm.rank}")
    os.makedirs(d, exist_ok=True)
    if comm.rank == 0:
        np.save(os.path.join(d, "m.npy"), np.eye(6))
    comm.Barrier()
    monkeypatch.chdir(d)
    with pytest.raises(io.MatrixFileError, match=r"\[rank 1\] m.npy: cannot read it on this "
                                                 r"rank \(no such file\)"):
        io.read_matrix("m.npy", g, block=2)
