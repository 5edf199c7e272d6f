"""distla: distributed dense linear algebra (ScaLAPACK's model) on CPU and GPU ranks."""
from . import pblas as _pblas  # noqa: F401,E402 - installs ``A @ B`` (SUMMA) on DistMatrix
from .errors import (
                     ConvergenceError,
                     DistlaError,
                     LinAlgWarning,
                     NonFiniteResultError,
                     NotPositiveDefiniteError,
                     SingularMatrixError,
                     install_excepthook,
)
from .grid import ProcessGrid
from .layout import Descriptor
from .matrix import DistMatrix

__version__ = "0.1.0"

__all__ = ["ProcessGrid", "DistMatrix", "Descriptor", "DistlaError", "NonFiniteResultError",
           "NotPositiveDefiniteError", "SingularMatrixError", "ConvergenceError",
           "LinAlgWarning", "install_excepthook"]

