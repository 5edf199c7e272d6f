"""The low-precision Cholesky's panel on one GPU, piece by piece (diagnosis for the mixed
solves, docs/mixed.md): float32 potrf of one nb x nb diagonal block, the float32 panel trsm
``L21 = A21 L11^-T`` (SIMT), and the alternative of inverting L11 once (a trsm on the
identity) and forming L21 by one GEMM, in float32 and on TF32 tensor cores.

    mpirun -n 1 python3 benchmarks/gpu/panel_probe.py --nb 1024 --m 31744 16384 4096
"""
import argparse
import json

from distla.bench.common import timed
from distla.device import get_backend


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--nb", type=int, default=1024)
    p.add_argument("--m", type=int, nargs="+", default=[31744, 16384, 4096])
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--json")
    a = p.parse_args()
    be = get_backend("gpu")
    xp = be.xp
    nb = a.nb
    rows = []
    rng = xp.random.default_rng(0)
    d = rng.standard_normal((nb, nb), dtype=xp.float32)
    spd = xp.asfortranarray(d @ d.T / nb + 2 * xp.eye(nb, dtype=xp.float32))

    def rec(name, m, s, flops):
        print(f"nb={nb:5d} m={m:6d}  {name:44s} {1e3 * s:8.3f} ms  "
              f"{flops / s / 1e12 if flops else 0:7.2f} TFLOP/s")
        rows.append({"bench": "panel-probe", "impl": name, "n": m, "nb": nb, "ranks": 1,
                     "device": "gpu", "seconds": s, "tflops": flops / s / 1e12 if flops else None,
                     "command": "mpirun -n 1 python3 benchmarks/gpu/panel_probe.py --nb "
                                f"{nb} --m {' '.join(map(str, a.m))}"})

    L = spd.copy(order="F")
    rec("spotrf nb x nb", nb, timed(lambda: be.potrf("L", L.copy(order="F")), "gpu", reps=a.reps),
        nb ** 3 / 3)
    be.potrf("L", L)
    L = xp.asfortranarray(xp.tril(L))
    inv = xp.asfortranarray(xp.eye(nb, dtype=xp.float32))
    rec("L11^-1 by trsm on the identity", nb, timed(
        lambda: be.trsm("L", "L", "N", "N", 1.0, L, xp.asfortranarray(
            xp.eye(nb, dtype=xp.float32))), "gpu", reps=a.reps), nb ** 3 / 3)
    be.trsm("L", "L", "N", "N", 1.0, L, inv)
    for m in a.m:
        A21 = xp.asfortranarray(rng.standard_normal((m, nb), dtype=xp.float32))
        out = xp.empty_like(A21, order="F")
        rec("strsm L21 = A21 L11^-T (SIMT)", m, timed(
            lambda: be.trsm("R", "L", "T", "N", 1.0, L, A21.copy(order="F")), "gpu",
            reps=a.reps), m * nb * nb)
        for tf32 in (False, True):
            rec(f"sgemm A21 (L11^-1)^T {'TF32' if tf32 else 'fp32'}", m, timed(
                lambda tf32=tf32: be.gemm("N", "T", 1.0, A21, inv, 0.0, out, tf32=tf32),
                "gpu", reps=a.reps), 2 * m * nb * nb)
        ref = A21.copy(order="F")
        be.trsm("R", "L", "T", "N", 1.0, L, ref)
        be.gemm("N", "T", 1.0, A21, inv, 0.0, out, tf32=True)
        err = float(xp.abs(out - ref).max() / xp.abs(ref).max())
        print(f"    TF32 inverse-GEMM panel vs strsm: max rel diff {err:.2e}")
        rec("A21 copy (reference: memory traffic)", m, timed(
            lambda: A21.copy(order="F"), "gpu", reps=a.reps), 0)
    if a.json:
        with open(a.json, "a") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)


if __name__ == "__main__":
    main()
