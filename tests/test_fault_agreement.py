"""One rank's failure is every rank's (the eighth sweep, fault injection): allocations made
before a factorization's first message are agreed on, a mixed solve falls back only from a
failure every rank shares, HDF5 reads agree on any exception."""
from __future__ import annotations

import numpy as np
import pytest

from distla import DistMatrix, errors
from distla.linalg import cholesky, lu_factor


def _same_everywhere(comm, value):
    vals = comm.allgather(value)
    assert all(v == vals[0] for v in vals), vals


@pytest.mark.mpi
@pytest.mark.parametrize("factor", ["lu", "cholesky"])
def test_out_of_memory_on_one_rank_before_factoring_is_raised_everywhere(grids, factor,
                                                                          monkeypatch):
    """A MemoryError copying A (or allocating Cholesky's panel workspace) on the last rank
    only: every rank raises MemoryError naming that rank, instead of the others waiting in
    the factorization's first broadcast."""
    from distla.linalg import _potrf_loop
    grid = grids[0]
    comm = grid.comm
    A = DistMatrix.random(grid, (40, 40), (8, 8), seed=1)
    A = A + DistMatrix.eye(grid, 40, (8, 8)) * 40.0       # SPD enough for Cholesky
    A = (A + A.T) * 0.5
    last = comm.size - 1
    real_copy, real_alloc = DistMatrix.copy, _potrf_loop.PotrfLoop._alloc

    def copy(self):
        if comm.rank == last:
            raise MemoryError("cannot allocate the copy")
        return real_copy(self)

    def alloc(self):
        if comm.rank == last:
            raise MemoryError("cannot allocate the panels")
        return real_alloc(self)
    if factor == "lu":
        monkeypatch.setattr(DistMatrix, "copy", copy)
        run = lambda: lu_factor(A)                                       # noqa: E731
    else:
        monkeypatch.setattr(_potrf_loop.PotrfLoop, "_alloc", alloc)
        run = lambda: cholesky(A, check_symmetric=False)                 # noqa: E731
    with pytest.raises(MemoryError) as e:
        run()
    _same_everywhere(comm, str(e.value))
    if comm.size > 1:
        assert str(e.value).startswith(f"[rank {last}]")


def test_raised_everywhere():
    """What a fallback may carry on from: breakdowns (raised by the drivers after agreeing on
    the column) and exceptions agree() raised; on one rank, anything."""
    from mpi4py import MPI

    class Two:
        def Get_size(self):
            return 2
    assert errors.raised_everywhere(np.linalg.LinAlgError("x"), MPI.COMM_SELF)
    assert not errors.raised_everywhere(np.linalg.LinAlgError("x"), Two())
    assert not errors.raised_everywhere(errors.DistlaError("x"), Two())
    assert errors.raised_everywhere(errors.NotPositiveDefiniteError(3), Two())
    assert errors.raised_everywhere(errors.SingularMatrixError(3), Two())
    with pytest.raises(errors.DistlaError) as e:
        errors.agree(MPI.COMM_SELF, errors.DistlaError("y"))
    assert errors.raised_everywhere(e.value, Two())


