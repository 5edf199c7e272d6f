"""Mixed-precision solves (distla/linalg/mixed.py, refine.py; docs/mixed.md).

CPU ranks factor a float32 (complex64) copy and refine in float64 (complex128): on every grid
shape, with n not a multiple of nb and a nonzero source process, the answer reaches the
float64 solver's componentwise backward error on well-conditioned matrices; ill-conditioned
ones fall back to the float64 solve with the reason (or raise the same error on every rank);
an unrefined answer is never returned. The low-precision GEMM modes fall back to float32 on
CPU ranks; the tensor-core paths are tested on a GPU (marked ``gpu``).
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.linalg as sla

from distla.testing import corner, random_array

EPS = np.finfo(np.float64).eps
N, NB = 61, 8                      # n not a multiple of nb


def berr_np(a, x, b):
    """LAPACK componentwise backward error max |b - a x| / (|a||x| + |b|) (NumPy)."""
    r = np.abs(b - a @ x)
    d = np.abs(a) @ np.abs(x) + np.abs(b)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(r == 0, 0.0, r / d)
    return float(np.nan_to_num(q, nan=np.inf).max())


def conditioned(n, cond, seed, spd=False, complex_=False):
    """Q1 diag(s) Q2^H with s log-spaced from 1 to 1/cond (NumPy, global)."""
    rng = np.random.default_rng(seed)

    def unitary():
        g = rng.standard_normal((n, n))
        if complex_:
            g = g + 1j * rng.standard_normal((n, n))
        return np.linalg.qr(g)[0]
    q1 = unitary()
    q2 = q1 if spd else unitary()
    a = (q1 * cond ** (-np.arange(n) / (n - 1))) @ q2.conj().T
    return (a + a.conj().T) / 2 if spd else a


def _dist(grid, a, nb=NB, src=(0, 0)):
    from distla import DistMatrix
    return DistMatrix.from_global(grid, a if grid.comm.rank == 0 else None, block=nb, src=src)


def _same_everywhere(comm, value):
    vals = comm.allgather(value)
    assert all(v == vals[0] for v in vals), vals


def _ref_berr(a, b):
    return berr_np(a, sla.solve(a, b), b)


def _scaled_solve(F, c):
    """``R -> c A^-1 R`` from the exact LU factors F: a correction of known contraction
    (``|1 - c|`` per step: damped for c < 1, overshooting and diverging for c > 2)."""
    from distla.linalg import lu_solve

    def solve(R):
        X = lu_solve(F, R)
        X.local *= c
        return X
    return solve


METHODS = [("cholesky", np.float64), ("gepp", np.float64), ("calu", np.float64),
           ("gepp", np.complex128), ("calu", np.complex128)]


# ---------------------------------------------------------------------------------------
# well-conditioned: float32 factors + IR reach float64's backward error
# ---------------------------------------------------------------------------------------
@pytest.mark.mpi
@pytest.mark.parametrize("method,dtype", METHODS)
@pytest.mark.parametrize("replicate", [False, True])
def test_mixed_reaches_double_backward_error(grids, monkeypatch, method, dtype, replicate):
    """Also with whole copies of the float32 factors on every rank (REPLICATE, on CPU ranks
    only when asked): the same accuracy as the distributed solves; one rank solves alone."""
    from distla.linalg import mixed, solve
    monkeypatch.setitem(mixed.REPLICATE, "cpu", replicate)
    a = conditioned(N, 1e3, 1, spd=method == "cholesky", complex_=dtype == np.complex128)
    b = random_array((N, 2), dtype, seed=2)
    ref = _ref_berr(a, b)
    for grid in grids:
        A, B = _dist(grid, a, src=corner(grid)), _dist(grid, b, (NB, 1))
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            X, info = solve(A, B, method=method, precision="mixed", return_info=True)
        low = "float32" if dtype == np.float64 else "complex64"
        assert (info.precision, info.factor_dtype, info.compute) == ("mixed", low, "fp32")
        assert not info.fallback and info.reason is None and info.iterations >= 1, info
        assert info.replicated == (replicate and grid.size > 1), info
        assert ("replicate" in info.times) == info.replicated, info.times
        assert info.history[-1] <= 1.0 < info.history[0]
        assert X.dtype == dtype and X.same_layout(B)
        assert berr_np(a, X.to_global(None), b) <= max(20 * ref, 4 * N * EPS)


@pytest.mark.mpi
def test_replicated_factors_need_the_memory(grids, monkeypatch):
    """No copies when one rank lacks the memory for them: every rank then solves distributed
    (the decision is agreed, not taken per rank)."""
    from distla.linalg import mixed, solve
    monkeypatch.setitem(mixed.REPLICATE, "cpu", True)
    a = conditioned(N, 1e2, 3, spd=True)
    b = random_array((N, 1), seed=4)
    for grid in grids:
        A = _dist(grid, a)
        low = 0 if grid.comm.rank == grid.size - 1 else 1 << 40     # the last rank: none
        monkeypatch.setattr(type(A.backend), "free_memory", lambda self: low, raising=False)
        X, info = solve(A, _dist(grid, b, (NB, 1)), method="cholesky", precision="mixed",
                        return_info=True)
        assert info.replicated is False, info
        assert not info.fallback and berr_np(a, X.to_global(None), b) <= 4 * N * EPS


@pytest.mark.mpi
def test_replication_out_of_memory_on_one_rank_solves_distributed(grids, monkeypatch):
    """One rank cannot allocate the whole copy (here: injected): every rank agrees and the
    refinement solves with the distributed factors instead (no hang in the all-gather, no
    error: the copies are only a faster way to the same solves)."""
    from distla.device.base import Backend
    from distla.linalg import mixed, solve
    monkeypatch.setitem(mixed.REPLICATE, "cpu", True)
    real = Backend.empty
    a = conditioned(N, 1e2, 3, spd=True)
    b = random_array((N, 1), seed=4)
    for grid in grids:
        def empty(self, shape, dtype=np.float64,
                  _last=grid.size > 1 and grid.comm.rank == grid.size - 1):
            if _last and tuple(np.atleast_1d(shape)) == (N, N):
                raise MemoryError("injected: no room for the copy")
            return real(self, shape, dtype)
        monkeypatch.setattr(Backend, "empty", empty)
        X, info = solve(_dist(grid, a), _dist(grid, b, (NB, 1)), method="cholesky",
                        precision="mixed", return_info=True)
        assert info.replicated is False and not info.fallback, info
        assert berr_np(a, X.to_global(None), b) <= max(20 * _ref_berr(a, b), 4 * N * EPS)


@pytest.mark.mpi
def test_replicate_flag_set_on_some_ranks_only_does_not_split_collectives(grids, monkeypatch):
    """REPLICATE differing between ranks (eighteenth sweep: a hang) is agreed first: the
    copies are made only where every rank asks for them."""
    from distla.linalg import mixed, solve
    a = conditioned(N, 1e2, 3, spd=True)
    b = random_array((N, 1), seed=4)
    for grid in grids:
        monkeypatch.setitem(mixed.REPLICATE, "cpu", grid.comm.rank == 0)
        X, info = solve(_dist(grid, a), _dist(grid, b, (NB, 1)), method="cholesky",
                        precision="mixed", return_info=True)
        assert info.replicated is False and not info.fallback, info
        _same_everywhere(grid.comm, info.iterations)
        assert berr_np(a, X.to_global(None), b) <= max(20 * _ref_berr(a, b), 4 * N * EPS)


@pytest.mark.mpi
@pytest.mark.parametrize("where", ["factor copies", "right-hand side"])
def test_replicate_failing_on_one_rank_is_agreed(grids, monkeypatch, where):
    """A copy failing on one rank inside replicate (injected): while the factors are copied,
    every rank goes on with the distributed factors; while a right-hand side is, every rank
    raises the same error. Never a hang."""
    from distla import DistlaError, replicate
    from distla.linalg import mixed, solve
    monkeypatch.setitem(mixed.REPLICATE, "cpu", True)
    real = replicate._copy
    a = conditioned(N, 1e2, 3, spd=True)
    b = random_array((N, 1), seed=4)
    for grid in grids:
        if grid.size == 1:
            continue
        last = grid.comm.rank == grid.size - 1

        def copy(dst, src):
            rhs = dst.shape[-1] == 1
            if last and rhs == (where == "right-hand side"):
                raise MemoryError("injected: copy failed")
            return real(dst, src)
        monkeypatch.setattr(replicate, "_copy", copy)
        A, B = _dist(grid, a), _dist(grid, b, (NB, 1))
        if where == "factor copies":
            X, info = solve(A, B, method="cholesky", precision="mixed", return_info=True)
            assert info.replicated is False and not info.fallback, info
            assert berr_np(a, X.to_global(None), b) <= max(20 * _ref_berr(a, b), 4 * N * EPS)
        else:
            with pytest.raises((MemoryError, DistlaError), match="injected"):
                solve(A, B, method="cholesky", precision="mixed")
        monkeypatch.setattr(replicate, "_copy", real)


@pytest.mark.mpi
def test_mixed_info_carries_the_condition_estimate(grids):
    """SolveInfo.rcond: the certificate's estimate for a mixed solve, the float64 solve's after
    a fallback, None without check_rcond."""
    from distla.linalg import solve
    a = conditioned(N, 1e3, 5, spd=True)
    true = 1 / np.linalg.cond(a, 1)
    bad = conditioned(N, 1e14, 6)
    b = random_array((N, 1), seed=7)
    for grid in grids[:2]:
        _, info = solve(_dist(grid, a), _dist(grid, b, (NB, 1)), method="cholesky",
                        precision="mixed", return_info=True)
        assert not info.fallback and true / 10 <= info.rcond <= true * 10, (info, true)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _, info = solve(_dist(grid, bad), _dist(grid, b, (NB, 1)), method="gepp",
                            precision="mixed", return_info=True)
        assert info.fallback and 0 <= info.rcond < 1e-10, info
        _, info = solve(_dist(grid, a), _dist(grid, b, (NB, 1)), method="gepp",
                        precision="mixed", return_info=True, check_rcond=False)
        assert info.rcond is None, info


@pytest.mark.mpi
def test_replicated_solve_failing_on_one_rank_raises_everywhere(grids, monkeypatch):
    """A rank whose own solve with the copies fails (here: injected) does not leave the
    others waiting in the next residual: every rank raises the same error."""
    import importlib

    from distla import DistlaError
    from distla.linalg import mixed, solve
    ch = importlib.import_module("distla.linalg.cholesky")
    from distla.replicate import self_grid
    monkeypatch.setitem(mixed.REPLICATE, "cpu", True)
    real = ch.cho_solve

    def failing(c, B, **kw):
        if B.grid is self_grid() and grids[0].comm.rank == grids[0].size - 1:
            raise MemoryError("injected: out of memory in the local sweep")
        return real(c, B, **kw)
    monkeypatch.setattr(ch, "cho_solve", failing)
    a = conditioned(N, 1e2, 3, spd=True)
    b = random_array((N, 1), seed=4)
    for grid in grids:
        if grid.size == 1:
            continue
        with pytest.raises((MemoryError, DistlaError), match="injected"):
            solve(_dist(grid, a), _dist(grid, b, (NB, 1)), method="cholesky",
                  precision="mixed")


@pytest.mark.mpi
@pytest.mark.parametrize("method", ["cholesky", "gepp"])
def test_mixed_with_ranks_that_hold_no_columns(grids, method):
    """One block larger than the matrix: every rank but one holds no entries of A (the
    refinement's residual once divided its columns into slabs of zero width on them)."""
    from distla.linalg import solve
    n = 20
    a = conditioned(n, 1e2, 5, spd=method == "cholesky")
    b = random_array((n, 1), seed=6)
    for grid in grids:
        A, B = _dist(grid, a, nb=32), _dist(grid, b, nb=32)
        X, info = solve(A, B, method=method, precision="mixed", return_info=True)
        assert info.precision == "mixed" and not info.fallback, info
        assert berr_np(a, X.to_global(None), b) <= max(20 * _ref_berr(a, b), 4 * n * EPS)


@pytest.mark.mpi
@pytest.mark.parametrize("replicate", ["no", "copies", "copies, no memory to promote them"])
def test_gmres_ir_takes_over_when_ir_stalls(grids, monkeypatch, replicate):
    """cond 1e9: float32 factors make classical IR diverge (cond * eps32 > 1); GMRES-IR
    (preconditioned by the factors in float64) still converges from the float32 LU (without
    the time budget, which at this size would rather fall back): with distributed factors,
    with whole copies (promoted for GMRES-IR), and with copies for the classical solves but
    too little memory left to promote them (GMRES-IR then promotes the distributed ones)."""
    from distla.device.base import Backend
    from distla.linalg import mixed, solve_lu
    monkeypatch.setattr(mixed, "REFINE_BUDGET", None)
    monkeypatch.setitem(mixed.REPLICATE, "cpu", replicate != "no")
    if replicate.endswith("promote them"):        # enough for the copies, then nothing
        calls = []

        def free_memory(self):
            calls.append(1)
            return 1 << 40 if len(calls) == 1 else 0
        monkeypatch.setattr(Backend, "free_memory", free_memory)
    a = conditioned(N, 1e9, 3)
    b = random_array((N, 1), seed=4)
    for grid in grids:
        if replicate.endswith("promote them"):
            calls.clear()
        X, info = solve_lu(_dist(grid, a), _dist(grid, b), precision="mixed",
                           return_info=True, check_rcond=False)   # (certifies in IR's range)
        assert info.precision == "mixed" and not info.fallback, info
        assert info.replicated == (replicate != "no" and grid.size > 1), info
        if replicate.endswith("promote them") and grid.size > 1:
            assert len(calls) == 2          # asked once for the copies, once to promote
        assert info.gmres_iterations and all(1 <= m <= 30 for m in info.gmres_iterations)
        assert berr_np(a, X.to_global(None), b) <= max(20 * _ref_berr(a, b), 4 * N * EPS)


@pytest.mark.mpi
def test_condition_estimate_is_checked_before_gmres_ir(grids):
    """mode 'auto' with a condition estimate: when classical IR hands over to GMRES-IR (here
    an exact solve overshooting by 2.5x: the error grows 1.5x per correction) the estimate is
    checked first, once; one below eps ends the refinement there, on every rank, with the
    reason and no GMRES iteration; one above it lets GMRES-IR converge and is not computed
    again at acceptance."""
    from distla.linalg import lu_factor, lu_solve
    from distla.linalg import refine as rf
    a = conditioned(N, 1e2, 8)
    b = random_array((N, 1), seed=9)
    for grid in grids[:3]:
        A, B = _dist(grid, a), _dist(grid, b)
        F = lu_factor(A)
        overshoot = _scaled_solve(F, 2.5)
        x0 = lu_solve(F, B)
        x0.local *= 1 + 1e-6
        for rc, ok in ((0.0, False), (0.5, True)):
            calls = []

            def estimate():
                calls.append(1)
                return grid.allreduce(rc, "max")   # (collective, like the real estimate)
            ref = rf.refine(A, B, overshoot, x=x0.copy(), anorm=A.norm("inf"), mode="auto",
                            precond=lambda R: lu_solve(F, R), rcond=estimate)
            assert ref.converged == ok and len(calls) == 1 and ref.rcond == rc, ref.reason
            if ok:
                assert ref.gmres_iterations, ref.history
            else:
                assert ref.gmres_iterations == [] and ref.iterations == 1, ref.history
                assert "condition estimate" in ref.reason, ref.reason
                _same_everywhere(grid.comm, ref.reason)


@pytest.mark.mpi
@pytest.mark.parametrize("method", ["gepp", "calu"])
def test_mixed_with_check_rcond_certifies_before_gmres_ir(grids, method):
    """cond 1e12 (n = 512): classical IR with float32 factors does not converge. GMRES-IR
    could reach a backward-stable x, but check_rcond's certificate (which refines its own
    solutions classically) fails, so with check_rcond the solve falls back as soon as
    classical IR hands over, saying why, with no GMRES-IR iteration; without check_rcond
    GMRES-IR runs (docs/mixed.md). Both answers at float64's backward error."""
    from distla import DistMatrix, problems
    from distla.linalg import solve
    n = 512
    for grid in grids[:2]:
        A = problems.conditioned_matrix(grid, n, 64, cond=1e12, seed=1)
        B = DistMatrix.random(grid, (n, 1), (64, 64), seed=6)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            X, info = solve(A, B, method=method, precision="mixed", return_info=True)
            X2, info2 = solve(A, B, method=method, precision="mixed", check_rcond=False,
                              return_info=True)
        assert info.fallback and info.gmres_iterations == [], info
        assert "condition estimate" in info.reason, info.reason
        _same_everywhere(grid.comm, info.reason)
        assert info2.gmres_iterations, info2
        a, b = A.to_global(None), B.to_global(None)
        for x in (X, X2):
            assert berr_np(a, x.to_global(None), b) <= max(20 * _ref_berr(a, b), 4 * n * EPS)


# ---------------------------------------------------------------------------------------
# ill-conditioned: fall back to float64 with the reason, or raise everywhere
# ---------------------------------------------------------------------------------------
@pytest.mark.mpi
@pytest.mark.parametrize("method,dtype", METHODS)
def test_ill_conditioned_falls_back_with_reason(grids, method, dtype):
    from distla.linalg import solve
    n = 150
    a = conditioned(n, 1e10, 5, spd=method == "cholesky", complex_=dtype == np.complex128)
    b = random_array((n, 1), dtype, seed=6)
    ref = _ref_berr(a, b)
    for grid in grids[:2]:
        A, B = _dist(grid, a, 16, corner(grid)), _dist(grid, b, 16)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")   # float64 solve of cond 1e10: no warning due
            X, info = solve(A, B, method=method, precision="mixed", return_info=True)
        assert info.fallback and info.precision == "double", info
        assert info.factor_dtype == info.compute == np.dtype(dtype).name
        assert info.reason.startswith(f"fp32 {method}: ")
        assert any(w in info.reason for w in ("refinement", "factorization failed",
                                              "condition estimate")), info.reason
        _same_everywhere(grid.comm, info.reason)
        assert berr_np(a, X.to_global(None), b) <= max(20 * ref, 4 * n * EPS)


@pytest.mark.mpi
@pytest.mark.parametrize("method", ["cholesky", "gepp"])
def test_fallback_false_raises_the_same_error_everywhere(grids, method):
    from distla import ConvergenceError
    from distla.linalg import solve
    n = 150
    a = conditioned(n, 1e12, 7, spd=method == "cholesky")
    b = random_array((n, 1), seed=8)
    for grid in grids[:2]:
        with pytest.raises(ConvergenceError, match="fallback=True") as ei:
            solve(_dist(grid, a, 16), _dist(grid, b, 16), method=method, precision="mixed",
                  fallback=False)
        _same_everywhere(grid.comm, str(ei.value))


@pytest.mark.mpi
def test_never_returns_an_unrefined_answer(grids):
    """Without corrections (max_iter=0) a float32 answer cannot meet the float64 criterion:
    the float64 solve runs. With one correction allowed, either it converged or it fell back:
    the answer is at float64's backward error either way."""
    from distla.linalg import solve
    a = conditioned(N, 1e5, 9)
    b = random_array((N, 1), seed=10)
    for grid in grids:
        A, B = _dist(grid, a), _dist(grid, b)
        X, info = solve(A, B, precision="mixed", max_iter=0, return_info=True)
        assert info.fallback and "refinement is off" in info.reason, info
        for max_iter in (1, 2):
            X, info = solve(A, B, precision="mixed", max_iter=max_iter, return_info=True)
            assert info.fallback or info.iterations >= 1
            assert berr_np(a, X.to_global(None), b) <= max(20 * _ref_berr(a, b), 4 * N * EPS)


@pytest.mark.mpi
def test_refine_takes_a_first_solution_in_any_layout(grids):
    """refine's first solution x may have any layout (it is moved to B's, where the answer
    is, and left unmodified); an x or B it cannot use is refused before any solve."""
    from distla import DistMatrix
    from distla.linalg import lu_factor, lu_solve
    from distla.linalg.refine import refine
    a = conditioned(N, 1e3, 11)
    b = random_array((N, 3), seed=12)
    x0 = np.linalg.solve(a, b) * (1 + 1e-4)
    for grid in grids:
        A, B = _dist(grid, a, 8), _dist(grid, b, 8)
        F = lu_factor(A.astype(np.float32))
        calls = []

        def solve(R):
            calls.append(1)
            return lu_solve(F, R.astype(np.float32)).astype(np.float64)
        X0 = DistMatrix.from_global(grid, x0, block=(5, 2), src=corner(grid))
        out = refine(A, B, solve, anorm=A.norm("inf"), x=X0)
        assert out.converged and out.x.same_layout(B), out.reason
        assert berr_np(a, out.x.to_global(None), b) <= 4 * N * EPS
        np.testing.assert_array_equal(X0.to_global(None), x0)      # not modified
        calls.clear()
        for bad in (_dist(grid, b[:, :2], 8), _dist(grid, b.astype(np.float32), 8)):
            with pytest.raises((ValueError, TypeError), match="refine: x"):
                refine(A, B, solve, anorm=1.0, x=bad)
        with pytest.raises(ValueError, match="refine: B"):
            refine(A, DistMatrix.from_global(grid, b, block=(5, 3)), solve, anorm=1.0)
        assert not calls


@pytest.mark.mpi
def test_non_finite_rhs_ends_the_refinement_at_once(grids):
    """An infinity in B with check_finite=False: the scaled residual is inf (it was the
    largest float, finite, so GMRES-IR ran its 30 iterations until the refinement
    stagnated or ran out of time) and the attempt fails before any correction; a zero
    x column against a nonzero residual stays finite (large)."""
    from distla import DistMatrix
    from distla.linalg import solve
    from distla.linalg.refine import scaled_residual
    a = conditioned(N, 10.0, 13)
    b = random_array((N, 2), seed=14)
    b[3, 0] = np.inf
    for grid in grids[:3]:
        X, info = solve(_dist(grid, a), _dist(grid, b), precision="mixed",
                        check_finite=False, return_info=True)
        assert info.fallback and "non-finite" in info.reason and info.iterations == 0, info
        assert not info.gmres_iterations
        R = _dist(grid, np.ones((N, 2)))
        Z = DistMatrix.zeros(grid, (N, 2), (NB, NB))
        rho = scaled_residual(R, Z, 1.0, 1e-16)
        assert np.isfinite(rho) and rho > 1e300


@pytest.mark.mpi
def test_time_budget_ends_a_slow_refinement_everywhere(grids, monkeypatch):
    """A refinement past its time budget fails with that reason on every rank (here a budget
    of zero seconds), and the float64 solve answers."""
    from distla.linalg import mixed, solve
    monkeypatch.setattr(mixed, "REFINE_BUDGET", 0.0)
    monkeypatch.setattr(mixed, "MIN_SOLVES", 0)
    monkeypatch.setattr(mixed, "MIN_BUDGET_S", 0.0)
    a = conditioned(N, 1e9, 3)
    b = random_array((N, 1), seed=4)
    for grid in grids[:2]:
        X, info = solve(_dist(grid, a), _dist(grid, b), precision="mixed", return_info=True)
        assert info.fallback and "exceeded its time budget" in info.reason, info
        assert berr_np(a, X.to_global(None), b) <= max(20 * _ref_berr(a, b), 4 * N * EPS)


@pytest.mark.mpi
def test_first_gmres_correction_is_charged_after_its_first_iteration(grids):
    """Only a GMRES-IR correction's start (first preconditioner application) and first
    iteration are free of the refinement's time budget (in a fresh process they load
    kernels): with a budget of ~0, GMRES stops after that iteration instead of running its
    30; with no budget it runs on."""
    from distla.linalg import lu_factor, lu_solve
    from distla.linalg.refine import _Budget, gmres
    a = conditioned(N, 1e9, 5)
    b = random_array((N, 1), seed=6)
    for grid in grids[:2]:
        A, B = _dist(grid, a), _dist(grid, b)
        F = lu_factor(A.astype(np.float32))

        def precond(R):
            return lu_solve(F, R.astype(np.float32)).astype(np.float64)
        clock = _Budget(grid, 1e-9)
        _, m = gmres(A, B, precond, 30, 1e-15, clock.over, free=clock.first)
        assert m == 1 and clock.free > 0 and clock.spent > clock.budget, m
        clock = _Budget(grid, None)
        _, m = gmres(A, B, precond, 30, 1e-15, clock.over, free=clock.first)
        assert m > 2, m


def test_refinement_projection():
    """refine.projected_corrections: a steady 2x decrease from 1e6 needs log2(1e6) more
    corrections, one that no longer shrinks infinitely many, a converged one none."""
    from distla.linalg import refine as rf
    assert rf.projected_corrections([4e6, 2e6, 1e6]) == pytest.approx(np.log2(1e6))
    assert rf.projected_corrections([1e3, 1e3, 1e3]) == np.inf
    assert rf.projected_corrections([1e3, 1e2, 2e3]) == np.inf
    assert rf.projected_corrections([1e3, 1e2, 0.5]) == 0.0
    assert rf.projected_corrections([1e3, 1e2]) == 0.0                 # too short to judge


@pytest.mark.mpi
def test_slow_refinement_fails_as_soon_as_it_cannot_make_its_budget(grids, monkeypatch):
    """Corrections that take 60% of the error off (a damped exact solve from x* (1 + 1e-3))
    need ~30 steps to reach rho <= 1. On a clock where every reading advances 1 s
    (deterministic: ~1 s per correction), a 20 s budget cannot be made: the refinement fails after
    PROJECT_FROM corrections with that reason, on every rank, instead of at 20 s; with a
    1000 s budget the same refinement converges."""
    import types

    from distla.linalg import lu_factor, lu_solve
    from distla.linalg import refine as rf
    ticks = iter(range(10 ** 6))
    monkeypatch.setattr(rf, "time", types.SimpleNamespace(perf_counter=lambda: next(ticks)))
    a = conditioned(N, 1e2, 8)
    b = random_array((N, 1), seed=9)
    for grid in grids[:2]:
        A, B = _dist(grid, a), _dist(grid, b)
        F = lu_factor(A)
        solve = _scaled_solve(F, 0.6)
        for budget, ok in ((20.0, False), (1000.0, True)):
            x0 = lu_solve(F, B)
            x0.local *= 1 + 1e-3
            ref = rf.refine(A, B, solve, x=x0, anorm=A.norm("inf"), max_iter=60,
                            budget=budget)
            assert ref.converged == ok, ref.reason
            if not ok:
                assert ref.iterations == rf.PROJECT_FROM, ref.history
                assert "would exceed its time budget" in ref.reason, ref.reason
                assert len(set(grid.comm.allgather(ref.reason))) == 1


def test_gmres_hopeless_projection():
    """refine.hopeless: a steady 2x-per-iteration decrease goes on, a plateau (8% per
    iteration: >60 iterations projected to reach 1e-8) stops from GMRES_PROBE iterations on,
    and a converged or short run never stops."""
    from distla.linalg import refine as rf
    fast = [0.5 ** (i + 1) for i in range(12)]
    slow = [1e-3 * 0.92 ** i for i in range(12)]
    assert not any(rf.hopeless(fast[:j], 1e-8, 30) for j in range(1, 13))
    assert not rf.hopeless(slow[:rf.GMRES_PROBE - 1], 1e-8, 30)
    assert rf.hopeless(slow[:rf.GMRES_PROBE], 1e-8, 30)
    assert rf.hopeless([1e-3] * 10, 1e-8, 30)                # no progress at all
    assert not rf.hopeless([1e-3] * 9 + [1e-9], 1e-8, 30)    # converged


@pytest.mark.mpi
def test_gmres_ir_stops_a_hopeless_correction_early(grids):
    """GMRES-IR with float32 LU factors: at cond 1e8 its corrections converge (about 20
    iterations each) and the refinement reaches double accuracy; at cond 1e10 GMRES
    plateaus near 1e-4 and the correction stops soon after GMRES_PROBE iterations instead of
    running 30 (it would not have halved the residual anyway): the refinement fails early."""
    from distla import DistMatrix, problems
    from distla.linalg import lu_factor, lu_solve
    from distla.linalg import refine as rf
    from distla.linalg.lu import LUFactor
    grid = grids[0]
    for cond, ok in ((1e8, True), (1e10, False)):
        A = problems.conditioned_matrix(grid, 512, 64, cond=cond, seed=1)
        B = DistMatrix.random(grid, (512, 1), (64, 64), seed=2)
        F = lu_factor(A.astype(np.float32))
        G = LUFactor(F.lu.astype(np.float64), F.piv, F.pivoting, F.max_abs_a, F.tree)

        def solve(R):
            return lu_solve(F, R.astype(np.float32)).astype(np.float64)
        ref = rf.refine(A, B, solve, anorm=A.norm("inf"), mode="auto",
                        precond=lambda R: lu_solve(G, R))
        assert ref.converged == ok, (cond, ref.reason)
        if ok:
            assert all(m > rf.GMRES_PROBE for m in ref.gmres_iterations)
        else:
            (m,) = ref.gmres_iterations          # stopped early (the plateau's start varies
            assert rf.GMRES_PROBE <= m < rf.GMRES_RESTART and "stagnated" in ref.reason, m


@pytest.mark.mpi
def test_overflowing_float32_falls_back(grids):
    from distla.linalg import solve
    a = conditioned(N, 10.0, 11) * 1e300
    b = random_array((N, 1), seed=12)
    for grid in grids[:2]:
        X, info = solve(_dist(grid, a), _dist(grid, b), precision="mixed", return_info=True)
        assert info.fallback and "overflows float32" in info.reason, info
        assert berr_np(a, X.to_global(None), b) <= 4 * N * EPS


# ---------------------------------------------------------------------------------------
# API: every solve path, one set of rules
# ---------------------------------------------------------------------------------------
@pytest.mark.mpi
def test_double_precision_info_and_rbt_factor_dtype(grids):
    from distla.linalg import rbt_solve, solve, solve_cholesky
    a = conditioned(N, 1e3, 13, spd=True)
    b = random_array((N, 1), seed=14)
    for grid in grids[:2]:
        A, B = _dist(grid, a), _dist(grid, b)
        X, info = solve_cholesky(A, B, return_info=True)
        assert (info.precision, info.factor_dtype, info.iterations) == ("double", "float64", 0)
        true = 1 / np.linalg.cond(a, 1)        # the double solves report their estimate
        assert true * 0.9999 <= info.rcond <= true * 10, (info.rcond, true)   # (a lower
        # bound of ||A^-1||_1: rcond at or above the true one)
        assert solve_cholesky(A, B, return_info=True, check_rcond=False)[1].rcond is None
        for m in ("gepp", "calu", "genp"):
            rc = solve(A, B, method=m, return_info=True)[1].rcond
            assert true * 0.9999 <= rc <= true * 10, (m, rc, true)
        X, info = rbt_solve(A, B, precision="mixed", factor_dtype="fp32", return_info=True)
        assert (info.factor_dtype, info.compute) == ("float32", "fp32") and info.converged
        Xm = solve(A, B, method="rbt", precision="mixed", return_info=True)[0]
        np.testing.assert_array_equal(X.to_global(None), Xm.to_global(None))


@pytest.mark.mpi
def test_bad_arguments_raise_on_every_rank(grids):
    from distla.linalg import rbt_solve, solve, solve_cholesky, solve_lu
    grid = grids[0]
    a = conditioned(16, 10.0, 15, spd=True)
    A, B = _dist(grid, a, 4), _dist(grid, np.ones((16, 1)), 4)
    cases = [
        (lambda: solve(A, B, precision="half"), ValueError),
        (lambda: solve(A, B, precision="mixed", factor_dtype="fp8"), ValueError),
        (lambda: solve(A, B, precision="mixed", factor_dtype="fp16"), ValueError),  # CPU
        (lambda: solve_lu(A, B, factor_dtype="fp32"), ValueError),        # needs 'mixed'
        (lambda: solve_lu(A, B, precision="mixed", trans=True), ValueError),
        (lambda: solve_cholesky(A.astype(np.float32), B.astype(np.float32),
                                precision="mixed"), TypeError),
        (lambda: rbt_solve(A, B, precision="mixed", factor_dtype="bf16"), ValueError),
    ]
    for fn, exc in cases:
        with pytest.raises(exc) as ei:
            fn()
        _same_everywhere(grid.comm, str(ei.value))


def test_cpu_low_precision_gemm_is_float32():
    """CPU ranks have no tensor cores: every low-precision mode computes the float32 GEMM."""
    from distla.device import get_backend
    be = get_backend("cpu")
    rng = np.random.default_rng(16)
    a = np.asfortranarray(rng.standard_normal((30, 20)), dtype=np.float32)
    b = np.asfortranarray(rng.standard_normal((20, 25)), dtype=np.float32)
    ref = np.zeros((30, 25), np.float32, order="F")
    be.gemm("N", "N", 1.0, a, b, 0.0, ref)
    for mode in ("tf32x3", "fp16x3", "tf32", "fp16", "bf16"):
        a2, b2, scale = be.lowp_operands(a, b, mode)
        c = np.zeros((30, 25), np.float32, order="F")
        be.gemm_lowp("N", "N", 1.0, a2, b2, 0.0, c, mode, scale)
        np.testing.assert_array_equal(c, ref)
    assert be.LOWP == ("fp32",) and be.lowp_mode("fp32") == "native"
    assert all(be.computes_in_fp32(m) for m in ("native", "tf32x3", "fp16"))


@pytest.mark.mpi
def test_cholesky_low_precision_modes_on_cpu_are_float32(grids, monkeypatch):
    """The Cholesky loop's low-precision update path (a few GEMMs over runs of block columns,
    some blocks above the diagonal included) computes the float32 factor on CPU ranks, for
    one run per update and for runs as narrow as one block column."""
    from distla.linalg import _potrf_loop, cholesky
    a = conditioned(N, 1e2, 22, spd=True).astype(np.float32)
    for grid in grids:
        A = _dist(grid, a, src=corner(grid))
        ref = cholesky(A).to_global(None)
        for mode, cols, most in (("tf32x3", 4096, 8), ("fp16", 4096, 8), ("fp16", 1, 3),
                                 ("tf32", 1, 64), ("fp16x3", 1, 3)):
            monkeypatch.setattr(_potrf_loop, "LOWP_RUN_COLS", cols)
            monkeypatch.setattr(_potrf_loop, "LOWP_MAX_RUNS", most)
            L = cholesky(A, gemm=mode).to_global(None)
            np.testing.assert_allclose(L, ref, rtol=0, atol=1e-5)
        with pytest.raises(TypeError, match="float32"):
            cholesky(A.astype(np.float64), gemm="fp16")


def test_cholesky_low_precision_update_runs_tile_the_columns(monkeypatch):
    """The runs of block columns one low-precision GEMM each covers: adjacent, covering
    every column once, at most LOWP_MAX_RUNS and about LOWP_RUN_COLS wide or more."""
    from mpi4py import MPI

    from distla import DistMatrix, ProcessGrid
    from distla.linalg import _potrf_loop
    grid = ProcessGrid(1, 1, MPI.COMM_SELF)
    A = DistMatrix.zeros(grid, (100, 100), (7, 7), dtype=np.float32)
    loop = _potrf_loop.PotrfLoop(A, 1, compute="fp16")
    nc = len(loop.cols)
    for cols, most in ((1, 64), (1, 3), (20, 8), (35, 8), (4096, 8)):
        monkeypatch.setattr(_potrf_loop, "LOWP_RUN_COLS", cols)
        monkeypatch.setattr(_potrf_loop, "LOWP_MAX_RUNS", most)
        for lo in range(nc):
            for hi in range(lo + 1, nc + 1):
                runs = loop.runs(lo, hi)
                assert runs[0][0] == lo and runs[-1][1] == hi
                assert all(e == i2 for (_, e), (i2, _) in zip(runs, runs[1:]))
                assert all(i < e for i, e in runs)
                width = sum(loop.cols[hi - 1][:2]) - loop.cols[lo][0]
                assert len(runs) <= max(1, min(most, width // cols))
                if cols == 1 and most >= nc:
                    assert len(runs) == hi - lo


def test_conditioned_matrix_has_the_prescribed_singular_values():
    from mpi4py import MPI

    from distla import ProcessGrid
    from distla.problems import conditioned_matrix
    grid = ProcessGrid(1, 1, MPI.COMM_SELF)
    for n, spd in ((96, False), (97, True), (50, False)):
        a = conditioned_matrix(grid, n, 16, cond=1e6, seed=3, spd=spd).to_global(None)
        s = np.linalg.svd(a, compute_uv=False)
        np.testing.assert_allclose(s, 1e6 ** (-np.arange(n) / (n - 1)), rtol=1e-8)
        if spd:
            np.testing.assert_allclose(a, a.T, atol=1e-15)
            assert np.linalg.eigvalsh(a).min() > 0


@pytest.mark.mpi
def test_conditioned_matrix_is_the_same_on_every_grid(grids):
    from distla.problems import conditioned_matrix
    ref = None
    for grid in grids:
        a = conditioned_matrix(grid, 45, (4, 4), cond=1e4, seed=2).to_global(None)
        ref = a if ref is None else ref
        np.testing.assert_allclose(a, ref, rtol=0, atol=1e-14)


# ---------------------------------------------------------------------------------------
# GPU: tensor-core updates (skipped without CuPy and a device)
# ---------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("mode,bits", [("tf32x3", 21), ("fp16x3", 21), ("tf32", 10), ("fp16", 10),
                                       ("bf16", 7)])
def test_gpu_low_precision_gemm_accuracy(mode, bits):
    """The product of scaled casts, accumulated in float32, is within the format's rounding
    of the float64 product; entries far beyond fp16's range do not overflow."""
    import cupy as cp

    from distla.device import get_backend
    be = get_backend("gpu")
    assert not be.computes_in_fp32(mode) and be.computes_in_fp32("native")
    rng = np.random.default_rng(17)
    a = rng.standard_normal((300, 64)) * 1e6          # fp16 max is 65504
    b = rng.standard_normal((64, 90)) * 1e-3
    ref = 1.0 - a.astype(np.float32).astype(np.float64) @ b.astype(np.float32)
    # column-major, row-major and strided operands; new arrays or a workspace
    for order, out in (("F", None), ("C", None), ("F", be.lowp_buffers(mode, 300, 64, 90)),
                       ("C", be.lowp_buffers(mode, 300, 64, 90)), ("strided", None)):
        if order == "strided":
            ag = cp.zeros((600, 64), cp.float32, order="F")[::2]
            ag[...] = cp.asarray(a, dtype=cp.float32)
            bg = cp.asarray(b, dtype=cp.float32, order="F")
        else:
            ag, bg = (cp.asarray(x, dtype=cp.float32, order=order) for x in (a, b))
        c = cp.ones((300, 90), cp.float32, order="F")
        a2, b2, scale = be.lowp_operands(ag, bg, mode, out=out)
        be.gemm_lowp("N", "N", -1.0, a2, b2, 1.0, c, mode, scale)
        err = np.abs(c.get() - ref).max() / (np.abs(a).max() * np.abs(b).max() * 64)
        assert np.all(np.isfinite(c.get())) and err < 4 * 2.0 ** -bits, (order, err)
    # a zero operand: scale 1, product 0
    z = cp.zeros((300, 64), cp.float32, order="F")
    c = cp.ones((300, 90), cp.float32, order="F")
    a2, b2, scale = be.lowp_operands(z, bg, mode)
    be.gemm_lowp("N", "N", -1.0, a2, b2, 1.0, c, mode, scale)
    assert cp.all(c == 1)
    # empty operands (a loop's last steps): k = 0 scales c by beta, an empty c is left alone
    e, f = cp.zeros((300, 0), cp.float32, order="F"), cp.zeros((0, 90), cp.float32, order="F")
    a2, b2, scale = be.lowp_operands(e, f, mode)
    be.gemm_lowp("N", "N", -1.0, a2, b2, 0.5, c, mode, scale)
    assert cp.all(c == 0.5)
    be.gemm_lowp("N", "N", -1.0, a2[:0], b2, 0.5, c[:0], mode, None)


@pytest.mark.mpi
@pytest.mark.gpu
@pytest.mark.parametrize("factor_dtype", ["fp32", "tf32", "fp16", "bf16"])
def test_gpu_mixed_solves_reach_double_accuracy(grids, factor_dtype):
    from distla.linalg import solve
    n = 200
    # condition numbers well inside 1 / (unit roundoff of the update format)
    cond = {"fp32": 1e4, "tf32": 1e2, "fp16": 1e2, "bf16": 20.0}[factor_dtype]
    for method in ("cholesky", "gepp", "calu", "rbt"):
        a = conditioned(n, cond, 18, spd=method == "cholesky")
        b = random_array((n, 1), seed=19)
        for grid in grids[:2]:
            A, B = _dist(grid, a, 32).to("gpu"), _dist(grid, b, 32).to("gpu")
            X, info = solve(A, B, method=method, precision="mixed", factor_dtype=factor_dtype,
                            return_info=True)
            assert X.device == "gpu", info
            if method != "rbt":   # (RBT may retry in float64: GENP growth, docs/rbt.md)
                assert info.compute == factor_dtype and not info.fallback, info
            assert berr_np(a, X.to_global(None), b) <= max(20 * _ref_berr(a, b), 4 * n * EPS)


@pytest.mark.mpi
@pytest.mark.gpu
def test_gpu_ill_conditioned_falls_back(grids):
    from distla.linalg import solve
    n = 200
    a = conditioned(n, 1e12, 20)
    b = random_array((n, 1), seed=21)
    for grid in grids[:2]:
        A, B = _dist(grid, a, 32).to("gpu"), _dist(grid, b, 32).to("gpu")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            X, info = solve(A, B, method="gepp", precision="mixed", factor_dtype="fp16",
                            return_info=True)
        assert info.fallback and info.reason.startswith("fp16 gepp: "), info
        assert berr_np(a, X.to_global(None), b) <= max(20 * _ref_berr(a, b), 4 * n * EPS)


# ---------------------------------------------------------------------------------------
# what low-precision factors cannot see: A's condition in its own precision
# ---------------------------------------------------------------------------------------
@pytest.mark.mpi
def test_refined_rcond_from_float32_factors(grids):
    """condition.refined_rcond: from float32 LU factors, within 10x of the true float64
    reciprocal condition number where refinement with them converges (cond 1e1, 1e4), 0.0
    (not certified) or within 10x beyond (1e7, 1e10), and 0.0 for a numerically singular
    matrix, whose float32 factors' own estimate (~1e-10) would pass for well-conditioned."""
    from distla.linalg import lu_factor, lu_solve
    from distla.linalg.condition import refined_rcond
    n = 40
    cases = [conditioned(n, c, seed=3) for c in (1e1, 1e4, 1e7, 1e10)]
    sing = np.random.default_rng(7).standard_normal((n, n))
    sing[-1] = sing[0] + sing[1]
    for g in grids:
        for a in cases + [sing]:
            A = _dist(g, a, 7, src=corner(g))
            F = lu_factor(A.astype(np.float32), check_finite=False)

            def s(X, trans=0):
                return lu_solve(F, X.astype(np.float32), trans=trans).astype(np.float64)
            rc = refined_rcond(A, A.norm(1), s, lambda X: s(X, 2))
            _same_everywhere(g.comm, rc)
            true = 1 / np.linalg.cond(a, 1)
            own = F.rcond()
            if a is sing:     # own: ~1e-10, by the BLAS's rounding: far above float64's eps
                assert rc == 0.0 and own > 1e4 * np.finfo(np.float64).eps, (rc, own)
            elif true > 1e-6:
                assert true / 10 <= rc <= true * 10 * (1 + 1e-8), (rc, true)
            else:
                assert rc == 0.0 or true / 10 <= rc <= true * 10 * (1 + 1e-8), (rc, true)


@pytest.mark.mpi
@pytest.mark.parametrize("method", ["gepp", "calu", "genp", "rbt", "gepp-replicated"])
def test_mixed_on_a_numerically_singular_matrix_warns_like_double(grids, method,
                                                                  monkeypatch):
    """A singular A (cond 4e16) with float32 factors: refinement converges to a backward
    stable but meaningless x, and the factors' own rcond (~1e-9) cannot show it. The mixed
    solve must not accept it silently: it ends in the float64 solve, which warns. (No time
    budget: on loaded ranks it could end the attempt first, for another reason.)"""
    from distla import LinAlgWarning
    from distla.linalg import mixed, solve
    monkeypatch.setattr(mixed, "REFINE_BUDGET", None)
    if method.endswith("-replicated"):    # the certificate's solves on whole copies
        method = method.split("-")[0]
        monkeypatch.setitem(mixed.REPLICATE, "cpu", True)
    n = 48
    rng = np.random.default_rng(7)
    a = rng.standard_normal((n, n))
    a[-1] = a[0] + a[1]
    b = rng.standard_normal((n, 1))
    for g in grids:
        A, B = _dist(g, a), _dist(g, b, (NB, 1))
        with pytest.warns(LinAlgWarning, match="ill-conditioned"):
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=".*falling back")   # RBT's own
                X, info = solve(A, B, method=method, precision="mixed", return_info=True)
        assert info.precision == "double" and info.fallback, info
        assert "singular" in info.reason, info.reason   # (exact zero pivot, or not certified)


