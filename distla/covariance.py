"""Covariance test problems: point sets, stationary kernels, and the matrices they define.

Points live in the unit cube ``[0, 1)^d`` (d = 2 or 3) and are sorted along a Morton (Z-order)
curve, so that the tiles of the covariance matrix far from the diagonal couple far-apart
clusters and have low numerical rank. Everything is seedable and deterministic: every rank
generates the same points from the same seed (O(n) memory), then evaluates only its own entries.

* :func:`points` -- 'random', 'grid' (cell centres) or 'jittered' (STARS-H: ``x = (i + 0.1 +
  0.8 U(0, 1)) / side`` per coordinate) point sets, Morton-sorted.
* Kernels (functions of the distance r, plus a nugget added on the diagonal only):
  :class:`SquaredExponential` ``sigma^2 exp(-r^2 / (2 beta^2))``, :class:`Exponential`
  ``sigma^2 exp(-r / beta)``, :class:`Matern` ``sigma^2 2^(1-nu) / Gamma(nu) (r/beta)^nu
  K_nu(r/beta)`` (nu = 1/2 is the exponential kernel).
* :func:`cross_covariance` -- the ``m x n`` matrix ``k(|a_i - b_j|)`` between two point sets
  (kriging's ``K_*``), no nugget;
* :func:`entry_function` -- ``fn(I, J)`` of global index arrays, for
  :meth:`distla.DistMatrix.from_function` and :func:`distla.tlr.from_function`;
  :func:`covariance_matrix` -- the dense :class:`~distla.DistMatrix`;
  :func:`default_problem` -- the HiCMA/STARS-H "st-2D-sqexp" problem.

Nothing here communicates except :func:`covariance_matrix` (collective).
"""
from __future__ import annotations

import functools
import math
import numbers
import zlib
from dataclasses import dataclass

import numpy as np

__all__ = [
    "Exponential",
    "Kernel",
    "Matern",
    "SquaredExponential",
    "covariance_matrix",
    "cross_covariance",
    "default_problem",
    "entry_function",
    "morton_codes",
    "morton_order",
    "points",
]

_KINDS = ("random", "grid", "jittered")


# ---- points ----------------------------------------------------------------------------

def _spread_bits(v: np.ndarray, dim: int) -> np.ndarray:
    """Insert ``dim - 1`` zero bits between the bits of ``v`` (uint64, < 2^(64 // dim))."""
    v = v.astype(np.uint64)
    out = np.zeros_like(v)
    bits = 64 // dim
    for b in range(bits):
        out |= ((v >> np.uint64(b)) & np.uint64(1)) << np.uint64(b * dim)
    return out


