"""Flop counts of the LAPACK/BLAS kernels (LAPACK's operation counts: multiplications plus
additions, real arithmetic) and the alpha-beta costs of the collectives distla calls, on the
topology of a P x Q grid. Not collective; pure functions of sizes.
"""
from __future__ import annotations

import math

import numpy as np

__all__ = [
    "Topology",
    "gemm_flops",
    "getrf_flops",
    "log2c",
    "numroc_v",
    "potrf_flops",
    "rows_from",
    "syrk_flops",
    "trsm_flops",
]


def gemm_flops(m, n, k):
    """``C -= A B`` with A m x k, B k x n."""
    return 2.0 * m * n * k


def syrk_flops(n, k):
    """Lower triangle (diagonal included) of ``C -= A A^T``, C n x n, A n x k."""
    return 1.0 * n * (n + 1) * k


def trsm_flops(m, n, unit=False):
    """Solve with a triangle of order ``m`` for ``n`` right-hand sides (either side)."""
    return 1.0 * n * m * (m - 1) if unit else 1.0 * n * m * m


def potrf_flops(n):
    return n ** 3 / 3.0 + n ** 2 / 2.0 + n / 6.0


def getrf_flops(m, n):
    """LU with partial pivoting of an m x n matrix (LAPACK's dgetrf count, any shape)."""
    m, n = float(m), float(n)
    if m <= 0 or n <= 0:
        return 0.0
    if m < n:   # the count is symmetric in the roles of rows and columns
        m, n = n, m
    return m * n * n - n ** 3 / 3.0 - n * n / 2.0 + 5.0 * n / 6.0


def log2c(p: int) -> int:
    return int(math.ceil(math.log2(p))) if p > 1 else 0


def numroc_v(n: int, nb: int, P: int) -> np.ndarray:
    """Rows of a length-n dimension on each of P processes (source 0), int64 array (P,)."""
    p = np.arange(P)
    nblocks, extra = divmod(n // nb, P)
    r = nblocks * nb + np.where(p < extra, nb, np.where(p == extra, n % nb, 0))
    return r.astype(np.int64)


def rows_from(n: int, g: int, nb: int, P: int) -> np.ndarray:
    """For each process: how many of the global indices ``g .. n-1`` it holds, (P,)."""
    return numroc_v(n, nb, P) - numroc_v(min(g, n), nb, P)


class Topology:
    """Where the ranks of a P x Q grid sit (``order`` 'row': a process row is Q consecutive
    ranks, distla's default; 'col': a process column is P consecutive ranks): ``ranks_per_node``
    ranks per node (default: every rank on one node for CPU
    machines, ``devices_per_node`` per node for GPU ones). Gives (alpha, beta) per message
    along process rows and columns, and ``share``: ranks per device (> 1 when CPU ranks
    outnumber the cores, which then time-share)."""

    def __init__(self, machine, P: int, Q: int, ranks_per_node: int | None = None,
                 order: str = "row"):
        R = P * Q
        dpn = max(1, int(machine.devices_per_node))
        if ranks_per_node is None:
            ranks_per_node = R if machine.device == "cpu" else min(dpn, R)
        rpn = max(1, min(int(ranks_per_node), R))
        self.P, self.Q, self.rpn = P, Q, rpn
        self.share = max(1.0, rpn / dpn)
        self.nodes = -(-R // rpn)
        # the direction whose ranks are consecutive stays in a node while it fits; the other
        # leaves the node as soon as the grid does, and all its groups on a node share the NICs
        inner, outer = (Q, P) if order == "row" else (P, Q)
        inner_inter = inner > rpn
        outer_inter = outer > 1 and R > rpn
        links = {}
        for kind, inter, crossing in (("row" if order == "row" else "col", inner_inter, 1),
                                      ("col" if order == "row" else "row", outer_inter,
                                       min(inner, rpn))):
            a, b = machine.link(kind, inter)
            links[kind] = (a, b / crossing if inter else b)
        self.row, self.col = links["row"], links["col"]
        self.row_inter = inner_inter if order == "row" else outer_inter
        self.col_inter = outer_inter if order == "row" else inner_inter

    @staticmethod
    def bcast(link, p: int, nbytes: float) -> float:
        """Pipelined broadcast among p ranks: latency per tree level, the bytes once."""
        if p <= 1 or nbytes <= 0:
            return 0.0
        a, b = link
        return log2c(p) * a + nbytes / b

    @staticmethod
    def allgather(link, p: int, each: float) -> float:
        """Ring allgather of ``each`` bytes from each of p ranks."""
        if p <= 1:
            return 0.0
        a, b = link
        return (p - 1) * (a + each / b)

    @staticmethod
    def allreduce(link, p: int, nbytes: float) -> float:
        if p <= 1:
            return 0.0
        a, b = link
        return 2 * log2c(p) * a + 2.0 * (p - 1) / p * nbytes / b

    @staticmethod
    def exchange(link, peers: int, nbytes: float) -> float:
        """Pairwise messages to ``peers`` ranks, ``nbytes`` in all each way."""
        if peers <= 0:
            return 0.0
        a, b = link
        return peers * a + nbytes / b
