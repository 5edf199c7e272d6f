"""Per-rank defaults for the examples, applied on import, before NumPy and MPI start.

With several ranks on one machine, each rank should use cores / ranks BLAS threads (not all
the cores: the ranks would fight over them), and when ranks outnumber cores, MPICH ranks that
wait must yield the CPU (MPIR_CVAR_POLLS_BEFORE_YIELD=1). Variables you set yourself win.
Import this module first: ``import _env  # noqa: F401``.
"""
import os


def _local_ranks() -> int:
    for var in ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE", "PMI_SIZE"):
        v = os.environ.get(var, "")
        if v.isdigit() and int(v) > 0:
            return int(v)
    return 1


def configure() -> None:
    ranks = _local_ranks()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    cores = cores or 1
    if ranks > 1:
        threads = str(max(1, cores // ranks))
        for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ.setdefault(var, threads)
    if ranks > cores:
        os.environ.setdefault("MPIR_CVAR_POLLS_BEFORE_YIELD", "1")


configure()
