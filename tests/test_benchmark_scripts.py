"""The measurement scripts under benchmarks/ stay runnable, and the records stay well formed.

No GPU or MPI needed: the shell scripts are syntax-checked with ``bash -n``, every benchmark
call of benchmarks/readme_table.sh is parsed by the benchmark's own argument parser (so an
option renamed in distla/bench/ breaks this test, not the next GPU run), and every record in
benchmarks/results/ carries the fields the README's claims rely on.
"""

import json
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
RECORDS = sorted((BENCH / "results").glob("*.jsonl"))


def _readme_table_calls():
    """(name, argv) of every ``run LIMIT RANKS NAME ARGS...`` line of readme_table.sh."""
    text = (BENCH / "readme_table.sh").read_text().replace("\\\n", " ")
    calls = []
    for line in text.splitlines():
        words = shlex.split(line, comments=True)
        if "run" not in words:
            continue
        words = words[words.index("run"):]
        if len(words) < 4 or not words[1].isdigit() or not words[2].isdigit():
            continue
        argv = [w for a in words[3:] for w in (["--device", "gpu"] if a == "$G" else [a])]
        calls.append((argv[0], argv[1:]))
    return calls


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize("script", sorted(str(p.relative_to(ROOT))
                                          for p in BENCH.rglob("*.sh")))
def test_shell_scripts_parse(script):
    subprocess.run(["bash", "-n", str(ROOT / script)], check=True)


def test_readme_table_calls_parse():
    from distla.bench import BENCHMARKS, build_parser

    calls = _readme_table_calls()
    assert {name for name, _ in calls} == set(BENCHMARKS)  # the table covers every benchmark
    for name, argv in calls:
        args = build_parser(name=name).parse_args([name, *argv, "--json", "out.jsonl"])
        assert args.bench == name


@pytest.mark.parametrize("path", RECORDS, ids=[p.name for p in RECORDS])
def test_records_are_well_formed(path):
    """Every measurement names its benchmark, implementation, size and seconds, and the file
    says how it was measured: a "command" in each record or a "note" line of its own."""
    recs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    data = [r for r in recs if "bench" in r]
    assert data, f"{path.name}: no measurement"
    noted = any("note" in r for r in recs if "bench" not in r)
    for rec in data:
        for key in ("impl", "n", "seconds"):
            assert key in rec, f"{path.name}: record without {key!r}: {rec}"
        assert rec["seconds"] > 0
        assert noted or "command" in rec, f"{path.name}: record without a command: {rec}"


def test_records_table_prints_one_row_per_record():
    import importlib.util

    spec = importlib.util.spec_from_file_location("records_table", BENCH / "records_table.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    recs = [r for r in mod.rows(RECORDS) if "bench" in r]
    out = mod.table(recs).splitlines()
    assert len(out) == 2 + len(recs)
    assert all(line.startswith("| ") and line.endswith(" |") for line in out[2:])


@pytest.mark.mpi
def test_cpu_reference_threads_are_at_most_the_cores(comm, monkeypatch):
    """The one-process CPU reference gets the cores the run uses: its ranks on the node, but
    never more threads than the node has cores (4 ranks on 2 cores ran SciPy with 4 threads,
    350x slower than with 1, and the benchmark printed a 58x 'speedup')."""
    import os

    from distla.bench import common
    on_node = common.ranks_on_node(comm)
    assert common.reference_threads(comm) == min(on_node, os.cpu_count())
    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    assert common.reference_threads(comm) == 1
    monkeypatch.setattr(os, "cpu_count", lambda: None)
    assert common.reference_threads(comm) == 1


@pytest.mark.mpi
def test_cpu_reference_takes_the_faster_of_its_threads_and_one(comm, monkeypatch):
    """On a busy node threaded BLAS was up to 1000x slower than one thread and benchmarks
    recorded speedups of 57-85x: a default reference is also timed with one thread and the
    faster counts (with its thread count); a --ref-threads the user gave is kept alone."""
    import os

    from distla.bench import common
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    on_node = common.ranks_on_node(comm)
    counts = common.reference_thread_counts(comm)
    assert counts == ((on_node, 1) if on_node > 1 else (1,))
    assert common.reference_thread_counts(comm, 3) == (3,)
    slow = {2: 5.0, 1: 0.5}            # seconds a measurement takes under k threads
    seen = []

    def blas(k):
        import contextlib

        @contextlib.contextmanager
        def cm():
            seen.append(k)
            yield k
        return cm()
    monkeypatch.setattr(common, "blas_threads", blas)
    assert common.best_over_threads((2, 1), lambda: slow[seen[-1]]) == (0.5, 1)
    assert common.best_over_threads((1,), lambda: slow[seen[-1]]) == (0.5, 1)
    slow[2] = 0.1
    assert common.best_over_threads((2, 1), lambda: slow[seen[-1]]) == (0.1, 2)
