"""Defaults chosen from measurements, in one place: the process grid named by "PxQ" (or the
squarest), the device, the block size per device and size (the README's table). Used by the
CLI, the benchmarks and the examples. Collective-ness is stated per function.
"""
from __future__ import annotations

import re

from . import layout
from .device import gpu_available
from .grid import ProcessGrid, squarest_shape

__all__ = ["parse_grid", "make_grid", "default_device", "default_nb"]


_GRID_RE = re.compile(r"^\s*(\d+)\s*[xX*,]\s*(\d+)\s*$")


def parse_grid(spec) -> tuple[int, int] | None:
    """``"2x3"`` -> ``(2, 3)``; ``None``/``""``/``"auto"`` -> ``None`` (the squarest shape).
    Raises ValueError for anything else. Not collective."""
    if spec is None or (isinstance(spec, str) and spec.strip().lower() in ("", "auto")):
        return None
    if isinstance(spec, (tuple, list)) and len(spec) == 2:
        p, q = int(spec[0]), int(spec[1])
    else:
        m = _GRID_RE.match(str(spec))
        if not m:
            raise ValueError(f"grid must look like PxQ (e.g. 2x2), not {spec!r}")
        p, q = int(m.group(1)), int(m.group(2))
    if p < 1 or q < 1:
        raise ValueError(f"grid dimensions must be positive, not {p}x{q}")
    return p, q


def make_grid(spec=None, comm=None, order: str = "row"):
    """Collective: the ProcessGrid named by ``spec`` ("PxQ", a pair, or None for the squarest
    shape) over ``comm`` (default COMM_WORLD). A shape that does not match the rank count
    raises ValueError on every rank with a message saying how many ranks to start."""
    from mpi4py import MPI
    comm = MPI.COMM_WORLD if comm is None else comm
    size = comm.Get_size()
    shape = parse_grid(spec)  # deterministic: same outcome on every rank
    if shape is None:
        shape = squarest_shape(size)
    p, q = shape
    if p * q != size:
        raise ValueError(
            f"grid {p}x{q} needs {p * q} MPI ranks, but {size} "
            f"{'was' if size == 1 else 'were'} started: run with mpiexec -n {p * q}, or "
            f"pick a grid with P*Q = {size} "
            f"(e.g. --grid {'x'.join(map(str, squarest_shape(size)))})")
    return ProcessGrid(p, q, comm=comm, order=order)


def default_device() -> str:
    """'gpu' when CuPy sees a GPU, else 'cpu'. Not collective."""
    return "gpu" if gpu_available() else "cpu"


#: the command lines' ``--nb`` help: :func:`default_nb`'s table in words
NB_HELP = ("block size (default by the local size n/max(P,Q): on cpu 128, 256 from 4096; on "
           "gpu 512, 1024 from 24576, 2048 from 65536 below 110000; at most one block per "
           "process row and column)")


def default_nb(n: int, device: str, grid=None) -> int:
    """The default block size (the one table of it; README "Command line"), from one-H200 and
    2-core CPU measurements: on CPU 128, or 256 once the local dimension ``n / max(P, Q)``
    reaches 4096 (2 ranks, n = 8192: Cholesky 48.6 against 40.9 GFLOP/s, LU 48.4 against
    45.3; at n = 2048 nb 128 wins); on GPU 512, or 1024 once the local dimension reaches 24576
    (Cholesky n=32768 on one H200: 40.9 TFLOP/s at nb 1024; nb 512 wins below 16384, nb 256
    loses everywhere), and 2048 from 65536 below 110000 (n = 65536 on one H200: Cholesky 46.1
    against 44.9 TFLOP/s, LU 44.1 against 42.4; beyond, LU's O(n nb) workspace at 2048 would
    not leave room for n = 120000 on one H200). Shrunk so every process row and column gets
    at least one block of an ``n x n`` matrix. Not collective."""
    local = n / max(1, max(grid.nprow, grid.npcol)) if grid is not None else n
    if device == "gpu":
        nb = 2048 if 65536 <= local < 110000 else 1024 if local >= 24576 else 512
    else:
        nb = 256 if local >= 4096 else 128
    if grid is not None:
        nb = min(nb, max(1, layout.num_blocks(n, max(grid.nprow, grid.npcol))))
    return max(1, min(nb, n))
