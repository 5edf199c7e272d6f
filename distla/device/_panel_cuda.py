"""The GPU leaf of the recursive LU panel (docs/perf.md, "Recursive panels"): partial pivoting
of ``w <= LEAF_MAX`` columns of a tall column-major panel in one cooperative kernel.

Thread block b owns a contiguous chunk of the panel's rows and is the only one to write their
leaf entries. For each column: every block finds its largest entry on and below the diagonal
and publishes it with its row (leaf columns) and, for the block holding it, the diagonal row;
one grid-wide barrier; every block then picks the same pivot from those candidates (the
largest magnitude, the smallest row among ties, NaNs never chosen, as LAPACK's idamax after
its first entry), the two owners exchange the rows' leaf entries, the pivot row's owner
exchanges their entries in every other panel column (so no separate laswp is needed), and
each block scales and updates its own rows. The candidates are double-buffered by column
parity, so one barrier per column suffices. As LAPACK's xGETF2: a zero pivot is recorded
(first one, 1-based, in ``info``) and not divided by; multipliers are scaled by the
reciprocal unless the pivot is below the smallest normal number.
"""
from __future__ import annotations  # pragma: no cover - needs a GPU

import functools

import numpy as np

LEAF_MAX = 64          # columns per leaf (compile-time size of the pivot row buffers)
ROWS_PER_BLOCK = 256   # rows per thread block while the SMs last (fewer blocks for short panels)
THREADS = 256
SMEM_MAX = 200 * 1024  # dynamic shared memory a block may use (its rows of the leaf), at most