@pytest.mark.mpi
def test_mixed_solve_does_not_fall_back_from_an_unshared_failure(grids, monkeypatch):
    """A LinAlgError from the low-precision factorization that agree() did not raise could be
    one rank's alone (the others still inside the factorization's collectives): the mixed
    solve raises it instead of starting the float64 solve on that rank (which hung the job).
    Here every rank raises it at once, so the test itself cannot hang; a breakdown the
    drivers agree on (not positive definite in float32) still falls back."""
    import importlib

    from distla.linalg import solve
    chol_mod = importlib.import_module("distla.linalg.cholesky")   # (the module, not the
    # function of the same name that distla.linalg exports)
    grid = grids[0]
    n = 48
    A = DistMatrix.random(grid, (n, n), (8, 8), seed=2)
    A = (A + A.T) * 0.5 + DistMatrix.eye(grid, n, (8, 8)) * float(n)
    B = DistMatrix.random(grid, (n, 1), (8, 8), seed=3)
    real = chol_mod._potrf_lower

    def local_failure(M, lookahead, gemm="native"):
        if M.dtype == np.float32:
            raise np.linalg.LinAlgError("a kernel's own failure")
        return real(M, lookahead, gemm)
    monkeypatch.setattr(chol_mod, "_potrf_lower", local_failure)
    if grid.comm.size > 1:
        with pytest.raises(np.linalg.LinAlgError, match="a kernel's own failure"):
            solve(A, B, method="cholesky", precision="mixed")
    else:       # one rank: nothing can be waiting elsewhere; it falls back
        _, info = solve(A, B, method="cholesky", precision="mixed", return_info=True)
        assert info.fallback and "a kernel's own failure" in info.reason

    def breakdown(M, lookahead, gemm="native"):
        if M.dtype == np.float32:
            raise errors.NotPositiveDefiniteError(5)
        return real(M, lookahead, gemm)
    monkeypatch.setattr(chol_mod, "_potrf_lower", breakdown)
    _, info = solve(A, B, method="cholesky", precision="mixed", return_info=True)
    assert info.fallback and "factorization failed" in info.reason
    _same_everywhere(grid.comm, info.reason)


@pytest.mark.mpi
def test_hdf5_read_agrees_on_any_exception(grids, mpi_tmp_path, monkeypatch):
    """A MemoryError while one rank reads its hyperslabs (it caught only file, key and value
    errors, so the others waited in the agreement) is raised on every rank."""
    pytest.importorskip("h5py")
    from distla import h5io, io
    grid = grids[0]
    comm = grid.comm
    path = str(mpi_tmp_path / "a.h5")
    A = DistMatrix.random(grid, (30, 30), (8, 8), seed=4)
    io.write_matrix(path + ":/A", A)
    real = h5io._select

    def select(*args):
        if comm.rank == comm.size - 1:
            raise MemoryError("no memory for the hyperslab")
        return real(*args)
    monkeypatch.setattr(h5io, "_select", select)
    with pytest.raises(MemoryError, match="no memory for the hyperslab"):
        io.read_matrix(path + ":/A", grid, (8, 8))


@pytest.mark.mpi
def test_one_ranks_read_only_array_or_differing_call_is_every_ranks_error(grids):
    """overwrite_a=True with a read-only local array on one rank raised there only, after
    the factorization (the kernels had written through the read-only flag) or in the middle
    of it (the others hung); DistMatrix.to with a device differing per rank returned early on
    one rank and hung the others; a TLR factor's rcond with anorm on one rank only ran two
    different estimates and hung; a GP report callback raising on one rank hung fit."""
    from distla import covariance as cov
    from distla import gp, tlr
    grid = grids[0]
    comm = grid.comm
    a = np.random.default_rng(0).standard_normal((24, 24))
    a = a @ a.T + 24 * np.eye(24)
    for factor in (cholesky, lu_factor):
        A = DistMatrix.from_global(grid, a, block=4)
        if comm.rank == comm.size - 1:
            A.local.setflags(write=False)
        with pytest.raises(ValueError, match="local array is read-only"):
            factor(A, overwrite_a=True)
        assert np.array_equal(A.to_global(None), a)      # untouched
    if comm.size > 1:
        A = DistMatrix.from_global(grid, a, block=4)
        with pytest.raises(ValueError, match="different arguments"):
            A.to("gpu" if comm.rank == 1 else "cpu")
        pts = cov.points(60, seed=1)
        L = tlr.cholesky(tlr.from_kernel(grid, pts, cov.SquaredExponential(nugget=1e-2), 20,
                                         tol=1e-8))
        with pytest.raises(ValueError, match="different arguments"):
            L.rcond(anorm=2.0 if comm.rank == 1 else None)
        lik = gp.DenseLikelihood(grid, pts, np.sin(pts[:, 0]),
                                 cov.SquaredExponential(nugget=1e-2), 16)

        def report(ev):
            if comm.rank == 1:
                raise RuntimeError("report failed here")
        lik.report = report
        with pytest.raises(RuntimeError, match="report failed here"):
            gp.fit(lik)


