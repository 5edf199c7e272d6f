"""``distla model`` (= ``python -m distla.model``): predictions, recommendations, weak scaling,
validation against measured records, and ``--calibrate``.

    distla model --machine h200-ib --algo cholesky lu calu rbt --n 65536 --ranks 1 2 4 8
    distla model --machine h200-ib --algo cholesky --weak 40 --ranks 1 8 64 256 1024
    distla model --machine cpu-dev --validate benchmarks/results/FILE.jsonl
    distla model --machine h200-nvlink --recommend --algo lu --n 131072 --ranks 8
    mpiexec -n 4 distla model --calibrate --out machine.json [--device gpu]

Everything but ``--calibrate`` runs on rank 0 alone (the others return at once).
"""
from __future__ import annotations

import json
import math

from .drivers import ALGORITHMS, predict
from .machine import PROFILES, load_machine

__all__ = ["build_parser", "main_argv", "recommend", "shapes", "validate_records"]

_BENCH_ALGO = {("cholesky", None): "cholesky", ("lu", "partial"): "lu",
               ("lu", "tournament"): "calu", ("lu", "none"): "genp", ("rbt", None): "rbt",
               ("tlr", None): "tlr"}


def build_parser(prog="distla model"):
    from ..runtime import ArgumentParser
    p = ArgumentParser(prog=prog, description="Alpha-beta-gamma model of distla's "
                       "factorizations as written (docs/model.md): predicted time, TFLOP/s, "
                       "efficiency and limiting term for given n, nb and grids.")
    p.add_argument("--machine", "-m", default=None,
                   help=f"profile ({', '.join(PROFILES)}) or JSON machine file (default "
                        "h200-nvlink; with --calibrate: where the parameters that cannot be "
                        "measured come from, default cpu-dev or h200-ib)")
    p.add_argument("--algo", nargs="+", default=["cholesky", "lu", "calu", "rbt"],
                   choices=ALGORITHMS, help="algorithms (default cholesky lu calu rbt)")
    p.add_argument("--n", nargs="+", default=["65536"], help="matrix sizes (1k = 1024)")
    p.add_argument("--nb", nargs="+", type=int, help="block sizes (default: distla's default)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--grid", nargs="+", help="grids PxQ")
    g.add_argument("--ranks", nargs="+", type=int,
                   help="rank counts: every grid shape of each (see --shapes)")
    p.add_argument("--shapes", choices=("all", "square", "extremes"), default="square",
                   help="grids per rank count: all shapes, the squarest (default), or "
                        "Px1, 1xQ and the squarest")
    p.add_argument("--weak", type=float, metavar="GB",
                   help="weak scaling: n chosen so each rank holds GB gigabytes of A")
    p.add_argument("--ranks-per-node", type=int, help="ranks per node (default: the "
                   "machine's devices per node for GPUs, all on one node for CPUs)")
    p.add_argument("--lookahead", type=int, default=1)
    p.add_argument("--order", choices=("row", "col"), default="row",
                   help="rank order of the grid (row: a process row is consecutive ranks)")
    p.add_argument("--variant", choices=("as-written", "scalapack"), default="as-written",
                   help="Cholesky panel broadcasts: as written, or ScaLAPACK's two broadcasts")
    p.add_argument("--tree", choices=("binary", "flat"), default="binary")
    p.add_argument("--depth", type=int, default=2, help="RBT butterfly depth")
    p.add_argument("--iterations", type=int, default=2, help="RBT refinement iterations")
    p.add_argument("--rank", type=int, default=16, help="TLR off-diagonal tile rank")
    p.add_argument("--recommend", action="store_true",
                   help="search nb and grid shape for each algorithm, n and rank count")
    p.add_argument("--validate", nargs="+", metavar="FILE.jsonl",
                   help="compare predictions with measured benchmark records")
    p.add_argument("--tolerance", type=float, default=0.15,
                   help="relative error flagged by --validate (default 0.15)")
    p.add_argument("--per-step", action="store_true",
                   help="also print the bytes received per step (busiest rank) beside "
                        "ScaLAPACK's textbook volume, for about 10 sampled steps")
    p.add_argument("--json", metavar="FILE", help="append one JSON line per row")
    p.add_argument("--calibrate", action="store_true",
                   help="measure this machine (collective; run under mpiexec)")
    p.add_argument("--out", metavar="FILE.json", help="--calibrate: machine file to write")
    p.add_argument("--device", choices=("cpu", "gpu"), help="--calibrate: device")
    p.add_argument("--calib-grid", metavar="PxQ", help="--calibrate: grid of the messages")
    p.add_argument("--quick", action="store_true", help="--calibrate: small sizes, fast")
    p.add_argument("--quiet", "-q", action="store_true")
    p.add_argument("--verbose", "-v", action="store_true")
    return p


