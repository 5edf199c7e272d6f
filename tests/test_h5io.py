"""HDF5 matrix files (distla.h5io, through distla.io): path parsing and header errors
(serial), round trips on every grid shape of the communicator (mpi-marked: both rank orders,
nonzero source process, blocks that do not divide n, real and complex types, vectors), and
the command line reading an .h5 matrix and writing x to .h5."""
from __future__ import annotations

import os

import numpy as np
import pytest

from distla import h5io, io

h5py = pytest.importorskip("h5py")


# ---------------------------------------------------------------------------------------
# serial: paths and headers
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("path, want", [
    ("a.h5:/x", ("a.h5", "/x")),
    ("dir.h5/b.HDF5:/g/y", ("dir.h5/b.HDF5", "/g/y")),
    ("a.h5", ("a.h5", "")),
    ("c:/data/a.hdf5", ("c:/data/a.hdf5", "")),
    ("a.npy", None),
    ("a.h5x", None),
    ("a.h5:/g//x", ("a.h5", "/g/x")),      # spellings of one dataset compare equal
    ("a.h5:/g/./x/", ("a.h5", "/g/x")),
    ("a.h5:x", ("a.h5", "/x")),
])
def test_split_path(path, want):
    assert h5io.split_path(path) == want
    assert h5io.is_h5(path) == (want is not None)


def test_inspect(tmp_path):
    f = tmp_path / "a.h5"
    with h5py.File(f, "w") as h:
        h["m"] = np.ones((3, 4), dtype=np.complex64)
        h["g/v"] = np.arange(5, dtype=np.int16)
    info = io.inspect(f"{f}:/m")
    assert (info.format, info.shape, info.dtype, info.ndim, info.dataset) == \
        ("h5", (3, 4), np.dtype(np.complex64), 2, "/m")
    info = io.inspect(f"{f}:g/v")
    assert (info.shape, info.ndim, info.dataset) == ((5, 1), 1, "/g/v")
    assert io._result_dtype(info.dtype) == np.float64
    with h5py.File(tmp_path / "one.h5", "w") as h:
        h["only"] = np.zeros((2, 2))
    assert io.inspect(tmp_path / "one.h5").dataset == "/only"   # the file's only dataset


def test_inspect_errors(tmp_path):
    f = tmp_path / "a.h5"
    with h5py.File(f, "w") as h:
        h["m"] = np.ones((2, 2))
        h["cube"] = np.ones((2, 2, 2))
        h["s"] = np.array([b"ab", b"cd"])
        h["c"] = np.zeros(3, dtype=[("a", "f8"), ("b", "i4")])
        h.create_group("grp")
    with h5py.File(f, "a") as h:
        h["grp/sub/A"] = np.ones((2, 2))
    with pytest.raises(io.MatrixFileError, match="its datasets: /grp/sub/A"):
        io.inspect(f"{f}:/grp")                     # absolute paths, usable as given
    for ds, needle in [("/nope", "no dataset '/nope'"), ("/grp", "is a group"),
                       ("/cube", "3-D"), ("/s", "numeric"), ("/c", "numeric")]:
        with pytest.raises(io.MatrixFileError, match=needle):
            io.inspect(f"{f}:{ds}")
    with pytest.raises(io.MatrixFileError, match="name the dataset"):
        io.inspect(f)
    with pytest.raises(FileNotFoundError, match="no such file"):
        io.inspect(tmp_path / "missing.h5:/x")
    (tmp_path / "bad.h5").write_bytes(b"not an hdf5 file")
    with pytest.raises(io.MatrixFileError, match="not a readable HDF5"):
        io.inspect(tmp_path / "bad.h5:/x")


def test_missing_h5py_is_a_clear_error(tmp_path, monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "h5py", None)   # import h5py now raises ImportError
    with pytest.raises(io.MatrixFileError, match=r"pip install 'distla\[hdf5\]'"):
        io.inspect(tmp_path / "a.h5:/x")


@pytest.mark.parametrize("N, b, P", [(10, 3, 1), (10, 3, 2), (10, 3, 3), (12, 4, 3),
                                     (5, 8, 2), (1, 1, 4), (17, 2, 4)])