@pytest.mark.mpi
def test_exit_or_interrupt_in_a_callback_on_one_rank_reaches_every_rank(grids):
    """sys.exit() (or an interrupt) inside a user's fn on one rank went past the agreement,
    which caught Exception only: that rank left and the others waited for it forever. Now
    every rank raises it, SystemExit with the same code."""
    from distla import tlr
    grid = grids[0]
    comm = grid.comm
    last = comm.size - 1

    def exits(i, j):
        if comm.rank == last:
            raise SystemExit(3)
        return (i + j).astype(float)
    with pytest.raises(SystemExit) as e:
        DistMatrix.from_function(grid, (20, 20), (4, 4), exits)
    assert e.value.code == 3

    def interrupted(i, j):
        if comm.rank == last:
            raise KeyboardInterrupt
        return np.exp(-np.abs(i - j) / 5.0)
    with pytest.raises(KeyboardInterrupt):
        tlr.from_function(grid, 40, 10, interrupted, tol=1e-8)
    # and the grid still works afterwards on every rank
    assert DistMatrix.eye(grid, 8, (4, 4)).norm("fro") == pytest.approx(8 ** 0.5)


@pytest.mark.mpi
def test_settings_changed_on_one_rank_after_the_grid_fail_every_rank(grids, mpi_tmp_path,
                                                                       monkeypatch):
    """DISTLA_IO changed on one rank after the grid was built took that rank down another
    read path (a hang); a value no switch takes, set then, was ignored. The I/O calls now
    carry the settings in their signature and check their values."""
    from distla import io
    grid = grids[0]
    comm = grid.comm
    A = DistMatrix.random(grid, (12, 9), (4, 4), seed=2)
    path = str(mpi_tmp_path / "settings.npy")
    io.write_npy(path, A)
    if comm.size > 1:
        if comm.rank == comm.size - 1:
            monkeypatch.setenv("DISTLA_IO", "memmap")
        with pytest.raises(ValueError, match="different arguments.*DISTLA_IO"):
            io.read_matrix(path, grid, block=4)
        with pytest.raises(ValueError, match="different arguments.*DISTLA_IO"):
            io.write_npy(path, A)
    monkeypatch.setenv("DISTLA_IO", "bogus")
    with pytest.raises(ValueError, match="DISTLA_IO='bogus'"):
        io.read_matrix(path, grid, block=4)
    monkeypatch.delenv("DISTLA_IO")
    assert np.array_equal(io.read_matrix(path, grid, block=4).to_global(None),
                          A.to_global(None))


@pytest.mark.mpi
def test_a_local_array_replaced_on_one_rank_fails_every_rank(grids):
    """A.local replaced by a wrongly shaped array on one rank (.local is public) hung solve,
    matmul, lu_factor and redistribute (that rank failed inside, the others waited): the
    signatures now say when a rank's local array does not match its layout."""
    from distla.linalg import solve
    from distla.pblas import matmul
    grid = grids[0]
    comm = grid.comm
    if comm.size == 1:
        pytest.skip("needs ranks whose local arrays differ")
    a = np.random.default_rng(3).standard_normal((24, 24)) + 24 * np.eye(24)
    for call in (lambda A: solve(A, DistMatrix.from_global(grid, a[:, :2], block=4)),
                 lambda A: matmul(A, A), lambda A: lu_factor(A),
                 lambda A: A.redistribute(block=(5, 5))):
        A = DistMatrix.from_global(grid, a, block=4)
        if comm.rank == comm.size - 1:
            A.local = A.local[:-1]
        with pytest.raises(ValueError, match="local array .* where this rank owns"):
            call(A)


