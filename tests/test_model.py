"""The performance model (distla/model): its flop accounting against the drivers' own kernel
calls, its response to the machine parameters, calibration and the command line."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

from distla.model import PROFILES, Machine, load_machine, predict
from distla.model.costs import (
    gemm_flops,
    getrf_flops,
    potrf_flops,
    syrk_flops,
    trsm_flops,
)


def _machine(**over):
    d = load_machine("cpu-dev").to_dict()
    d.update(over)
    return Machine.from_dict(d)


# ------------------------------------------------------------------------------------------
# counting the drivers' kernel flops
# ------------------------------------------------------------------------------------------
class _Counter:
    """Wraps the CPU backend's kernels (class-level, restored by monkeypatch) and adds up
    LAPACK's flop counts of every call, by kernel."""

    def __init__(self, monkeypatch):
        from distla.device import get_backend
        self.flops = {}
        cls = type(get_backend("cpu"))
        orig = {k: getattr(cls, k) for k in ("gemm", "syrk", "trsm", "potrf", "getrf")}

        def add(kind, v):
            self.flops[kind] = self.flops.get(kind, 0.0) + float(v)

        def gemm(be, ta, tb, alpha, a, b, beta, c, *args, **kw):
            k = a.shape[0] if ta in "TtCc" else a.shape[1]
            add("gemm", gemm_flops(c.shape[0], c.shape[1], k))
            return orig["gemm"](be, ta, tb, alpha, a, b, beta, c, *args, **kw)

        def syrk(be, uplo, trans, alpha, a, beta, c):
            k = a.shape[0] if trans in "TtCc" else a.shape[1]
            add("syrk", syrk_flops(c.shape[0], k))
            return orig["syrk"](be, uplo, trans, alpha, a, beta, c)

        def trsm(be, side, uplo, transa, diag, alpha, a, b):
            nrhs = b.shape[1] if side in "Ll" else b.shape[0]
            add("trsm", trsm_flops(a.shape[0], nrhs, unit=diag in "Uu"))
            return orig["trsm"](be, side, uplo, transa, diag, alpha, a, b)

        def potrf(be, uplo, a):
            add("potrf", potrf_flops(a.shape[0]))
            return orig["potrf"](be, uplo, a)

        def getrf(be, a):
            add("getrf", getrf_flops(*a.shape))
            return orig["getrf"](be, a)
        for name, fn in (("gemm", gemm), ("syrk", syrk), ("trsm", trsm), ("potrf", potrf),
                         ("getrf", getrf)):
            monkeypatch.setattr(cls, name, fn)

    def total(self):
        return sum(self.flops.values())


def _run_driver(algo, grid, n, nb, tree="binary"):
    from distla.bench.common import general_matrix, spd_matrix
    from distla.linalg import cholesky, lu_factor
    if algo == "cholesky":
        A = spd_matrix(grid, n, nb)
        cholesky(A, check_finite=False, check_symmetric=False)
    else:
        A = general_matrix(grid, n, nb)
        lu_factor(A, pivoting={"lu": "partial", "calu": "tournament"}[algo], tree=tree,
                  check_finite=False)


@pytest.mark.parametrize("algo", ["cholesky", "lu", "calu"])
@pytest.mark.parametrize("n,nb", [(100, 16), (61, 8), (48, 48)])
def test_model_flops_equal_driver_flops_1x1(algo, n, nb, monkeypatch):
    from mpi4py import MPI

    from distla import ProcessGrid
    grid = ProcessGrid(1, 1, comm=MPI.COMM_SELF)
    cnt = _Counter(monkeypatch)
    _run_driver(algo, grid, n, nb)
    pred = predict(algo, n, nb, 1, 1, "cpu-dev")
    assert pred.total_flops() == pytest.approx(cnt.total(), rel=1e-12)
    # and both equal LAPACK's count of the unblocked factorization
    exact = potrf_flops(n) if algo == "cholesky" else getrf_flops(n, n)
    assert cnt.total() == pytest.approx(exact, rel=1e-12)


@pytest.mark.mpi
@pytest.mark.parametrize("algo,tree", [("cholesky", "binary"), ("lu", "binary"),
                                       ("calu", "binary"), ("calu", "flat")])
