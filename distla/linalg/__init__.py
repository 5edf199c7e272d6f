"""Dense solvers on DistMatrix: one module per solver family."""
from .cholesky import cho_factor, cho_solve, cholesky, logdet, solve_cholesky
from .rbt import RBTFallbackWarning, RBTInfo, rbt_solve, rbt_transform
