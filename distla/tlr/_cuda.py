"""Batched small dense factorizations for GPU ranks, as CUDA kernels (CuPy ``RawModule``).

cuSOLVER has no batched QR or SVD for the tall ``nb x w`` tiles of TLR compression (its
batched SVD stops at 32 x 32) and CuPy's stacked ``linalg.qr``/``svd`` issue one library call
per tile, so one step of a TLR algorithm would be thousands of launches. These kernels do a
whole stack in one launch, one thread block per tile:

* :func:`qr` -- Householder QR (LAPACK ``dgeqr2`` + ``dorg2r``, with the column scaling of
  ``dlarfg`` so tiles near underflow or overflow stay accurate) of a stack ``(t, m, w)``,
  ``m >= w``: explicit ``Q (t, m, w)`` and ``R (t, w, w)``.
* :func:`svd` -- one-sided Jacobi SVD (Hestenes; round-robin pair ordering, rotations from
  Demmel and Veselic) of a stack of small square cores ``(t, w, w)``, ``w <= 128``, the core
  kept in shared memory: ``M = X diag(s) Y^T`` with ``s`` descending.

Only :mod:`distla.tlr.batched` calls these (its ``stacked_qr``/``stacked_svd`` seam); the
NumPy ranks use LAPACK there. Local (not collective).
"""
from __future__ import annotations

import functools

import numpy as np

MAX_SVD_WIDTH = 128   # the core lives in shared memory: w * w * 8 bytes <= 128 KiB
MAX_QR_ROWS = 16384   # the Householder vector lives in shared memory: m * 8 bytes
_SMEM_LIMIT = 160 * 1024   # dynamic shared memory asked of a block (H100/H200: <= 227 KiB)