def test_runs_cover_the_layout(N, b, P):
    """The hyperslab runs of every process, chunked, are exactly its global indices."""
    from distla import layout
    for p in range(P):
        want = np.concatenate([np.arange(g * b, min(N, g * b + b))
                               for g in range(p, -(-N // b), P)] or [np.zeros(0, int)])
        nblk = -(-layout.numroc(N, b, p, 0, P) // b)
        for step in (1, 2, max(1, nblk)):
            got = []
            for i0 in range(0, nblk, step):
                for s, st, cnt, blk in h5io._runs(N, b, p, P, i0, i0 + step):
                    got += [s + k * st + j for k in range(cnt) for j in range(blk)]
            np.testing.assert_array_equal(np.array(got, dtype=int), want)


# ---------------------------------------------------------------------------------------
# mpi: round trips on every grid shape
# ---------------------------------------------------------------------------------------
@pytest.mark.mpi
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
def test_roundtrip_every_grid(comm, grids, mpi_tmp_path, dtype):
    from distla import DistMatrix
    rng = np.random.default_rng(3)
    a = rng.standard_normal((23, 17))
    if np.dtype(dtype).kind == "c":
        a = a + 1j * rng.standard_normal(a.shape)
    a = a.astype(dtype)
    src = mpi_tmp_path / f"src_{np.dtype(dtype).name}.h5"
    if comm.rank == 0:
        with h5py.File(src, "w") as h:
            h["a"] = a
            h["v"] = a[:, 0]
            h["keep"] = np.arange(3.0)
    comm.Barrier()
    for g in grids:
        for block, s in [((4, 3), (0, 0)), ((5, 7), (g.nprow - 1, g.npcol - 1)),
                         ((30, 2), (0, g.npcol - 1))]:
            A = io.read_matrix(f"{src}:/a", g, block, src=s)
            assert A.dtype == np.dtype(dtype)
            np.testing.assert_array_equal(A.to_global(None), a)
            v = io.read_matrix(f"{src}:/v", g, block, src=s)
            assert v.shape == (23, 1)
            np.testing.assert_array_equal(v.to_global(None)[:, 0], a[:, 0])
            out = mpi_tmp_path / f"out_{np.dtype(dtype).name}.h5"
            B = DistMatrix.from_global(g, a, block=block[::-1], src=s)
            io.write_matrix(f"{out}:/b", B)
            io.write_matrix(f"{out}:/x/v", v, vector=True)
            comm.Barrier()
            if comm.rank == 0:
                with h5py.File(out) as h:
                    np.testing.assert_array_equal(h["b"][...], a)
                    np.testing.assert_array_equal(h["x/v"][...], a[:, 0])
                    assert h["b"].dtype == np.dtype(dtype)
            back = io.read_matrix(f"{out}:/b", g, block, src=s)
            np.testing.assert_array_equal(back.to_global(None), a)
            comm.Barrier()


@pytest.mark.mpi
def test_small_slabs_and_int_file(comm, grids, mpi_tmp_path):
    """Reads a slab of block rows at a time (tiny slab_bytes), integers become float64."""
    from distla import DistMatrix
    a = np.arange(41 * 9, dtype=np.int32).reshape(41, 9)
    f = mpi_tmp_path / "int.h5"
    if comm.rank == 0:
        with h5py.File(f, "w") as h:
            h["i"] = a
    comm.Barrier()
    info = io.inspect(f"{f}:/i")
    for g in grids:
        A = DistMatrix.zeros(g, info.shape, (3, 2), src=(g.nprow - 1, 0))
        h5io.read_into(info, A, slab_bytes=1)
        assert A.dtype == np.float64
        np.testing.assert_array_equal(A.to_global(None), a)


@pytest.mark.mpi
def test_write_keeps_other_datasets_and_replaces_one(comm, mpi_tmp_path):
    from distla import DistMatrix, ProcessGrid
    g = ProcessGrid(comm=comm)
    f = mpi_tmp_path / "keep.h5"
    if comm.rank == 0:
        with h5py.File(f, "w") as h:
            h["other"] = np.arange(4.0)
            h["g/x"] = np.zeros((2, 2))
            h["g/y"] = np.ones(3)
            h["g"].attrs["unit"] = "m"
            h.attrs["title"] = "t"
    comm.Barrier()
    X = DistMatrix.random(g, (90, 50), (8, 8), seed=1)
    io.write_matrix(f"{f}:/g/x", X)
    size = f.stat().st_size
    io.write_matrix(f"{f}:g/x", X)          # rewriting does not grow the file
    ref = X.to_global(None)
    comm.Barrier()
    if comm.rank == 0:
        assert f.stat().st_size <= size
        with h5py.File(f) as h:
            np.testing.assert_array_equal(h["other"][...], np.arange(4.0))
            np.testing.assert_array_equal(h["g/y"][...], np.ones(3))
            np.testing.assert_array_equal(h["g/x"][...], ref)
            assert h["g"].attrs["unit"] == "m" and h.attrs["title"] == "t"
        assert [p.name for p in mpi_tmp_path.iterdir() if ".partial" in p.name] == []
    comm.Barrier()


@pytest.mark.mpi
def test_generated_h5_matches_npy(comm, mpi_tmp_path):
    """write_npy_generated writes the same matrix to .h5 as to .npy (slabs of block columns,
    tiny slabs so that there are several), and the same row sums."""
    from distla import ProcessGrid
    from distla.problems import problem_entries
    g = ProcessGrid(comm=comm)
    fn = problem_entries("general", 29, seed=4)
    kw = dict(dtype=np.float64, slab_bytes=1, row_sums=True)
    b1 = io.write_npy_generated(mpi_tmp_path / "g.npy", g, (29, 29), (4, 4), fn, **kw)
    b2 = io.write_npy_generated(f"{mpi_tmp_path / 'g.h5'}:/g", g, (29, 29), (4, 4), fn, **kw)
    np.testing.assert_allclose(b1.to_global(None), b2.to_global(None), rtol=1e-14)
    comm.Barrier()
    if comm.rank == 0:
        with h5py.File(mpi_tmp_path / "g.h5") as h:
            np.testing.assert_array_equal(h["g"][...], np.load(mpi_tmp_path / "g.npy"))
    comm.Barrier()


@pytest.mark.mpi
def test_read_errors_are_the_same_on_every_rank(comm, mpi_tmp_path):
    from distla import ProcessGrid
    g = ProcessGrid(comm=comm)
    f = mpi_tmp_path / "e.h5"
    if comm.rank == 0:
        with h5py.File(f, "w") as h:
            h["a"] = np.ones((4, 4))
    comm.Barrier()
    (mpi_tmp_path / "junk.h5").write_bytes(b"not hdf5") if comm.rank == 0 else None
    comm.Barrier()
    with pytest.raises(io.MatrixFileError, match="not a readable HDF5"):
        io.write_matrix(f"{mpi_tmp_path / 'junk.h5'}:/x", io.read_matrix(f"{f}:/a", g, (2, 2)))
    for path, needle in [(f"{f}:/b", "no dataset"), (f"{f}", None)]:
        if needle is None:
            assert io.read_matrix(path, g, (2, 2)).shape == (4, 4)
            continue
        with pytest.raises(io.MatrixFileError, match=needle):
            io.read_matrix(path, g, (2, 2))


@pytest.mark.mpi
@pytest.mark.gpu
def test_read_and_write_on_gpu_ranks(comm, grids, mpi_tmp_path):
    a = np.arange(19 * 11, dtype=np.float64).reshape(19, 11)
    f = mpi_tmp_path / "gpu.h5"
    if comm.rank == 0:
        with h5py.File(f, "w") as h:
            h["a"] = a
    comm.Barrier()
    for g in grids:
        A = io.read_matrix(f"{f}:/a", g, (4, 3), device="gpu", src=(g.nprow - 1, 0))
        assert A.device == "gpu"
        np.testing.assert_array_equal(A.to_global(None), a)
        io.write_matrix(f"{mpi_tmp_path / 'gout.h5'}:/b", A)
        back = io.read_matrix(f"{mpi_tmp_path / 'gout.h5'}:/b", g, (5, 5))
        np.testing.assert_array_equal(back.to_global(None), a)
    comm.Barrier()


# ---------------------------------------------------------------------------------------
# command line
# ---------------------------------------------------------------------------------------
def test_cli_solve_h5_in_h5_out(tmp_path):
    import os

    from test_cli import MPIEXEC, run
    if not os.path.exists(MPIEXEC):
        pytest.skip("no mpiexec")
    a = tmp_path / "sys.h5"
    p = run(["generate", "--kind", "spd", "--n", 70, "--nb", 8, "--out", f"{a}:/A",
             "--rhs-out", f"{a}:/b"], n=3)
    assert p.returncode == 0, p.stdout + p.stderr
    with h5py.File(a) as h:
        A, b = h["A"][...], h["b"][...]
    np.testing.assert_allclose(A, A.T)
    np.testing.assert_allclose(b, A.sum(axis=1), rtol=1e-12)
    p = run(["solve", "--matrix", f"{a}:/A", "--rhs", f"{a}:/b", "--grid", "1x2", "--nb", 9,
             "--out", f"{tmp_path / 'x.h5'}:/sol/x"], n=2)
    assert p.returncode == 0, p.stdout + p.stderr
    with h5py.File(tmp_path / "x.h5") as h:
        x = h["sol/x"][...]
    assert x.shape == (70,)
    np.testing.assert_allclose(A @ x, b, rtol=1e-10)
    p = run(["solve", "--matrix", f"{a}:/missing"], n=2)
    assert p.returncode == 2 and "no dataset" in p.stdout + p.stderr


def test_external_link_reads_its_target_and_guards_it(tmp_path):
    """A dataset reached through an external link is the other file's: it was read from the
    linking file under the target's name (another, unrelated dataset: a silent wrong solve),
    and `--out` naming the real input was let through. Also: output names that a group
    holds, that pass through a dataset, or that use '..' are refused before any work."""
    import os

    from test_cli import MPIEXEC, run
    n = 12
    a = np.random.default_rng(0).standard_normal((n, n))
    a = a @ a.T + n * np.eye(n)
    with h5py.File(tmp_path / "target.h5", "w") as f:
        f["x"] = a
    with h5py.File(tmp_path / "main.h5", "w") as f:
        f["x"] = 3.0 * np.eye(n)                        # same name, unrelated data
        f["A"] = h5py.ExternalLink(str(tmp_path / "target.h5"), "/x")
        f["b"] = a @ np.ones(n)
        f["g/y"] = np.ones(2)
    info = h5io.inspect(f"{tmp_path}/main.h5:/A")
    assert (os.path.realpath(info.path), info.dataset) == \
        (os.path.realpath(tmp_path / "target.h5"), "/x")
    assert h5io.resolve(f"{tmp_path}/main.h5:/A")[0] == os.path.realpath(tmp_path / "target.h5")
    for bad, needle in ((f"{tmp_path}/main.h5:/g", "is a group"),
                        (f"{tmp_path}/main.h5:/b/c", "is a dataset, not a group"),
                        (f"{tmp_path}/main.h5:/g/../b", "'..'")):
        with pytest.raises((io.MatrixFileError, ValueError), match=needle):
            io.check_writable(bad)
    io.check_writable(f"{tmp_path}/main.h5:/g//z")
    if not os.path.exists(MPIEXEC):
        pytest.skip("no mpiexec")
    m = f"{tmp_path}/main.h5"
    p = run(["solve", "--matrix", f"{m}:/A", "--rhs", f"{m}:/b", "--out",
             f"{tmp_path / 'x.npy'}"], n=2)
    assert p.returncode == 0, p.stdout + p.stderr
    np.testing.assert_allclose(np.load(tmp_path / "x.npy"), np.ones(n), rtol=1e-10)
    for out in (f"{tmp_path}/target.h5:/x", f"{m}:/A"):
        p = run(["solve", "--matrix", f"{m}:/A", "--rhs", f"{m}:/b", "--out", out], n=2)
        assert p.returncode == 2 and "same dataset" in p.stdout + p.stderr, p.stderr
    with h5py.File(tmp_path / "target.h5") as f:
        np.testing.assert_array_equal(f["x"][...], a)
    p = run(["solve", "--matrix", f"{m}:/A", "--rhs", f"{m}:/b", "--out", f"{m}:/g/"], n=2)
    assert p.returncode == 2 and "is a group" in p.stdout + p.stderr


@pytest.mark.mpi
def test_writing_a_dataset_keeps_the_files_links(comm, grids, mpi_tmp_path):
    """Writing /B into a file with a soft link, an external link, a dangling link and a
    second hard link to /A kept them all (they became copies, the external data was pulled
    in, a dangling link made every write fail with h5py's KeyError); rewriting /A shows the
    new values through the soft and hard links, as rewriting it in place would."""
    from distla import DistMatrix, io
    f = str(mpi_tmp_path / "links.h5")
    ext = str(mpi_tmp_path / "other.h5")
    if comm.rank == 0:
        with h5py.File(ext, "w") as e:
            e["X"] = np.arange(3.0)
        with h5py.File(f, "w") as h:
            h["A"] = np.ones((4, 4))
            h["hard"] = h["A"]
            h["alias"] = h5py.SoftLink("/A")
            h["ext"] = h5py.ExternalLink(ext, "/X")
            h["dangling"] = h5py.SoftLink("/nowhere")
            h.create_group("g").attrs["note"] = "kept"
    comm.Barrier()
    g = grids[0]
    io.write_matrix(f + ":/B", DistMatrix.from_global(g, np.full((3, 3), 2.0), block=2))
    io.write_matrix(f + ":/A", DistMatrix.from_global(g, np.full((4, 4), 5.0), block=2))
    if comm.rank == 0:
        with h5py.File(f, "r") as h:
            assert isinstance(h.get("alias", getlink=True), h5py.SoftLink)
            assert isinstance(h.get("ext", getlink=True), h5py.ExternalLink)
            assert isinstance(h.get("dangling", getlink=True), h5py.SoftLink)
            assert h["hard"].id == h["A"].id
            assert np.all(h["alias"][...] == 5.0) and np.all(h["hard"][...] == 5.0)
            assert np.all(h["B"][...] == 2.0) and h["g"].attrs["note"] == "kept"
    comm.Barrier()


@pytest.mark.parametrize("link", ["soft", "hard"])
def test_output_through_an_hdf5_link_to_an_input_is_refused(tmp_path, link):
    """`--out m.h5:/alias`, /alias a soft or hard link to the --matrix (or --rhs) dataset,
    overwrote the input with x (exit 0): the names differ, the dataset is the same. Refused
    before any work, by the dataset's identity."""
    import os

    from test_cli import MPIEXEC, run
    n = 8
    a = np.eye(n) * 4 + 1
    m = tmp_path / "m.h5"
    with h5py.File(m, "w") as f:
        f["A"], f["b"] = a, a.sum(axis=1)
        for src, name in (("/A", "alias"), ("/b", "balias")):
            f[name] = h5py.SoftLink(src) if link == "soft" else f[src]
    assert h5io.dataset_key(f"{m}:/alias") == h5io.dataset_key(f"{m}:/A") is not None
    assert h5io.dataset_key(f"{m}:/b") != h5io.dataset_key(f"{m}:/A")
    assert h5io.dataset_key(f"{m}:/missing") is None
    if not os.path.exists(MPIEXEC):
        pytest.skip("no mpiexec")
    for args, other in (([f"{m}:/A", "--out", f"{m}:/alias"], "--matrix"),
                        ([f"{m}:/A", "--rhs", f"{m}:/b", "--out", f"{m}:/balias"], "--rhs")):
        p = run(["solve", "--matrix", *args, "-q"], n=2)
        assert p.returncode == 2, p.stdout + p.stderr
        assert f"and {other} name the same dataset" in p.stderr and "link" in p.stderr
    with h5py.File(m) as f:
        np.testing.assert_array_equal(f["A"][...], a)
        np.testing.assert_array_equal(f["b"][...], a.sum(axis=1))
    p = run(["solve", "--matrix", f"{m}:/b", "-q"], n=1)      # messages name the dataset
    assert p.returncode == 2 and f"--matrix: {m}:/b holds a {n} x 1 vector" in p.stderr


@pytest.mark.mpi
def test_failed_write_stops_every_rank_and_leaves_nothing(comm, mpi_tmp_path, monkeypatch):
    """A full disk while writing an HDF5 file on >= 2 ranks: the next rank reopened the file
    that rank 0's failed write had left inconsistent, and HDF5 crashed (SIGSEGV), leaving
    the temporary behind. Now the space is reserved when the dataset is created (a full disk
    is a clean error there), and after a failed write no rank opens the file again: one
    error naming the path and the reason on every rank, no .partial file, no target."""
    import errno

    from distla import DistMatrix, ProcessGrid
    g = ProcessGrid(comm=comm)
    X = DistMatrix.random(g, (30, 20), (4, 4), seed=1)
    target = mpi_tmp_path / "full.h5"

    def no_space(path):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
    with monkeypatch.context() as m:
        m.setattr(h5io, "_reserve", no_space)
        with pytest.raises(OSError, match=r"full.h5:/x: cannot write \(No space left"):
            io.write_matrix(f"{target}:/x", X)
    opened = []
    real = h5io._write_local

    def fail_on_rank0(ds, *a, **k):
        opened.append(comm.rank)
        if comm.rank == 0:
            raise OSError(errno.ENOSPC, "Can't write data (No space left on device)")
        return real(ds, *a, **k)
    with monkeypatch.context() as m:
        m.setattr(h5io, "_write_local", fail_on_rank0)
        m.setattr(h5io, "_use_mpi", lambda h5py: False)
        with pytest.raises(OSError, match="full.h5:/x: cannot write .*No space left"):
            io.write_matrix(f"{target}:/x", X)
    assert opened == ([0] if comm.rank == 0 else [])   # nobody wrote after rank 0 failed
    comm.Barrier()
    assert sorted(p.name for p in mpi_tmp_path.iterdir()) == []
    comm.Barrier()


def test_reserve_allocates_the_file(tmp_path):
    f = tmp_path / "r.bin"
    with open(f, "wb") as fh:
        fh.truncate(1 << 20)                    # sparse
    h5io._reserve(str(f))
    assert f.stat().st_size == 1 << 20


def test_virtual_dataset_with_a_missing_source_is_refused(tmp_path):
    """A virtual dataset whose source file is gone read as its fill value (zeros),
    silently: refused, naming the source; with the source there it reads exactly."""
    a = np.arange(36.0).reshape(6, 6)
    src, vds = tmp_path / "src.h5", tmp_path / "v.h5"
    with h5py.File(src, "w") as f:
        f["s"] = a
    lay = h5py.VirtualLayout(shape=(6, 6), dtype="f8")
    lay[:, :] = h5py.VirtualSource(str(src), "s", shape=(6, 6))
    with h5py.File(vds, "w") as f:
        f.create_virtual_dataset("A", lay, fillvalue=0.0)
    assert h5io.inspect(f"{vds}:/A").shape == (6, 6)
    from mpi4py import MPI

    from distla import ProcessGrid
    g = ProcessGrid(1, 1, MPI.COMM_SELF)
    np.testing.assert_array_equal(io.read_matrix(f"{vds}:/A", g, (4, 4)).to_global(), a)
    os.remove(src)
    with pytest.raises(io.MatrixFileError, match="virtual dataset whose source file"):
        h5io.inspect(f"{vds}:/A")


@pytest.mark.mpi
def test_rewriting_a_dataset_keeps_its_attributes(comm, mpi_tmp_path):
    from distla import DistMatrix, ProcessGrid
    path = mpi_tmp_path / "m.h5"
    if comm.rank == 0:
        with h5py.File(path, "w") as f:
            f["x"] = np.zeros((5, 5))
            f["x"].attrs["units"] = "m/s"
    comm.Barrier()
    g = ProcessGrid(comm=comm)
    a = np.arange(25.0).reshape(5, 5)
    io.write_matrix(f"{path}:/x", DistMatrix.from_global(g, a, block=2))
    comm.Barrier()
    with h5py.File(path, "r") as f:
        np.testing.assert_array_equal(f["x"][...], a)
        assert dict(f["x"].attrs) == {"units": "m/s"}


@pytest.mark.mpi
def test_one_ranks_failed_write_is_one_error_and_no_temporary(comm, mpi_tmp_path):
    """One rank's HDF5 write fails (here: a file-size limit on the last rank only, standing in
    for any I/O error of one rank): the job crashed with SIGSEGV when HDF5 freed or closed
    the failed write's objects, and left the temporary. Now the same OSError on every rank,
    nothing under the target's name or a temporary one, and the job goes on."""
    import resource
    if comm.size < 2 or h5io._use_mpi(h5py):
        pytest.skip("needs two ranks writing one after the other (h5py without MPI)")
    from distla import DistMatrix, ProcessGrid
    g = ProcessGrid(1, comm.size, comm)
    a = np.arange(200 * 100, dtype=np.float64).reshape(200, 100)
    A = DistMatrix.from_global(g, a, block=16)
    d = mpi_tmp_path / "fail"
    if comm.rank == 0:
        d.mkdir()
    comm.Barrier()
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    if comm.rank == comm.size - 1:
        resource.setrlimit(resource.RLIMIT_FSIZE, (40000, hard))   # (SIGXFSZ: ignored)
    try:
        with pytest.raises(OSError) as e:
            io.write_matrix(f"{d}/x.h5:/A", A)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert "cannot write" in str(e.value) and "File too large" in str(e.value)
    assert len(set(comm.allgather(str(e.value)))) == 1
    comm.Barrier()
    assert sorted(p.name for p in d.iterdir()) == []
    io.write_matrix(f"{d}/y.h5:/A", A)                     # the next write works
    np.testing.assert_array_equal(h5py.File(d / "y.h5", "r")["A"][()], a)
