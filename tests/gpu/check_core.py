"""GPU check of the core (run on a GPU machine with mpirun -n 1 or 2): the GPU path must agree
with the CPU path. Prints one line per check on rank 0 and exits nonzero on a mismatch.

    NCCL_NVLS_ENABLE=0 mpirun -n 2 python tests/gpu/check_core.py
"""
import sys
import time

import numpy as np
from mpi4py import MPI

from distla import DistMatrix, ProcessGrid
from distla.device import get_backend
from distla.pblas import matmul, norm, triangular_solve

comm = MPI.COMM_WORLD
ok = True


def report(name, good, extra=""):
    global ok
    ok &= bool(good)
    if comm.rank == 0:
        print(f"{'PASS' if good else 'FAIL'} {name} {extra}", flush=True)


# local kernels on the device against NumPy/SciPy
be = get_backend("gpu", comm)
cp = be.xp
rng = np.random.default_rng(comm.rank)
for dt in (np.float64, np.float32):
    tol = 1e-10 if dt == np.float64 else 1e-3
    big = rng.standard_normal((40, 40)).astype(dt)
    a, b = rng.standard_normal((7, 5)).astype(dt), rng.standard_normal((5, 6)).astype(dt)
    g = cp.asarray(np.asfortranarray(big))
    be.gemm("N", "N", -1.0, cp.asarray(a, order="F"), cp.asarray(b, order="F"), 1.0, g[3:10, 4:10])
    ref = big.copy(); ref[3:10, 4:10] -= a @ b
    report(f"gemm strided {np.dtype(dt)}", np.allclose(g.get(), ref, atol=tol))
    s = rng.standard_normal((9, 9)).astype(dt); spd = s @ s.T + 9 * np.eye(9, dtype=dt)
    g = cp.asarray(np.asfortranarray(np.pad(spd, ((2, 0), (1, 0)))))
    info = be.potrf("L", g[2:, 1:])
    L = np.tril(g.get()[2:, 1:])
    report(f"potrf {np.dtype(dt)}", be.info_value(info) == 0 and np.allclose(L @ L.T, spd, atol=tol * 10))
    bad = spd.copy(); bad[4, 4] = -1
    info = be.potrf("L", cp.asarray(bad, order="F"))
    report("potrf info", be.info_value(info) == 5, f"info={be.info_value(info)}")
    x = rng.standard_normal((9, 3)).astype(dt); gx = cp.asarray(x, order="F")
    be.trsm("L", "L", "N", "N", 1.0, cp.asarray(np.tril(spd), order="F"), gx)
    report("trsm", np.allclose(np.tril(spd) @ gx.get(), x, atol=tol * 10))
    c = cp.zeros((9, 9), dtype=dt, order="F"); be.syrk("L", "N", 1.0, cp.asarray(x, order="F"), 0.0, c)
    report("syrk", np.allclose(np.tril(c.get()), np.tril(x @ x.T), atol=tol * 10))
    m = rng.standard_normal((8, 8)).astype(dt)
    import scipy.linalg as sl
    gm = cp.asarray(m, order="F"); piv, info = be.getrf(gm)
    lu, p = sl.lu_factor(m)
    report("getrf", np.array_equal(piv.get(), p) and np.allclose(gm.get(), lu, atol=tol * 10))

# distributed: GPU vs CPU on every grid of this size
for P, Q in [(p, comm.size // p) for p in range(1, comm.size + 1) if comm.size % p == 0]:
    for order in ("row", "col"):
        grid = ProcessGrid(P, Q, order=order)
        f = lambda I, J: (I * 3 + J * 7) % 11 + 0.5 * (I == J)
        for dev in ("cpu", "gpu"):
            A = DistMatrix.from_function(grid, (37, 29), (4, 5), f, device=dev, src=(P - 1, 0))
            R = DistMatrix.random(grid, (29, 23), (5, 3), seed=5, device=dev)
            if dev == "cpu":
                a_cpu, r_cpu = A.to_global(None), R.to_global(None)
                c_cpu = matmul(A, R).to_global(None)
                n_cpu = [norm(A, o) for o in ("fro", 1, np.inf, "max")]
            else:
                tag = f"{P}x{Q} {order}"
                report(f"from_function gpu==cpu {tag}", np.array_equal(A.to_global(None), a_cpu))
                report(f"random gpu==cpu {tag}", np.allclose(R.to_global(None), r_cpu, rtol=1e-14, atol=1e-14))
                B = A.redistribute(block=(3, 2), src=(0, Q - 1))
                report(f"redistribute {tag}", np.array_equal(B.to_global(None), a_cpu))
                report(f"transpose {tag}", np.array_equal(A.T.to_global(None), a_cpu.T))
                C = matmul(A, R).to_global(None)
                report(f"matmul {tag}", np.allclose(C, c_cpu, atol=1e-10), f"{np.abs(C - c_cpu).max():.2e}")
                ns = [norm(A, o) for o in ("fro", 1, np.inf, "max")]
                report(f"norms {tag}", np.allclose(ns, n_cpu))
                T = DistMatrix.from_function(grid, (29, 29), (5, 5), lambda I, J: (I >= J) * (1.0 + (I == J) * 29 + 0.01 * J), device=dev)
                X = triangular_solve(T, R)
                t = T.to_global(None)
                report(f"trsm {tag}", np.allclose(np.tril(t) @ X.to_global(None), r_cpu, atol=1e-10))
sys.exit(0 if comm.allreduce(int(not ok)) == 0 else 1)
