"""Distributed BLAS (matmul / triangular_solve / norm) and the residual checks (mpi).

Everything is compared with NumPy/SciPy on the gathered matrices, on every grid shape and
rank order of the communicator, with odd sizes, blocks that do not divide them, nonzero
source processes and mismatched blockings.
"""

import numpy as np
import pytest
import scipy.linalg as sla

from distla import DistMatrix, checks
from distla.device import get_backend
from distla.pblas import matmul, norm, triangular_solve
from distla.testing import corner, random_array

pytestmark = pytest.mark.mpi

TOL = {np.float64: 1e-12, np.float32: 1e-4, np.complex128: 1e-12}


def some(grids):
    """1 x S row-major, a middle shape and S x 1 column-major: for the residual checks, which
    exercise distla.checks rather than every grid again."""
    return list(dict.fromkeys([grids[0], grids[len(grids) // 2], grids[-1]]))


rand = random_array


def close(got, want, dtype):
    scale = max(1.0, float(np.abs(want).max())) if want.size else 1.0
    np.testing.assert_allclose(got, want, rtol=TOL[dtype], atol=TOL[dtype] * scale)


# --------------------------------------------------------------------------------------
# matmul (SUMMA)
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("m,k,n", [(13, 9, 11), (1, 7, 5), (8, 1, 6), (5, 6, 1), (20, 17, 3),
                                   (14, 11, 19)])
def test_matmul_all_grids(grids, m, k, n):
    a, b = rand((m, k), seed=1), rand((k, n), seed=2)
    want = a @ b
    for g in grids:
        # (A blocks, A src, B blocks, B src): matching, mismatched inner blocks, big blocks
        for ba, sa, bb, sb in [((4, 3), (0, 0), (3, 2), (0, 0)),
                               ((3, 5), corner(g), (2, 4), (0, 0)),
                               ((2, 2), (0, 0), (5, 3), corner(g)),
                               ((16, 16), corner(g), (16, 16), corner(g))]:
            A = DistMatrix.from_global(g, a, block=ba, src=sa)
            B = DistMatrix.from_global(g, b, block=bb, src=sb)
            C = matmul(A, B)
            # documented layout: A's row blocking, B's column blocking
            assert C.shape == (m, n) and C.grid is g
            assert (C.mb, C.rsrc, C.nb, C.csrc) == (A.mb, A.rsrc, B.nb, B.csrc)
            close(C.to_global(None), want, np.float64)
            # the operands are not modified
            np.testing.assert_array_equal(B.to_global(None), b)


@pytest.mark.parametrize("k", [1, 4, 16])
def test_matmul_few_columns_matches_summa(grids, k):
    """Up to 16 columns matmul keeps A stationary; it agrees with SUMMA (run directly on the
    same operands) and with NumPy on every grid, blocking and source process, alpha/beta
    included."""
    from distla.pblas import _FEW_RHS, _summa
    assert k <= _FEW_RHS
    a, b, c = rand((23, 19), seed=40), rand((19, k), seed=41), rand((23, k), seed=42)
    for g in grids:
        for ba, sa, bb, sb in [((4, 3), (0, 0), (3, 2), (0, 0)),
                               ((5, 6), corner(g), (4, 1), (0, 0)),
                               ((3, 2), (0, 0), (7, 3), corner(g))]:
            A = DistMatrix.from_global(g, a, block=ba, src=sa)
            B = DistMatrix.from_global(g, b, block=bb, src=sb)
            C = DistMatrix.from_global(g, c, block=(ba[0], bb[1]), src=(sa[0], sb[1]))
            out = matmul(A, B, alpha=2.0, beta=-0.5, C=C)
            assert out is C
            ref = DistMatrix.from_global(g, -0.5 * c, block=C.block, src=C.src)
            Bs = B.redistribute(block=(A.nb, B.nb), src=(A.csrc % g.nprow, B.csrc))
            _summa(A, Bs, ref, 2.0)
            close(C.to_global(None), ref.to_global(None), np.float64)
            close(C.to_global(None), 2.0 * a @ b - 0.5 * c, np.float64)


def test_product_and_norm_and_solve_checks_one_pass(comm, grids):
    """checks.product_and_norm / solve_checks (one pass over A) against NumPy and against
    the SUMMA-based checks, real and complex."""
    n = 21
    for dtype in (np.float64, np.complex128):
        a = rand((n, n), dtype, 43)
        x = rand((n, 3), dtype, 44)
        b = a @ x + 1e-9 * rand((n, 3), dtype, 45)
        for g in some(grids):
            A = DistMatrix.from_global(g, a, block=(4, 5), src=corner(g))
            X = DistMatrix.from_global(g, x, block=(3, 2))
            B = DistMatrix.from_global(g, b, block=(6, 1), src=corner(g))
            P, an = checks.product_and_norm(A, X)
            assert (P.mb, P.rsrc, P.nb, P.csrc) == (A.mb, A.rsrc, X.nb, X.csrc)
            close(P.to_global(None), a @ x, np.float64)
            assert an == pytest.approx(np.abs(a).sum(axis=1).max(), rel=1e-14)
            assert comm.allgather(an) == [an] * comm.size
            r = checks.solve_checks(A, X, B)
            assert r["anorm"] == pytest.approx(an, rel=1e-14)
            assert r["sresid"] == pytest.approx(checks._solve_residual_summa(A, X, B),
                                                rel=1e-6)
            assert r["berr"] == pytest.approx(checks._backward_error_summa(A, X, B),
                                              rel=1e-6)
            assert checks.solve_checks(A, X, B, berr=False, anorm=an) == \
                {"sresid": r["sresid"], "berr": None, "anorm": an}


def test_residual_with_abs_and_componentwise_error(comm, grids):
    """vector.residual(with_abs=True) gives the same R, and |A||X| where the backend reads A
    once for both (None on CPU ranks); componentwise_error from a given |A||X| equals the one
    that computes it, and both equal LAPACK's BERR computed with NumPy."""
    from distla.vector import abs_product, componentwise_error, residual
    n = 23
    a = rand((n, n), np.float64, 46)
    x = rand((n, 2), np.float64, 47)
    b = a @ x + 1e-9 * rand((n, 2), np.float64, 48)
    r = b - a @ x
    berr = (np.abs(r) / (np.abs(a) @ np.abs(x) + np.abs(b))).max()
    for g in some(grids):
        A = DistMatrix.from_global(g, a, block=(4, 5), src=corner(g))
        X = DistMatrix.from_global(g, x, block=(3, 2))
        B = DistMatrix.from_global(g, b, block=(4, 1), src=corner(g))
        R, D = residual(A, X, B, with_abs=True)
        close(R.to_global(None), r, np.float64)
        assert D is None or np.allclose(A.backend.to_host(D),
                                        A.backend.to_host(abs_product(A, X, B)))
        e1 = componentwise_error(A, X, B, R)
        e2 = componentwise_error(A, X, B, R, abs_product(A, X, B))
        assert e1 == e2 == pytest.approx(berr, rel=1e-6)
        # near the largest float: |A||X| + |B| overflows though both terms are finite (x_i =
        # 1.5 2^1023, b_i = 1.25 2^1023, A = I); the error is 0.25 / 2.75, not 0
        top = 2.0 ** 1023
        I = DistMatrix.from_global(g, np.eye(n), block=(4, 5), src=corner(g))
        Xb = DistMatrix.from_global(g, np.full((n, 2), 1.5 * top), block=(3, 2))
        Bb = DistMatrix.from_global(g, np.full((n, 2), 1.25 * top), block=(4, 1),
                                    src=corner(g))
        assert componentwise_error(I, Xb, Bb, residual(I, Xb, Bb)) == \
            pytest.approx(0.25 / 2.75, rel=1e-12)


@pytest.mark.parametrize("transa", [False, True])
@pytest.mark.parametrize("transb", [False, True])
def test_matmul_transposes_alpha_beta(grids, transa, transb):
    m, k, n = 10, 7, 9
    a = rand((k, m) if transa else (m, k), seed=3)
    b = rand((n, k) if transb else (k, n), seed=4)
    c = rand((m, n), seed=5)
    opa = a.T if transa else a
    opb = b.T if transb else b
    for g in grids:
        A = DistMatrix.from_global(g, a, block=(3, 2), src=corner(g))
        B = DistMatrix.from_global(g, b, block=(2, 4))
        C0 = matmul(A, B, transa=transa, transb=transb)
        close(C0.to_global(None), opa @ opb, np.float64)
        C1 = matmul(A, B, transa=transa, transb=transb, alpha=-2.0)
        close(C1.to_global(None), -2.0 * opa @ opb, np.float64)
        # with C in the result's layout: updated in place and returned
        C = DistMatrix.from_global(g, c, block=C0.block, src=C0.src)
        out = matmul(A, B, transa=transa, transb=transb, alpha=0.5, beta=-1.5, C=C)
        assert out is C
        close(C.to_global(None), 0.5 * opa @ opb - 1.5 * c, np.float64)
        C = DistMatrix.from_global(g, c, block=C0.block, src=C0.src)
        matmul(A, B, transa=transa, transb=transb, beta=1.0, C=C)
        close(C.to_global(None), opa @ opb + c, np.float64)


@pytest.mark.parametrize("dtype", [np.float32, np.complex128])
def test_matmul_dtypes_and_operator(grids, dtype):
    a, b = rand((9, 8), dtype, 6), rand((8, 7), dtype, 7)
    for g in grids:
        A = DistMatrix.from_global(g, a, block=3, src=corner(g))
        B = DistMatrix.from_global(g, b, block=(3, 2))
        C = A @ B
        assert C.dtype == np.dtype(dtype)
        close(C.to_global(None), a @ b, dtype)
        # transa is a plain transpose for complex too (no conjugation)
        close(matmul(A, A, transa=True).to_global(None), a.T @ a, dtype)
        close(matmul(A.H, A).to_global(None), a.conj().T @ a, dtype)


def test_matmul_empty_inner_and_outer(grids):
    for g in grids:
        A = DistMatrix.zeros(g, (5, 0), 2)
        B = DistMatrix.zeros(g, (0, 4), 2)
        C = matmul(A, B)
        np.testing.assert_array_equal(C.to_global(None), np.zeros((5, 4)))
        D = matmul(DistMatrix.zeros(g, (0, 3), 2), DistMatrix.random(g, (3, 4), 2))
        assert D.shape == (0, 4)


def test_matmul_bad_arguments(comm, grids):
    g = grids[0]
    A = DistMatrix.random(g, (6, 5), 2)
    B = DistMatrix.random(g, (5, 4), 2)
    with pytest.raises(ValueError, match="inner"):
        matmul(A, B, transa=True)
    with pytest.raises(ValueError, match="C has shape"):
        matmul(A, B, C=DistMatrix.zeros(g, (6, 5), 2))
    with pytest.raises(ValueError, match="C must have"):
        matmul(A, B, C=DistMatrix.zeros(g, (6, 4), 3), beta=1.0)
    with pytest.raises(TypeError):
        matmul(A, np.ones((5, 4)))
    for call in (lambda: matmul(np.ones((6, 5)), B),        # the first operand, too: the same
                 lambda: triangular_solve(np.eye(5), B)):   # TypeError on every rank
        with pytest.raises(TypeError, match="operands must be DistMatrix"):
            call()
    # one rank passing no DistMatrix at all: its error reached no agreement and the others
    # waited in theirs
    if g.comm is comm and comm.size > 1:
        for call in (lambda X, Y: matmul(X, Y), lambda X, Y: triangular_solve(X, Y)):
            eye = DistMatrix.from_global(g, np.eye(5), block=2)
            ops = (np.eye(5), np.ones((5, 5))) if comm.rank == 1 else (eye, eye)
            with pytest.raises(TypeError, match="operands must be DistMatrix"):
                call(*ops)
    # C's layout is checked before any data moves, on every path, naming what it must be
    for transa, ncols in ((False, 4), (True, 4), (False, 20)):
        Bw = DistMatrix.zeros(g, (5, ncols), 2)
        Aw = DistMatrix.zeros(g, (5, 5) if transa else (6, 5), 2)
        with pytest.raises(ValueError, match=r"block \(2, 2\), src \(0, 0\), not block "
                                             r"\(3, 2\)"):
            matmul(Aw, Bw, transa=transa, C=DistMatrix.zeros(g, (Aw.shape[1] if transa
                                                                 else 6, ncols), (3, 2)))
    comm.Barrier()


@pytest.mark.parametrize("transa", [False, True])
@pytest.mark.parametrize("ncols", [3, 19])   # the A-stationary and the SUMMA paths
def test_alpha_zero_reads_neither_operand(comm, grids, transa, ncols):
    """As BLAS: alpha = 0 gives beta C (or zeros) whatever A and B hold, NaN and Inf included,
    in the layout alpha = 1 gives; triangular_solve's alpha = 0 gives X = 0."""
    for g in grids:
        a = rand((9, 9), np.float64, 1)
        a[2, 3], a[7, 0] = np.nan, np.inf
        A = DistMatrix.from_global(g, a, block=(3, 2), src=(g.nprow - 1, g.npcol - 1))
        B = DistMatrix.from_global(g, rand((9, ncols), np.float64, 2), block=(2, 4))
        B.local[...] = np.nan
        ref = matmul(A, B, transa=transa)
        c = rand((9, ncols), np.float64, 3)
        C = DistMatrix.from_global(g, c, block=ref.block, src=ref.src)
        for beta, want in ((0.0, 0 * c), (2.0, 2 * c)):
            got = matmul(A, B, transa=transa, alpha=0.0, beta=beta, C=C.copy())
            np.testing.assert_array_equal(got.to_global(None), want)
        Z = matmul(A, B, transa=transa, alpha=0)
        assert (Z.block, Z.src) == (ref.block, ref.src)
        np.testing.assert_array_equal(Z.to_global(None), np.zeros((9, ncols)))
        T = DistMatrix.from_global(g, triangle(9, True, 4), block=3)
        X = triangular_solve(T, B.redistribute(block=3, src=(0, 0)), alpha=0.0, trans=transa)
        np.testing.assert_array_equal(X.to_global(None), np.zeros((9, ncols)))


# --------------------------------------------------------------------------------------
# triangular_solve (pdtrsm)
# --------------------------------------------------------------------------------------
def triangle(n, lower, seed, dtype=np.float64):
    """A well-conditioned triangle with junk (never read) in the other triangle."""
    t = rand((n, n), dtype, seed) / np.sqrt(n) + 3 * np.eye(n)
    junk = 1e3 * rand((n, n), dtype, seed + 100)
    a = (np.tril(t) + np.triu(junk, 1)) if lower else (np.triu(t) + np.tril(junk, -1))
    return a.astype(dtype)


def reference_solve(a, b, lower, trans, unit, side, alpha):
    t = np.tril(a) if lower else np.triu(a)
    if unit:
        t = t - np.diag(np.diag(t)) + np.eye(len(t))
    if side == "left":
        return sla.solve_triangular(t, alpha * b, lower=lower, trans=1 if trans else 0)
    # X op(T) = alpha B  <=>  op(T)^T X^T = alpha B^T
    return sla.solve_triangular(t, alpha * b.T, lower=lower, trans=0 if trans else 1).T


@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("trans", [False, True])
@pytest.mark.parametrize("unit", [False, True])
@pytest.mark.parametrize("nrhs", [5, 19])   # few: A stays put; many: A's panels travel
def test_triangular_solve_all_grids(grids, side, lower, trans, unit, nrhs):
    n = 14
    a = triangle(n, lower, seed=8)
    b = rand((n, nrhs) if side == "left" else (nrhs, n), seed=9)
    want = reference_solve(a, b, lower, trans, unit, side, 1.5)
    for i, g in enumerate(grids):
        layouts = [(3, (0, 0), (3, 2), (0, 0)),
                   (4, corner(g), (5, 3), (0, 0)),  # B re-blocked inside
                   (5, (0, 0), (2, 2), corner(g))]
        for ab, asrc, bb, bsrc in (layouts[i % 3], layouts[(i + 1) % 3]):
            A = DistMatrix.from_global(g, a, block=ab, src=asrc)
            B = DistMatrix.from_global(g, b, block=bb, src=bsrc)
            X = triangular_solve(A, B, lower=lower, trans=trans, unit_diagonal=unit,
                                 side=side, alpha=1.5)
            assert X.same_layout(B) and X is not B
            close(X.to_global(None), want, np.float64)
            np.testing.assert_array_equal(B.to_global(None), b)  # B kept


@pytest.mark.parametrize("j", [0, 6, 13])
def test_triangular_solve_exact_zero_diagonal_raises(grids, j):
    """An exact zero on the diagonal raises SingularMatrixError naming it on every rank, as
    scipy.linalg.solve_triangular does (the solve would return inf/NaN); with
    unit_diagonal the diagonal is not read, and the solve is right."""
    from distla import SingularMatrixError
    n = 14
    a = triangle(n, True, seed=8)
    a[j, j] = 0.0
    b = rand((n, 2), seed=9)
    for g in grids:
        A = DistMatrix.from_global(g, a, block=3, src=corner(g))
        B = DistMatrix.from_global(g, b, block=3)
        for side, BB in (("left", B), ("right", B.transpose())):
            with pytest.raises(SingularMatrixError, match=rf"A\[{j}, {j}\] is exactly zero") \
                    as e:
                triangular_solve(A, BB, side=side, trans=j % 2 == 0)
            assert e.value.index == j
        X = triangular_solve(A, B, unit_diagonal=True)
        close(X.to_global(None), sla.solve_triangular(a, b, lower=True, unit_diagonal=True),
              np.float64)


@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("trans", [False, True])
def test_triangular_solve_skips_zero_blocks_of_b(grids, lower, trans):
    """Right-hand sides zero before (forward sweep) or after (backward) some row, as the
    condition estimator's unit vectors: the sweep starts at the first nonzero block and x is
    exactly zero where b's zero blocks lie; a wholly zero b gives zeros. One process, a
    grid, few right-hand sides, a source process in the corner, blocks not dividing n."""
    n = 23
    a = triangle(n, lower, seed=16)
    forward = lower != trans
    cases = {}
    for j in (0, 4, 5, 11, 22):
        e = np.zeros((n, 2))
        e[j, 0], e[(j + 7) % n, 1] = 1.0, -2.0
        cases[f"unit {j}"] = e
    tail = rand((n, 1), seed=17)
    tail[:9] = 0 if forward else tail[:9]
    tail[14:] = 0 if not forward else tail[14:]
    cases["zero run"], cases["zero"] = tail, np.zeros((n, 1))
    for g in grids:
        for name, b in cases.items():
            A = DistMatrix.from_global(g, a, block=5, src=corner(g))
            B = DistMatrix.from_global(g, b, block=5, src=corner(g))
            X = triangular_solve(A, B, lower=lower, trans=trans).to_global(None)
            want = sla.solve_triangular(a, b, lower=lower, trans=1 if trans else 0)
            np.testing.assert_allclose(X, want, rtol=1e-12, atol=1e-14, err_msg=name)
            nz = np.flatnonzero(np.any(b != 0, axis=1))
            zero = slice(0, nz[0]) if nz.size and forward else \
                slice(nz[-1] + 1, n) if nz.size else slice(0, n)
            assert not X[zero].any(), name


@pytest.mark.parametrize("chunk", [4, 7, 1024])
@pytest.mark.parametrize("fan_in_only", [False, True])
def test_triangular_solve_few_rhs_in_row_chunks(grids, monkeypatch, chunk, fan_in_only):
    """The few-right-hand-side sweep reads block rows of A in chunks of local rows
    (pblas._CHUNK_ROWS): chunks smaller than, not a multiple of, and larger than the blocks,
    both forms of the partial sums (dot / axpy, chosen by the grid's shape or forced)."""
    from distla import pblas
    monkeypatch.setattr(pblas, "_CHUNK_ROWS", chunk)
    monkeypatch.setattr(pblas, "_FAN_IN_ONLY", fan_in_only)
    n = 41
    for lower in (True, False):
        a = triangle(n, lower, seed=12)
        b = rand((n, 3), np.float64, 13)
        for g in grids:
            A = DistMatrix.from_global(g, a, block=3, src=corner(g))
            B = DistMatrix.from_global(g, b, block=(5, 2))
            for trans in (False, True):
                for unit in (False, True):
                    X = triangular_solve(A, B, lower=lower, trans=trans, unit_diagonal=unit)
                    close(X.to_global(None),
                          reference_solve(a, b, lower, trans, unit, "left", 1.0), np.float64)


@pytest.mark.parametrize("dtype", [np.float32, np.complex128])
def test_triangular_solve_dtypes(grids, dtype):
    n = 11
    for lower in (True, False):
        a = triangle(n, lower, seed=10, dtype=dtype)
        b = rand((n, 3), dtype, 11)
        for g in grids:
            A = DistMatrix.from_global(g, a, block=3, src=corner(g))
            B = DistMatrix.from_global(g, b, block=(3, 2))
            Bmany = DistMatrix.from_global(g, np.tile(b, (1, 7)), block=(3, 2))
            for trans in (False, True):
                Xm = triangular_solve(A, Bmany, lower=lower, trans=trans)
                # trans: plain transpose, also for complex
                close(Xm.to_global(None), reference_solve(a, np.tile(b, (1, 7)), lower,
                                                          trans, False, "left", 1.0), dtype)
                X = triangular_solve(A, B, lower=lower, trans=trans)
                close(X.to_global(None),
                      reference_solve(a, b, lower, trans, False, "left", 1.0), dtype)


@pytest.mark.parametrize("side", ["left", "right", "L", "r"])
@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_triangular_solve_every_trans_spelling(grids, side, dtype):
    """``trans`` as scipy.linalg.solve_triangular: 0 / False / 'N', 1 / True / 'T' (plain
    transpose, also for complex A), 2 / 'C' (conjugate transpose; 'T' for real A) and
    lowercase letters, few and many right-hand sides, both sides (also ScaLAPACK's 'L' /
    'R', any case), complex alpha."""
    side_given, side = side, {"L": "left", "r": "right"}.get(side, side)
    n = 13
    alpha = 1.5 - 0.5j if np.dtype(dtype).kind == "c" else 1.5
    for lower in (True, False):
        a = triangle(n, lower, seed=21, dtype=dtype)
        for nrhs in (2, 17):
            b = rand((n, nrhs) if side == "left" else (nrhs, n), dtype, 22)
            for spelling, t in ((0, 0), (False, 0), ("N", 0), ("n", 0), (1, 1), (True, 1),
                                ("T", 1), ("t", 1), (2, 2), ("C", 2), ("c", 2)):
                tri = np.tril(a) if lower else np.triu(a)
                op = tri if t == 0 else tri.T if t == 1 else tri.conj().T
                want = np.linalg.solve(op, alpha * b) if side == "left" else \
                    np.linalg.solve(op.T, alpha * b.T).T
                for g in grids:
                    A = DistMatrix.from_global(g, a, block=3, src=corner(g))
                    B = DistMatrix.from_global(g, b, block=(3, 4))
                    X = triangular_solve(A, B, lower=lower, trans=spelling,
                                         side=side_given, alpha=alpha)
                    close(X.to_global(None), want, dtype)
                    np.testing.assert_array_equal(B.to_global(None), b)    # B kept


def test_numpy_booleans_as_trans(comm, grids):
    g = grids[-1]
    a = triangle(7, True, 5)
    A = DistMatrix.from_global(g, a, block=3)
    B = DistMatrix.from_global(g, rand((7, 2), np.float64, 6), block=3)
    X = triangular_solve(A, B, trans=np.True_)
    close(X.to_global(None), reference_solve(a, B.to_global(None), True, True, False,
                                             "left", 1.0), np.float64)
    close(matmul(A, B, transa=np.True_).to_global(None), a.T @ B.to_global(None), np.float64)


def test_triangular_solve_refuses_unknown_trans(comm, grids):
    A = DistMatrix.random(grids[0], (6, 6), 2)
    B = DistMatrix.random(grids[0], (6, 2), 2)
    for bad in ("X", 3, -1, "transpose", None, 1.0):
        with pytest.raises(ValueError, match="trans must be"):
            triangular_solve(A, B, trans=bad)
    comm.Barrier()


def test_matmul_with_c_overlapping_a_or_b(grids):
    """C may be A or B itself (C = A B, C = A C, C = C C, beta 0 and 1; few and many
    columns): the result is the product of the inputs as they were, not of C zeroed or half
    overwritten."""
    r = np.random.default_rng(31)
    s = r.standard_normal((10, 10))
    for g in grids:
        for ncol in (3, 10):
            for beta in (0.0, 1.0):
                S = DistMatrix.from_global(g, s, block=(2, 2))
                X = DistMatrix.from_global(g, s[:, :ncol].copy(), block=(2, 2))
                R = matmul(S, X, C=X, beta=beta)
                assert R is X
                close(R.to_global(None), s @ s[:, :ncol] + beta * s[:, :ncol], np.float64)
            S = DistMatrix.from_global(g, s, block=(2, 2))
            R = matmul(S, S, C=S, beta=1.0, alpha=2.0)
            close(R.to_global(None), 2 * s @ s + s, np.float64)


def test_matmul_refuses_complex_scalars_on_real_matrices(comm, grids):
    A = DistMatrix.random(grids[0], (4, 4), 2)
    for kw in ({"alpha": 1j}, {"beta": 0.5j, "C": DistMatrix.random(grids[0], (4, 4), 2)}):
        with pytest.raises(TypeError, match=r"matmul: (alpha|beta)=.* is complex but the "
                                            r"matrices are float64"):
            matmul(A, A, **kw)
    comm.Barrier()


def test_triangular_solve_overwrite_b(grids):
    n = 9
    a, b = triangle(n, True, 12), rand((n, 4), seed=13)
    want = sla.solve_triangular(np.tril(a), b, lower=True)
    for g in grids:
        A = DistMatrix.from_global(g, a, block=2, src=corner(g))
        B = DistMatrix.from_global(g, b, block=(2, 3), src=corner(g))  # aligned with A
        X = triangular_solve(A, B, overwrite_b=True)
        assert X is B
        close(B.to_global(None), want, np.float64)
        B2 = DistMatrix.from_global(g, b, block=(3, 3))  # not aligned: a new matrix
        X2 = triangular_solve(A, B2, overwrite_b=True)
        assert X2.same_layout(B2)
        close(X2.to_global(None), want, np.float64)


def test_triangular_solve_bad_arguments(comm, grids):
    g = grids[0]
    A = DistMatrix.random(g, (6, 6), 2)
    B = DistMatrix.random(g, (6, 3), 2)
    with pytest.raises(ValueError, match="square"):
        triangular_solve(DistMatrix.random(g, (6, 5), 2), B)
    with pytest.raises(ValueError, match="square blocks"):
        triangular_solve(DistMatrix.random(g, (6, 6), (2, 3)), B)
    with pytest.raises(ValueError, match="side"):
        triangular_solve(A, B, side="top")
    with pytest.raises(ValueError, match="B is"):
        triangular_solve(A, B, side="right")
    with pytest.raises(TypeError, match="dtype"):
        triangular_solve(A, B.astype(np.float32))
    comm.Barrier()


# --------------------------------------------------------------------------------------
# norm
# --------------------------------------------------------------------------------------
def test_norm_function_matches_numpy(comm, grids):
    a = rand((12, 7), seed=14)
    for g in grids:
        A = DistMatrix.from_global(g, a, block=(5, 3), src=corner(g))
        for o in ("fro", 1, np.inf, "inf", "max"):
            want = np.abs(a).max() if o == "max" else np.linalg.norm(
                a, np.inf if o == "inf" else o)
            assert norm(A, o) == pytest.approx(want, rel=1e-13)


def test_norms_in_one_pass_match_each(grids):
    """DistMatrix.norm with a tuple of orders: what one call per order gives."""
    a = rand((13, 9), seed=15)
    a[4, 6] = -40.0
    for g in grids:
        A = DistMatrix.from_global(g, a, block=(4, 3), src=corner(g))
        ords = ("fro", 1, np.inf, "max")
        # (inf alone takes the one-pass row sums of gemv_abs: the same to rounding)
        assert A.norm(ords) == pytest.approx(tuple(A.norm(o) for o in ords), rel=1e-14)
        assert A.norm((1, "max")) == pytest.approx((np.abs(a).sum(0).max(), 40.0), rel=1e-14)


def test_norm_keeps_nan(comm, grids):
    # Assert only on the allgathered outcome: with a NaN-dropping MAX, ranks can even get
    # different norms, and a rank-local assert would let the ranks' control flow diverge.
    missed = []
    for g in grids:
        for pos in [(0, 0), (7, 7), (3, 5)]:
            a = np.ones((8, 8))
            a[pos] = np.nan
            A = DistMatrix.from_global(g, a, block=2)
            for o in ("fro", 1, np.inf, "max"):
                if not np.isnan(norm(A, o)):
                    missed.append((g.shape, g.order, pos, o))
    missed = comm.allgather(missed)
    assert not any(missed), missed


# --------------------------------------------------------------------------------------
# residual checks (distla.checks)
# --------------------------------------------------------------------------------------
EPS64 = 2.0 ** -53


def ref_sresid(a, x, b, eps=EPS64):
    n = a.shape[1]
    an = np.abs(a).sum(axis=1).max()
    return max(np.abs(a @ x[:, j] - b[:, j]).max() / (an * np.abs(x[:, j]).max() * eps * n)
               for j in range(x.shape[1]))


def test_eps_and_passes():
    assert checks.eps(np.float64) == EPS64
    assert checks.eps(np.float32) == 2.0 ** -24
    assert checks.eps(np.complex128) == EPS64
    assert checks.passes(0.5, 1.0) and checks.passes(1.0, 1.0)
    assert not checks.passes(1.5, 1.0)
    assert not checks.passes(float("nan"), 1.0)
    assert not checks.passes(float("inf"), 1.0)


def test_solve_residual_and_backward_error(comm, grids):
    n, nrhs = 17, 3
    a, b = rand((n, n), seed=15), rand((n, nrhs), seed=16)
    x = np.linalg.solve(a, b)
    xbad = x + 1e-6 * rand((n, nrhs), seed=17)
    berr = np.max(np.abs(b - a @ x) / (np.abs(a) @ np.abs(x) + np.abs(b)))
    for g in some(grids):
        A = DistMatrix.from_global(g, a, block=4, src=corner(g))
        X = DistMatrix.from_global(g, x, block=(3, 2))
        B = DistMatrix.from_global(g, b, block=(5, 1), src=corner(g))
        r = checks.solve_residual(A, X, B)
        assert isinstance(r, float)
        assert comm.allgather(r) == [r] * comm.size
        assert r == pytest.approx(ref_sresid(a, x, b), rel=0.2, abs=0.05)
        assert checks.passes(r, 1.0)
        rb = checks.solve_residual(A, DistMatrix.from_global(g, xbad, block=3), B)
        assert rb == pytest.approx(ref_sresid(a, xbad, b), rel=1e-6)
        assert not checks.passes(rb, 1.0)
        e = checks.backward_error(A, X, B)
        assert e < 10 * EPS64 * n and e == pytest.approx(berr, rel=0.5, abs=2 * EPS64)
        eb = checks.backward_error(A, DistMatrix.from_global(g, xbad, block=3), B)
        want = np.max(np.abs(b - a @ xbad) / (np.abs(a) @ np.abs(xbad) + np.abs(b)))
        assert eb == pytest.approx(want, rel=1e-6)


def test_checks_nan_is_kept(comm, grids):
    n = 9
    a = rand((n, n), seed=18)
    x = rand((n, 2), seed=19)
    b = a @ x
    for g in some(grids):
        A = DistMatrix.from_global(g, a, block=2)
        B = DistMatrix.from_global(g, b, block=2)
        for pos in [(0, 0), (n - 1, 1), (4, 0)]:  # held by different ranks
            xn = x.copy()
            xn[pos] = np.nan
            X = DistMatrix.from_global(g, xn, block=2)
            r = checks.solve_residual(A, X, B)
            assert np.isnan(r) and not checks.passes(r, 1e9)
            assert np.isnan(checks.backward_error(A, X, B))
        an = a.copy()
        an[n - 1, n - 1] = np.nan
        An = DistMatrix.from_global(g, an, block=2)
        class F:  # noqa: N801
            lu, perm = An, np.arange(n)
        assert np.isnan(checks.factor_residual_lu(A, F))
        assert np.isnan(checks.factor_residual_cholesky(A, An))


def test_solve_residual_float32(grids):
    n = 12
    a = rand((n, n), np.float32, 20)
    b = rand((n, 1), np.float32, 21)
    x = np.linalg.solve(a.astype(np.float64), b.astype(np.float64)).astype(np.float32)
    xbad = x + np.float32(1e-3) * rand((n, 1), np.float32, 22)
    ref = lambda xx: ref_sresid(*(v.astype(np.float64) for v in (a, xx, b)),  # noqa: E731
                                eps=2.0 ** -24)
    for g in some(grids):
        A = DistMatrix.from_global(g, a, block=5)
        B = DistMatrix.from_global(g, b, block=5)
        r = checks.solve_residual(A, DistMatrix.from_global(g, x, block=5), B)
        # the residual itself is computed in float32: within a few units of the exact one
        assert checks.passes(r, 1.0) and abs(r - ref(x)) < 0.1
        rb = checks.solve_residual(A, DistMatrix.from_global(g, xbad, block=5), B)
        assert rb == pytest.approx(ref(xbad), rel=1e-3) and rb > 100


@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_factor_residual_cholesky(grids, dtype):
    n = 15
    g0 = rand((n, n), dtype, 22)
    s = g0 @ g0.conj().T + n * np.eye(n)
    low = np.linalg.cholesky(s)
    junk = 1e3 * rand((n, n), dtype, 23)
    for g in some(grids):
        S = DistMatrix.from_global(g, s, block=4, src=corner(g))
        Lm = DistMatrix.from_global(g, low + np.triu(junk, 1), block=3)
        r = checks.factor_residual_cholesky(S, Lm)
        assert checks.passes(r, 3.0), r
        Um = DistMatrix.from_global(g, low.conj().T + np.tril(junk, -1), block=3)
        ru = checks.factor_residual_cholesky(S, Um, lower=False)
        assert checks.passes(ru, 3.0), ru
        bad = low.copy()
        bad[n // 2, 1] += 1e-8
        rb = checks.factor_residual_cholesky(S, DistMatrix.from_global(g, bad, block=3))
        want = np.abs(s - bad @ bad.conj().T).sum(1).max() / (
            np.abs(s).sum(1).max() * EPS64 * n)
        assert rb == pytest.approx(want, rel=1e-4) and not checks.passes(rb, 3.0)


class LU:
    """A stand-in for a distributed LU result: .lu (DistMatrix) and .perm."""

    def __init__(self, lu, perm):
        self.lu, self.perm = lu, perm


def host_lu(a):
    """LAPACK getrf of a (any shape): compact LU and perm with a[perm] = L U."""
    lu = np.asfortranarray(a.copy())
    piv, info = get_backend("cpu").getrf(lu)
    perm = np.arange(a.shape[0])
    for i, p in enumerate(piv):
        perm[[i, p]] = perm[[p, i]]
    return lu, perm


@pytest.mark.parametrize("shape", [(16, 16), (13, 7), (6, 11)])
def test_factor_residual_lu(grids, shape):
    a = rand(shape, seed=24)
    lu, perm = host_lu(a)
    m, n = shape
    for g in some(grids):
        for blk, src in [(4, (0, 0)), (3, corner(g))]:
            A = DistMatrix.from_global(g, a, block=blk, src=src)
            F = LU(DistMatrix.from_global(g, lu, block=blk, src=src), perm)
            r = checks.factor_residual_lu(A, F)
            assert checks.passes(r, 1.0), r
            # a wrong permutation (two rows swapped) is caught
            wrong = perm.copy()
            wrong[[0, m - 1]] = wrong[[m - 1, 0]]
            rb = checks.factor_residual_lu(A, LU(F.lu, wrong))
            assert rb > 1e10
            k = min(m, n)
            L = np.tril(lu[:, :k], -1) + np.eye(m, k)
            want = np.abs(a[wrong] - L @ np.triu(lu[:k])).sum(1).max() / (
                np.abs(a).sum(1).max() * EPS64 * max(m, n))
            assert rb == pytest.approx(want, rel=1e-6)


def test_permute_rows(comm, grids):
    m, n = 19, 6
    a = rand((m, n), np.complex128, 25)
    rng = np.random.default_rng(26)
    perms = [rng.permutation(m), np.arange(m), np.arange(m)[::-1].copy()]
    for g in some(grids):
        for blk, src in [((3, 2), (0, 0)), ((4, 4), corner(g)), ((32, 1), (0, 0))]:
            A = DistMatrix.from_global(g, a, block=blk, src=src)
            for p in perms:
                PA = checks.permute_rows(A, p)
                assert PA.same_layout(A) and PA.local.flags.f_contiguous
                np.testing.assert_array_equal(PA.to_global(None), a[p])
            np.testing.assert_array_equal(A.to_global(None), a)


def test_permute_rows_bad_perm(comm, grids):
    g = grids[0]
    A = DistMatrix.random(g, (5, 3), 2)
    for bad, exc in [(np.array([0, 1, 2, 3]), ValueError), (np.array([0, 1, 1, 3, 4]),
                     ValueError), (np.array([0, 1, 2, 3, 5]), ValueError),
                     (np.arange(5.0), TypeError), (np.arange(5).reshape(5, 1), ValueError)]:
        with pytest.raises(exc):
            checks.permute_rows(A, bad)
    if comm.size > 1:  # a perm that differs between ranks is caught, not a hang
        p = np.arange(5) if comm.rank else np.array([1, 0, 2, 3, 4])
        with pytest.raises(ValueError, match="differs"):
            checks.permute_rows(A, p)
    comm.Barrier()


def test_checks_bad_shapes(comm, grids):
    g = grids[0]
    A = DistMatrix.random(g, (5, 5), 2)
    with pytest.raises(ValueError, match="shapes"):
        checks.solve_residual(A, DistMatrix.random(g, (5, 2), 2), DistMatrix.random(g, (5, 3), 2))
    with pytest.raises(ValueError, match="square"):
        checks.factor_residual_cholesky(DistMatrix.random(g, (5, 4), 2), A)
    with pytest.raises(TypeError):
        checks.backward_error(A, np.ones((5, 1)), A)
    from distla import vector
    B = DistMatrix.random(g, (5, 1), 2)
    for X in (DistMatrix.random(g, (7, 1), 2), DistMatrix.random(g, (3, 1), 2),
              DistMatrix.random(g, (5, 3), 2)):    # longer, shorter, more columns than B
        for call in (vector.residual, vector.abs_product):
            with pytest.raises(ValueError, match="X is"):
                call(A, X, B)
    comm.Barrier()


@pytest.mark.gpu
def test_checks_and_pblas_on_gpu(comm, grids):
    n = 40
    a, b = rand((n, n), seed=27), rand((n, 2), seed=28)
    x = np.linalg.solve(a, b)
    lu, perm = host_lu(a)
    for g in some(grids):
        A = DistMatrix.from_global(g, a, block=8, src=corner(g))
        X = DistMatrix.from_global(g, x, block=8)
        B = DistMatrix.from_global(g, b, block=8)
        # a residual well above round-off (x perturbed), so that both devices must agree on it
        Xp = DistMatrix.from_global(g, x + 1e-3 * rand((n, 2), seed=29), block=8)
        rc = checks.solve_residual(A, Xp, B)
        Ag, Xg, Bg = A.to("gpu"), X.to("gpu"), B.to("gpu")
        assert checks.solve_residual(Ag, Xp.to("gpu"), Bg) == pytest.approx(rc, rel=1e-6)
        assert checks.backward_error(Ag, Xg, Bg) < 1e-14
        P, an = checks.product_and_norm(Ag, Xg)
        assert P.device == "gpu" and an == pytest.approx(np.abs(a).sum(axis=1).max())
        close(P.to_global(None), a @ x, np.float64)
        r = checks.solve_checks(Ag, Xp.to("gpu"), Bg, anorm=an)
        assert r["sresid"] == pytest.approx(rc, rel=1e-6)
        assert checks.solve_checks(Ag, Xg, Bg, anorm=an)["berr"] < 1e-14
        F = LU(DistMatrix.from_global(g, lu, block=8, src=corner(g)).to("gpu"), perm)
        assert checks.passes(checks.factor_residual_lu(Ag, F), 1.0)
        close((Ag @ Xg).to_global(None), a @ x, np.float64)
        T = DistMatrix.from_global(g, triangle(n, True, 29), block=8).to("gpu")
        Y = triangular_solve(T, Bg, lower=True)
        close(Y.to_global(None), reference_solve(triangle(n, True, 29), b, True, False, False,
                                                 "left", 1.0), np.float64)
