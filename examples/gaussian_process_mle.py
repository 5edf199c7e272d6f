"""Gaussian-process maximum likelihood and kriging with the tile low-rank (TLR) Cholesky.

    mpiexec -n 4 python examples/gaussian_process_mle.py [--n 1600] [--tile 100] [--tol 1e-8]
    python examples/gaussian_process_mle.py --device gpu --n 65536 --tile 2048 --predict 1000

Synthetic data: ``n + m`` jittered points in the unit square (Morton order), observations
``y ~ N(0, sigma^2 (R_beta + tau I))`` with the squared-exponential correlation ``R_beta``
(or --kernel exp / matern, nu = 3/2), drawn with an accurate TLR factor (tol 1e-12); ``m``
random points (--predict) are held out for the prediction step.

1. Fit: ``beta`` (length scale) maximizes the profile log-likelihood (``sigma^2`` profiled out
   analytically, ``tau`` known), ``-n/2 (log(2 pi sigma^2_hat) + 1) - 1/2 log det C(beta)``,
   with TLR: each evaluation builds C from the kernel tile by tile (never dense), factors it,
   reads log det from the factor and solves for ``C^-1 y`` (``distla.gp``). Kept between
   evaluations: the grid, the points and their Morton order, the tiling and the data on the
   device; each evaluation prints its time split (build, factor, solve) on rank 0.
2. The same fit with distla's dense Cholesky (unless --no-dense), and the relative differences
   of the estimates.
3. Kriging at the ``m`` held-out points: mean ``K_* C^-1 y`` and variance ``sigma^2 (1 -
   ||L^-1 K_*^T||^2)`` (cross-covariance in slabs, one TLR triangular solve with many
   right-hand sides per slab), compared with dense kriging (unless --no-dense) and with the
   held-out values: their standardized squared errors average ~1 when the variances are right.
"""
from __future__ import annotations

import json
import sys
import time

import _env  # noqa: F401  (threads per rank; must come before NumPy and MPI)
import numpy as np
from _args import (
    Parser,
    length_scale,
    nonnegative_float,
    nonnegative_int,
    positive_float,
    positive_int,
    unit_interval,
)
from mpi4py import MPI

from distla import covariance as cov
from distla import gp, tlr
from distla.defaults import default_nb
from distla.grid import ProcessGrid

KERNELS = {"sqexp": cov.SquaredExponential, "exp": cov.Exponential,
           "matern": lambda **k: cov.Matern(nu=1.5, **k)}


def parse(argv):
    p = Parser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=positive_int, default=1600,
                   help="training points (default 1600)")
    p.add_argument("--tile", type=positive_int, default=None,
                   help="tile size (default 100 on cpu, 2048 on gpu; at most n)")
    p.add_argument("--tol", type=unit_interval, default=1e-8,
                   help="TLR accuracy (default 1e-8)")
    p.add_argument("--predict", type=nonnegative_int, default=200, metavar="M",
                   help="held-out points to predict (default 200; 0: no prediction)")
    p.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    p.add_argument("--no-dense", dest="dense", action="store_false",
                   help="skip the dense fit and the dense kriging check")
    p.add_argument("--kernel", choices=tuple(KERNELS), default="sqexp")
    p.add_argument("--beta-true", type=length_scale, default=0.1)
    p.add_argument("--sigma-true", type=length_scale, default=1.5)
    p.add_argument("--tau", type=nonnegative_float, default=1e-2,
                   help="nugget / sigma^2, known (default 1e-2)")
    p.add_argument("--bounds", type=length_scale, nargs=2, default=(0.02, 0.5),
                   metavar=("LO", "HI"), help="search interval for beta (default 0.02 0.5)")
    p.add_argument("--xatol", type=positive_float, default=1e-5,
                   help="optimizer tolerance in log(beta) (default 1e-5)")
    p.add_argument("--seed", type=nonnegative_int, default=0)
    p.add_argument("--json", metavar="FILE", help="append one JSON line per fit/prediction")
    p.add_argument("--quiet", action="store_true", help="no line per evaluation")
    args = p.parse_args(argv)
    lo, hi = args.bounds
    if not lo < hi:
        p.fail(f"argument --bounds: LO must be below HI, not {lo:g} {hi:g}")
    if not np.isfinite(args.sigma_true ** 2 * args.tau):
        p.fail(f"argument --tau: the nugget sigma_true^2 tau = {args.sigma_true:g}^2 "
               f"{args.tau:g} overflows")
    return args


