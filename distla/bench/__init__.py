"""distla's benchmark framework: ``python -m distla.bench NAME [options]`` (= ``distla bench``).

Every benchmark is a module ``distla/bench/NAME.py`` with two functions:

* ``add_arguments(parser)`` -- add its own options to an argparse parser (see
  :func:`distla.bench.common.add_problem_arguments` for the usual --n/--nb/--grid/--device/
  --dtype/--reps set);
* ``run(args) -> list[dict]`` -- collective over ``MPI.COMM_WORLD``: measure, and return result
  records (only rank 0's list is used). A record is a flat dict; by convention
  ``{"bench", "impl", "n", "nb", "grid", "ranks", "device", "dtype", "seconds", "tflops", ...}``
  where ``impl`` is ``"distla"`` or the reference's name (``"numpy"``, ``"cupy"``, ...);
  :func:`distla.bench.common.record` builds one.

The framework adds the common options ``--json FILE`` (append one JSON line per record),
``--plot FILE.png`` (rate vs n, and vs ranks when the records -- this run's plus those in the
--json file -- span several rank counts; needs matplotlib: ``pip install 'distla[plot]'``),
``--quiet`` and ``--verbose``; prints the records as a table on rank 0; and turns any error
into one line on rank 0 and exit code 2 on every rank. A benchmark that checks its results
judges each record against a stated threshold (``check`` PASS/FAIL, ``check_thresh``:
:func:`distla.bench.common.judge`); when any record FAILs, the command exits with code 3 (as
``distla solve``) after printing and saving every record. ``python -m distla.bench plot
FILE.jsonl --plot out.png`` plots saved results.
"""
from __future__ import annotations

import importlib
import json

from ..runtime import (
    EXIT_THRESH,
    ArgumentParser,
    CommandError,
    UsageError,
    apply_runtime_defaults,
    guarded,
    on_root,
    run_main,
)

__all__ = ["BENCHMARKS", "main", "main_argv", "run_benchmark", "plot_records",
           "load_records"]

BENCHMARKS = ("matmul", "cholesky", "lu", "rbt", "tlr", "job", "mixed")
_HELP = {
    "matmul": "distributed GEMM (SUMMA) beside one-process NumPy/CuPy",
    "cholesky": "distributed Cholesky factorization",
    "lu": "distributed LU factorization (partial / tournament pivoting)",
    "rbt": "random butterfly transformation solve",
    "tlr": "tile low-rank Cholesky",
    "job": "the whole job (generate, read, rhs, solve, check, write) beside its floors",
    "mixed": "mixed-precision solves vs float64 over a condition-number sweep",
}


def _load(name: str):
    if name not in BENCHMARKS:
        raise CommandError(f"unknown benchmark {name!r} (choose from "
                           f"{', '.join(BENCHMARKS)})")
    try:
        mod = importlib.import_module(f"{__name__}.{name}")
    except ModuleNotFoundError as e:
        if e.name == f"{__name__}.{name}":
            raise CommandError(f"benchmark {name!r} is not available in this build of distla "
                               f"(no module distla/bench/{name}.py yet)") from None
        raise
    for fn in ("add_arguments", "run"):
        if not callable(getattr(mod, fn, None)):
            raise CommandError(f"benchmark module distla.bench.{name} has no {fn}()")
    return mod


def _add_common(p) -> None:
    g = p.add_argument_group("output")
    g.add_argument("--json", metavar="FILE", help="append one JSON line per result to FILE")
    g.add_argument("--plot", metavar="FILE.png",
                   help="plot rate vs n (and vs ranks, from this run plus --json's file)")
    q = g.add_mutually_exclusive_group()
    q.add_argument("-q", "--quiet", action="store_true", help="no table")
    q.add_argument("-v", "--verbose", action="store_true", help="tracebacks on errors")


def build_parser(prog: str = "python -m distla.bench", name: str | None = None):
    """The argument parser; only benchmark ``name``'s module is imported (the others get
    stub sub-parsers, so ``--help`` stays cheap). Not collective."""
    p = ArgumentParser(prog=prog, description="Run a distla benchmark under MPI, e.g. "
                       f"'mpiexec -n 4 {prog} matmul --n 2048'. "
                       f"'{prog} NAME --help' lists a benchmark's options.")
    sub = p.add_subparsers(dest="bench", metavar="NAME", parser_class=ArgumentParser)
    for b in BENCHMARKS:
        if b == name:
            mod = _load(b)
            doc = (mod.__doc__ or _HELP[b]).strip().splitlines()[0]
            sp = sub.add_parser(b, help=_HELP[b], description=doc)
            mod.add_arguments(sp)
            _add_common(sp)
        else:
            sub.add_parser(b, help=_HELP[b], add_help=False)
    sp = sub.add_parser("plot", help="plot results saved with --json",
                        description="Plot records saved with --json (rank 0 only).")
    sp.add_argument("files", nargs="+", metavar="FILE.jsonl")
    sp.add_argument("--plot", required=True, metavar="FILE.png")
    sp.add_argument("--only", metavar="NAME", help="only records of benchmark NAME")
    return p