_SOURCE = r"""
typedef @T@ T;
// sums of squares in [SAFE_LO, SAFE_HI] lost nothing to under- or overflow
#define SAFE_LO ((T)@LO@)
#define SAFE_HI ((T)@HI@)

__device__ __forceinline__ T warp_sum(T v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ void warp_sum3(T& a, T& b, T& c) {   // three chains interleaved
    for (int o = 16; o > 0; o >>= 1) {
        a += __shfl_xor_sync(0xffffffffu, a, o);
        b += __shfl_xor_sync(0xffffffffu, b, o);
        c += __shfl_xor_sync(0xffffffffu, c, o);
    }
}
__device__ __forceinline__ T warp_max(T v) {
    for (int o = 16; o > 0; o >>= 1) v = fmax(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
// Block-wide reductions; every thread gets the result. red: 32 T of shared scratch.
__device__ T block_sum(T v, T* red) {
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) red[wid] = v;
    __syncthreads();
    return warp_sum(lane < nw ? red[lane] : (T)0);
}
__device__ T block_max(T v, T* red) {
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) red[wid] = v;
    __syncthreads();
    return warp_max(lane < nw ? red[lane] : (T)0);
}

// a[j:, c] -= tau v (v^T a[j:, c]) for the columns c > j (leading dimension lda), one
// warp per column.
__device__ void apply_reflector(T* a, const int lda, const T* v, T tau, int j, int m, int w) {
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int c = j + 1 + wid; c < w; c += nw) {
        T* ac = a + (size_t)c * lda;
        T d = 0;
        for (int r = j + lane; r < m; r += 32) d += v[r] * ac[r];
        d = warp_sum(d) * tau;
        for (int r = j + lane; r < m; r += 32) ac[r] -= d * v[r];
    }
}

// Householder QR (dgeqr2, dlarfg's scaling) of the column-major m x w matrix a (leading
// dimension lda, m >= w) by the whole block; R(i, j) (i <= j; zero below) is written to
// R[i * rs_r + j * rs_c]; with want_q, a is then overwritten by the explicit Q (dorg2r).
// Scratch in shared memory: v (m), tau (w), red (32).
__device__ void qr_block(T* a, const int lda, const int m, const int w, T* R, const int rs_r,
                         const int rs_c, const int want_q, T* v, T* tau, T* red) {
    const int tid = threadIdx.x;
    for (int j = 0; j < w; ++j) {
        T* aj = a + (size_t)j * lda;
        const T alpha = aj[j];
        T ss = 0;
        for (int r = j + 1 + tid; r < m; r += blockDim.x) { const T x = aj[r]; ss += x * x; }
        ss = block_sum(ss, red);  // sum of squares below the diagonal
        T nrm = sqrt(alpha * alpha + ss);
        if (!(ss >= SAFE_LO && alpha * alpha + ss <= SAFE_HI)) {
            // squares may have under- or overflowed (or the column is zero below the
            // diagonal): redo with the column scaled by its largest entry (block-uniform)
            T mx = 0;
            for (int r = j + tid; r < m; r += blockDim.x) mx = fmax(mx, fabs(aj[r]));
            mx = block_max(mx, red);
            ss = 0;
            if (mx > 0) {
                const T inv = 1 / mx;
                for (int r = j + 1 + tid; r < m; r += blockDim.x) {
                    const T x = aj[r] * inv;
                    ss += x * x;
                }
            }
            ss = block_sum(ss, red);
            const T as = mx > 0 ? alpha / mx : (T)0;
            nrm = mx * sqrt(as * as + ss);
        }
        T t = 0, beta = alpha, scale = 0;
        if (ss > 0) {             // dlarfg: beta = -sign(alpha) ||a[j:, j]||
            beta = alpha >= 0 ? -nrm : nrm;
            t = (beta - alpha) / beta;
            scale = 1 / (alpha - beta);
        }
        for (int r = j + 1 + tid; r < m; r += blockDim.x) {
            const T x = aj[r] * scale;
            v[r] = x;
            aj[r] = x;
        }
        if (tid == 0) { v[j] = 1; tau[j] = t; aj[j] = beta; }
        __syncthreads();
        if (t != 0) apply_reflector(a, lda, v, t, j, m, w);
        __syncthreads();
    }
    for (int idx = tid; idx < w * w; idx += blockDim.x) {
        const int i = idx / w, j = idx - i * w;
        R[(size_t)i * rs_r + (size_t)j * rs_c] = i <= j ? a[(size_t)j * lda + i] : (T)0;
    }
    if (!want_q) return;
    __syncthreads();
    for (int j = w - 1; j >= 0; --j) {  // dorg2r: Q = H_0 ... H_{w-1} [I; 0], in place
        T* aj = a + (size_t)j * lda;
        const T t = tau[j];
        for (int r = j + 1 + tid; r < m; r += blockDim.x) v[r] = aj[r];
        if (tid == 0) v[j] = 1;
        __syncthreads();
        if (t != 0) apply_reflector(a, lda, v, t, j, m, w);
        __syncthreads();
        for (int r = j + 1 + tid; r < m; r += blockDim.x) aj[r] = -t * v[r];
        for (int r = tid; r < j; r += blockDim.x) aj[r] = 0;
        if (tid == 0) aj[j] = 1 - t;
        __syncthreads();
    }
}

// QR of each column-major m x w tile A[b] (stored as (t, w, m)), m >= w, in global memory.
// R (t, w, w) row-major; with want_q, A[b] is overwritten by the explicit Q.
extern "C" __global__ void hh_qr(T* A, T* R, const int m, const int w, const int want_q) {
    extern __shared__ unsigned char smem_raw[];
    T* v = (T*)smem_raw;      // m
    T* tau = v + m;           // w
    T* red = tau + w;         // 32
    qr_block(A + (size_t)blockIdx.x * w * m, m, m, w, R + (size_t)blockIdx.x * w * w, w, 1,
             want_q, v, tau, red);
}

// Row-chunk QR in shared memory (the first level of a TSQR): block (b, i) factors rows
// [i mc, (i + 1) mc) of tile b of A (t, w, m) (column-major m x w tiles, mc >= w), writes
// the explicit Q of the chunk back in place (with want_q) and its R to rows [i w, (i + 1) w)
// of Rs (t, w, nch w): column-major (nch w) x w tiles, the stacked R factors of the tile.
extern "C" __global__ void hh_qr_chunks(T* A, T* Rs, const int m, const int w, const int mc,
                                        const int want_q) {
    extern __shared__ unsigned char smem_raw[];
    T* a = (T*)smem_raw;      // mc * w, column-major
    T* v = a + (size_t)mc * w;
    T* tau = v + mc;
    T* red = tau + w;
    const int nch = m / mc, b = blockIdx.x / nch, i = blockIdx.x - b * nch;
    T* g = A + (size_t)b * w * m + (size_t)i * mc;
    for (int idx = threadIdx.x; idx < mc * w; idx += blockDim.x) {
        const int c = idx / mc, r = idx - c * mc;
        a[idx] = g[(size_t)c * m + r];
    }
    __syncthreads();
    const int M2 = nch * w;
    qr_block(a, mc, mc, w, Rs + (size_t)b * w * M2 + (size_t)i * w, 1, M2, want_q, v, tau, red);
    if (!want_q) return;
    __syncthreads();
    for (int idx = threadIdx.x; idx < mc * w; idx += blockDim.x) {
        const int c = idx / mc, r = idx - c * mc;
        g[(size_t)c * m + r] = a[idx];
    }
}

// One-sided Jacobi on the columns of each row-major w x w core M[b]: M V = W with W's
// columns orthogonal. Outputs (row-major): X = W / s (zero where s == 0), s = column norms
// of W (unsorted), Yt = V^T. Sweeps stop when no pair has |w_p . w_q| > tol ||w_p|| ||w_q||.
// W (and V when v_in_smem) live in shared memory, column-major; otherwise V is worked on in
// Yt (column-major V = row-major V^T). One warp per column pair of a round.
extern "C" __global__ void jacobi_svd(const T* M, T* X, T* S, T* Yt, const int w,
                                      const int max_sweeps, const T tol, const int v_in_smem) {
    extern __shared__ unsigned char smem_raw[];
    T* W = (T*)smem_raw;
    __shared__ int rotated;
    const int tid = threadIdx.x, lane = tid & 31, wid = tid >> 5, nw = blockDim.x >> 5;
    const T* Mb = M + (size_t)blockIdx.x * w * w;
    T* Ytb = Yt + (size_t)blockIdx.x * w * w;
    T* V = v_in_smem ? W + w * w : Ytb;
    for (int idx = tid; idx < w * w; idx += blockDim.x) {
        const int r = idx / w, c = idx - r * w;
        W[c * w + r] = Mb[idx];
        V[idx] = r == c ? (T)1 : (T)0;
    }
    const int N = w + (w & 1);  // even number of players; column w (if any) is a bye
    for (int sweep = 0; sweep < max_sweeps; ++sweep) {
        if (tid == 0) rotated = 0;
        __syncthreads();
        for (int rnd = 0; rnd < N - 1; ++rnd) {
            for (int pi = wid; pi < N / 2; pi += nw) {
                int p, q;
                if (pi == 0) { p = 0; q = 1 + rnd; }
                else { p = 1 + (rnd + pi) % (N - 1); q = 1 + (rnd - pi + N - 1) % (N - 1); }
                if (p >= w || q >= w) continue;
                T* wp = W + p * w;
                T* wq = W + q * w;
                T al = 0, be = 0, ga = 0;
                for (int r = lane; r < w; r += 32) {
                    const T x = wp[r], y = wq[r];
                    al += x * x; be += y * y; ga += x * y;
                }
                warp_sum3(al, be, ga);
                if (ga != 0 && fabs(ga) > tol * sqrt(al) * sqrt(be)) {
                    const T zeta = (be - al) / (2 * ga);
                    const T tn = copysign((T)1, zeta) / (fabs(zeta) + hypot((T)1, zeta));
                    const T c = 1 / sqrt(1 + tn * tn), s = c * tn;
                    T* vp = V + p * w;
                    T* vq = V + q * w;
                    for (int r = lane; r < w; r += 32) {
                        const T x = wp[r], y = wq[r];
                        wp[r] = c * x - s * y;
                        wq[r] = s * x + c * y;
                        const T vx = vp[r], vy = vq[r];
                        vp[r] = c * vx - s * vy;
                        vq[r] = s * vx + c * vy;
                    }
                    if (lane == 0) rotated = 1;
                }
            }
            __syncthreads();
        }
        const int done = !rotated;
        __syncthreads();
        if (done) break;
    }
    T* Xb = X + (size_t)blockIdx.x * w * w;
    T* Sb = S + (size_t)blockIdx.x * w;
    for (int c = wid; c < w; c += nw) {
        T ss = 0;
        for (int r = lane; r < w; r += 32) { const T x = W[c * w + r]; ss += x * x; }
        const T nrm = sqrt(warp_sum(ss));
        const T inv = nrm > 0 ? 1 / nrm : (T)0;
        for (int r = lane; r < w; r += 32) Xb[r * w + c] = W[c * w + r] * inv;
        if (lane == 0) Sb[c] = nrm;
    }
    if (v_in_smem)
        for (int idx = tid; idx < w * w; idx += blockDim.x) Ytb[idx] = V[idx];
}
"""


