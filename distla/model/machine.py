"""Machine parameters of the performance model: kernel rates of one device and the latency and
bandwidth of messages along process rows and columns, inside a node and between nodes.

A machine is a JSON object (see ``distla/model/machines/*.json`` and docs/model.md):

* ``gemm``: ``{k: flop/s}`` rate of a large ``C -= A B`` with inner dimension ``k`` (the block
  size); ``trsm``, ``syrk``: the same for a triangular solve / symmetric update with an
  ``nb x nb`` triangle; ``potrf``: ``{nb: seconds}`` of one diagonal-block Cholesky;
  ``getrf``: ``{nb: [t0, flop/s]}``, the time of a tall ``m x nb`` LU with partial pivoting
  ``t0 + flops(m, nb) / rate`` (the latency-bound panel);
* ``mem_bw``: bytes/s of a device copy (packing, butterflies); ``swap_bw``: bytes/s of row
  gathers/scatters of a column-major matrix (row interchanges; default mem_bw / 4);
  ``scan_bw``: bytes/s of the input checks' passes over the matrix (NaN/Inf scan, norms;
  default mem_bw / 4); ``call``: seconds of host overhead per kernel call (Python + launch);
* ``intra`` / ``inter``: ``{"alpha": s, "beta": bytes/s}`` per message inside a node and
  between nodes (``beta`` between nodes is the node's injection bandwidth, shared by the
  groups that cross it); ``row``/``col`` may override ``intra`` for process rows / columns
  (what ``--calibrate`` measures);
* ``devices_per_node`` (GPUs, or cores for CPU ranks with one BLAS thread each): more ranks
  than devices on a node share them (rates divided accordingly);
* ``overlap``: fraction of the lookahead panel that runs concurrently with the trailing update
  (1 on GPUs: separate streams; 0 on CPU ranks: one host thread in program order);
* ``tlr``: efficiency of the small batched TLR kernels relative to ``gemm``.

Not collective.
"""
from __future__ import annotations

import json
import math
import numbers
import os
from dataclasses import dataclass, field

__all__ = ["PROFILES", "Machine", "load_machine", "profile_path"]

_DIR = os.path.join(os.path.dirname(__file__), "machines")
PROFILES = ("h200-nvlink", "h200-ib", "cpu-dev")


def profile_path(name: str) -> str:
    """The JSON file of a shipped profile name."""
    return os.path.join(_DIR, f"{name}.json")


def _table(d) -> dict:
    return {int(k): v for k, v in (d or {}).items()}


def _interp(table: dict, x: float):
    """Linear interpolation in log2(x) over a ``{x: value}`` table, clamped at the ends."""
    if not table:
        raise ValueError("empty rate table in the machine file")
    xs = sorted(table)
    if x <= xs[0]:
        return table[xs[0]]
    if x >= xs[-1]:
        return table[xs[-1]]
    for a, b in zip(xs, xs[1:]):
        if a <= x <= b:
            t = (math.log2(x) - math.log2(a)) / (math.log2(b) - math.log2(a))
            va, vb = table[a], table[b]
            if isinstance(va, (list, tuple)):
                return [u + t * (v - u) for u, v in zip(va, vb)]
            return va + t * (vb - va)
    return table[xs[-1]]  # pragma: no cover


@dataclass
class Machine:
    name: str
    device: str
    gemm: dict
    trsm: dict
    syrk: dict
    potrf: dict
    getrf: dict
    mem_bw: float
    call: float
    intra: dict
    inter: dict
    devices_per_node: int = 1
    overlap: float = 0.0
    row: dict | None = None
    col: dict | None = None
    tlr: float = 0.3
    swap_bw: float = 0.0
    scan_bw: float = 0.0
    source: str = ""
    extra: dict = field(default_factory=dict)

    # ---- rates ----------------------------------------------------------------------------
    def gemm_rate(self, k: float) -> float:
        return float(_interp(self.gemm, k))

    def trsm_rate(self, k: float) -> float:
        return float(_interp(self.trsm, k))

    def syrk_rate(self, k: float) -> float:
        return float(_interp(self.syrk, k))

    def potrf_time(self, nb: float) -> float:
        """Seconds of one ``nb x nb`` Cholesky (scaled as nb^3 beyond the table)."""
        xs = sorted(self.potrf)
        if nb > xs[-1]:
            return self.potrf[xs[-1]] * (nb / xs[-1]) ** 3
        if nb < xs[0]:
            return self.potrf[xs[0]] * (nb / xs[0])
        return float(_interp(self.potrf, nb))

    def getrf_time(self, m: float, nb: float, flops: float) -> float:
        t0, rate = _interp(self.getrf, nb)
        return t0 + flops / rate

    def link(self, kind: str, inter: bool) -> tuple[float, float]:
        """(alpha seconds, beta bytes/s) of a message along ``kind`` ('row' | 'col')."""
        if inter:
            return float(self.inter["alpha"]), float(self.inter["beta"])
        d = (self.row if kind == "row" else self.col) or self.intra
        return float(d["alpha"]), float(d["beta"])

    # ---- JSON ---------------------------------------------------------------------------
    def to_dict(self) -> dict:
        d = {k: getattr(self, k) for k in ("name", "device", "source", "devices_per_node",
                                          "overlap", "mem_bw", "swap_bw", "scan_bw", "call",
                                          "tlr")}
        for k in ("gemm", "trsm", "syrk", "potrf", "getrf"):
            d[k] = {str(x): v for x, v in sorted(getattr(self, k).items())}
        d["intra"], d["inter"] = dict(self.intra), dict(self.inter)
        if self.row:
            d["row"] = dict(self.row)
        if self.col:
            d["col"] = dict(self.col)
        if self.extra:
            d["extra"] = self.extra
        return d

    def save(self, path: str) -> None:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.to_dict(), f, indent=1)
            f.write("\n")

    @classmethod
    def from_dict(cls, d: dict) -> Machine:
        need = ("gemm", "trsm", "potrf", "getrf", "mem_bw", "call", "intra", "inter")
        if not isinstance(d, dict):
            raise ValueError(f"machine file: a JSON object expected, not {type(d).__name__}")
        miss = [k for k in need if k not in d]
        if miss:
            raise ValueError(f"machine file lacks {', '.join(miss)}")
        _check_values(d)
        return cls(name=d.get("name", "machine"), device=d.get("device", "cpu"),
                   gemm=_table(d["gemm"]), trsm=_table(d["trsm"]),
                   syrk=_table(d.get("syrk") or d["gemm"]), potrf=_table(d["potrf"]),
                   getrf=_table(d["getrf"]), mem_bw=float(d["mem_bw"]), call=float(d["call"]),
                   intra=dict(d["intra"]), inter=dict(d["inter"]),
                   devices_per_node=int(d.get("devices_per_node", 1)),
                   overlap=float(d.get("overlap", 0.0)), row=d.get("row"), col=d.get("col"),
                   tlr=float(d.get("tlr", 0.3)),
                   swap_bw=float(d.get("swap_bw") or float(d["mem_bw"]) / 4),
                   scan_bw=float(d.get("scan_bw") or float(d["mem_bw"]) / 4),
                   source=d.get("source", ""),
                   extra=d.get("extra", {}))