@pytest.mark.mpi
def test_mixed_cholesky_of_a_lower_triangle(grids):
    """check_symmetric=False with only the lower triangle stored (the docs' case): the mixed
    solve refines against the matrix the factorization reads, not the stored square."""
    from distla.linalg import solve_cholesky
    s = conditioned(N, 1e3, seed=5, spd=True)
    b = np.random.default_rng(2).standard_normal((N, 2))
    ref = np.linalg.solve(s, b)
    for g in grids:
        A, B = _dist(g, np.tril(s), src=corner(g)), _dist(g, b, (NB, 2))
        X, info = solve_cholesky(A, B, check_symmetric=False, precision="mixed",
                                 return_info=True)
        assert info.precision == "mixed" and not info.fallback, info
        np.testing.assert_allclose(X.to_global(None), ref, rtol=1e-9, atol=1e-12)
        np.testing.assert_array_equal(A.to_global(None), np.tril(s))    # A is not touched


@pytest.mark.mpi
@pytest.mark.parametrize("kw", [{"max_iter": -1}, {"max_iter": 2.5},
                                {"max_iter": True}, {"fallback": "no"}, {"fallback": 0}])
def test_refinement_options_are_validated(grids, kw):
    from distla.linalg import solve_cholesky, solve_lu
    g = grids[0]
    a = np.eye(6) * 3 + 0.1
    A, B = _dist(g, a, 2), _dist(g, np.ones((6, 1)), 2)
    for f in (solve_lu, solve_cholesky):
        with pytest.raises((TypeError, ValueError), match="max_iter|fallback"):
            f(A, B, precision="mixed", **kw)