def test_model_flops_per_rank_equal_driver_flops(algo, tree, monkeypatch):
    """Every rank's kernel flops (redundant panel work included) are what the model books
    for that grid position, on every grid shape."""
    from mpi4py import MPI

    from distla import ProcessGrid
    from distla.testing import grid_shapes
    for P, Q in grid_shapes(MPI.COMM_WORLD.size):
        grid = ProcessGrid(P, Q)
        for n, nb in ((90, 8), (64, 16)):
            cnt = _Counter(monkeypatch)
            _run_driver(algo, grid, n, nb, tree)
            pred = predict(algo, n, nb, P, Q, "cpu-dev", tree=tree)
            mine = sum(float(v[grid.myrow, grid.mycol]) for v in pred.flops.values())
            assert mine == pytest.approx(cnt.total(), rel=1e-12), (P, Q, n, nb)
            monkeypatch.undo()


def test_model_total_flops_cholesky_any_grid():
    for P, Q in ((1, 1), (2, 1), (1, 3), (3, 2), (4, 4)):
        pred = predict("cholesky", 203, 16, P, Q, "cpu-dev")
        assert pred.total_flops() == pytest.approx(potrf_flops(203), rel=1e-12)


# ------------------------------------------------------------------------------------------
# response to the machine
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("algo", ["cholesky", "lu", "calu", "genp", "rbt", "tlr"])
def test_faster_network_never_slower(algo):
    base = load_machine("cpu-dev")
    prev = None
    for f in (0.25, 1, 4, 16):
        m = _machine(intra={"alpha": base.intra["alpha"] / f, "beta": base.intra["beta"] * f},
                     row=None, col=None,
                     inter={"alpha": base.inter["alpha"] / f, "beta": base.inter["beta"] * f})
        t = predict(algo, 2048, 64, 2, 4, m).seconds
        if prev is not None:
            assert t <= prev * (1 + 1e-12)
        prev = t
    slow = _machine(intra={"alpha": 1e-2, "beta": 1e6}, inter={"alpha": 1e-2, "beta": 1e6},
                    row=None, col=None)
    assert predict(algo, 2048, 64, 2, 4, slow).seconds > prev * 2


def test_one_rank_reduces_to_local_rates():
    """1 x 1: no messages at all (network parameters do not matter), and for a large
    matrix the rate approaches the GEMM rate at nb (the update dominates)."""
    m1 = _machine()
    m2 = _machine(intra={"alpha": 1.0, "beta": 1.0}, inter={"alpha": 1.0, "beta": 1.0},
                  row=None, col=None)
    for algo in ("cholesky", "lu", "calu", "rbt"):
        a, b = predict(algo, 4096, 128, 1, 1, m1), predict(algo, 4096, 128, 1, 1, m2)
        assert a.seconds == b.seconds
        assert a.bytes_per_rank() == 0
    big = predict("cholesky", 65536, 128, 1, 1, m1)
    assert 0.8 < big.efficiency <= 1.0
    gemm_only = big.flops["gemm"].sum() / m1.gemm_rate(128)
    assert big.seconds > gemm_only
    assert big.limiting == "update"


