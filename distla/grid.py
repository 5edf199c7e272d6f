"""ProcessGrid: a BLACS-like P x Q grid over an MPI communicator.

Collective: constructing a grid is collective over ``comm`` (it splits row and column
communicators). Ranks are laid out row-major (``rank = prow * npcol + pcol``) or column-major
(``rank = prow + pcol * nprow``) as in BLACS_GRIDINIT.
"""
from __future__ import annotations

import math
import numbers
import os

import numpy as np

from .comm import make_grid_comms
from .errors import DistlaError, agree, install_excepthook, signature

__all__ = ["ProcessGrid", "check_launch", "squarest_shape"]

# Task count announced by the launcher that started this process, most specific first: MPICH's
# Hydra and srun --mpi=pmi2 (PMI_SIZE), Open MPI's mpirun (OMPI_COMM_WORLD_SIZE), any srun
# step (SLURM_STEP_NUM_TASKS; unlike SLURM_NTASKS it is not set in the batch script itself,
# where one serial process is legitimate).
LAUNCH_SIZE_VARS = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_STEP_NUM_TASKS")


def squarest_shape(size: int) -> tuple[int, int]:
    """The most square (nprow, npcol) with nprow * npcol == size and nprow <= npcol."""
    p = int(math.isqrt(size))
    while size % p:
        p -= 1
    return p, size // p


# Row and column communicators of the grids over MPI_COMM_WORLD, by (shape, order): a job
# that makes the same grid again (in a loop, or a test suite) reuses them instead of using up
# MPI's communicator contexts (MPICH has 2048 per process: the 2-core CI machine's 4-rank test
# session ran out). COMM_WORLD is never freed, so its entries stay valid; grids over other
# communicators split their own.
_WORLD_SPLITS: dict = {}


def _row_col_comms(comm, shape, order, myrow, mycol):
    """Collective over ``comm`` (every rank makes the same grids in the same order, so every
    rank finds the same cache entries): (row communicator, column communicator)."""
    from mpi4py import MPI
    key = (shape, order) if comm == MPI.COMM_WORLD else None
    got = _WORLD_SPLITS.get(key) if key is not None else None
    if got is None:
        got = (comm.Split(color=myrow, key=mycol), comm.Split(color=mycol, key=myrow))
        if key is not None:
            _WORLD_SPLITS[key] = got
    return got


def _world():
    from mpi4py import MPI
    return MPI.COMM_WORLD


def _pmi_hint(library: str) -> str:
    lib = library.lower()
    if "open mpi" in lib:
        return "srun --mpi=pmix (Open MPI)"
    if any(k in lib for k in ("mpich", "intel", "mvapich")):
        return "srun --mpi=pmi2 (MPICH and its derivatives, such as the pip mpich wheel)"
    return "the srun --mpi= plugin that this MPI supports (srun --mpi=list)"


def check_launch(world_size: int, environ=None, library: str | None = None) -> None:
    """Raise :class:`DistlaError` when the launcher started a different number of tasks than
    MPI's ``COMM_WORLD`` has ranks (``world_size``): each task then initialized MPI on its own
    (e.g. ``srun --mpi=none``, or a PMI plugin that the MPI library does not speak) and would
    silently run alone. ``environ`` defaults to ``os.environ``; ``library`` is the MPI library
    version string used for the hint. Not collective; ``DISTLA_LAUNCH_CHECK=0`` disables it."""
    env = os.environ if environ is None else environ
    if env.get("DISTLA_LAUNCH_CHECK", "1") == "0":
        return
    for var in LAUNCH_SIZE_VARS:
        val = env.get(var, "").strip()
        if val.isdigit():
            if int(val) == world_size:
                return
            if library is None:
                from mpi4py import MPI
                library = MPI.Get_library_version()
            name = " ".join(library.strip().split("\n")[0].split()) or "unknown MPI"
            raise DistlaError(
                f"the launcher started {val} tasks ({var}={val}) but MPI's COMM_WORLD has "
                f"{world_size} rank(s): the tasks did not join one MPI job, because the "
                f"launcher's process-management interface (PMI) does not match the MPI "
                f"library ({name}). Start with the mpiexec of that MPI, or with "
                f"{_pmi_hint(name)}; launch/slurm.sbatch picks it itself (SRUN_MPI overrides). "
                f"DISTLA_LAUNCH_CHECK=0 skips this check")


class SettingError(ValueError):
    """A DISTLA_* environment variable with a value the library does not take, or set
    differently on different ranks."""