def _first_positional(argv) -> str | None:
    for a in argv:
        if not a.startswith("-"):
            return a
    return None


def load_records(path, bench: str | None = None) -> list[dict]:
    """The records in a JSON-lines file (blank and malformed lines skipped), optionally only
    those of ``bench``. Not collective."""
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(r, dict) and (bench is None or r.get("bench") == bench):
                out.append(r)
    return out


def _check_matplotlib():
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise CommandError("--plot needs matplotlib, which is not installed: "
                           "pip install 'distla[plot]' (or pip install matplotlib)") from None


def _rate_key(records):
    for k in ("tflops", "gflops"):
        if any(r.get(k) is not None for r in records):
            return k
    return None


def plot_records(records: list[dict], path: str, title: str = "") -> None:
    """Write a PNG: rate vs n for every (impl, ranks) series, and, when the records span more
    than one rank count, rate vs ranks for every (impl, n). Not collective (call on one
    rank). Needs matplotlib."""
    _check_matplotlib()
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    key = _rate_key(records)
    if key is None:
        raise CommandError("--plot: the records have no 'tflops' or 'gflops' field")
    recs = [r for r in records if r.get(key) is not None and "n" in r]   # (rate-less phases:
    if not recs:                                                           # null, skipped)
        raise CommandError(f"--plot: no record has a {key!r} value")
    ranks = sorted({int(r.get("ranks", 1)) for r in recs if r.get("impl") == "distla"})
    scaling = len(ranks) > 1
    fig, axes = plt.subplots(1, 2 if scaling else 1, figsize=(11 if scaling else 6, 4.5),
                             squeeze=False)
    ax = axes[0][0]
    series: dict[tuple, dict[int, float]] = {}
    for r in recs:
        impl = r.get("impl", "?")
        nr = int(r.get("ranks", 1)) if impl == "distla" else int(r.get("threads") or 0)
        label = (impl, nr, r.get("device", ""), r.get("dtype", ""))
        pts = series.setdefault(label, {})
        pts[int(r["n"])] = max(pts.get(int(r["n"]), 0.0), float(r[key]))
    for (impl, nr, dev, dt), pts in sorted(series.items(), key=lambda kv: str(kv[0])):
        xs = sorted(pts)
        if impl == "distla":
            lab = f"{impl} ({nr} rank{'s' * (nr != 1)}"
        else:
            lab = f"{impl} (1 process" + (f", {nr} thread{'s' * (nr != 1)}" if nr else "")
        lab += f", {dev}" if dev else ""
        lab += f", {dt})" if dt else ")"
        ax.plot(xs, [pts[x] for x in xs], marker="o",
                linestyle="-" if impl == "distla" else "--", label=lab)
    unit = "TFLOP/s" if key == "tflops" else "GFLOP/s"
    ax.set_xlabel("n")
    ax.set_ylabel(unit)
    ax.set_title(f"{title} rate vs n" if title else "rate vs n")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    if scaling:
        ax2 = axes[0][1]
        by_n: dict[int, dict[int, float]] = {}
        for r in recs:
            if r.get("impl") != "distla":
                continue
            pts = by_n.setdefault(int(r["n"]), {})
            nr = int(r.get("ranks", 1))
            pts[nr] = max(pts.get(nr, 0.0), float(r[key]))
        for n, pts in sorted(by_n.items()):
            if len(pts) < 2:
                continue
            xs = sorted(pts)
            ax2.plot(xs, [pts[x] for x in xs], marker="o", label=f"distla n={n}")
        refs = [float(r[key]) for r in recs if r.get("impl") != "distla"]
        if refs:
            ax2.axhline(max(refs), color="gray", linestyle="--",
                        label="best 1-process reference")
        ax2.set_xlabel("ranks")
        ax2.set_ylabel(unit)
        ax2.set_xticks(ranks)
        ax2.set_title("rate vs ranks")
        ax2.grid(True, alpha=0.3)
        ax2.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _body(argv, prog) -> int:
    name = _first_positional(argv)
    parser = build_parser(prog, name if name in BENCHMARKS else None)
    args = parser.parse_args(argv)
    if args.bench is None:
        raise UsageError(f"choose a benchmark: {', '.join(BENCHMARKS)} (or plot, for saved "
                         f"results)", parser.format_usage())
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    import warnings
    if comm.Get_rank() != 0:     # one copy of each warning (every rank raises it alike)
        warnings.simplefilter("ignore")
    warnings.formatwarning = lambda msg, cat, *a, **k: f"distla bench: warning: {msg}\n"
    if args.bench == "plot":
        def plot():
            recs = []
            for f in args.files:
                try:
                    recs += load_records(f, args.only)
                except OSError as e:
                    raise CommandError(f"{f}: {e.strerror or e}") from None
                except UnicodeDecodeError:
                    raise CommandError(f"{f}: not a JSON-lines file of records (binary data: "
                                       f"a matrix?)") from None
            if not recs:
                raise CommandError("no records to plot")
            plot_records(recs, args.plot, args.only or "")
        on_root(comm, plot)
        if comm.Get_rank() == 0:
            print(f"plot written to {args.plot}", flush=True)
        return 0
    mod = _load(args.bench)
    _check_options(args)
    if getattr(args, "device", None) == "gpu":
        from mpi4py import MPI

        from ..device import gpu_available
        if not comm.allreduce(gpu_available(), op=MPI.LAND):
            raise CommandError("--device gpu: needs CuPy and a CUDA GPU on every rank (pip "
                               "install 'distla[gpu]'); some rank has none")
    if args.plot:
        on_root(comm, _check_matplotlib)
    if args.json:
        from ..filebase import check_jsonl
        try:
            check_jsonl(args.json, comm)
        except (OSError, ValueError) as e:
            raise CommandError(f"--json: {e}") from None
    with guarded(comm):
        records = mod.run(args)

    def report():
        from .common import STREAMED, append_jsonl
        recs = [dict(r) for r in (records or [])]
        done = [r.pop(STREAMED, False) for r in recs]     # written while the sweep ran
        for r in recs:
            r.setdefault("bench", args.bench)
        if not args.quiet:
            from .common import format_table
            print(format_table(recs), flush=True)
        append_jsonl(args.json, [r for r, d in zip(recs, done) if not d])
        if args.plot:
            allrecs = load_records(args.json, args.bench) if args.json else recs
            plot_records(allrecs, args.plot, args.bench)
            if not args.quiet:
                print(f"plot written to {args.plot}", flush=True)
        return _failures(recs)
    failed = on_root(comm, report)
    if failed:     # a wrong answer never exits 0 (the records above keep check=FAIL)
        raise CommandError(failed, EXIT_THRESH)
    return 0