@functools.cache
def _module(dtype_name: str):
    import cupy
    ctype, lo, hi = {"float64": ("double", "1e-280", "1e300"),
                     "float32": ("float", "1e-26f", "1e36f")}[dtype_name]
    src = _SOURCE.replace("@T@", ctype).replace("@LO@", lo).replace("@HI@", hi)
    return cupy.RawModule(code=src, options=("--std=c++14",))


def _kernel(dtype, name):
    return _module(np.dtype(dtype).name).get_function(name)


def supported(dtype) -> bool:
    return np.dtype(dtype).name in ("float64", "float32")


def _smem_qr(m, w, its):
    return (m * w + m + w + 32) * its


def _chunk_rows(m, w, its):
    """Rows per chunk of the shared-memory TSQR, or None (the tile is too small to split, or
    no chunk size divides ``m``)."""
    for mc in (256, 128, 512, 64):
        if m % mc == 0 and m // mc >= 2 and mc >= 2 * w and _smem_qr(mc, w, its) <= _SMEM_LIMIT:
            return mc
    return None


def _launch(name, dtype, grid, threads, args, smem):
    k = _kernel(dtype, name)
    if smem > 48 * 1024:
        k.max_dynamic_shared_size_bytes = smem
    k((grid,), (threads,), args, shared_mem=smem)


