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
import re

from .drivers import ALGORITHMS, MAX_RANKS, check_inputs, predict
from .machine import PROFILES, Machine, load_machine

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
    p.add_argument("--algo", nargs="+", default=None,
                   choices=ALGORITHMS, help="algorithms (default cholesky lu calu rbt)")
    p.add_argument("--n", nargs="+", default=None,
                   help="matrix sizes (1k = 1024; default 65536)")
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
    small = [p for p in range(1, math.isqrt(R) + 1) if R % p == 0]
    allsh = sorted({(p, R // p) for p in small} | {(R // p, p) for p in small})
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
    """The fastest (prediction, nb, P, Q) over block sizes ``nbs`` (those larger than n count
    as n) and every grid shape of R ranks. Not collective."""
    M = load_machine(machine)
    cands = _candidates(M.device, nbs, n)
    check_inputs(algo, n, cands[-1], **kw)       # the options, before any work
    best = None
    for P, Q in shapes(R, "all"):
        for nb in cands:
            try:
                check_inputs(algo, n, nb, P, Q, **kw)
            except ValueError:       # too many block steps at this nb: the others remain
                continue
            pr = predict(algo, n, nb, P, Q, M, **kw)
            if best is None or pr.seconds < best.seconds:
                best = pr
    return best


def _candidates(device, nbs, n):
    """The block sizes :func:`recommend` tries (``nbs``, or a default set per device), those
    larger than n counted as n."""
    nbs = nbs or ((256, 384, 512, 768, 1024, 1536, 2048) if device == "gpu"
                  else (32, 64, 96, 128, 192, 256))
    return sorted({min(int(nb), int(n)) for nb in nbs})


def _rec_int(r, key, default, lo, zero_is_default=False):
    v = r.get(key, default)
    if v is None or (zero_is_default and v == 0 and not isinstance(v, bool)):
        v = default
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if not isinstance(v, int) or isinstance(v, bool) or v < lo:
        raise ValueError(f"{key!r} must be an int >= {lo}, not {v!r}")
    return v


def _record_args(r):
    """(algo, kwargs of :func:`predict`, seconds) of one benchmark record, None for a
    record that is not a distla run the model covers; ValueError naming the field and its
    value for a malformed one."""
    from ..defaults import parse_grid
    if r.get("impl") not in ("distla", "distla-rbt"):
        return None
    algo = _BENCH_ALGO.get((r.get("bench"), r.get("pivoting")))
    if algo is None or "grid" not in r or "seconds" not in r:
        return None
    grid = r["grid"]
    try:
        P, Q = parse_grid(grid) if isinstance(grid, str) and "x" in grid.lower() else (0, 0)
    except ValueError:
        P = Q = 0
    if P < 1:
        raise ValueError(f"'grid' must be PxQ with P, Q >= 1, not {grid!r}")
    sec = r["seconds"]
    if not isinstance(sec, (int, float)) or isinstance(sec, bool) or \
            not 0 < sec < math.inf:
        raise ValueError(f"'seconds' must be a finite number > 0, not {sec!r}")
    kw = dict(n=_rec_int(r, "n", None, 1), nb=_rec_int(r, "nb", None, 1), P=P, Q=Q,
              lookahead=_rec_int(r, "lookahead", 1, 0))
    if algo == "calu":
        # (some records use "tree" for a label of their own: the driver's default then)
        kw["tree"] = r["tree"] if r.get("tree") in ("binary", "flat") else "binary"
    if algo == "rbt":
        kw.update(depth=_rec_int(r, "depth", 2, 0), iterations=_rec_int(r, "iters", 2, 0, True),
                  nrhs=_rec_int(r, "nrhs", 1, 1))
    return algo, kw, float(sec)


def _validate_one(r, M, ranks_per_node=None):
    """The row of :func:`validate_records` for one record (None: not a distla run the model
    covers); ValueError naming the field and its value for a malformed one."""
    if not isinstance(r, dict):
        raise ValueError(f"not a JSON object: {str(r)[:60]}")
    got = _record_args(r)
    if got is None:
        return None
    algo, kw, sec = got
    n, nb, P, Q = kw.pop("n"), kw.pop("nb"), kw.pop("P"), kw.pop("Q")
    try:
        pr = predict(algo, n, nb, P, Q, M, ranks_per_node=ranks_per_node, **kw)
    except TypeError as e:
        raise ValueError(str(e)) from None
    return dict(algo=algo, n=n, nb=nb, grid=f"{P}x{Q}", measured_s=sec,
                predicted_s=pr.seconds, err=pr.seconds / sec - 1.0, limiting=pr.limiting)


def validate_records(records, machine, ranks_per_node=None):
    """Rows of predicted vs measured for benchmark records (distla rows of the cholesky, lu,
    rbt and tlr benchmarks; other records are skipped); ``err`` = predicted / measured - 1.
    A malformed distla record (grid not PxQ, n or nb not a positive int, seconds not a
    finite number > 0, ...) raises ValueError naming the record (1-based) and the field.
    Not collective."""
    M = load_machine(machine)
    out = []
    for i, r in enumerate(records):
        try:
            row = _validate_one(r, M, ranks_per_node)
        except ValueError as e:
            raise ValueError(f"record {i + 1}: {e}") from None
        if row is not None:
            out.append(row)
    return out


_SIZE_RE = re.compile(r"([0-9]+)(k?)")


def _sizes(values) -> list[int]:
    """``["1024", "64k", "2048,4096"]`` -> ints (k = 1024). Raises ValueError."""
    out = []
    for v in values:
        for tok in str(v).replace(",", " ").split():
            m = _SIZE_RE.fullmatch(tok.lower())
            n = int(m.group(1)) * (1024 if m.group(2) else 1) if m else 0
            if n < 1:
                raise ValueError(f"--n: a size must be a positive integer (k = 1024: 64k), "
                                 f"not {tok!r}")
            out.append(n)
    if not out:
        raise ValueError("--n: no sizes given")
    return out


def _load_records(path) -> list[tuple[int, dict]]:
    """``(line number, record)`` of the JSON objects of a JSON-lines file (blank lines
    skipped); ValueError naming the line of one that is not JSON or not an object."""
    out = []
    with open(path, encoding="utf-8") as f:
        for k, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                r = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"line {k}: not JSON ({e.msg}, column {e.colno})") from None
            if not isinstance(r, dict):
                raise ValueError(f"line {k}: not a JSON object: {line.strip()[:60]}")
            out.append((k, r))
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


def _check_options(args) -> None:
    """CommandError (raised alike on every rank: it looks at the arguments only) for an
    option out of range or one that does not apply to this run (never silently ignored)."""
    from ..runtime import CommandError
    if not args.calibrate:
        for opt, v in (("--out", args.out), ("--device", args.device),
                       ("--calib-grid", args.calib_grid), ("--quick", args.quick or None)):
            if v is not None:
                raise CommandError(f"{opt} applies only with --calibrate")
    else:
        for opt, v in (("--validate", args.validate), ("--recommend", args.recommend or None),
                       ("--weak", args.weak), ("--grid", args.grid), ("--ranks", args.ranks),
                       ("--json", args.json), ("--per-step", args.per_step or None),
                       ("--ranks-per-node", args.ranks_per_node)):
            if v is not None:
                raise CommandError(f"{opt} does not apply with --calibrate (it measures this "
                                   f"machine and predicts nothing)")
    if args.calibrate or args.validate:
        for opt, v in (("--n", args.n), ("--algo", args.algo)):
            if v is not None:
                raise CommandError(f"{opt} does not apply with "
                                   f"{'--calibrate' if args.calibrate else '--validate'}")
    if args.weak is not None and args.n is not None:
        raise CommandError("--n does not apply with --weak (n is chosen so that each rank "
                           "holds --weak GB of A)")
    args.n = args.n or ["65536"]
    args.algo = args.algo or ["cholesky", "lu", "calu", "rbt"]
    if args.validate:
        for opt, v in (("--recommend", args.recommend or None), ("--weak", args.weak),
                       ("--grid", args.grid), ("--ranks", args.ranks), ("--nb", args.nb),
                       ("--per-step", args.per_step or None)):
            if v is not None:
                raise CommandError(f"{opt} does not apply with --validate (n, nb and the grid "
                                   f"come from the records)")
    for opt, vals, lo in (("--nb", args.nb, 1), ("--ranks", args.ranks, 1),
                          ("--ranks-per-node", args.ranks_per_node, 1),
                          ("--lookahead", args.lookahead, 0), ("--depth", args.depth, 0),
                          ("--iterations", args.iterations, 0), ("--rank", args.rank, 1)):
        for v in (vals if isinstance(vals, list) else [vals]):
            if v is not None and v < lo:
                raise CommandError(f"{opt} must be {'positive' if lo else '>= 0'}, not {v}")
    for R in args.ranks or []:
        if R > MAX_RANKS:
            raise CommandError(f"--ranks {R} is more than the model holds ({MAX_RANKS})")
    if args.weak is not None and not 0 < args.weak < math.inf:
        raise CommandError(f"--weak must be a finite number of GB > 0, not {args.weak:g}")
    if not 0 <= args.tolerance < math.inf:
        raise CommandError(f"--tolerance must be a finite number >= 0, not "
                           f"{args.tolerance:g}")
    if args.depth > 62:
        raise CommandError(f"--depth {args.depth} is too large: 2^depth must be <= "
                           f"max(2n, 4)")
    try:
        sizes = _sizes(args.n)
    except ValueError as e:
        raise CommandError(str(e)) from None
    if "rbt" in args.algo and not args.validate and not args.calibrate and not args.weak:
        for n in sizes:
            if (1 << args.depth) > max(2 * n, 4):
                raise CommandError(f"--depth {args.depth} is too large for --n {n}: "
                                   f"2^depth must be <= max(2n, 4), as distla's RBT solver "
                                   f"requires")


def _jobs(args, sizes, grids):
    """The predictions to make, in order: ``(algo, n, nb, P, Q, R)`` (``nb`` None and ``P``
    ``Q`` None: recommend). ValueError/TypeError for one :func:`predict` would refuse."""
    counts = args.ranks or ([p * q for p, q in grids] if grids else [1])
    out = []
    for algo in args.algo:
        kw = dict(lookahead=args.lookahead, tree=args.tree,
                  ranks_per_node=args.ranks_per_node, **_opts(args, algo))
        for R in sorted(set(counts)):
            todo = [g for g in grids if g[0] * g[1] == R] if grids else shapes(R, args.shapes)
            for n0 in sizes:
                if args.recommend:
                    n = _weak_n(args.weak, R, 1024) if args.weak else n0
                    check_inputs(algo, n, _candidates(args.device_kind, args.nb, n)[-1],
                                 1, R, **kw)
                    _check_tile_rank(args, algo, _candidates(args.device_kind, args.nb, n)[-1])
                    out.append((algo, n, None, None, None, R))
                    continue
                for P, Q in todo:
                    for nb in (args.nb or [None]):
                        nbx = nb or (1024 if args.device_kind == "gpu" and args.weak else None)
                        n = _weak_n(args.weak, R, nbx or 1024) if args.weak else n0
                        nbx = nbx or _default_nb(n, args.device_kind, P, Q)
                        check_inputs(algo, n, nbx, P, Q, **kw)
                        _check_tile_rank(args, algo, min(nbx, n))
                        out.append((algo, n, nbx, P, Q, R))
    return out, counts


def _check_tile_rank(args, algo, tile: int) -> None:
    """TLR: an off-diagonal tile of ``tile`` rows has rank at most ``tile``."""
    if algo == "tlr" and args.rank > tile:
        from ..runtime import CommandError
        raise CommandError(f"--rank {args.rank} is larger than the TLR tile size {tile} "
                           f"(--nb; a tile's rank is at most its size)")


def _check_machine_out(path) -> None:
    """``--calibrate --out``: a ``.json`` name, and an existing file there must be a machine
    file (what --calibrate writes): anything else (a matrix named by mistake) would be
    destroyed. Not collective."""
    import os
    path = os.fspath(path)
    if not path.lower().endswith(".json"):
        raise ValueError(f"{path}: the machine file is JSON; give a name ending in .json")
    if not os.path.exists(path):
        return
    if not os.path.isfile(path):
        raise ValueError(f"{path}: exists and is not a regular file")
    try:
        with open(path, encoding="utf-8") as f:
            Machine.from_dict(json.load(f))
    except (ValueError, TypeError, KeyError, AttributeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: exists and is not a machine file of --calibrate ({e}); "
                         f"it would be overwritten: remove it or name another") from None


def _body(argv, prog):
    from mpi4py import MPI

    from ..defaults import parse_grid
    from ..errors import on_root
    from ..filebase import check_jsonl, check_writable
    from ..runtime import CommandError
    args = build_parser(prog).parse_args(argv)
    _check_options(args)
    comm = MPI.COMM_WORLD
    if args.calibrate:
        from .calibrate import calibrate
        dev = args.device or "cpu"
        try:
            base = load_machine(args.machine or ("h200-ib" if dev == "gpu" else "cpu-dev"))
        except ValueError as e:
            raise CommandError(str(e)) from None
        if args.calib_grid:
            from ..defaults import squarest_shape
            try:
                P, Q = parse_grid(args.calib_grid)
            except ValueError as e:
                raise CommandError(f"--calib-grid: {e}") from None
            if P * Q != comm.size:
                raise CommandError(
                    f"--calib-grid {P}x{Q} needs {P * Q} MPI ranks, but {comm.size} "
                    f"{'was' if comm.size == 1 else 'were'} started: run with mpiexec -n "
                    f"{P * Q}, or pick a grid with P*Q = {comm.size} (e.g. --calib-grid "
                    f"{'x'.join(map(str, squarest_shape(comm.size)))})")
        if args.out:
            try:
                on_root(comm, lambda: _check_machine_out(args.out))
                check_writable(args.out, comm)
            except (OSError, ValueError) as e:
                raise CommandError(f"--out: {e}") from None
        m = calibrate(comm, device=dev, nbs=args.nb, grid=args.calib_grid, quick=args.quick,
                      out=args.out, base=base)
        if comm.rank == 0 and not args.quiet:
            print(json.dumps(m.to_dict(), indent=1))
            if args.out:
                print(f"machine written to {args.out}")
        return 0
    state = {}

    def prepare():
        """Everything that can fail on the user's input, before any work (rank 0)."""
        try:
            state["M"] = M = load_machine(args.machine or "h200-nvlink")
        except ValueError as e:
            raise CommandError(str(e)) from None
        if args.json:
            try:
                check_jsonl(args.json)
            except (OSError, ValueError) as e:
                raise CommandError(f"--json: {e}") from None
        if args.validate:
            recs = []
            for f in args.validate:
                try:
                    recs += [(f, k, r) for k, r in _load_records(f)]
                except OSError as e:
                    raise CommandError(f"--validate: {f}: {e.strerror}") from None
                except (ValueError, UnicodeDecodeError) as e:   # names the line
                    raise CommandError(f"--validate: {f}, {e}") from None
            rows = []
            for f, k, r in recs:
                try:
                    row = _validate_one(r, M, args.ranks_per_node)
                except ValueError as e:
                    raise CommandError(f"--validate: {f}, line {k}: {e}") from None
                if row is not None:
                    rows.append(row)
            if not rows:     # (it printed "(no results)" with exit 0)
                kinds = sorted({str(r.get("bench")) for _, _, r in recs})
                raise CommandError(
                    f"--validate: no record the model can check in {', '.join(args.validate)}"
                    f" ({len(recs)} record(s) of bench {', '.join(kinds) or 'none'}; it "
                    f"checks distla rows of the cholesky, lu, rbt and tlr benchmarks; "
                    f"model-validation records carry their own prediction and error)")
            state["rows"] = rows
            return
        try:
            sizes = _sizes(args.n)
            grids = [parse_grid(g) for g in args.grid] if args.grid else None
            if grids and None in grids:
                raise ValueError("--grid: give PxQ shapes (auto is the squarest: use --ranks)")
            args.device_kind = M.device
            state["jobs"], state["counts"] = _jobs(args, sizes, grids)
        except (ValueError, TypeError) as e:
            raise CommandError(str(e)) from None

    on_root(comm, prepare)
    if comm.rank != 0:
        return 0
    M = state["M"]
    if args.validate:
        rows = state["rows"]
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
        rows, counts, base_rate = [], state["counts"], {}
        for algo, n, nbx, P, Q, R in state["jobs"]:
            kw = dict(lookahead=args.lookahead, tree=args.tree,
                      ranks_per_node=args.ranks_per_node, **_opts(args, algo))
            if nbx is None:
                pr = recommend(algo, n, R, M, nbs=args.nb, **kw)
                rows.append({**pr.row(), "recommended": True})
                continue
            pr = predict(algo, n, nbx, P, Q, M, **kw)
            row = pr.row()
            key = (algo, nbx, args.weak is not None)
            if R == min(counts):
                base_rate.setdefault(key, row["tflops_per_rank"])
            if key in base_rate:
                row["scaling_eff"] = row["tflops_per_rank"] / base_rate[key]
            if args.per_step and not args.quiet:
                _print_steps(pr)
            val = M.extra.get("validation")
            if val:   # the spread of the machine's validation runs, where they cover the row
                inside = R <= val.get("max_ranks", math.inf) and \
                    algo in val.get("algorithms", (algo,))
                row["err_band"] = f"+-{100 * val['max_abs_err']:.0f}%" if inside else \
                    "extrapolated"
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