#: the DISTLA_* switches the library reads, and the values each takes (README's table)
ENV_CHOICES = {
    "DISTLA_IO": ("mpiio", "memmap"),
    "DISTLA_IO_COLLECTIVE_READ": ("0", "1"),
    "DISTLA_IO_WRITE": ("thread", "sync"),
    "DISTLA_REMAP": ("typed", "buffers"),
    "DISTLA_EXCEPTHOOK": ("0", "1"),
    "DISTLA_LAUNCH_CHECK": ("0", "1"),
    "DISTLA_PRELOAD": ("0", "1"),
    "DISTLA_H5_MPI": ("0", "1"),
}


def check_environment_values(env=None) -> None:
    """ValueError naming the variable for a DISTLA_* switch set to a value it does not take
    (``DISTLA_IO=MEMMAP`` or ``DISTLA_IO_COLLECTIVE_READ=true`` meant the default, silently)
    or a ``DISTLA_ABORT_TIMEOUT`` that is not a positive number of seconds. Local."""
    import math
    env = os.environ if env is None else env
    for k, allowed in ENV_CHOICES.items():
        if k in env and env[k] not in allowed:
            raise SettingError(f"{k}={env[k]!r}: expected one of {', '.join(allowed)}")
    if "DISTLA_ABORT_TIMEOUT" in env:
        v = env["DISTLA_ABORT_TIMEOUT"]
        try:
            ok = 0 < float(v) < math.inf
        except ValueError:
            ok = False
        if not ok:
            raise SettingError(f"DISTLA_ABORT_TIMEOUT={v!r}: expected a positive number of "
                               f"seconds")


def settings() -> tuple:
    """The ``DISTLA_*`` environment variables now, as sorted ``(name, value)`` pairs. Calls
    that read them after the grid was built (file I/O) put them in their collective
    signature, so a rank whose environment changed since fails with the others instead of
    taking another path. Local."""
    return tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("DISTLA_")))


def _check_environment(comm) -> None:
    """Collective: ValueError on every rank when the ranks see different ``DISTLA_*``
    environment variables (set per rank by an MPMD launch or a wrapper script): each rank would
    choose its own I/O path, hints or exchange and wait in a collective the others never
    enter (a hang, not an error). One allgather of the variables."""
    mine = list(settings())
    every = comm.allgather(mine)
    for r, theirs in enumerate(every):
        if theirs != every[0]:
            a, b = dict(every[0]), dict(theirs)
            k = next(k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k))
            raise SettingError(f"ranks see different environments: {k}={a.get(k)!r} on rank 0 "
                             f"but {b.get(k)!r} on rank {r} ({'unset' if k not in b else 'set'}"
                             f" there); distla's DISTLA_* settings must be the same on every "
                             f"rank (export them before mpiexec/srun)")
    check_environment_values()          # the same on every rank now