def test_stagnation_is_not_reported_as_a_budget_projection():
    """A refinement stopped because its scaled residual no longer shrinks (projected time
    inf) says it stagnated, not that it 'would exceed its time budget (projected inf s)'."""
    import math
    import types

    from distla.linalg import refine as rf
    clock = types.SimpleNamespace(budget=1.0, spent=0.1, projected=math.inf)
    out = rf._fail(rf.Refinement(x=None, iterations=3), "fp32 gepp", 5.0, 30, clock)
    assert "stagnated" in out.reason and "inf" not in out.reason, out.reason
    clock.projected = 7.0
    out = rf._fail(rf.Refinement(x=None, iterations=3), "fp32 gepp", 5.0, 30, clock)
    assert "would exceed its time budget" in out.reason, out.reason


# ---------------------------------------------------------------------------------------
# sweep 26: answers the float64 solve gives, or a fallback
# ---------------------------------------------------------------------------------------
@pytest.mark.mpi
@pytest.mark.parametrize("method", ["cholesky", "gepp", "calu"])
def test_tiny_decoupled_rows_are_solved_componentwise_or_fall_back(grids, method):
    """b = [b1; 1e-60 b2] with A block diagonal: float32 residuals (scaled by their column's
    largest entry) lose the tiny rows, whose x came back as exactly 0 (relative error 1)
    accepted under the sparse-solution relaxation meant for RBT's row mixing. Now the
    answer is componentwise accurate, here through the float64 fallback."""
    from distla.linalg import solve
    h = 32
    rng = np.random.default_rng(0)
    a1, a2 = (rng.standard_normal((h, h)) + 3 * np.sqrt(h) * np.eye(h) for _ in range(2))
    a = sla.block_diag(a1 @ a1.T if method == "cholesky" else a1,
                       a2 @ a2.T if method == "cholesky" else a2)
    b = np.concatenate([rng.standard_normal(h), 1e-60 * rng.standard_normal(h)])[:, None]
    want = sla.solve(a, b)
    for g in grids:
        X, info = solve(_dist(g, a, 16), _dist(g, b, 16), method=method, precision="mixed",
                        return_info=True)
        x = X.to_global(None)
        assert np.abs(x[h:] - want[h:]).max() <= 1e-12 * np.abs(want[h:]).max()
        assert berr_np(a, x, b) <= 10 * EPS
        _same_everywhere(g.comm, (info.precision, info.fallback))