def morton_codes(x, bits: int | None = None) -> np.ndarray:
    """Morton (Z-order) codes of points ``x`` (n x d NumPy array in ``[0, 1)^d``, d <= 3).

    Each coordinate is quantized to ``bits`` bits (default ``64 // d``, capped at 31) and the
    bits are interleaved with coordinate 0 in the least significant position. Not collective.
    """
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2 or not 1 <= x.shape[1] <= 3:
        raise ValueError(f"points must be an n x d array with d in 1..3, got shape {x.shape}")
    d = x.shape[1]
    bits = min(64 // d, 31) if bits is None else int(bits)
    q = np.clip(np.floor(x * (1 << bits)), 0, (1 << bits) - 1).astype(np.uint64)
    code = np.zeros(x.shape[0], dtype=np.uint64)
    for c in range(d):
        code |= _spread_bits(q[:, c], d) << np.uint64(c)
    return code


def morton_order(x) -> np.ndarray:
    """The permutation (int64) that sorts the points ``x`` along the Morton curve (stable).
    Local (not collective)."""
    return np.argsort(morton_codes(x), kind="stable")


def points(n: int, dim: int = 2, kind: str = "jittered", seed: int = 0,
           morton: bool = True) -> np.ndarray:
    """``n`` points in ``[0, 1)^dim`` as an ``n x dim`` float64 NumPy array. Not collective.

    ``kind``: 'random' (uniform), 'grid' (cell centres ``(i + 0.5) / side``) or 'jittered'
    (``(i + 0.1 + 0.8 U(0, 1)) / side`` per coordinate, the STARS-H point set). Grids have
    ``side = ceil(n^(1/dim))`` cells per coordinate; when ``n < side^dim`` the first ``n`` cells
    in lexicographic order are used (as STARS-H does). ``morton=True`` sorts the points along
    the Z-order curve. Same ``seed`` -> same points on every rank.
    """
    for name, v in (("n", n), ("dim", dim), ("seed", seed)):
        if not isinstance(v, numbers.Integral) or isinstance(v, bool):
            raise TypeError(f"{name} must be an int, not {v!r}")
    n, dim = int(n), int(dim)
    if n < 0:
        raise ValueError(f"n must be non-negative, got {n}")
    if dim not in (2, 3):
        raise ValueError(f"dim must be 2 or 3, got {dim}")
    if seed < 0:
        raise ValueError(f"seed must be a non-negative int, not {seed}")
    if kind not in _KINDS:
        raise ValueError(f"kind must be one of {_KINDS}, not {kind!r}")
    rng = np.random.default_rng(seed)
    if kind == "random":
        x = rng.random((n, dim))
    else:
        side = max(1, math.ceil(round(n ** (1.0 / dim), 9)))
        while side ** dim < n:
            side += 1
        cells = np.stack(np.unravel_index(np.arange(n), (side,) * dim), axis=1).astype(float)
        if kind == "grid":
            x = (cells + 0.5) / side
        else:
            x = (cells + 0.1 + 0.8 * rng.random((n, dim))) / side
    if morton and n:
        x = x[morton_order(x)]
    return np.ascontiguousarray(x)


# ---- kernels ---------------------------------------------------------------------------

#: sigma and beta are squared (sigma^2, 1 / beta^2) in float64: each square must be a normal
#: float64, finite and nonzero, so each parameter lies in about [1.5e-154, 1.3e154]
SCALE_RANGE = (math.sqrt(np.finfo(np.float64).tiny), math.sqrt(np.finfo(np.float64).max))


def _real(kind, name, v):
    """``v`` itself if a real number (not a bool, not a string), else TypeError."""
    if not isinstance(v, numbers.Real) or isinstance(v, bool):
        raise TypeError(f"{kind}: {name} must be a real number, not {v!r}")
    return float(v)


def _check_scale(kind, name, v):
    """ValueError/TypeError unless ``v`` is a real number in :data:`SCALE_RANGE`."""
    x = _real(kind, name, v)
    lo, hi = SCALE_RANGE
    if not (lo <= x <= hi and np.finfo(np.float64).tiny <= x * x < math.inf):
        raise ValueError(f"{kind}: {name} must be a finite number > 0 whose square is a "
                         f"normal float64 (about {lo:.2g} to {hi:.2g}), not {v!r}")


def _xp_of(a):
    if isinstance(a, np.ndarray) or np.isscalar(a):
        return np
    import cupy
    return cupy


@dataclass(frozen=True, kw_only=True)
class Kernel:
    """A stationary covariance kernel ``k(r)`` plus a ``nugget`` added on the diagonal
    (i == j) only. Subclasses implement :meth:`from_sqdist`. Parameters are keyword-only
    (``Matern(nu=1.5, beta=0.2)``): a positional ``Matern(1.5)`` would silently be a
    ``sigma``."""

    sigma: float = 1.0
    beta: float = 0.1
    nugget: float = 0.0

    def __post_init__(self):
        for name in ("sigma", "beta"):
            _check_scale(type(self).__name__, name, getattr(self, name))
        v = _real(type(self).__name__, "nugget", self.nugget)
        if not 0 <= v < math.inf:
            raise ValueError(f"{type(self).__name__}: nugget must be a finite number >= 0, "
                             f"not {self.nugget!r}")
        for name in ("sigma", "beta", "nugget"):      # plain floats (not NumPy scalars)
            object.__setattr__(self, name, float(getattr(self, name)))

    def from_sqdist(self, r2):
        """Kernel values (no nugget) for squared distances ``r2`` (NumPy or CuPy array)."""
        raise NotImplementedError

    def __call__(self, r):
        """Kernel values (no nugget) for distances ``r``."""
        xp = _xp_of(r)
        r = xp.asarray(r, dtype=np.float64)
        return self.from_sqdist(r * r)

    def cuda_expr(self):
        """The kernel as a CUDA C expression of ``r2`` (squared distance) and the parameters
        ``s2`` (sigma^2) and ``ib`` (1 / beta), for the fused GPU tile evaluation; None when
        there is none (the tiles are then evaluated with CuPy ufuncs)."""
        return

    def apply_(self, r2, tmp=None):
        """In place: overwrite the squared distances ``r2`` by the kernel values (no nugget);
        ``tmp``: scratch of ``r2``'s shape (used by some kernels). Kernels without an in-place
        form compute :meth:`from_sqdist` (temporaries) and copy."""
        r2[...] = self.from_sqdist(r2)
        return r2

    def replace(self, **kw) -> Kernel:
        """A copy with some parameters changed (e.g. ``k.replace(beta=0.2)``)."""
        import dataclasses
        return dataclasses.replace(self, **kw)


@dataclass(frozen=True, kw_only=True)
class SquaredExponential(Kernel):
    """``sigma^2 exp(-r^2 / (2 beta^2))`` (Gaussian / RBF kernel)."""

    def from_sqdist(self, r2):
        xp = _xp_of(r2)
        return (self.sigma ** 2) * xp.exp(r2 * (-0.5 / self.beta ** 2))

    def cuda_expr(self):
        return "s2 * exp(-0.5 * r2 * ib * ib)"

    def apply_(self, r2, tmp=None):
        xp = _xp_of(r2)
        r2 *= -0.5 / self.beta ** 2
        xp.exp(r2, out=r2)
        r2 *= self.sigma ** 2
        return r2


@dataclass(frozen=True, kw_only=True)
class Exponential(Kernel):
    """``sigma^2 exp(-r / beta)`` (Matern with nu = 1/2)."""

    def from_sqdist(self, r2):
        xp = _xp_of(r2)
        return (self.sigma ** 2) * xp.exp(-xp.sqrt(r2) / self.beta)

    def cuda_expr(self):
        return "s2 * exp(-sqrt(r2) * ib)"

    def apply_(self, r2, tmp=None):
        return _exp_of_distance(r2, self.beta, self.sigma ** 2)


@dataclass(frozen=True, kw_only=True)
class Matern(Kernel):
    """``sigma^2 2^(1-nu) / Gamma(nu) x^nu K_nu(x)`` with ``x = r / beta`` (STARS-H scaling);
    ``sigma^2`` at ``r = 0``. nu = 1/2, 3/2, 5/2 use closed forms (any device); other nu use
    ``scipy.special.kv`` (on GPU ranks the distances go through the host)."""

    nu: float = 0.5

    def __post_init__(self):
        super().__post_init__()
        nu = _real("Matern", "nu", self.nu)
        if not 0 < nu < math.inf:
            raise ValueError(f"Matern: nu must be a finite number > 0, not {self.nu!r}")
        object.__setattr__(self, "nu", nu)

    def from_sqdist(self, r2):
        xp = _xp_of(r2)
        s2 = self.sigma ** 2
        x = xp.sqrt(r2) / self.beta
        if self.nu == 0.5:
            return s2 * xp.exp(-x)
        if self.nu == 1.5:
            return s2 * (1.0 + x) * xp.exp(-x)
        if self.nu == 2.5:
            return s2 * (1.0 + x + x * x / 3.0) * xp.exp(-x)
        return self._general(x, xp)

    def cuda_expr(self):
        return {0.5: "s2 * exp(-sqrt(r2) * ib)",
                1.5: "s2 * (1.0 + sqrt(r2) * ib) * exp(-sqrt(r2) * ib)",
                2.5: "s2 * (1.0 + sqrt(r2) * ib + r2 * ib * ib / 3.0) * exp(-sqrt(r2) * ib)"
                }.get(self.nu)

    def apply_(self, r2, tmp=None):
        if self.nu == 0.5:
            return _exp_of_distance(r2, self.beta, self.sigma ** 2)
        if self.nu == 1.5 and tmp is not None:   # (1 + x) exp(-x), x = r / beta
            xp = _xp_of(r2)
            xp.sqrt(r2, out=r2)
            r2 *= 1.0 / self.beta
            xp.negative(r2, out=tmp)
            xp.exp(tmp, out=tmp)
            r2 += 1.0
            r2 *= tmp
            r2 *= self.sigma ** 2
            return r2
        return super().apply_(r2, tmp)

    def _general(self, x, xp):
        """In log space, ``log K_nu(x) = log kve(nu, x) - x``: the product of ``x^nu`` and
        ``K_nu(x)`` underflows times overflows (NaN) at small x for large nu (nu = 50: below
        x ~ 2e-5), where the correlation is 1 to ~1e-12; kve overflows exactly there (then 1)
        and underflows to 0 only where the correlation is 0."""
        from scipy.special import gammaln, kve
        xh = x.get() if xp is not np else x
        pos = xh > 0
        xs = np.where(pos, xh, 1.0)
        with np.errstate(all="ignore"):
            logc = (1.0 - self.nu) * math.log(2.0) - gammaln(self.nu)
            k = kve(self.nu, xs)
            v = np.exp(logc + self.nu * np.log(xs) + np.log(k) - xs)
        v = np.where(~pos | np.isposinf(k), 1.0, np.minimum(np.nan_to_num(v, nan=0.0), 1.0))
        return xp.asarray(v * self.sigma ** 2)


def _exp_of_distance(r2, beta, scale):
    """In place: ``scale * exp(-sqrt(r2) / beta)``."""
    xp = _xp_of(r2)
    xp.sqrt(r2, out=r2)
    r2 *= -1.0 / beta
    xp.exp(r2, out=r2)
    r2 *= scale
    return r2


# ---- matrices ---------------------------------------------------------------------------

def entry_function(pts, kernel: Kernel, xp=np):
    """``fn(I, J)`` -> covariance entries ``k(|p_I - p_J|) + nugget [I == J]`` for integer
    index arrays ``I``, ``J`` of any broadcastable shapes (NumPy, or CuPy when ``xp`` is
    cupy). The points are moved to ``xp``'s device once, here. Not collective."""
    if not isinstance(kernel, Kernel):
        raise TypeError(f"kernel must be a distla.covariance.Kernel, not {type(kernel).__name__}")
    p = _real_points("points", pts)
    if p.ndim != 2:
        raise ValueError(f"points must be an n x d array, got shape {p.shape}")
    bad = np.argwhere(~np.isfinite(p))
    if bad.size:       # (NaN gave 'SVD did not converge' in a TLR build)
        raise ValueError(f"the points hold a non-finite value ({p[tuple(bad[0])]}) at index "
                         f"{tuple(int(i) for i in bad[0])}")
    P = xp.asarray(p)
    d = P.shape[1]
    nug = float(kernel.nugget)

    def fn(I, J):
        r2 = None
        for c in range(d):
            diff = P[I, c] - P[J, c]
            r2 = diff * diff if r2 is None else r2 + diff * diff
        vals = kernel.from_sqdist(r2)
        if nug:
            vals = vals + nug * (I == J)
        return vals

    fused = None
    if xp is not np and FUSED_GPU:  # pragma: no cover - needs a GPU
        expr = kernel.cuda_expr()
        fused = None if expr is None else (expr, d, kernel.sigma ** 2, 1.0 / kernel.beta)

    def tiles(I, J, out, tmp=None, diagonal=True):
        """Stacked tiles straight into ``out (t, m, n)``: ``out[a] = fn(I[a][:, None],
        J[a][None, :])`` for index stacks ``I (t, m)``, ``J (t, n)`` (on ``xp``'s device),
        in place (one scratch array of ``out``'s shape, ``tmp``, allocated if not given).
        ``diagonal=False`` promises that no ``I == J`` pair occurs (no nugget to add)."""
        if fused is not None and out.dtype == np.float64 and _fused_tiles(fused, P, I, J, out):
            if nug and diagonal:
                out += nug * (I[:, :, None] == J[:, None, :])
            return out
        tmp = xp.empty_like(out) if (tmp is None and d > 1) else tmp
        for c in range(d):
            dst = out if c == 0 else tmp
            xp.subtract(P[I, c][:, :, None], P[J, c][:, None, :], out=dst)
            xp.multiply(dst, dst, out=dst)
            if c:
                out += tmp
        kernel.apply_(out, tmp)
        if nug and diagonal:
            out += nug * (I[:, :, None] == J[:, None, :])
        return out

    fn.n = p.shape[0]
    fn.tiles = tiles
    fn.digest = lambda: f"{digest(p)} {kernel!r}"   # points and kernel parameters
    return fn


def digest(a) -> str:
    """A short text identifying the array ``a`` (shape, dtype and a CRC-32 of its bytes), for
    the call signatures ranks agree on: point sets that differ between ranks (the docs require
    them identical) then raise ValueError on every rank instead of building a patchwork
    matrix. ``O(a.nbytes)``, local."""
    a = np.ascontiguousarray(a)
    return f"{'x'.join(map(str, a.shape))} {a.dtype} crc32 {zlib.crc32(a.data) & 0xffffffff:08x}"


def digest_or_type(a) -> str:
    """:func:`digest` of ``a`` (NumPy, CuPy or a nested sequence), or its type's name when it
    is not an array of numbers (the call then fails its own checks on every rank). Local."""
    try:
        arr = np.asarray(a.get() if hasattr(a, "__cuda_array_interface__") else a)
        if arr.dtype.kind in "biufc":
            return digest(arr)
    except Exception:  # noqa: BLE001 - described by type instead
        pass
    return type(a).__name__


def _real_points(name, a) -> np.ndarray:
    """``a`` (NumPy, CuPy or a sequence) as a float64 NumPy array; TypeError for complex or
    non-numeric data (a cast kept the real part with only a NumPy ComplexWarning)."""
    arr = np.asarray(a.get() if (hasattr(a, "get") and not isinstance(a, np.ndarray)) else a)
    if arr.dtype.kind not in "biuf":
        raise TypeError(f"{name} must be real numbers, not {arr.dtype} data"
                        + (" (complex: give the real part explicitly)"
                           if arr.dtype.kind == "c" else ""))
    return np.asarray(arr, dtype=np.float64)


def cross_covariance(a, b, kernel: Kernel, xp=np):
    """``K[i, j] = k(|a_i - b_j|)`` for point sets ``a`` (``m x d``) and ``b`` (``n x d``):
    an ``(m, n)`` float64 array of ``xp`` (NumPy, or CuPy). No nugget: the nugget models
    measurement noise, independent of the field, so it never enters a cross-covariance (add
    it yourself for the covariance of noisy observations at coinciding points). Memory: the
    result only (squared distances are computed in place); slab over ``a`` for large ``m n``.
    Not collective."""
    if not isinstance(kernel, Kernel):
        raise TypeError(f"kernel must be a distla.covariance.Kernel, not {type(kernel).__name__}")
    a, b = _real_points("points a", a), _real_points("points b", b)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(f"points must be m x d and n x d arrays, got shapes {a.shape} and "
                         f"{b.shape}")
    if xp is np:
        from scipy.spatial.distance import cdist
        r2 = cdist(a, b, "sqeuclidean")
    else:  # pragma: no cover - needs a GPU
        A, B = xp.asarray(a), xp.asarray(b)
        r2 = xp.zeros((a.shape[0], b.shape[0]), np.float64)
        for c in range(a.shape[1]):
            diff = A[:, c:c + 1] - B[None, :, c]
            diff *= diff
            r2 += diff
            del diff
    return kernel.apply_(r2, xp.empty_like(r2) if isinstance(kernel, Matern) else None)


#: GPU ranks evaluate covariance tiles with one fused CUDA kernel per stack (distance, kernel
#: and store in one pass) where the kernel has a :meth:`Kernel.cuda_expr`; False: CuPy ufuncs.
FUSED_GPU = True
_FUSED_FAILED: list = []


def _fused_tiles(spec, P, I, J, out) -> bool:  # pragma: no cover - needs a GPU
    """``out[a, i, j] = k(|P[I[a, i]] - P[J[a, j]]|)`` in one CuPy elementwise kernel; False
    (after one warning) if the kernel cannot be built, so that the ufunc path runs instead."""
    if _FUSED_FAILED:
        return False
    expr, d, s2, ib = spec
    try:
        kern = _fused_kernel(expr, d)
        args = []
        for c in range(d):
            args += [P[I, c][:, :, None], P[J, c][:, None, :]]
        kern(*args, s2, ib, out)
        return True
    except Exception as e:  # noqa: BLE001 - fall back to the ufunc path, once warned
        import warnings
        _FUSED_FAILED.append(e)
        warnings.warn(f"fused GPU covariance kernel unavailable ({type(e).__name__}: {e}); "
                      f"using CuPy ufuncs", RuntimeWarning, stacklevel=3)
        return False


@functools.cache
def _fused_kernel(expr: str, d: int):  # pragma: no cover - needs a GPU
    import cupy
    params = ", ".join(f"float64 a{c}, float64 b{c}" for c in range(d))
    body = "double r2 = 0.0;\n" + "".join(
        f"{{ double t = a{c} - b{c}; r2 += t * t; }}\n" for c in range(d)) + f"out = {expr};"
    return cupy.ElementwiseKernel(f"{params}, float64 s2, float64 ib", "float64 out", body,
                                  f"distla_cov_tiles_{d}d")


def covariance_matrix(grid, pts, kernel: Kernel, block=(64, 64), *, device="cpu",
                      src=(0, 0), dtype=np.float64):
    """Collective: the dense ``n x n`` covariance matrix of ``pts`` (replicated n x d array,
    identical on every rank) as a :class:`~distla.DistMatrix`; each rank evaluates only its own
    entries (with CuPy index arrays on GPU ranks)."""
    from .device import get_backend
    from .errors import collective, signature
    from .matrix import DistMatrix
    sig = signature("covariance_matrix")
    with collective(grid.comm, sig):
        be = get_backend(device, grid.comm)
        fn = entry_function(pts, kernel, be.xp)
        if grid.comm.Get_size() > 1:     # (checked as the points of every rank agree)
            sig.kw["points"] = fn.digest()
    n = fn.n
    return DistMatrix.from_function(grid, (n, n), block, fn, dtype=dtype, device=device, src=src)


def default_problem(n: int, dim: int = 2, seed: int = 0, beta: float = 0.1,
                    sigma: float = 1.0, nugget: float = 1e-2):
    """The HiCMA/STARS-H "st-2D-sqexp" problem: ``(points, kernel)`` with a jittered grid in
    the unit square sorted in Morton order and the squared-exponential kernel with
    beta = 0.1, sigma = 1, nugget 1e-2. Not collective."""
    return (points(n, dim=dim, kind="jittered", seed=seed),
            SquaredExponential(sigma=sigma, beta=beta, nugget=nugget))