class ProcessGrid:
    """A ``nprow x npcol`` process grid (a BLACS context).

    Attributes: ``nprow, npcol, myrow, mycol, order, comm`` (all ranks), ``row_comm`` (the ranks
    of my process row, ranked by column), ``col_comm`` (the ranks of my process column, ranked
    by row). Collective over ``comm``; a shape that does not match the communicator size raises
    ``ValueError`` on every rank.
    """

    def __init__(self, nprow: int | None = None, npcol: int | None = None, comm=None,
                 order: str = "row"):
        comm = _world() if comm is None else comm
        from mpi4py import MPI
        if comm == MPI.COMM_NULL:
            raise ValueError("ProcessGrid: comm is MPI.COMM_NULL (this rank is not in the "
                             "communicator): only its members build the grid")
        size, rank = comm.Get_size(), comm.Get_rank()
        if _world().Get_size() > 1:   # an uncaught exception on one rank ends the job
            install_excepthook()
        err = None
        try:
            check_launch(_world().Get_size())
            if order not in ("row", "col", "column"):
                raise ValueError(f"order must be 'row' or 'col', not {order!r}")
            for x in (nprow, npcol):
                if x is not None and (not isinstance(x, numbers.Integral)
                                      or isinstance(x, (bool, np.bool_))):
                    raise ValueError(f"grid dimensions must be integers, got {x!r}")
            if nprow is None and npcol is None:
                nprow, npcol = squarest_shape(size)
            elif nprow is None:
                nprow = size // int(npcol) if int(npcol) > 0 and size % int(npcol) == 0 else 0
            elif npcol is None:
                npcol = size // int(nprow) if int(nprow) > 0 and size % int(nprow) == 0 else 0
            nprow, npcol = int(nprow), int(npcol)
            if nprow < 1 or npcol < 1 or nprow * npcol != size:
                raise ValueError(
                    f"a {nprow} x {npcol} process grid needs "
                    f"{nprow * npcol if nprow > 0 and npcol > 0 else 'a positive number of'} "
                    f"ranks, but the communicator has {size}; start {size} ranks with a grid "
                    f"whose nprow * npcol == {size} (e.g. {squarest_shape(size)})")
        except Exception as e:  # noqa: BLE001
            err = e
        # ranks asking for different shapes or orders (each valid) would share a grid whose
        # ranks disagree on who holds what: refused together
        agree(comm, err, signature("ProcessGrid", nprow=nprow, npcol=npcol,
                                   order={"column": "col"}.get(order, order)
                                   if isinstance(order, str) else order))
        _check_environment(comm)
        self.comm = comm
        self.order = "row" if order == "row" else "col"
        self.nprow, self.npcol = nprow, npcol
        self.rank, self.size = rank, size
        self.myrow, self.mycol = self.coords(rank)
        self.row_comm, self.col_comm = _row_col_comms(comm, self.shape, self.order,
                                                      self.myrow, self.mycol)
        self._device_comms = {}
        self._flat = None

    def flat(self) -> "ProcessGrid":
        """Collective over ``comm`` the first time: the 1 x size grid over the same
        communicator (ranks in their order), made once and kept, e.g. to regroup a matrix
        into whole columns for writing (:mod:`distla.io`)."""
        if self._flat is None:
            self._flat = self if self.nprow == 1 and self.order == "row" else \
                ProcessGrid(1, self.size, self.comm)
        return self._flat

    @property
    def shape(self) -> tuple[int, int]:
        return self.nprow, self.npcol

    def rank_of(self, prow: int, pcol: int) -> int:
        """Rank in ``comm`` of the process at grid coordinates (prow, pcol)."""
        if self.order == "row":
            return prow * self.npcol + pcol
        return prow + pcol * self.nprow

    def coords(self, rank: int) -> tuple[int, int]:
        """Grid coordinates (prow, pcol) of ``rank``."""
        if self.order == "row":
            return divmod(rank, self.npcol)
        pcol, prow = divmod(rank, self.nprow)
        return prow, pcol

    def comms(self, device: str = "cpu"):
        """The data communicators (``.all``, ``.row``, ``.col``) for arrays on ``device``.

        MPI (host buffers) for 'cpu'; NCCL for 'gpu' (built on first use: collective over
        ``comm``). See :mod:`distla.comm`.
        """
        c = self._device_comms.get(device)
        if c is None:
            c = self._device_comms[device] = make_grid_comms(self, device)
        return c

    def free(self) -> None:
        """Collective over ``comm``: release this grid's device communicators (NCCL on GPU
        ranks; they otherwise live until the process exits, see :mod:`distla.comm`). The grid
        stays usable: communicators are rebuilt on next use."""
        for c in self._device_comms.values():
            for sub in (c.all, c.row, c.col):
                if hasattr(sub, "free"):
                    sub.free()
        self._device_comms = {}

    def allreduce(self, value, op: str = "sum"):
        """Collective over ``comm``: ``op`` ('sum', 'max' or 'min') of one host scalar per
        rank, the same value on every rank (an exact int when every rank passed an int, however
        large). NaN on any rank gives NaN (MPI leaves NaN in MAX/MIN undefined)."""
        if op not in ("sum", "max", "min"):
            raise ValueError(f"op must be 'sum', 'max' or 'min', not {op!r}")
        if self.size == 1:        # (no message, no NumPy reduction: ~7 us a call)
            return int(value) if isinstance(value, (int, np.integer)) else float(value)
        vals = self.comm.allgather(value)
        if all(isinstance(v, (int, np.integer)) for v in vals):   # exact: Python ints
            return {"sum": sum, "max": max, "min": min}[op](int(v) for v in vals)
        f = {"sum": np.sum, "max": np.max, "min": np.min}[op]
        return float(f(np.asarray(vals, dtype=np.float64)))

    def agree(self, exc: BaseException | None = None) -> None:
        """Collective: raise the same exception on every rank if any rank passed one."""
        agree(self.comm, exc)

    def __repr__(self) -> str:
        return (f"ProcessGrid({self.nprow}x{self.npcol}, order={self.order!r}, "
                f"rank={self.rank} at ({self.myrow}, {self.mycol}))")

    def __eq__(self, other) -> bool:
        return (isinstance(other, ProcessGrid) and other.shape == self.shape
                and other.order == self.order and other.comm is self.comm) or other is self

    __hash__ = object.__hash__