@pytest.mark.mpi
@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_mixed_cholesky_solves_the_lower_triangle_as_double_does(grids, dtype):
    """An A symmetric only within check_symmetric's tolerance (3e-10 in the upper triangle),
    or (check_symmetric=False) with garbage above the diagonal and an imaginary part on it:
    the float64 solve reads the lower triangle (real diagonal); the mixed one refined against
    all of A (apart by the asymmetry times cond: 5e-6 at cond 1e5)."""
    from distla.linalg import solve
    n = 60
    a = conditioned(n, 1e5, 3, spd=True, complex_=dtype == np.complex128)
    rng = np.random.default_rng(4)
    near = a + np.triu(rng.standard_normal((n, n)), 1) * 3e-10 * np.abs(a).max()
    junk = np.tril(a) + np.triu(rng.standard_normal((n, n)), 1)
    if dtype == np.complex128:
        junk[np.diag_indices(n)] += 1e-3j
    b = rng.standard_normal((n, 2)).astype(dtype)
    for g in grids:
        for m, check in ((near, True), (junk, False)):
            A, B = _dist(g, m.astype(dtype), 16), _dist(g, b, 16)
            xd = solve(A, B, method="cholesky", check_symmetric=check).to_global(None)
            xm, info = solve(A, B, method="cholesky", check_symmetric=check,
                             precision="mixed", return_info=True)
            assert info.precision == "mixed"
            np.testing.assert_allclose(xm.to_global(None), xd, rtol=0,
                                       atol=1e-9 * np.abs(xd).max())