@pytest.mark.mpi
def test_gp_fit_with_different_bounds_on_one_rank_names_fit(grids):
    """Different bounds on one rank were noticed only inside the first likelihood, naming
    the covariance call; the search's own arguments are compared first now."""
    from distla import covariance as cov
    from distla import gp
    grid = grids[0]
    comm = grid.comm
    if comm.size == 1:
        pytest.skip("needs two ranks")
    pts = cov.points(40, seed=1)
    lik = gp.DenseLikelihood(grid, pts, np.sin(pts[:, 0]), cov.SquaredExponential(nugget=1e-2),
                             16)
    with pytest.raises(ValueError, match=r"different arguments.*gp\.fit"):
        gp.fit(lik, bounds=(0.02, 0.4 if comm.rank == 1 else 0.5))
    assert len(lik.history) == 0


@pytest.mark.mpi
def test_lu_solve_with_b_on_different_grids_fails_every_rank(grids):
    """lu_solve agreed on B's communicator: ranks passing B on different grids (one on a
    Dup of the factors' communicator) waited in allgathers on different communicators. It
    agrees on the factors' grid now, as cho_solve does."""
    from distla import ProcessGrid
    from distla.linalg import lu_solve, lu_solve_rcond
    grid = grids[0]
    comm = grid.comm
    if comm.size == 1:
        pytest.skip("needs ranks passing different grids")
    other = ProcessGrid(grid.nprow, grid.npcol, comm=comm.Dup())
    a = np.random.default_rng(6).standard_normal((20, 20)) + 20 * np.eye(20)
    F = lu_factor(DistMatrix.from_global(grid, a, block=4))
    Bs = [DistMatrix.from_global(g, np.ones((20, 1)), block=4) for g in (grid, other)]
    for call in (lu_solve, lu_solve_rcond):
        with pytest.raises(ValueError, match="different grids"):
            call(F, Bs[0] if comm.rank == 0 else Bs[1])


@pytest.mark.mpi
def test_read_only_b_or_c_is_every_ranks_business(grids):
    """A read-only B with overwrite_b=True was written through its raw pointer on one rank
    (read-only memory changed; a read-only memory map faulted) and refused by NumPy on the
    ranks holding B's columns only on several (the others hung). overwrite_b is a permission:
    such a B is solved in a copy on every rank, B unchanged. A read-only C of matmul is a
    clear error on every rank."""
    from distla.linalg import cho_solve, cholesky, lu_solve, solve
    from distla.pblas import matmul, triangular_solve
    rng = np.random.default_rng(7)
    a = rng.standard_normal((13, 13)) + 13 * np.eye(13)
    spd = a @ a.T
    b = rng.standard_normal((13, 3))
    for grid in grids:
        A = DistMatrix.from_global(grid, a, block=4)
        S = DistMatrix.from_global(grid, spd, block=4)
        F, L = lu_factor(A), cholesky(S)
        for call, want in (
                (lambda B: lu_solve(F, B, overwrite_b=True), np.linalg.solve(a, b)),
                (lambda B: cho_solve((L, True), B, overwrite_b=True), np.linalg.solve(spd, b)),
                (lambda B: solve(A, B, overwrite_b=True, check_rcond=False),
                 np.linalg.solve(a, b)),
                (lambda B: triangular_solve(A, B, overwrite_b=True),
                 np.linalg.solve(np.tril(a), b))):
            B = DistMatrix.from_global(grid, b, block=4)
            B.local.setflags(write=False)
            X = call(B)
            np.testing.assert_allclose(X.to_global(None), want, rtol=1e-10, atol=1e-12)
            assert np.array_equal(B.to_global(None), b)            # untouched
        C = DistMatrix.from_global(grid, np.zeros((13, 3)), block=4)
        if grid.comm.rank == grid.comm.size - 1:
            C.local.setflags(write=False)
        with pytest.raises(ValueError, match="C's local array is read-only"):
            matmul(A, DistMatrix.from_global(grid, b, block=4), C=C)