def test_more_ranks_weak_scaling_moves_more_bytes():
    m = load_machine("h200-ib")
    b = [predict("cholesky", int(65536 * np.sqrt(R)) // 1024 * 1024, 1024, P, Q, m)
         .bytes_per_rank() for R, (P, Q) in ((4, (2, 2)), (16, (4, 4)), (64, (8, 8)))]
    assert b[0] < b[1] < b[2]


@pytest.mark.parametrize("name", PROFILES)
def test_profiles_load_and_predict(name):
    m = load_machine(name)
    p = predict("lu", 8192, 256, 2, 2, m)
    assert p.seconds > 0 and 0 < p.efficiency <= 1
    assert load_machine(m.to_dict()).to_dict() == m.to_dict()


@pytest.mark.parametrize("key, value, msg", [
    ("swap_bw", -1e11, "swap_bw must be a finite number > 0"),
    ("scan_bw", -1e11, "scan_bw must be"), ("mem_bw", 0, "mem_bw must be"),
    ("devices_per_node", 0, "devices_per_node must be an int >= 1"),
    ("overlap", 2, "overlap must be a finite number >= 0 and <= 1"),
    ("device", "tpu", "device must be 'cpu' or 'gpu'"), ("call", -1, "call must be"),
    ("tlr", 0, "tlr must be"), ("row", {"alpha": 1e-5}, "row needs alpha"),
    ("potrf", {}, "potrf must be a non-empty"), ("gemm", [1, 2], "gemm must be a non-empty"),
    ("gemm", {"big": 1e12}, "gemm has the key 'big'"),
    ("getrf", {"1024": 5}, r"getrf\[1024\] must be \[seconds, flop/s\]"),
    ("inter", {"alpha": 1e-6, "beta": "fast"}, "inter.beta must be")])
def test_machine_values_the_model_cannot_use_are_refused(key, value, msg):
    """Negative bandwidths, counts and overlaps made predictions faster with negative
    terms (exit 0); zeros and malformed tables ended in ZeroDivisionError, KeyError,
    IndexError: each is a ValueError naming the key now."""
    d = load_machine("h200-ib").to_dict()
    d[key] = value
    with pytest.raises(ValueError, match=msg):
        load_machine(d)


def test_tlr_rates_stay_below_the_peak_and_bands_cover_their_runs():
    """TLR rows divided the dense flop count by the TLR time: 581 TFLOP/s on one H200,
    efficiency 13; the error band was printed for runs the validation does not cover."""
    m = load_machine("h200-nvlink")
    for P, Q in ((1, 1), (2, 2)):
        p = predict("tlr", 262144, 1024, P, Q, m)
        assert 0 < p.efficiency <= 1 and p.tflops <= P * Q * max(m.gemm.values()) / 1e12


def test_per_step_bytes_are_each_steps():
    """The step table was one step late (step 0 carried two panels' broadcasts, the table
    stopped a step short) and took differences of the busiest rank's running total, whose
    rank changes (steps at 0). Each step is now the busiest rank's bytes in that step."""
    m = load_machine("h200-ib")
    for algo in ("cholesky", "lu"):
        p = predict(algo, 16384, 512, 4, 4, m)
        assert len(p.step_bytes) == 16384 // 512
        assert all(b > 0 for b in p.step_bytes)
        assert sum(p.step_bytes) >= p.bytes_per_rank() * (1 - 1e-12)
        # the broadcasts shrink with the trailing matrix: no step carries more than step 0
        assert max(p.step_bytes) <= p.step_bytes[0] * (1 + 1e-12)


def test_bad_machine_and_inputs():
    with pytest.raises(ValueError, match="no such profile"):
        load_machine("no-such-machine")
    d = load_machine("cpu-dev").to_dict()
    del d["gemm"]
    with pytest.raises(ValueError, match="gemm"):
        load_machine(d)
    with pytest.raises(ValueError, match="algorithm"):
        predict("qr", 100, 10, 1, 1, "cpu-dev")
    with pytest.raises(ValueError, match="positive"):
        predict("lu", 0, 10, 1, 1, "cpu-dev")


# ------------------------------------------------------------------------------------------
# calibration and the command line
# ------------------------------------------------------------------------------------------
def test_calibrate_writes_a_valid_machine(tmp_path):
    from mpi4py import MPI

    from distla.model import calibrate
    out = tmp_path / "m.json"
    m = calibrate(MPI.COMM_SELF, device="cpu", nbs=(16, 32), quick=True, out=str(out))
    got = load_machine(str(out))
    assert got.to_dict() == m.to_dict()
    assert all(v > 0 for v in got.gemm.values()) and set(got.gemm) == {16, 32}
    assert got.mem_bw > 0 and got.call > 0
    assert predict("cholesky", 256, 32, 1, 1, got).seconds > 0


def test_cli_predicts_and_validates(tmp_path, capsys):
    from distla.model.cli import main_argv
    js = tmp_path / "rows.jsonl"
    assert main_argv(["--machine", "cpu-dev", "--algo", "cholesky", "calu", "--n", "1024",
                      "--ranks", "1", "2", "--shapes", "all", "--json", str(js)]) == 0
    out = capsys.readouterr().out
    assert "cholesky" in out and "1x2" in out and "2x1" in out
    rows = [json.loads(x) for x in js.read_text().splitlines()]
    assert len(rows) == 2 * 3 and all(r["seconds"] > 0 for r in rows)
    rec = tmp_path / "meas.jsonl"
    rec.write_text(json.dumps({"bench": "lu", "impl": "distla", "n": 1024, "nb": 128,
                               "grid": "1x2", "pivoting": "partial", "seconds": 0.5}) + "\n")
    assert main_argv(["--machine", "cpu-dev", "--validate", str(rec)]) == 0
    assert "1 runs" in capsys.readouterr().out
    assert main_argv(["--machine", "nope"]) == 2
    assert main_argv(["--machine", "h200-ib", "--recommend", "--algo", "cholesky",
                      "--n", "65536", "--ranks", "4"]) == 0


def test_cholesky_moves_the_textbook_volume():
    """The driver's panel exchange (own rows along the process row, then an allgather of the
    rows matching each process column's block columns) receives what ScaLAPACK's two
    broadcasts do, about m nb (1/P + 1/Q) per step, far below the whole panel per rank; the
    flops do not change with the variant."""
    m = load_machine("h200-ib")
    for P, Q in ((4, 4), (4, 8), (8, 8)):
        a = predict("cholesky", 32768, 512, P, Q, m)
        b = predict("cholesky", 32768, 512, P, Q, m, variant="scalapack")
        assert a.bytes_per_rank() <= 1.1 * b.bytes_per_rank()
        whole_panel = sum(32768 - k * 512 for k in range(1, 64)) * 512 * 8   # m nb per step
        assert a.bytes_per_rank() < 0.6 * whole_panel
        assert a.total_flops() == pytest.approx(b.total_flops(), rel=1e-12)


def test_rank_order_decides_which_direction_leaves_the_node():
    from distla.model.costs import Topology
    m = load_machine("h200-ib")
    t = Topology(m, 8, 16, order="row")        # rows of 16 ranks span two 8-GPU nodes
    assert t.row_inter and t.col_inter
    t = Topology(m, 8, 16, order="col")        # columns of 8 consecutive ranks: one node
    assert not t.col_inter and t.row_inter
    assert t.col == m.link("col", False)


@pytest.mark.mpi
@pytest.mark.gpu
def test_calibrate_gpu_messages_along_rows_and_columns(tmp_path):
    """GPU ranks: kernels through cuBLAS/cuSOLVER, messages through NCCL, on every rank."""
    from mpi4py import MPI

    from distla.device import gpu_available
    from distla.model import calibrate
    if not gpu_available():
        pytest.skip("needs CuPy and a GPU")
    comm = MPI.COMM_WORLD
    out = str(tmp_path / "gpu.json") if comm.rank == 0 else None
    m = calibrate(comm, device="gpu", nbs=(256, 512), quick=True, out=out)
    assert m.device == "gpu" and min(m.gemm.values()) > 0 and m.swap_bw > 0
    if comm.size > 1:
        assert (m.row or m.col)["beta"] > 0
    if comm.rank == 0:
        assert load_machine(out).to_dict() == m.to_dict()


@pytest.mark.mpi
def test_calibrate_cpu_measures_both_grid_directions(tmp_path_factory):
    from mpi4py import MPI

    from distla.model import calibrate
    from distla.testing import grid_shapes
    comm = MPI.COMM_WORLD
    P, Q = grid_shapes(comm.size)[len(grid_shapes(comm.size)) // 2]
    m = calibrate(comm, device="cpu", nbs=(16,), quick=True, grid=f"{P}x{Q}")
    assert (m.row is not None) == (Q > 1) and (m.col is not None) == (P > 1)
    for link in (m.row, m.col):
        if link is not None:
            assert link["alpha"] > 0 and link["beta"] > 0
    assert m.to_dict() == comm.bcast(m.to_dict(), root=0)   # the same machine everywhere


# ------------------------------------------------------------------------------------------
# input validation (before any work): library and command line
# ------------------------------------------------------------------------------------------
def test_rbt_depth_refused_as_the_solver_does_before_any_work():
    """2^depth > max(2n, 4) made the model walk a padded n of 2^depth (depth 40: never
    returns); it is refused at once, as rbt_solve refuses it, and so is depth < 0."""
    import time

    from distla.linalg.rbt import _check_depth
    t = time.perf_counter()
    for depth in (40, 11):
        with pytest.raises(ValueError, match=f"depth {depth} is too large for n = 1000"):
            predict("rbt", 1000, 64, 1, 1, "cpu-dev", depth=depth)
        with pytest.raises(ValueError, match="too large"):
            _check_depth(depth, 1000)         # the solver draws the same line
    assert time.perf_counter() - t < 5
    assert predict("rbt", 1000, 64, 1, 1, "cpu-dev", depth=10).seconds > 0   # 2^10 <= 2000
    with pytest.raises(ValueError, match="depth must be an int >= 0, not -1"):
        predict("rbt", 1000, 64, 1, 1, "cpu-dev", depth=-1)


@pytest.mark.parametrize("kw, match", [
    (dict(lookahead=-1), "lookahead must be an int >= 0, not -1"),
    (dict(lookahead=2), "lookahead must be 0 or 1"),      # (it was taken as 1, silently)
    (dict(ranks_per_node=0), "ranks_per_node must be an int >= 1, not 0"),
    (dict(ranks_per_node=-4), "ranks_per_node must be an int >= 1, not -4"),
    (dict(algo="rbt", iterations=-5), "iterations must be an int >= 0, not -5"),
    (dict(algo="rbt", depth=2.5), "depth must be an int >= 0, not 2.5"),
    (dict(algo="tlr", rank=-5), "rank must be an int >= 1, not -5"),
    (dict(algo="tlr", depth=2), "tlr takes no option 'depth'"),
    (dict(nb=0), "nb must be a positive int, not 0"),
    (dict(n=10 ** 9, nb=16), "block steps"),
])
def test_predict_refuses_bad_inputs(kw, match):
    algo = kw.pop("algo", "lu")
    n, nb = kw.pop("n", 1024), kw.pop("nb", 64)
    with pytest.raises((ValueError, TypeError), match=match):
        predict(algo, n, nb, 2, 2, "cpu-dev", **kw)


def test_recommend_for_n_below_every_block_size():
    from distla.model.cli import recommend
    pr = recommend("lu", 10, 4, "h200-ib")
    assert pr is not None and pr.nb == 10 and pr.n == 10 and pr.P * pr.Q == 4


def test_sizes_are_parsed_strictly():
    from distla.model.cli import _sizes
    assert _sizes(["1024", "64k", "2k,4K"]) == [1024, 65536, 2048, 4096]
    for bad in ("1kk", "k", "1.5k", "0", "-4", "1e3", "1_000"):
        with pytest.raises(ValueError, match=f"not '{bad}'"):
            _sizes([bad])


@pytest.mark.parametrize("argv, msg", [
    (["--algo", "rbt", "--depth", "40", "--n", "1000"], "--depth 40 is too large for --n 1000"),
    (["--algo", "rbt", "--depth", "-1"], "--depth must be >= 0, not -1"),
    (["--ranks", "0"], "--ranks must be positive, not 0"),
    (["--ranks", "-4"], "--ranks must be positive, not -4"),
    (["--weak", "-1"], "--weak must be a finite number of GB > 0, not -1"),
    (["--weak", "nan"], "--weak must be a finite number of GB > 0, not nan"),
    (["--weak", "inf"], "--weak must be a finite number of GB > 0, not inf"),
    (["--weak", "0"], "--weak must be a finite number of GB > 0, not 0"),
    (["--weak", "1", "--n", "1024"], "--n does not apply with --weak"),
    (["--nb", "0"], "--nb must be positive, not 0"),
    (["--n", "1kk"], "not '1kk'"),
    (["--lookahead", "-1"], "--lookahead must be >= 0, not -1"),
    (["--iterations", "-5"], "--iterations must be >= 0, not -5"),
    (["--algo", "tlr", "--rank", "-5"], "--rank must be positive, not -5"),
    (["--ranks-per-node", "0"], "--ranks-per-node must be positive, not 0"),
    (["--tolerance", "nan"], "--tolerance must be a finite number >= 0, not nan"),
    (["--out", "m.json"], "--out applies only with --calibrate"),
    (["--device", "gpu"], "--device applies only with --calibrate"),
    (["--quick"], "--quick applies only with --calibrate"),
    (["--calibrate", "--validate", "x.jsonl"], "--validate does not apply with --calibrate"),
    (["--validate", "x.jsonl", "--nb", "64"], "--nb does not apply with --validate"),
    (["--grid", "auto"], "--grid: give PxQ shapes"),
    (["--n", "99999999999999999999999"], "is beyond the model's range (2^52)"),
    (["--validate", os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                 "benchmarks/results/2026-11-24-model-validation-cpu.jsonl")],
     "no record the model can check"),            # (it printed '(no results)', exit 0)
])
def test_cli_refuses_bad_options_before_any_work(argv, msg, capsys):
    """A usage error: exit code 2 (EXIT_USAGE, as distla solve), one 'distla model: error:'
    line naming the option and the value, and no table printed first."""
    import time

    from distla.model.cli import main_argv
    from distla.runtime import EXIT_USAGE
    t = time.perf_counter()
    assert main_argv(["--machine", "cpu-dev", *argv]) == EXIT_USAGE
    assert time.perf_counter() - t < 10
    cap = capsys.readouterr()
    err = [ln for ln in cap.err.splitlines() if ln.strip()]
    assert err[-1].startswith("distla model: error: ") and msg in err[-1], cap.err
    assert "Traceback" not in cap.err and cap.out == ""


def test_cli_checks_output_paths_before_the_table(tmp_path, capsys):
    from distla.model.cli import main_argv
    assert main_argv(["--machine", "cpu-dev", "--algo", "lu", "--n", "1024", "--json",
                      str(tmp_path)]) == 2
    cap = capsys.readouterr()
    assert cap.out == "" and f"--json: {tmp_path}: is a directory" in cap.err
    assert main_argv(["--machine", "cpu-dev", "--algo", "lu", "--n", "1024", "--json",
                      str(tmp_path / "no" / "x.jsonl")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_cli_recommends_for_small_n(capsys):
    from distla.model.cli import main_argv
    assert main_argv(["--machine", "h200-ib", "--recommend", "--algo", "lu", "--n", "10",
                      "--ranks", "2"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1].split()[:3] == ["lu", "10", "10"]


@pytest.mark.parametrize("line, msg", [
    ('{"bench":"cholesky","impl":"distla","grid":"2x2x1","n":1024,"nb":128,"seconds":1}',
     "'grid' must be PxQ with P, Q >= 1, not '2x2x1'"),
    ('{"bench":"cholesky","impl":"distla","grid":"0x2","n":1024,"nb":128,"seconds":1}',
     "'grid' must be PxQ with P, Q >= 1, not '0x2'"),
    ('{"bench":"cholesky","impl":"distla","grid":"2x2","n":"abc","nb":128,"seconds":1}',
     "'n' must be an int >= 1, not 'abc'"),
    ('{"bench":"cholesky","impl":"distla","grid":"2x2","n":1024,"nb":0,"seconds":1}',
     "'nb' must be an int >= 1, not 0"),
    ('{"bench":"cholesky","impl":"distla","grid":"2x2","n":1024,"nb":128,"seconds":0}',
     "'seconds' must be a finite number > 0, not 0"),
    ('{"bench":"rbt","impl":"distla-rbt","grid":"1x1","n":100,"nb":16,"seconds":1,'
     '"depth":40}', "depth 40 is too large for n = 100"),
    ('[1, 2]', "not a JSON object"),
    ('{"bench": "lu", ', "not JSON"),
])
def test_cli_validate_names_the_file_and_line_of_a_bad_record(tmp_path, capsys, line, msg):
    from distla.model.cli import main_argv
    good = json.dumps({"bench": "lu", "impl": "distla", "n": 1024, "nb": 128, "grid": "1x2",
                       "pivoting": "partial", "seconds": 0.5})
    rec = tmp_path / "meas.jsonl"
    rec.write_text(good + "\n\n" + line + "\n")
    assert main_argv(["--machine", "cpu-dev", "--validate", str(rec)]) == 2
    cap = capsys.readouterr()
    assert cap.out == "" and f"--validate: {rec}, line 3: " in cap.err and msg in cap.err


def test_validate_records_keeps_the_records_it_does_not_cover():
    from distla.model.cli import validate_records
    recs = [{"bench": "io", "impl": "distla"}, {"bench": "lu", "impl": "scalapack"},
            {"bench": "lu", "impl": "distla", "n": 1024, "nb": 128, "grid": "1x2",
             "pivoting": "tournament", "tree": "before", "seconds": 0.5}]
    rows = validate_records(recs, "cpu-dev")
    assert [r["algo"] for r in rows] == ["calu"]
    with pytest.raises(ValueError, match="record 2: 'seconds' must be a finite"):
        validate_records([recs[2], {**recs[2], "seconds": float("nan")}], "cpu-dev")


@pytest.mark.mpi
def test_cli_usage_errors_on_every_rank():
    """Every rank returns the usage exit code (options are checked on every rank; output
    paths on rank 0, the outcome shared)."""
    import os

    from mpi4py import MPI

    from distla.model.cli import main_argv
    here = os.path.dirname(os.path.abspath(__file__))      # a directory on every rank
    codes = [main_argv(["--machine", "cpu-dev", "--ranks", "0"]),
             main_argv(["--machine", "cpu-dev", "--n", "1024", "--json", here]),
             main_argv(["--machine", "cpu-dev", "--algo", "rbt", "--weak", "1",
                        "--depth", "40"])]
    assert codes == [2, 2, 2]
    assert MPI.COMM_WORLD.allgather(codes) == [codes] * MPI.COMM_WORLD.size


def test_rank_counts_beyond_the_model_are_refused_at_once(capsys):
    """--ranks 1e9 enumerated a billion candidate shapes (and --grid 1e5x1e5 asked for
    (P, Q) arrays of 1e10 entries): refused before any work; shapes() finds divisors fast."""
    import time

    from distla.model.cli import main_argv, shapes
    from distla.model.drivers import MAX_RANKS
    t = time.perf_counter()
    assert main_argv(["--machine", "cpu-dev", "--ranks", str(10 ** 9)]) == 2
    assert f"--ranks {10 ** 9} is more than the model holds ({MAX_RANKS})" in \
        capsys.readouterr().err
    with pytest.raises(ValueError, match="100000x100000 grid is 10000000000 ranks"):
        predict("lu", 1024, 64, 10 ** 5, 10 ** 5, "cpu-dev")
    assert shapes(MAX_RANKS, "all")[:2] == [(1, MAX_RANKS), (2, MAX_RANKS // 2)]
    assert time.perf_counter() - t < 5
    assert shapes(12, "all") == [(1, 12), (2, 6), (3, 4), (4, 3), (6, 2), (12, 1)]


def test_calibrate_refuses_an_output_that_is_not_its_machine_file(tmp_path, capsys):
    """`model --calibrate --out A.npy` overwrote the matrix with JSON, and a non-.json name
    was taken; `--calib-grid 2x2` on the wrong rank count suggested `--grid`, an option
    --calibrate does not have. All refused before any measurement (serial: one rank)."""
    from distla.model.cli import main_argv
    np.save(tmp_path / "A.npy", np.eye(3))
    (tmp_path / "other.json").write_text('{"a": 1}\n')
    for out, msg in (("A.npy", "give a name ending in .json"),
                     ("cal.txt", "give a name ending in .json"),
                     ("other.json", "exists and is not a machine file of --calibrate")):
        assert main_argv(["--calibrate", "--quick", "--out", str(tmp_path / out)]) == 2
        err = capsys.readouterr().err
        assert "--out: " in err and msg in err, err
    assert np.load(tmp_path / "A.npy").shape == (3, 3)
    assert (tmp_path / "other.json").read_text() == '{"a": 1}\n'
    assert not (tmp_path / "cal.txt").exists()
    assert main_argv(["--calibrate", "--quick", "--calib-grid", "2x2"]) == 2
    err = capsys.readouterr().err
    assert "--calib-grid 2x2 needs 4 MPI ranks" in err and "--calib-grid 1x1" in err
    assert "--grid " not in err
    good = tmp_path / "m.json"                 # its own earlier output may be replaced
    load_machine("cpu-dev").save(str(good))
    from distla.model.cli import _check_machine_out
    _check_machine_out(str(good))