_SRC = r"""
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
#define WMAX %(wmax)d
#define BIG 2147483647

template <typename T> __device__ __forceinline__ T absval(T x) { return x < T(0) ? -x : x; }

template <typename T> __device__ __forceinline__ void argmax_step(T &v, int &i, T v2, int i2) {
  if (v2 > v || (v2 == v && i2 < i)) { v = v2; i = i2; }
}

// block-wide (value, row) argmax: larger value, then smaller row; every thread gets it. One
// __syncthreads: callers alternate two (sv, si) buffers, so no second one guards their reuse.
template <typename T>
__device__ __forceinline__ void block_argmax(T &v, int &i, T *sv, int *si) {
  for (int o = 16; o > 0; o >>= 1)
    argmax_step(v, i, __shfl_xor_sync(0xffffffffu, v, o), __shfl_xor_sync(0xffffffffu, i, o));
  if ((threadIdx.x & 31) == 0) { sv[threadIdx.x >> 5] = v; si[threadIdx.x >> 5] = i; }
  __syncthreads();
  v = sv[0]; i = si[0];
  for (int k = 1; k < (int)(blockDim.x >> 5); ++k) argmax_step(v, i, sv[k], si[k]);
}

#define BATCH 8   // loads in flight per thread when moving a row's leaf entries

template <typename T>
__device__ void getf2_leaf(T *a, long long lda, int m, int ncols, int c0, int w, int *ipiv,
                           int *info, T *cval, int *cidx, T *crow, T *drow, T sfmin) {
  cg::grid_group grid = cg::this_grid();
  extern __shared__ unsigned char smem_raw[];
  T *s = reinterpret_cast<T *>(smem_raw);     // the block's rows of the leaf, s[c * chunk + i]
  __shared__ T sv[2][32];
  __shared__ int si[2][32];
  __shared__ T prow[WMAX];
  __shared__ int piv_s[WMAX];
  __shared__ int pos[2 * WMAX], orig[2 * WMAX];
  __shared__ int ntouch;
  const int G = gridDim.x, b = blockIdx.x, tid = threadIdx.x, nt = blockDim.x;
  const int chunk = (m + G - 1) / G;
  const int rb = b * chunk, re = min(m, rb + chunk), nr = max(0, re - rb);
  for (int i = tid; i < nr; i += nt) {
    const T *src = a + rb + i + (long long)c0 * lda;
    for (int c = 0; c < w; c += BATCH) {
      T r[BATCH];
#pragma unroll
      for (int u = 0; u < BATCH; ++u) r[u] = c + u < w ? src[(long long)(c + u) * lda] : T(0);
#pragma unroll
      for (int u = 0; u < BATCH; ++u) if (c + u < w) s[(c + u) * chunk + i] = r[u];
    }
  }
  __syncthreads();
  for (int j = 0; j < w; ++j) {
    const int jr = c0 + j, par = j & 1;
    const T *sc = s + j * chunk;
    T v = T(-1);
    int vi = BIG;
    for (int i = max(0, jr - rb) + tid; i < nr; i += nt) {
      const T x = absval(sc[i]);
      if (x > v) { v = x; vi = rb + i; }
    }
    block_argmax(v, vi, sv[0], si[0]);
    if (tid == 0) { cval[par * G + b] = v; cidx[par * G + b] = vi; }
    if (vi != BIG)
      for (int c = tid; c < w; c += nt) crow[(par * G + b) * WMAX + c] = s[c * chunk + vi - rb];
    const bool own_jr = jr >= rb && jr < re;
    if (own_jr)
      for (int c = tid; c < w; c += nt) drow[par * WMAX + c] = s[c * chunk + jr - rb];
    grid.sync();
    T gv = T(-1);
    int gi = BIG;
    for (int q = tid; q < G; q += nt) {
      const int i = __ldcg(cidx + par * G + q);
      const T x = __ldcg(cval + par * G + q);
      if (i != BIG) argmax_step(gv, gi, x, i);
    }
    block_argmax(gv, gi, sv[1], si[1]);
    const int p = gi == BIG ? jr : gi;
    const T *src = gi == BIG ? drow + par * WMAX : crow + (par * G + p / chunk) * WMAX;
    const bool own_p = p != jr && p >= rb && p < re, swap_jr = p != jr && own_jr;
    for (int c = tid; c < w; c += nt) {   // the pivot row, and the two rows exchanged
      const T pv = __ldcg(src + c);
      prow[c] = pv;
      if (own_p) s[c * chunk + p - rb] = __ldcg(drow + par * WMAX + c);
      if (swap_jr) s[c * chunk + jr - rb] = pv;
    }
    if (tid == 0) piv_s[j] = p;
    __syncthreads();
    const T piv = prow[j];
    if (b == 0 && tid == 0) {
      ipiv[jr] = p;
      if (piv == T(0) && *info == 0) *info = jr + 1;
    }
    const bool recip = absval(piv) >= sfmin;
    const T rinv = T(1) / piv;
    T *scw = s + j * chunk;
    for (int i = max(0, jr + 1 - rb) + tid; i < nr; i += nt) {
      T l = scw[i];
      if (piv != T(0)) { l = recip ? l * rinv : l / piv; scw[i] = l; }
      for (int c = j + 1; c < w; c += BATCH) {
        T r[BATCH];
#pragma unroll
        for (int u = 0; u < BATCH; ++u) r[u] = c + u < w ? s[(c + u) * chunk + i] : T(0);
#pragma unroll
        for (int u = 0; u < BATCH; ++u)
          if (c + u < w) s[(c + u) * chunk + i] = r[u] - l * prow[c + u];
      }
    }
    __syncthreads();
  }
  for (int c = 0; c < w; ++c)
    for (int i = tid; i < nr; i += nt) a[rb + i + (long long)(c0 + c) * lda] = s[c * chunk + i];
  // the leaf's interchanges on the other columns: the net moves of its w swaps (at most 2w
  // rows), worked out by one thread, then block b moves the rows of its share of the columns
  if (tid == 0) {
    int n = 0;
    for (int j = 0; j < w; ++j) {
      const int r1 = c0 + j, r2 = piv_s[j];
      int k1 = -1, k2 = -1;
      for (int k = 0; k < n; ++k) { if (pos[k] == r1) k1 = k; if (pos[k] == r2) k2 = k; }
      if (k1 < 0) { pos[n] = r1; orig[n] = r1; k1 = n++; }
      if (k2 < 0) { pos[n] = r2; orig[n] = r2; k2 = n++; }
      const int t = orig[k1]; orig[k1] = orig[k2]; orig[k2] = t;
    }
    ntouch = n;
  }
  __syncthreads();
  const int nother = ncols - w, per = (nother + G - 1) / G;
  const int cb = b * per, ce = min(nother, cb + per), nt2 = ntouch;
  const int cstep = nt2 > 0 ? nt / nt2 : 1;   // whole columns per pass: loads, then stores
  for (int c1 = cb; c1 < ce && nt2 > 0; c1 += cstep) {
    const int c = c1 + tid / nt2, k = tid %% nt2;
    const bool mine = tid < cstep * nt2 && c < ce;
    const long long o = (long long)(c < c0 ? c : c + w) * lda;
    const T val = mine ? a[orig[k] + o] : T(0);
    __syncthreads();
    if (mine && orig[k] != pos[k]) a[pos[k] + o] = val;
    __syncthreads();
  }
}

extern "C" __global__ void distla_getf2_leaf(%(T)s *a, long long lda, int m, int ncols,
    int c0, int w, int *ipiv, int *info, %(T)s *cval, int *cidx, %(T)s *crow, %(T)s *drow) {
  getf2_leaf<%(T)s>(a, lda, m, ncols, c0, w, ipiv, info, cval, cidx, crow, drow, %(sfmin)s);
}
"""


