"""Dense solvers on DistMatrix: one module per solver family."""
from ..errors import (  # the solvers' exceptions, here as scipy.linalg has LinAlgError
    ConvergenceError,
    LinAlgWarning,
    NonFiniteResultError,
    NotPositiveDefiniteError,
    SingularMatrixError,
)
from .cholesky import (
    cho_factor,
    cho_rcond,
    cho_solve,
    cho_solve_rcond,
    cholesky,
    logdet,
    solve_cholesky,
)
from .lu import LUFactor, lu_factor, lu_solve, lu_solve_rcond, solve_lu
from .mixed import SolveInfo
from .rbt import RBTFallbackWarning, RBTInfo, rbt_solve, rbt_transform
from .solve import METHODS, rcond, solve

__all__ = ["cholesky", "cho_factor", "cho_solve", "cho_rcond", "cho_solve_rcond",
           "solve_cholesky", "logdet", "lu_factor", "lu_solve", "lu_solve_rcond", "solve_lu",
           "LUFactor",
           "rbt_solve", "rbt_transform", "RBTInfo", "RBTFallbackWarning",
           "solve", "rcond", "LinAlgWarning", "METHODS", "SolveInfo",
           "ConvergenceError", "NonFiniteResultError", "NotPositiveDefiniteError",
           "SingularMatrixError"]
