"""Where distla's one-GPU Cholesky and LU spend the time the library call does not (small n,
1 x 1 grid): the whole call beside its pieces, each the best of ``--reps`` device-synchronized
runs on a fresh copy.

    python3 benchmarks/gpu/small_n_probe.py --n 4096 8192 [--reps 10] [--json FILE]

Rows: ``impl`` = distla (the whole factorization), reference (cupy.linalg.cholesky /
cupyx.scipy.linalg.lu_factor), and the pieces: checks (the input pass), library (the bare
cuSOLVER call), after (what follows it: zeroing, agreeing, the result check). One process."""
from __future__ import annotations

import argparse
import json

import numpy as np

from distla import ProcessGrid
from distla.bench import common
from distla.linalg.cholesky import _zero_upper, cholesky
from distla.linalg.lu import lu_factor
from distla.validate import check_finite_result, check_symmetric


def rows_for(n, nb, reps, device):
    if device == "gpu":
        import cupy
        from cupyx.scipy.linalg import lu_factor as cu_lu
        cu_chol = cupy.linalg.cholesky
    else:   # smoke test on CPU ranks
        import scipy.linalg
        cu_lu, cu_chol = scipy.linalg.lu_factor, np.linalg.cholesky
    g = ProcessGrid(1, 1)
    out = []

    def t(name, alg, fn, setup):
        s = common.best_local(fn, device, reps, warmup=2, setup=setup)
        out.append(common.record(alg, name, n=n, seconds=s, device=device, ranks=1))
        print(f"{alg:9s} n={n:6d} {name:12s} {s * 1e3:9.3f} ms", flush=True)

    S = common.spd_matrix(g, n, nb, seed=1, device=device)
    be = S.backend
    t("distla", "cholesky", lambda W: cholesky(W, overwrite_a=True), S.copy)
    t("reference", "cholesky", lambda W: cu_chol(W), lambda: S.local.copy())
    t("checks", "cholesky", lambda W: check_symmetric(W, what="cholesky", finite=True), S.copy)
    t("library", "cholesky", lambda W: be.potrf("L", W), lambda: S.local.copy(order="F"))
    t("zero_upper", "cholesky", _zero_upper, S.copy)
    t("info_read", "cholesky", lambda W: be.infos_to_host([be.potrf("L", W)]),
      lambda: S.local.copy(order="F"))
    G = common.general_matrix(g, n, nb, seed=1, device=device)
    t("distla", "lu", lambda W: lu_factor(W, overwrite_a=True), G.copy)
    t("reference", "lu", lambda W: cu_lu(W, overwrite_a=True, check_finite=False),
      lambda: G.local.copy(order="F"))
    t("checks", "lu", lambda W: W.norm((1, "max")), G.copy)
    t("library", "lu", lambda W: be.getrf(W), lambda: G.local.copy(order="F"))
    t("piv_to_host", "lu", lambda W: be.to_host(be.getrf(W)[0]),
      lambda: G.local.copy(order="F"))
    t("finite_result", "lu", lambda W: check_finite_result(W, "lu_factor"), G.copy)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, nargs="+", default=[4096, 8192])
    ap.add_argument("--nb", type=int, default=512)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--device", default="gpu")
    ap.add_argument("--json")
    a = ap.parse_args()
    for n in a.n:
        for r in rows_for(n, a.nb, a.reps, a.device):
            if a.json:
                with open(a.json, "a") as f:
                    f.write(json.dumps(r, default=common.jsonable) + "\n")


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
