"""``distla model --calibrate``: measure the machine parameters of the model on this machine.

Collective over ``comm``: rank 0 times the local kernels alone (GEMM, TRSM, SYRK with inner
dimension nb; POTRF of one nb x nb block; GETRF of tall nb-wide panels; a device copy; the
host cost of one tiny kernel call) through the same backend kernels the drivers call, while
the other ranks wait; then all ranks time broadcasts of one word and of a large buffer along
the process rows and columns of the squarest grid (or ``grid``) through the data
communicators the drivers use (MPI on CPU ranks, NCCL on GPU ranks), and fit latency alpha and
bandwidth beta per direction. Returns the :class:`~distla.model.machine.Machine` on every
rank (rank 0 saves it when given a path).
"""
from __future__ import annotations

import os
import time

import numpy as np

from .costs import getrf_flops, log2c
from .machine import Machine

__all__ = ["calibrate"]


def _best(fn, sync, reps=5):
    fn()
    sync()
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        sync()
        best = min(best, time.perf_counter() - t)
    return best


def _local(be, device, nbs, quick):
    """Rank-local kernel rates (one rank alone on its device)."""
    xp = be.xp
    sync = be.synchronize
    big = (2048 if quick else 8192) if device == "gpu" else (512 if quick else 1024)
    rng = np.random.default_rng(0)

    def arr(m, n):
        return be.asarray(np.asfortranarray(rng.standard_normal((m, n))))

    out = dict(gemm={}, trsm={}, syrk={}, potrf={}, getrf={})
    for k in nbs:
        a, b, c = arr(big, k), arr(k, big), arr(big, big)
        t = _best(lambda a=a, b=b, c=c: be.gemm("N", "N", -1.0, a, b, 1.0, c), sync)
        out["gemm"][k] = 2.0 * big * big * k / t
        tri = be.asarray(np.asfortranarray(np.tril(rng.standard_normal((k, k))) + k * np.eye(k)))
        bm = arr(big, k)
        t = _best(lambda tri=tri, bm=bm: be.trsm("R", "L", "T", "N", 1.0, tri, bm), sync)
        out["trsm"][k] = big * k * k / t
        s_a, s_c = arr(k, k), arr(k, k)
        t = _best(lambda s_a=s_a, s_c=s_c: be.syrk("L", "T", -1.0, s_a, 1.0, s_c), sync, reps=5)
        out["syrk"][k] = min(out["gemm"][k], k * (k + 1) * k / t)
        spd = np.asfortranarray(rng.standard_normal((k, k)))
        spd = spd @ spd.T + k * np.eye(k)
        host = np.asfortranarray(spd)

        def pot(host=host):
            w = be.asarray(host.copy(order="F"))
            be.potrf("L", w)
        t_copy = _best(lambda host=host: be.asarray(host.copy(order="F")), sync, reps=5)
        out["potrf"][k] = max(_best(pot, sync, reps=5) - t_copy, 1e-7)
        pts = []
        for m in (k, (8 if quick else 32) * k if device == "gpu" else 16 * k):
            src = np.asfortranarray(rng.standard_normal((m, k)))
            dev = be.asarray(src)
            w = be.empty((m, k), dev.dtype)

            def lu(dev=dev, w=w):
                w[...] = dev
                be.getrf(w)
            tc = _best(lambda dev=dev, w=w: w.__setitem__(Ellipsis, dev), sync, reps=5)
            pts.append((getrf_flops(m, k), max(_best(lu, sync, reps=5) - tc, 1e-7)))
        (f1, t1), (f2, t2) = pts
        rate = (f2 - f1) / (t2 - t1) if t2 > t1 else f2 / t2
        out["getrf"][k] = [max(t1 - f1 / rate, 0.0), rate]
    n = (1 << 27) if device == "gpu" else (1 << 23)
    x = be.zeros((n,), np.float64)
    y = be.zeros((n,), np.float64)
    t = _best(lambda: y.__setitem__(Ellipsis, x), sync)
    out["mem_bw"] = 2.0 * n * 8 / t
    t = _best(lambda: bool(xp.isfinite(x).all()), sync)
    out["scan_bw"] = n * 8 / t
    # row interchanges: gather nb scattered rows of a tall column-major matrix, then put them
    m = (1 << 15) if device == "gpu" else (1 << 12)
    k = max(nbs)
    a = be.zeros((m, m // 4 if device == "cpu" else m // 2), np.float64)
    idx = be.asarray(np.sort(rng.choice(a.shape[0], size=min(k, a.shape[0]), replace=False)))
    rows = be.empty((idx.shape[0], a.shape[1]), np.float64)

    def swap(a=a, idx=idx, rows=rows):
        be.take_rows(a, idx, rows)
        be.put_rows(a, idx, rows)
    t = _best(swap, sync)
    out["swap_bw"] = 4.0 * rows.size * 8 / t
    a8, b8, c8 = arr(8, 8), arr(8, 8), arr(8, 8)
    reps = 200
    be.gemm("N", "N", 1.0, a8, b8, 1.0, c8)
    sync()
    t = time.perf_counter()
    for _ in range(reps):
        be.gemm("N", "N", 1.0, a8, b8, 1.0, c8)
    sync()
    out["call"] = (time.perf_counter() - t) / reps
    return out


def _link(comms_dim, p, be, device, quick, comm):
    """(alpha, beta) along one grid direction: broadcasts of 1 word and of a large buffer."""
    from mpi4py import MPI
    n_big = (1 << (22 if quick else 25)) if device == "gpu" else (1 << (17 if quick else 20))
    small = be.zeros((1,), np.float64)
    large = be.zeros((n_big,), np.float64)

    def timed(buf, reps):
        comms_dim.bcast(buf, 0)
        be.synchronize()
        comm.Barrier()
        t = time.perf_counter()
        for _ in range(reps):
            comms_dim.bcast(buf, 0)
        be.synchronize()
        dt = (time.perf_counter() - t) / reps
        return comm.allreduce(dt, op=MPI.MAX)
    ts = timed(small, 20 if quick else 100)
    tl = timed(large, 3 if quick else 5)
    L = max(1, log2c(p))
    alpha = ts / L
    beta = n_big * 8 / max(tl - alpha * L, 1e-9)
    return dict(alpha=alpha, beta=beta)


def calibrate(comm=None, device: str = "cpu", nbs=None, grid=None, quick: bool = False,
              out: str | None = None, name: str | None = None, base=None) -> Machine:
    """Collective over ``comm`` (default COMM_WORLD): measure and return the Machine (see the
    module docstring). ``nbs``: block sizes to measure (default 64, 128, 256 on CPU; 256, 512,
    1024 on GPU). ``grid``: "PxQ" for the message measurements (default squarest).
    ``base``: a Machine whose message parameters stand in for directions that cannot be
    measured (one rank; or between nodes). ``out``: rank 0 writes the JSON there (the
    other ranks may pass None)."""
    from mpi4py import MPI

    from ..defaults import make_grid
    from ..device import get_backend
    from ..errors import collective
    comm = MPI.COMM_WORLD if comm is None else comm
    with collective(comm):
        be = get_backend(device, comm)
    nbs = tuple(nbs or ((256, 512, 1024) if device == "gpu" else (64, 128, 256)))
    loc = None
    with collective(comm):
        if comm.rank == 0:
            loc = _local(be, device, nbs, quick)
    loc = comm.bcast(loc, root=0)
    g = make_grid(grid, comm)
    comms = g.comms(device)
    links = {}
    with collective(comm):
        for kind, p, c in (("row", g.npcol, comms.row), ("col", g.nprow, comms.col)):
            if p > 1:
                links[kind] = _link(c, p, be, device, quick, comm)
    fallback = base.intra if base is not None else \
        dict(alpha=5e-6, beta=5e9) if device == "cpu" else dict(alpha=2e-5, beta=1e11)
    intra = links.get("row") or links.get("col") or dict(fallback)
    if device == "gpu":
        import cupy
        dpn = cupy.cuda.runtime.getDeviceCount()
    else:
        dpn = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
            (os.cpu_count() or 1)
    m = Machine(
        name=name or f"calibrated-{device}", device=device, gemm=loc["gemm"],
        trsm=loc["trsm"], syrk=loc["syrk"], potrf=loc["potrf"], getrf=loc["getrf"],
        mem_bw=loc["mem_bw"], swap_bw=loc["swap_bw"], scan_bw=loc["scan_bw"],
        call=loc["call"], intra=intra,
        inter=dict(base.inter) if base is not None else dict(intra),
        devices_per_node=dpn, overlap=1.0 if device == "gpu" else 0.0,
        row=links.get("row"), col=links.get("col"),
        tlr=base.tlr if base is not None else (0.3 if device == "gpu" else 0.5),
        source=(f"distla model --calibrate on {comm.size} rank(s), grid {g.nprow}x{g.npcol}, "
                f"device {device}, {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC"
                + ("" if links else "; message parameters not measured (one rank)"
                   + (f": taken from {base.name}" if base is not None else ""))
                + (f"; between nodes: {base.name}" if base is not None else "")),
        extra=dict(calibrated_ranks=comm.size,
                   grid=f"{g.nprow}x{g.npcol}"))
    m = Machine.from_dict(comm.bcast(m.to_dict(), root=0))   # rank 0's, on every rank
    with collective(comm):      # every rank: an unwritable path fails on all of them
        if out is not None and comm.rank == 0:
            m.save(out)
    return m
