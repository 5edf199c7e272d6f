"""When a one-process grid hands the whole factorization to the local library.

On a 1 x 1 grid there is nothing to distribute: the local library's own blocked factorization
(LAPACK on CPU ranks; cuSOLVER on a GPU) needs no panel broadcasts or packing, and below a
crossover size it beats distla's step loop. Above it distla's loop wins on a GPU (lookahead
hides the tall panels that cuSOLVER factors serially): Cholesky on one H200 at nb 1024 ran at
1.33x cuSOLVER potrf for n = 32768 but 0.68-0.80x at n <= 16384 (records in
benchmarks/results/). The table below is that crossover; ``LOCAL_UP_TO[...] = 0`` forces the
loop (tests do, to exercise it on one rank).
"""
from __future__ import annotations

# largest n for which a 1 x 1 grid calls the local library, per (device, factorization)
LOCAL_UP_TO = {("cpu", "potrf"): 1 << 62, ("cpu", "getrf"): 1 << 62,
               ("gpu", "potrf"): 24576, ("gpu", "getrf"): 1 << 62}


def use_local(A, kind: str) -> bool:
    """True when ``A`` (on a 1 x 1 grid) should be factored by one local ``kind`` call
    ('potrf' or 'getrf'). Not collective (every rank of a 1 x 1 grid is alone)."""
    g = A.grid
    return g.nprow == 1 and g.npcol == 1 and min(A.shape) <= LOCAL_UP_TO[(A.device, kind)]
