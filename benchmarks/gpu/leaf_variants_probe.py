"""Where a leaf kernel's ~4.6 us per column goes (diagnosis for docs/perf.md): the leaf of
``distla.device._panel_cuda`` timed as is and with parts removed (wrong results, timing only):
no grid barrier; no barrier and the pivot row not read back from global memory."""
from __future__ import annotations

import time

import cupy
import numpy as np

from distla.device import _panel_cuda as pc


def variant(src, char):
    T, sfmin = {"d": ("double", "2.2250738585072014e-308"), "f": ("float", "1.17549435e-38f")}[char]
    return cupy.RawKernel(src % {"wmax": pc.LEAF_MAX, "T": T, "sfmin": sfmin}, "distla_getf2_leaf",
                          options=("-std=c++17",), enable_cooperative_groups=True)


def main():
    base = pc._SRC
    nosync = base.replace("grid.sync();", "__syncthreads();")
    norow = nosync.replace("const T pv = __ldcg(src + c);", "const T pv = s[c * chunk];")
    nocand = norow.replace("const int i = __ldcg(cidx + par * G + q);", "const int i = q;").replace(
        "const T x = __ldcg(cval + par * G + q);", "const T x = T(q);")
    noperm = nocand.replace("ntouch = n;", "ntouch = 0;")
    loop = "for (int j = 0; j < w; ++j) {\n    const int jr"
    empty = noperm.replace(loop, loop.replace("j < w", "j < 0"))
    assert len({base, nosync, norow, nocand, noperm, empty}) == 6
    for m, w in ((32768, 32), (8192, 32), (32768, 64)):
        for name, src in (("as is", base), ("no grid barrier", nosync),
                          ("no barrier, no row read", norow), ("no global reads", nocand),
                          ("... no net row moves", noperm), ("load and store only", empty)):
            k = variant(src, "d")
            a = cupy.asfortranarray(cupy.random.default_rng(0).standard_normal((m, 1024)))
            G = pc.blocks(m)
            ws = (cupy.empty(2 * 132, np.float64), cupy.zeros(2 * 132, np.int32),
                  cupy.empty(2 * 132 * pc.LEAF_MAX), cupy.empty(2 * pc.LEAF_MAX))
            ipiv, info = cupy.zeros(1024, np.int32), cupy.zeros((), np.int32)
            smem = -(-m // G) * w * 8
            k.max_dynamic_shared_size_bytes = pc.SMEM_MAX
            t = np.inf
            for _ in range(5):
                cupy.cuda.runtime.deviceSynchronize()
                t0 = time.perf_counter()
                k((G,), (pc.THREADS,), (a, np.int64(m), np.int32(m), np.int32(1024), np.int32(0),
                                        np.int32(w), ipiv, info) + ws, shared_mem=smem)
                cupy.cuda.runtime.deviceSynchronize()
                t = min(t, time.perf_counter() - t0)
            print(f"m {m:6d} w {w:3d} G {G:4d} {name:26s} {t * 1e6:8.1f} us "
                  f"({t * 1e6 / w:5.2f} us per column)", flush=True)


if __name__ == "__main__":
    main()