def shapes(R: int, which: str = "all") -> list[tuple[int, int]]:
    """Grid shapes P x Q with P Q = R: all, the squarest, or the extremes plus the squarest."""
    from ..grid import squarest_shape
    allsh = [(p, R // p) for p in range(1, R + 1) if R % p == 0]
    sq = tuple(squarest_shape(R))
    if which == "square":
        return [sq]
    if which == "extremes":
        return sorted({(R, 1), (1, R), sq})
    return allsh


def _default_nb(n, device, P, Q):
    from ..defaults import default_nb

    class _G:
        nprow, npcol = P, Q
    return default_nb(n, device, _G)


def _weak_n(gb, R, nb):
    n = int(math.sqrt(gb * 1e9 / 8 * R))
    return max(nb, n // nb * nb)


def _opts(args, algo):
    base = dict(order=args.order)
    if algo == "cholesky":
        base["variant"] = args.variant
    return {**base, **_opts_algo(args, algo)}


def _opts_algo(args, algo):
    if algo == "rbt":
        return dict(depth=args.depth, iterations=args.iterations)
    if algo == "tlr":
        return dict(rank=args.rank)
    return {}


def recommend(algo, n, R, machine, nbs=None, **kw):
    """The fastest (prediction, nb, P, Q) over block sizes ``nbs`` and every grid shape of R
    ranks. Not collective."""
    M = load_machine(machine)
    nbs = nbs or ((256, 384, 512, 768, 1024, 1536, 2048) if M.device == "gpu"
                  else (32, 64, 96, 128, 192, 256))
    best = None
    for P, Q in shapes(R, "all"):
        for nb in nbs:
            if nb > n:
                continue
            pr = predict(algo, n, nb, P, Q, M, **kw)
            if best is None or pr.seconds < best.seconds:
                best = pr
    return best


def validate_records(records, machine, ranks_per_node=None):
    """Rows of predicted vs measured for benchmark records (distla rows of the cholesky, lu,
    rbt and tlr benchmarks); ``err`` = predicted / measured - 1. Not collective."""
    M = load_machine(machine)
    out = []
    for r in records:
        if r.get("impl") not in ("distla", "distla-rbt"):
            continue
        algo = _BENCH_ALGO.get((r.get("bench"), r.get("pivoting")))
        if algo is None or "grid" not in r or "seconds" not in r:
            continue
        P, Q = (int(x) for x in str(r["grid"]).lower().split("x"))
        kw = {}
        if algo == "calu":
            kw["tree"] = r.get("tree", "binary")
        if algo == "rbt":
            kw.update(depth=int(r.get("depth", 2)), iterations=int(r.get("iters", 2) or 2),
                      nrhs=int(r.get("nrhs", 1)))
        pr = predict(algo, int(r["n"]), int(r["nb"]), P, Q, M,
                     lookahead=int(r.get("lookahead", 1)), ranks_per_node=ranks_per_node,
                     **kw)
        out.append(dict(algo=algo, n=int(r["n"]), nb=int(r["nb"]), grid=f"{P}x{Q}",
                        measured_s=float(r["seconds"]), predicted_s=pr.seconds,
                        err=pr.seconds / float(r["seconds"]) - 1.0, limiting=pr.limiting))
    return out


def _sizes(values) -> list[int]:
    """``["1024", "64k", "2048,4096"]`` -> ints (k = 1024). Raises ValueError."""
    out = []
    for v in values:
        for tok in str(v).replace(",", " ").split():
            t = tok.lower()
            mult = 1024 if t.endswith("k") else 1
            try:
                n = int(t.rstrip("k")) * mult
            except ValueError:
                raise ValueError(f"size must be a positive integer, not {tok!r}") from None
            if n < 1:
                raise ValueError(f"size must be a positive integer, not {tok!r}")
            out.append(n)
    return out


def _load_records(path) -> list[dict]:
    """The JSON objects of a JSON-lines file (blank and malformed lines skipped)."""
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(r, dict):
                out.append(r)
    return out


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, dict):
        return ""
    return str(v)


def _table(rows, columns=None) -> str:
    """An aligned text table of dict rows (columns: ``columns`` or the union of keys)."""
    if not rows:
        return "(no results)"
    if columns is None:
        columns = []
        for r in rows:
            columns += [k for k in r if k not in columns and not isinstance(r[k], dict)]
    cells = [[_fmt(r.get(c, "")) for c in columns] for r in rows]
    w = [max(len(c), *(len(x[i]) for x in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.rjust(k) for c, k in zip(columns, w)),
             "  ".join("-" * k for k in w)]
    lines += ["  ".join(x.rjust(k) for x, k in zip(row, w)) for row in cells]
    return "\n".join(lines)


def _print_steps(pr) -> None:
    """Bytes received per step by the busiest rank beside the textbook volume (rank 0)."""
    tb = pr.textbook.get("step_words", [])
    sb = pr.step_bytes
    n = min(len(tb), len(sb))
    if not n:
        return
    print(f"{pr.algo} n={pr.n} nb={pr.nb} grid {pr.P}x{pr.Q}: GB received per step")
    rows = [dict(step=k, distla_gb=sb[k] / 1e9, textbook_gb=tb[k] * 8 / 1e9,
                 ratio=(sb[k] / (tb[k] * 8)) if tb[k] else float("nan"))
            for k in sorted({*range(0, n, max(1, n // 10)), n - 1})]
    print(_table(rows))


def _body(argv, prog):
    from mpi4py import MPI

    from ..defaults import parse_grid
    from ..runtime import CommandError
    args = build_parser(prog).parse_args(argv)
    comm = MPI.COMM_WORLD
    if args.calibrate:
        from .calibrate import calibrate
        dev = args.device or "cpu"
        try:
            base = load_machine(args.machine or ("h200-ib" if dev == "gpu" else "cpu-dev"))
        except ValueError as e:
            raise CommandError(str(e)) from None
        m = calibrate(comm, device=dev, nbs=args.nb, grid=args.calib_grid, quick=args.quick,
                      out=args.out, base=base)
        if comm.rank == 0 and not args.quiet:
            print(json.dumps(m.to_dict(), indent=1))
            if args.out:
                print(f"machine written to {args.out}")
        return 0
    if comm.rank != 0:
        return 0
    try:
        M = load_machine(args.machine or "h200-nvlink")
    except ValueError as e:
        raise CommandError(str(e)) from None
    rows = []
    if args.validate:
        recs = []
        for f in args.validate:
            try:
                recs += _load_records(f)
            except OSError as e:
                raise CommandError(f"--validate: {f}: {e.strerror}") from None
        rows = validate_records(recs, M, args.ranks_per_node)
        for r in rows:
            r["ok"] = bool(abs(r["err"]) <= args.tolerance)
        if not args.quiet:
            print(f"machine: {M.name} ({M.source})")
            print(_table([{**r, "err": f"{100 * r['err']:+.1f}%"} for r in rows]))
            if rows:
                e = [abs(r["err"]) for r in rows]
                print(f"{len(rows)} runs: mean |error| {100 * sum(e) / len(e):.1f}%, max "
                      f"{100 * max(e):.1f}%, within {100 * args.tolerance:.0f}%: "
                      f"{sum(r['ok'] for r in rows)}/{len(rows)}")
    else:
        try:
            sizes = _sizes(args.n)
            grids = [parse_grid(g) for g in args.grid] if args.grid else None
        except ValueError as e:
            raise CommandError(str(e)) from None
        counts = args.ranks or ([p * q for p, q in grids] if grids else [1])
        base_rate = {}
        for algo in args.algo:
            for R in sorted(set(counts)):
                todo = [g for g in grids if g[0] * g[1] == R] if grids else \
                    shapes(R, args.shapes)
                for n0 in sizes:
                    if args.recommend:
                        n = _weak_n(args.weak, R, 1024) if args.weak else n0
                        pr = recommend(algo, n, R, M, nbs=args.nb, lookahead=args.lookahead,
                                       tree=args.tree, ranks_per_node=args.ranks_per_node,
                                       **_opts(args, algo))
                        rows.append({**pr.row(), "recommended": True})
                        continue
                    for P, Q in todo:
                        for nb in (args.nb or [None]):
                            nbx = nb or (1024 if M.device == "gpu" and args.weak else None)
                            if args.weak:
                                n = _weak_n(args.weak, R, nbx or 1024)
                            else:
                                n = n0
                            nbx = nbx or _default_nb(n, M.device, P, Q)
                            pr = predict(algo, n, nbx, P, Q, M, lookahead=args.lookahead,
                                         tree=args.tree, ranks_per_node=args.ranks_per_node,
                                         **_opts(args, algo))
                            row = pr.row()
                            key = (algo, nbx, args.weak is not None)
                            if R == min(counts):
                                base_rate.setdefault(key, row["tflops_per_rank"])
                            if key in base_rate:
                                row["scaling_eff"] = row["tflops_per_rank"] / base_rate[key]
                            if args.per_step and not args.quiet:
                                _print_steps(pr)
                            val = M.extra.get("validation")
                            if val:   # the spread of the machine's validation runs
                                row["err_band"] = f"+-{100 * val['max_abs_err']:.0f}%"
                            rows.append(row)
        if not args.quiet:
            print(f"machine: {M.name} ({M.source})")
            cols = ["algo", "n", "nb", "grid", "seconds", "err_band", "tflops",
                    "tflops_per_rank", "efficiency", "scaling_eff", "limiting",
                    "gbytes_per_rank", "textbook_gbytes_per_rank"]
            print(_table(rows, [c for c in cols if any(c in r for r in rows)]))
    if args.json:
        with open(args.json, "a", encoding="utf-8") as f:
            for r in rows:
                rec = {"bench": "model", "impl": "model", "machine": M.name, **r,
                       "variant": args.variant if r.get("algo") == "cholesky" else None,
                       "command": " ".join([prog, *argv]),
                       "kind": "model prediction (not a measurement)"}
                f.write(json.dumps({k: v for k, v in rec.items() if v is not None}) + "\n")
    return 0


def main_argv(argv, prog: str = "distla model") -> int:
    """Run ``distla model`` on ``argv``; returns the exit code (errors: one line on rank 0)."""
    from ..runtime import run_main
    return run_main(lambda a: _body(a, prog), list(argv), prog=prog)
