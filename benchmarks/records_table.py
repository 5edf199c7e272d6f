"""Print benchmark records (JSON lines, as ``--json`` writes them) as a Markdown table.

    python benchmarks/records_table.py benchmarks/results/FILE.jsonl [...]

One row per record, in file order: benchmark, implementation, n, grid (or ranks), the
variant fields a record carries (dtype, pivoting, precision, gemm, tile, tol, nb, tree),
seconds and TFLOP/s. Lines without a "bench" field (a file's "note": how it was measured) are
printed above the table. Serial, no MPI.
"""

from __future__ import annotations

import argparse
import json

VARIANTS = ("dtype", "pivoting", "precision", "gemm", "nb", "tile", "tol", "tree")


def rows(paths):
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    yield json.loads(line)


def fmt(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def table(records) -> str:
    head = ["bench", "impl", "n", "grid", "variant", "seconds", "TFLOP/s"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in records:
        if "bench" not in r:
            continue
        grid = r.get("grid") or (f"{r['ranks']} ranks" if "ranks" in r else "")
        variant = ", ".join(f"{k} {fmt(r[k])}" for k in VARIANTS if r.get(k) is not None)
        cells = [r.get("bench"), r.get("impl"), r.get("n"), grid, variant,
                 r.get("seconds"), r.get("tflops")]
        out.append("| " + " | ".join(fmt(c) for c in cells) + " |")
    return "\n".join(out)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("files", nargs="+", metavar="FILE.jsonl")
    records = list(rows(p.parse_args(argv).files))
    for r in records:
        if "bench" not in r:
            print(r.get("note", r))
    print(table(records))


if __name__ == "__main__":
    main()