def synthetic(grid, args, corr):
    """Collective: training points and data, held-out points and their values."""
    m, n = args.predict, args.n
    pts = cov.points(n + m, kind="jittered", seed=args.seed)
    truth = corr.replace(sigma=args.sigma_true, nugget=args.sigma_true ** 2 * args.tau)
    L = tlr.cholesky(tlr.from_kernel(grid, pts, truth, args.tile, tol=1e-12,
                                     device=args.device), overwrite=True)
    z = np.random.default_rng(args.seed + 1).standard_normal(n + m)
    y = L.matvec(z)
    y = y.get() if hasattr(y, "get") else np.asarray(y)
    held = np.zeros(n + m, bool)
    held[np.random.default_rng(args.seed + 2).choice(n + m, m, replace=False)] = True
    return pts[~held], y[~held], pts[held], y[held]       # Morton order kept in both


def show_evaluation(say, lik):
    def report(ev):
        say(f"{lik.kind:>5} {len(lik.history):4d} {ev.beta:10.6f} {ev.sigma2:10.6f} "
            f"{ev.loglik:16.6f} {ev.build_s:8.3f} {ev.factor_s:8.3f} {ev.solve_s:8.3f}"
            + (f" {ev.rank_mean:6.1f}" if lik.kind == "TLR" else ""))
    return report


def run_fit(say, lik, args):
    if not args.quiet:
        lik.report = show_evaluation(say, lik)
    say(f"{'':>5} {'eval':>4} {'beta':>10} {'sigma^2':>10} {'profile loglik':>16} "
        f"{'build s':>8} {'factor s':>8} {'solve s':>8}"
        + (f" {'rank':>6}" if lik.kind == "TLR" else ""))
    f = gp.fit(lik, bounds=args.bounds, xatol=args.xatol)
    hist = lik.history[-f.nevals:]
    split = {k: sum(getattr(e, k) for e in hist) for k in ("build_s", "factor_s", "solve_s")}
    split["evaluations"] = [[e.beta, e.loglik, e.build_s, e.factor_s, e.solve_s] for e in hist]
    say(f"{lik.kind} MLE: beta = {f.beta:.6f}, sigma^2 = {f.sigma2:.6f}, loglik = "
        f"{f.loglik:.6f}; {f.nevals} evaluations in {f.seconds:.2f} s (build "
        f"{split['build_s']:.2f} s, factor {split['factor_s']:.2f} s, solve "
        f"{split['solve_s']:.2f} s)")
    return f, split


def kriging(say, lik, f, new, ynew, tau, label):
    lik.report = None
    t0 = time.perf_counter()
    mean, var, _ = gp.predict(lik, f.beta, new)
    dt = lik.grid.comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
    z2 = (ynew - mean) ** 2 / (var + f.sigma2 * tau)      # a new observation's variance
    cover = float(np.mean(np.sqrt(z2) <= 1.96))
    say(f"{label} kriging at {len(new)} points: {dt:.2f} s; held-out values: mean standardized "
        f"squared error {np.mean(z2):.3f} (1 if the variances are right), 95% interval "
        f"coverage {cover:.3f}, RMSE {np.sqrt(np.mean((ynew - mean) ** 2)):.4f} vs predicted "
        f"{np.sqrt(np.mean(var + f.sigma2 * tau)):.4f}")
    return mean, var, {"seconds": dt, "z2_mean": float(np.mean(z2)), "coverage95": cover}


