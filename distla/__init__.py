"""distla: distributed dense linear algebra (ScaLAPACK's model) on CPU and GPU ranks."""
from .errors import (ConvergenceError, DistlaError, LinAlgWarning, NotPositiveDefiniteError,
                     SingularMatrixError, install_excepthook)
from .grid import ProcessGrid
from .layout import Descriptor
from .matrix import DistMatrix

__version__ = "0.1.0"

__all__ = ["ProcessGrid", "DistMatrix", "Descriptor", "DistlaError",
           "NotPositiveDefiniteError", "SingularMatrixError", "ConvergenceError",
           "LinAlgWarning", "install_excepthook"]


def _auto_excepthook() -> None:
    """An uncaught exception on one rank of a multi-rank job aborts the job (see
    :func:`install_excepthook`; ``DISTLA_EXCEPTHOOK=0`` turns this off)."""
    from mpi4py import MPI
    if MPI.Is_initialized() and MPI.COMM_WORLD.Get_size() > 1:
        install_excepthook()


_auto_excepthook()
