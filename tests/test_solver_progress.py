"""The solvers report their flops to an active Progress (what `distla solve` shows)."""
import io

import numpy as np
import pytest
from mpi4py import MPI

from distla import DistMatrix, ProcessGrid
from distla.linalg import cholesky, lu_factor
from distla.progress import Progress
from distla.testing import grid_shapes


class Recorder(Progress):
    """A Progress that keeps every value reported to it."""

    def __init__(self, total):
        super().__init__(total, "t", enabled=False, stream=io.StringIO())
        self.seen = []

    @property
    def done(self):
        return self.seen[-1] if self.seen else 0.0

    @done.setter
    def done(self, v):
        if hasattr(self, "seen"):
            self.seen.append(v)


@pytest.mark.mpi
@pytest.mark.parametrize("which", ["cholesky", "lu"])
def test_factorizations_report_all_their_flops(which):
    comm = MPI.COMM_WORLD
    n, nb = 45, 8
    for P, Q in grid_shapes(comm.size):
        g = ProcessGrid(P, Q)
        A = DistMatrix.from_function(g, (n, n), (nb, nb),
                                     lambda I, J: 1.0 / (1.0 + abs(I - J)) + n * (I == J))
        coeff = 1.0 / 3.0 if which == "cholesky" else 2.0 / 3.0
        with Recorder(coeff * n ** 3) as p:
            cholesky(A) if which == "cholesky" else lu_factor(A)
        seen = np.array(p.seen)
        # one report per block column; a 1 x 1 grid makes one local library call, one report
        assert len(seen) == (1 if P * Q == 1 else -(-n // nb))
        assert np.all(np.diff(seen) > 0)                # monotone
        assert seen[-1] == pytest.approx(coeff * n ** 3)  # ends at the total