def compare_dense(say, args, grid, data, corr, ft, tlr_pred, records, base):
    """Collective: the dense fit, the relative differences of the estimates, dense kriging
    with TLR's estimates at the held-out points; appends to / updates ``records``."""
    pts, y, new = data
    nb = default_nb(args.n, args.device, grid)      # dense Cholesky at its best block
    say(f"dense: block {nb}")
    dlik = gp.DenseLikelihood(grid, pts, y, corr, nb, device=args.device)
    fd, dsplit = run_fit(say, dlik, args)
    rb = abs(ft.beta - fd.beta) / fd.beta
    rs = abs(ft.sigma2 - fd.sigma2) / fd.sigma2
    say(f"TLR vs dense MLE: relative difference beta {rb:.2e}, sigma^2 {rs:.2e} "
        f"({'agree' if max(rb, rs) <= 1e-3 else 'DIFFER'} to 1e-3); whole fit "
        f"{ft.seconds:.2f} s TLR vs {fd.seconds:.2f} s dense")
    records[0].update(rel_diff_beta=rb, rel_diff_sigma2=rs, dense_seconds=fd.seconds)
    records.append({"bench": "gp_mle", "impl": "distla-dense", **base, "nb": nb,
                    "seconds": fd.seconds, "nevals": fd.nevals, "beta": fd.beta,
                    "sigma2": fd.sigma2, "loglik": fd.loglik, **dsplit})
    if tlr_pred is not None:
        dlik.report = None
        md, vd, _ = gp.predict(dlik, ft.beta, new)     # dense kriging, TLR's estimates
        em = np.linalg.norm(tlr_pred[0] - md) / np.linalg.norm(md)
        ev = np.linalg.norm(tlr_pred[1] - vd) / np.linalg.norm(vd)
        say(f"TLR vs dense kriging (same parameters): relative difference mean {em:.2e}, "
            f"variance {ev:.2e}")
        records[1].update(rel_diff_mean=float(em), rel_diff_var=float(ev))


def free_device_pool(device):
    """Hand CuPy's cached blocks back to the device (the dense fit needs one n x n block)."""
    if device == "gpu":
        import cupy
        cupy.get_default_memory_pool().free_all_blocks()


def main(argv=None):
    args = parse(argv)
    comm = MPI.COMM_WORLD
    grid = ProcessGrid(comm=comm)
    say = print if comm.rank == 0 else (lambda *a, **k: None)
    args.tile = min(args.tile or (2048 if args.device == "gpu" else 100), args.n)
    corr = KERNELS[args.kernel](sigma=1.0, beta=args.beta_true, nugget=args.tau)
    t0 = time.perf_counter()
    pts, y, new, ynew = synthetic(grid, args, corr)
    say(f"n = {args.n} points ({args.kernel}, beta {args.beta_true}, sigma^2 "
        f"{args.sigma_true ** 2:g}, tau {args.tau:g}), {args.predict} held out; tile "
        f"{args.tile}, {grid.nprow}x{grid.npcol} grid, {args.device}, TLR tol {args.tol:g}; "
        f"data in {time.perf_counter() - t0:.2f} s")
    records = []
    base = {"n": args.n, "ranks": comm.size, "grid": f"{grid.nprow}x{grid.npcol}",
            "device": args.device, "nb": args.tile, "tol": args.tol, "kernel": args.kernel,
            "beta_true": args.beta_true, "sigma2_true": args.sigma_true ** 2, "tau": args.tau,
            "tflops": None, "command": " ".join(["examples/gaussian_process_mle.py",
                                                 *(argv if argv is not None else sys.argv[1:])])}

    lik = gp.TLRLikelihood(grid, pts, y, corr, args.tile, tol=args.tol, device=args.device,
                           seed=args.seed)
    ft, split = run_fit(say, lik, args)
    records.append({"bench": "gp_mle", "impl": "distla-tlr", **base, "seconds": ft.seconds,
                    "nevals": ft.nevals, "beta": ft.beta, "sigma2": ft.sigma2,
                    "loglik": ft.loglik, **split})
    tlr_pred = None
    if args.predict:
        mt, vt, kr = kriging(say, lik, ft, new, ynew, args.tau, "TLR")
        tlr_pred = (mt, vt)
        records.append({"bench": "gp_krige", "impl": "distla-tlr", **base, "m": args.predict,
                        **kr})
    lik = None
    free_device_pool(args.device)
    failed = None
    if args.dense:
        try:       # distla raises the same exception on every rank: safe to catch
            compare_dense(say, args, grid, (pts, y, new), corr, ft, tlr_pred, records, base)
        except Exception as e:  # noqa: BLE001 - reported; the TLR records are still written
            failed = e
            say(f"dense comparison failed: {type(e).__name__}: {e}")
    if args.json and comm.rank == 0:
        with open(args.json, "a") as fh:
            for r in records:
                fh.write(json.dumps(r) + "\n")
    if failed is not None:
        sys.exit(1)
    return records


if __name__ == "__main__":
    main()