def qr(A, want_q: bool = True):
    """Reduced QR of a CuPy stack ``A (t, m, w)``, ``m >= w``, ``m <= MAX_QR_ROWS``:
    ``Q (t, m, w)`` (``None`` unless ``want_q``) and ``R (t, w, w)``.

    Tiles that fit in shared memory are factored there (one block per tile); taller tiles
    whose rows split into chunks of 64-512 rows go through a two-level TSQR (chunk QRs in
    shared memory, one block per chunk; QR of the stacked R factors; ``Q`` = chunk ``Q`` times
    the matching rows of the second level's ``Q``, one batched GEMM); the rest is factored
    in global memory, one block per tile."""
    import cupy
    t, m, w = A.shape
    if m < w or m > MAX_QR_ROWS:
        raise ValueError(f"qr kernel needs w <= m <= {MAX_QR_ROWS}, got {A.shape}")
    At = cupy.ascontiguousarray(A.swapaxes(1, 2))   # column-major tiles
    R = cupy.empty((t, w, w), A.dtype)
    if not (t and w):
        return (At.swapaxes(1, 2) if want_q else None), R
    its = A.dtype.itemsize
    wq = np.int32(bool(want_q))
    if _smem_qr(m, w, its) <= _SMEM_LIMIT:      # the whole tile in shared memory
        Rs = cupy.empty((t, w, w), A.dtype)
        _launch("hh_qr_chunks", A.dtype, t, 256,
                (At, Rs, np.int32(m), np.int32(w), np.int32(m), wq), _smem_qr(m, w, its))
        # Rs holds R column-major: R = Rs^T as a row-major array
        return (At.swapaxes(1, 2) if want_q else None), cupy.ascontiguousarray(
            Rs.swapaxes(1, 2))
    mc = _chunk_rows(m, w, its)
    if mc is not None:                          # two-level TSQR
        nch = m // mc
        Rs = cupy.empty((t, w, nch * w), A.dtype)
        _launch("hh_qr_chunks", A.dtype, t * nch, 256,
                (At, Rs, np.int32(m), np.int32(w), np.int32(mc), wq), _smem_qr(mc, w, its))
        Q2, R = qr(Rs.swapaxes(1, 2), want_q)
        if not want_q:
            return None, R
        Qc = At.swapaxes(1, 2).reshape(t, nch, mc, w)
        Q = cupy.matmul(Qc, Q2.reshape(t, nch, w, w)).reshape(t, m, w)
        return Q, R
    threads = 512 if w > 16 else 256
    _launch("hh_qr", A.dtype, t, threads, (At, R, np.int32(m), np.int32(w), wq),
            (m + w + 32) * its)
    return (At.swapaxes(1, 2) if want_q else None), R