@pytest.mark.mpi
@pytest.mark.parametrize("method", ["gepp", "cholesky"])
def test_corrections_go_on_until_the_componentwise_error_is_reached(grids, method):
    """A diagonal A of entries 1e-30..1e30: the normwise scaled residual is ~1e-48 after one
    correction, which ended the refinement; the componentwise test then failed and the solve
    fell back, blaming A. The corrections now go on while the componentwise error halves:
    the answer is mixed, at float64's componentwise backward error (the certificate off: A is
    normwise ill-conditioned, cond 1e60)."""
    from distla.linalg import solve
    n = 50
    rng = np.random.default_rng(2)
    a = np.diag(10.0 ** rng.uniform(-30, 30, n))
    b = rng.standard_normal((n, 2))
    for g in grids:
        X, info = solve(_dist(g, a), _dist(g, b), method=method, precision="mixed",
                        check_rcond=False, return_info=True)
        assert info.precision == "mixed" and not info.fallback, info
        assert info.iterations >= 2 and info.history[1] <= 1.0, info
        assert berr_np(a, X.to_global(None), b) <= 10 * EPS
        _same_everywhere(g.comm, (info.iterations, info.precision))


@pytest.mark.mpi
def test_right_hand_sides_near_the_largest_float(grids):
    """A column of B beyond 2^1023 (9e307, 1.7e308 / 2): its scaling power of two was 2^1024
    = inf, the refinement's residual NaN, and the solve fell back though nothing overflows."""
    from distla.linalg import solve
    n = 30
    rng = np.random.default_rng(0)
    a = 4.0 * np.eye(n) + rng.uniform(-0.1, 0.1, (n, n))
    b = np.stack([np.full(n, 9e307), np.full(n, 1.0)], axis=1)
    for g in grids:
        for method, m in (("gepp", a), ("cholesky", (a + a.T) / 2)):
            X, info = solve(_dist(g, m), _dist(g, b), method=method, precision="mixed",
                            return_info=True)
            x = X.to_global(None)
            assert info.precision == "mixed" and not info.fallback, info
            assert np.isfinite(x).all() and berr_np(m, x / 4, b / 4) <= 10 * EPS


@pytest.mark.mpi
def test_breakdown_times_the_factorization_and_empty_b_refines_nothing(grids):
    """A low-precision factorization that breaks down still reports its time ('factor');
    an n x 0 B is factored (A checked) and returns at once: no corrections."""
    from distla.linalg import solve
    n = 24
    b = np.ones((n, 1))
    for g in grids:
        spd = np.diag(np.linspace(1.0, 2.0, n))
        spd[0, 0] = 1e-50                   # positive definite in float64, 0 in float32
        X, info = solve(_dist(g, spd), _dist(g, b), method="cholesky", precision="mixed",
                        return_info=True, check_rcond=False)
        assert info.fallback and "factorization failed" in info.reason, info
        assert info.times.get("factor", 0.0) > 0, info.times
        E, info = solve(_dist(g, spd + np.eye(n)), _dist(g, np.zeros((n, 0))),
                        method="gepp", precision="mixed", return_info=True)
        assert E.shape == (n, 0) and info.iterations == 0 and not info.fallback, info
