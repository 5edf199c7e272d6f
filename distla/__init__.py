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