@functools.lru_cache(maxsize=None)
def _kernel(char: str):  # pragma: no cover - needs a GPU
    import cupy
    T, sfmin = {"d": ("double", "2.2250738585072014e-308"), "f": ("float", "1.17549435e-38f")}[char]
    return cupy.RawKernel(_SRC % {"wmax": LEAF_MAX, "T": T, "sfmin": sfmin}, "distla_getf2_leaf",
                          options=("-std=c++17",), enable_cooperative_groups=True)


@functools.lru_cache(maxsize=None)
def _multiprocessors() -> int:  # pragma: no cover - needs a GPU
    import cupy
    dev = cupy.cuda.Device()
    return int(dev.attributes["MultiProcessorCount"])


def blocks(m: int) -> int:  # pragma: no cover - needs a GPU
    return max(1, min(_multiprocessors(), -(-m // ROWS_PER_BLOCK)))


@functools.lru_cache(maxsize=None)
def smem_limit() -> int:  # pragma: no cover - needs a GPU
    """Dynamic shared memory a leaf's block may use on this device: SMEM_MAX, or less where
    the device allows less per block (its opt-in maximum, minus the kernel's static buffers)."""
    import cupy
    dev = cupy.cuda.Device()
    optin = int(dev.attributes.get("MaxSharedMemoryPerBlockOptin", SMEM_MAX + 8192))
    return max(0, min(SMEM_MAX, optin - 8192))


def widest_leaf(m: int, itemsize: int) -> int:  # pragma: no cover - needs a GPU
    """The widest leaf (a power of two, at most LEAF_MAX) whose rows fit a block's shared
    memory for an m-row panel; 0 when not even 8 columns fit."""
    chunk = -(-m // blocks(m))
    w = LEAF_MAX
    while w >= 8 and chunk * w * itemsize > smem_limit():
        w //= 2
    return w if w >= 8 else 0


class LeafKernel:  # pragma: no cover - needs a GPU
    """``__call__(a, lda, c0, w, ipiv, info)``: the leaf on columns ``c0 .. c0 + w`` of the
    column-major panel ``a`` (float32 or float64, ``w <= widest_leaf``; ``ipiv`` int32 panel
    rows, 0-based; ``info`` an int32 device scalar). The candidates' workspace is kept per
    dtype."""

    def __init__(self, cp):
        self.cp = cp
        self._ws = {}

    def __call__(self, a, lda: int, c0: int, w: int, ipiv, info) -> None:
        cp = self.cp
        m, ncols = a.shape
        G = blocks(m)
        dt = np.dtype(a.dtype)
        ws = self._ws.get(dt.char)
        if ws is None:
            gm = _multiprocessors()
            ws = (cp.empty(2 * gm, dt), cp.empty(2 * gm, np.int32),
                  cp.empty(2 * gm * LEAF_MAX, dt), cp.empty(2 * LEAF_MAX, dt))
            self._ws[dt.char] = ws
        k = _kernel(dt.char)
        smem = -(-m // G) * w * dt.itemsize
        if k.max_dynamic_shared_size_bytes < smem:
            k.max_dynamic_shared_size_bytes = smem_limit()
        k((G,), (THREADS,), (a, np.int64(lda), np.int32(m), np.int32(ncols), np.int32(c0),
                             np.int32(w), ipiv, info) + ws, shared_mem=smem)
