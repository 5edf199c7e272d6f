"""Tile low-rank (TLR) matrices and their Cholesky factorization, distributed.

A symmetric matrix in ``nb x nb`` tiles (the blocks of a 2D block-cyclic DistMatrix): dense
diagonal tiles, off-diagonal tiles ``U V^T`` truncated to a fixed accuracy ``tol`` (relative
to ``||A||_F``, see :mod:`distla.tlr.matrix`) or a fixed ``max_rank``; lower triangle only.

* :func:`compress` (from a dense DistMatrix), :func:`from_function`, :func:`from_kernel`
  (tile by tile on each owner, never dense) -> :class:`TLRMatrix`
* :func:`cholesky` -> :class:`TLRCholesky` (``.logdet()``, ``.solve(B)``, ``.matvec``,
  ``.rcond()``)
* :func:`cho_solve`, :func:`solve`, :func:`norm1_estimate`

The per-tile work of one step runs as stacked (batched) ``xp`` calls: :mod:`.batched`.
All functions here are collective over the matrix's grid.
"""
from .build import compress, from_function, from_kernel
from .cholesky import cholesky
from .factor import TLRCholesky
from .matrix import RankSummary, TLRMatrix
from .solve import cho_solve, norm1_estimate, solve

__all__ = [
           "RankSummary",
           "TLRCholesky",
           "TLRMatrix",
           "cho_solve",
           "cholesky",
           "compress",
           "from_function",
           "from_kernel",
           "norm1_estimate",
           "solve",
]