def _check_options(args) -> None:
    """CommandError (exit 2, before any work) for an option outside its range."""
    from .common import check_options
    try:
        check_options(args)
    except ValueError as e:
        raise CommandError(str(e)) from None


def _failures(recs) -> str:
    """'' when no record FAILs its check, else the message naming the failed ones."""
    bad = [r for r in recs if r.get("check") == "FAIL"]
    what = "; ".join(f"{r.get('impl', '?')} n={r.get('n', '?')}"
                     + "".join(f" {k}={r[k]}" for k in ("method", "pivoting", "precision",
                                                         "factor_dtype", "cond", "phase")
                               if k in r)
                     + f" (threshold {r['check_thresh']:g})" for r in bad[:3])
    return what and (f"{len(bad)} result{'s' * (len(bad) != 1)} FAILED the residual check: "
                     f"{what}{' ...' if len(bad) > 3 else ''}")


def main_argv(argv, prog: str = "python -m distla.bench") -> int:
    """Run the framework on ``argv``; returns the exit code (errors -> one line on rank 0).
    Collective over COMM_WORLD."""
    return run_main(lambda a: _body(a, prog), list(argv), prog=prog)


def main(argv=None) -> None:
    """``python -m distla.bench``: exit with the framework's code on every rank."""
    import sys

    apply_runtime_defaults()
    code = main_argv(sys.argv[1:] if argv is None else argv)
    sys.stdout.flush()
    sys.exit(code)


def run_benchmark(name: str, argv=()) -> list[dict]:
    """Collective: run benchmark ``name`` with command-line style options ``argv`` (e.g.
    ``["--n", "512", "1024"]``) and return its records on every rank (rank 0's list,
    broadcast). For scripts such as examples/scaling_study.py; errors propagate as
    exceptions (the same on every rank)."""
    from mpi4py import MPI

    parser = build_parser(name=name)
    args = parser.parse_args([name, *map(str, argv)])
    mod = _load(name)
    _check_options(args)
    with guarded(MPI.COMM_WORLD):
        records = mod.run(args)
    return MPI.COMM_WORLD.bcast([dict(r) for r in (records or [])], root=0)