def _number(key: str, v, lo: float = 0.0, strict: bool = True, hi: float = math.inf):
    """``v`` as a float, ValueError naming ``key`` unless it is a finite real number above
    ``lo`` (or at least ``lo`` when not ``strict``) and at most ``hi``."""
    ok = isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v) and \
        (v > lo if strict else v >= lo) and v <= hi
    if not ok:
        bound = f"{'>' if strict else '>='} {lo:g}" + (f" and <= {hi:g}" if hi < math.inf
                                                         else "")
        raise ValueError(f"machine file: {key} must be a finite number {bound}, not {v!r}")
    return float(v)


def _size_table(key: str, t, value) -> None:
    """``t``: a non-empty ``{block size: value}`` object (keys that read as positive ints)."""
    if not isinstance(t, dict) or not t:
        raise ValueError(f"machine file: {key} must be a non-empty {{block size: value}} "
                         f"object, not {t!r}")
    for k, v in t.items():
        try:
            ok = int(k) >= 1
        except (TypeError, ValueError):
            ok = False
        if not ok:
            raise ValueError(f"machine file: {key} has the key {k!r}, not a block size")
        value(f"{key}[{k}]", v)


def _check_values(d: dict) -> None:
    """ValueError naming the key for a value the model cannot use (negative or zero rates,
    bandwidths and counts made predictions faster with negative terms; others ended in
    ZeroDivisionError or KeyError)."""
    for k in ("gemm", "trsm") + (("syrk",) if d.get("syrk") else ()):
        _size_table(k, d[k], _number)
    _size_table("potrf", d["potrf"], _number)

    def pair(key, v):
        if not isinstance(v, (list, tuple)) or len(v) != 2:
            raise ValueError(f"machine file: {key} must be [seconds, flop/s], not {v!r}")
        _number(f"{key}[0]", v[0], strict=False)
        _number(f"{key}[1]", v[1])
    _size_table("getrf", d["getrf"], pair)
    for k in ("mem_bw", "swap_bw", "scan_bw"):
        if d.get(k) is not None:
            _number(k, d[k])
    _number("call", d["call"], strict=False)
    if "tlr" in d:
        _number("tlr", d["tlr"], hi=1.0)
    if "overlap" in d:
        _number("overlap", d["overlap"], strict=False, hi=1.0)
    if "devices_per_node" in d:
        v = d["devices_per_node"]
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"machine file: devices_per_node must be an int >= 1, not {v!r}")
    if d.get("device", "cpu") not in ("cpu", "gpu"):
        raise ValueError(f"machine file: device must be 'cpu' or 'gpu', not {d['device']!r}")
    for k in ("intra", "inter", "row", "col"):
        if k in ("row", "col") and d.get(k) is None:
            continue
        link = d[k]
        if not isinstance(link, dict) or not {"alpha", "beta"} <= set(link):
            raise ValueError(f"machine file: {k} needs alpha (s) and beta (bytes/s)")
        _number(f"{k}.alpha", link["alpha"], strict=False)
        _number(f"{k}.beta", link["beta"])


def load_machine(spec) -> Machine:
    """A :class:`Machine` from a profile name (``PROFILES``), a JSON file path, a dict or a
    Machine. Raises ValueError for an unknown name or a malformed file."""
    if isinstance(spec, Machine):
        return spec
    if isinstance(spec, dict):
        return Machine.from_dict(spec)
    path = profile_path(spec) if spec in PROFILES else spec
    if not os.path.exists(path):
        raise ValueError(f"machine {spec!r}: no such profile ({', '.join(PROFILES)}) or file")
    if not os.path.isfile(path):
        raise ValueError(f"machine {spec!r}: not a file (a profile name or a JSON file)")
    with open(path, encoding="utf-8") as f:
        try:
            d = json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError(f"machine file {path}: not JSON ({e})") from None
    return Machine.from_dict(d)
