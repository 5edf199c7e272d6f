"""When a one-process grid hands the whole factorization to the local library.

On a 1 x 1 grid there is nothing to distribute: the local library's own blocked factorization
(LAPACK on CPU ranks; cuSOLVER on a GPU) needs no panel broadcasts or packing. On one H200 the
in-place cuSOLVER call beat distla's step loop at every size measured, n = 4096 to 32768 (potrf
1.9x at 4096, 1.04x at 32768; getrf 1.7x to 1.03x;
benchmarks/results/2026-11-24-h200-crossover.jsonl, made by benchmarks/crossover.py). Beyond
the measured sizes the loop is kept: its lookahead hides the tall panels that the library
factors serially, and the library's margin shrank as n grew. With the recursive panels of
distla's own leaf kernel (docs/perf.md) the loop was still slower at n = 24576 on one H200
(0.363 / 0.364 s against 0.346 / 0.347 s) and even at 32768 (0.682 / 0.715 s against 0.708 /
0.707 s; benchmarks/results/2026-11-28-h200-lu-crossover-check.jsonl). Once the loops applied
the diagonal block's inverse by a GEMM (GpuBackend.NATIVE_INVERSE) they won at 32768 (one
H200, alternating, twice: getrf 0.705 / 0.702 s against the loop's 0.662 / 0.648 s, potrf
0.280 / 0.280 against 0.275 / 0.271) and tied at 24576 (getrf 0.344 / 0.344 against 0.342 /
0.332, potrf 0.129 / 0.127 against 0.125 / 0.128;
benchmarks/results/2026-11-28-h200-crossover-native-inverse.jsonl): the GPU crossover moved
to 28672, between the two. The table below is that crossover;
``LOCAL_UP_TO[...] = 0`` forces the loop (tests do, to exercise it on one rank).
"""
from __future__ import annotations

# largest n for which a 1 x 1 grid calls the local library, per (device, factorization)
LOCAL_UP_TO = {("cpu", "potrf"): 1 << 62, ("cpu", "getrf"): 1 << 62,
               ("gpu", "potrf"): 28672, ("gpu", "getrf"): 28672}


def use_local(A, kind: str) -> bool:
    """True when ``A`` (on a 1 x 1 grid) should be factored by one local ``kind`` call
    ('potrf' or 'getrf'). Not collective (every rank of a 1 x 1 grid is alone)."""
    g = A.grid
    return g.nprow == 1 and g.npcol == 1 and min(A.shape) <= LOCAL_UP_TO[(A.device, kind)]