def svd(M, max_sweeps: int = 40):
    """SVD of a CuPy stack of square cores ``M (t, w, w)``, ``w <= MAX_SVD_WIDTH``:
    ``X, s, Yt`` with ``M = X diag(s) Yt``, ``s`` descending (like ``xp.linalg.svd``)."""
    import cupy
    t, w, w2 = M.shape
    if w != w2 or w > MAX_SVD_WIDTH:
        raise ValueError(f"svd kernel needs square cores of width <= {MAX_SVD_WIDTH}, "
                         f"got {M.shape}")
    M = cupy.ascontiguousarray(M)
    X = cupy.empty_like(M)
    Yt = cupy.empty_like(M)
    s = cupy.empty((t, w), M.dtype)
    if t and w:
        its = M.dtype.itemsize
        v_in_smem = 2 * w * w * its <= _SMEM_LIMIT
        smem = (2 if v_in_smem else 1) * w * w * its
        k = _kernel(M.dtype, "jacobi_svd")
        if smem > 48 * 1024:
            k.max_dynamic_shared_size_bytes = smem
        threads = min(1024, 32 * ((w + 1) // 2))       # one warp per pair of a round
        # rotate while |w_p . w_q| > tol ||w_p|| ||w_q||; the dot product itself is only
        # accurate to ~w eps, so a smaller tol would keep rotating on rounding noise
        tol = 4.0 * w * np.finfo(M.dtype).eps
        k((t,), (threads,), (M, X, s, Yt, np.int32(w), np.int32(max_sweeps),
                             M.dtype.type(tol), np.int32(v_in_smem)), shared_mem=smem)
        order = cupy.argsort(-s, axis=1)
        s = cupy.take_along_axis(s, order, axis=1)
        X = cupy.take_along_axis(X, order[:, None, :], axis=2)
        Yt = cupy.take_along_axis(Yt, order[:, :, None], axis=1)
    return X, s, Yt


@functools.cache
def _diff_norm_kernel():
    import cupy
    return cupy.ReductionKernel("T x, T y", "T z", "(x - y) * (x - y)", "a + b",
                                "z = sqrt(a)", "0", "distla_diff_norm")


def diff_norms(X, Y):
    """``||X_t - Y_t||_F`` for C-contiguous CuPy stacks of equal shape ``(t, ...)``, in one
    pass (each tile reduced in 64 parts, so that few tiles still fill the device)."""
    import cupy
    t = X.shape[0]
    size = X.size // max(t, 1)
    p = 64 if size % 64 == 0 and size >= 64 * 1024 else 1
    part = _diff_norm_kernel()(X.reshape(t, p, -1), Y.reshape(t, p, -1), axis=2)
    return cupy.sqrt(cupy.sum(part * part, axis=1))
