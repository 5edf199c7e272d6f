"""Markdown table of scaling records (benchmarks/scaling.sh): per-GPU TFLOP/s, parallel
efficiency against the same algorithm on one GPU (strong scaling: same n; weak scaling: per-GPU
rate against one GPU's), and cuSOLVERMp beside on the same grid and n.

    python benchmarks/scaling_table.py OUT/scaling.jsonl [OUT/peers.jsonl ...]
"""
from __future__ import annotations

import argparse
import json

_NAME = {("cholesky", None): "Cholesky", ("lu", "partial"): "LU partial",
         ("lu", "tournament"): "CALU", ("rbt", None): "RBT"}


def load(paths):
    dist, peers = [], {}
    for p in paths:
        for line in open(p, encoding="utf-8"):
            line = line.strip()
            if not line:
                continue
            r = json.loads(line)
            if "lib" in r:   # cusolvermp_bench.py RESULT rows
                peers[(r["op"], r["n"], r["grid"])] = r["tflops"]
            elif r.get("impl") in ("distla", "distla-rbt") and r.get("part"):
                dist.append(r)
    best = {}   # repeated runs of one configuration: the fastest
    for r in dist:
        k = (r["bench"], r.get("pivoting"), r.get("tree"), r["part"], r["n"], r["grid"])
        if k not in best or r["seconds"] < best[k]["seconds"]:
            best[k] = r
    return list(best.values()), peers


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+")
    args = ap.parse_args(argv)
    dist, peers = load(args.files)
    one = {}   # one GPU's rate: strong scaling at the same n, weak scaling of the same part
    for r in dist:
        if r.get("ranks") == 1:
            key = (r["bench"], r.get("pivoting"), r.get("tree"), r.get("part"))
            one[(*key, r["n"])] = r["tflops"]
            one.setdefault(key, r["tflops"])
    print("| algorithm | part | n | GPUs | grid | TFLOP/s | per GPU | efficiency | cuSOLVERMp |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in sorted(dist, key=lambda r: (r["bench"], str(r.get("pivoting")), str(r.get("tree")),
                                         str(r.get("part")), r["n"], r["ranks"], r["grid"])):
        name = _NAME.get((r["bench"], r.get("pivoting")), r["bench"])
        if r.get("pivoting") == "tournament":
            name += f" ({r.get('tree', 'binary')})"
        g = r["ranks"]
        key = (r["bench"], r.get("pivoting"), r.get("tree"))
        base = one.get((*key, r.get("part"), r["n"])) if r.get("part") != "weak" else \
            one.get((*key, "weak"))
        eff = f"{r['tflops'] / g / base:.0%}" if base else ""
        op = "potrf" if r["bench"] == "cholesky" else "getrf"
        peer = peers.get((op, r["n"], r["grid"]))
        print(f"| {name} | {r.get('part', '')} | {r['n']} | {g} | {r['grid']} | "
              f"{r['tflops']:.1f} | {r['tflops'] / g:.1f} | {eff} | "
              f"{'' if peer is None else f'{peer:.1f}'} |")


if __name__ == "__main__":
    main()
