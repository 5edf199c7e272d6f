"""What the inverted-diagonal solves cost on one GPU (diagnosis): the batched inversion of
the diagonal blocks (Backend.triangular_block_inverses) and one solve with them
(Backend.trsm_inverse_blocks) against the library's trsm, float32 and float64.

    python3 benchmarks/gpu/inverse_blocks_cost.py --n 32768 --nb 1024 [--json OUT]
"""
from __future__ import annotations

import argparse
import json

import numpy as np
from probe_timing import best

from distla.device import get_backend


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=32768)
    ap.add_argument("--nb", type=int, default=1024)
    ap.add_argument("--json")
    a = ap.parse_args()
    be = get_backend("gpu")
    xp, n, nb = be.xp, a.n, a.nb
    rows = []
    for dt in (np.float32, np.float64):
        rng = xp.random.default_rng(1)
        t = xp.asfortranarray(xp.tril(rng.standard_normal((n, n), dtype=dt)) * (0.5 / n))
        t[xp.arange(n), xp.arange(n)] += 1
        b = xp.asfortranarray(rng.standard_normal((n, 1), dtype=dt))
        res = {}
        for lower, unit in ((True, False), (True, True)):
            res[f"inverses lower unit={unit}"] = best(
                lambda: be.triangular_block_inverses(t, nb, lower, unit))
        S = be.triangular_block_inverses(t, nb, True, False)
        for trans in (False, True):
            res[f"solve by inverses trans={trans}"] = best(
                lambda: be.trsm_inverse_blocks(t, S, nb, True, trans, b.copy(order="F")))
            res[f"library trsm trans={trans}"] = best(
                lambda: be.trsm("L", "L", "T" if trans else "N", "N", 1.0, t,
                                b.copy(order="F")))
        for k, s in res.items():
            print(f"{np.dtype(dt).name:8s} {k:32s} {s * 1e3:8.3f} ms", flush=True)
            rows.append(dict(bench="inverse_blocks_cost", impl=k, n=n, nb=nb, ranks=1,
                             device="gpu", dtype=np.dtype(dt).name, seconds=s, tflops=None))
        t = S = None
    if a.json:
        with open(a.json, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)


if __name__ == "__main__":
    main()
