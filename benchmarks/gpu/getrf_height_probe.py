"""How cuSOLVER's getrf of an ``m x nb`` panel scales with its height m, and whether several
shorter getrfs on separate streams overlap (diagnosis: would a tournament over row chunks of
one GPU's panel shorten the LU loop's panel chain? docs/perf.md).

    python3 benchmarks/gpu/getrf_height_probe.py [--nb 512 1024] [--json OUT]

For float32 and float64: the best of ``--reps`` device-synchronized getrf of m x nb (m from
nb to 32768), and ``--chunks`` getrfs of (32768 / chunks) x nb each on its own stream, all
queued before one synchronize. One process, one GPU.
"""
from __future__ import annotations

import argparse
import time

import cupy
import numpy as np

from distla.bench import common
from distla.device import get_backend


def best(fn, reps):
    t = np.inf
    for _ in range(reps):
        cupy.cuda.runtime.deviceSynchronize()
        t0 = time.perf_counter()
        fn()
        cupy.cuda.runtime.deviceSynchronize()
        t = min(t, time.perf_counter() - t0)
    return t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nb", type=int, nargs="+", default=[512, 1024])
    ap.add_argument("--m", type=int, default=32768)
    ap.add_argument("--chunks", type=int, nargs="+", default=[4, 8])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json")
    a = ap.parse_args()
    be = get_backend("gpu")
    rows = []
    rng = cupy.random.default_rng(0)
    for dt in (np.float32, np.float64):
        for nb in a.nb:
            src = cupy.asfortranarray(rng.standard_normal((a.m, nb), dtype=dt))
            work = cupy.empty_like(src, order="F")
            heights = [m for m in (nb, 2048, 4096, 8192, 16384, 32768) if nb <= m <= a.m]
            for m in heights:
                def one(m=m):
                    work[:m] = src[:m]
                    be.getrf(work[:m])
                t = best(one, a.reps)
                rows.append(common.record("getrf_height_probe", "getrf", n=m, seconds=t,
                                          nb=nb, dtype=np.dtype(dt).name, device="gpu",
                                          ranks=1, tflops=None))
                print(f"{np.dtype(dt).name} getrf {m:6d} x {nb}: {t * 1e3:7.3f} ms",
                      flush=True)
            for c in a.chunks:
                h = a.m // c
                streams = [cupy.cuda.Stream(non_blocking=True) for _ in range(c)]

                def chunks(h=h, streams=streams):
                    work[...] = src
                    ev = cupy.cuda.get_current_stream().record()
                    for i, s in enumerate(streams):
                        s.wait_event(ev)
                        with s:
                            be.getrf(work[i * h:(i + 1) * h])
                    for s in streams:
                        cupy.cuda.get_current_stream().wait_event(s.record())
                t = best(chunks, a.reps)
                rows.append(common.record("getrf_height_probe", f"{c} streams", n=h,
                                          seconds=t, nb=nb, dtype=np.dtype(dt).name,
                                          device="gpu", ranks=1, tflops=None, chunks=c))
                print(f"{np.dtype(dt).name} {c} getrfs of {h} x {nb} on {c} streams: "
                      f"{t * 1e3:7.3f} ms", flush=True)
    common.append_jsonl(a.json, rows)


if __name__ == "__main__":
    main()
