"""The import layers of DESIGN.md, enforced: every import between distla's modules (function-
local ones included) goes to the same or a lower layer, and there is no import cycle."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "distla"

# layer of each module (longest matching prefix wins); DESIGN.md shows the same table
LAYERS = {
    "distla.layout": 0, "distla.errors": 0, "distla.trace": 0, "distla.progress": 0,
    "distla.random": 0, "distla.testing": 0, "distla.redistribute": 0, "distla.filebase": 0,
    "distla.device": 1,
    "distla.comm": 2,
    "distla.grid": 3,
    "distla.matrix": 4,
    "distla.pblas": 5, "distla.validate": 5, "distla.io": 5, "distla.h5io": 5, "distla.checks": 5,
    "distla.covariance": 5, "distla.vector": 5, "distla.replicate": 5,
    "distla.linalg": 6, "distla.tlr": 6,
    "distla.problems": 7, "distla.defaults": 7, "distla.runtime": 7, "distla.warmup": 7,
    "distla.model": 7, "distla.gp": 7,
    "distla.bench": 8,
    "distla.cli": 9, "distla.__main__": 9, "distla": 9,
}


def _modules() -> dict[str, Path]:
    out = {}
    for p in ROOT.rglob("*.py"):
        parts = ("distla",) + p.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


def _imports(name: str, path: Path, mods) -> set[str]:
    pkg = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = pkg.split(".")[:len(pkg.split(".")) - node.level + 1]
                base = ".".join(up) + ("." + node.module if node.module else "")
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base
                       for a in node.names]
        for t in targets:
            while t not in mods and "." in t:
                t = t.rsplit(".", 1)[0]
            if t in mods and t != name and t.startswith("distla"):
                found.add(t)
    return found


def _layer(name: str) -> int:
    best = max((k for k in LAYERS if name == k or name.startswith(k + ".")), key=len)
    return LAYERS[best]


GRAPH = {m: _imports(m, p, _modules()) for m, p in _modules().items()}


def test_every_module_has_a_layer():
    missing = [m for m in GRAPH if not any(m == k or m.startswith(k + ".") for k in LAYERS
                                           if k != "distla") and m != "distla"]
    assert not missing, f"add these modules to LAYERS (and DESIGN.md): {missing}"


@pytest.mark.parametrize("mod", sorted(GRAPH))
def test_imports_go_down(mod):
    up = sorted(d for d in GRAPH[mod] if _layer(d) > _layer(mod))
    assert not up, f"{mod} (layer {_layer(mod)}) imports higher layers: " + ", ".join(
        f"{d} ({_layer(d)})" for d in up)


def test_no_import_cycles():
    state, stack, cycles = {}, [], []

    def visit(v):
        state[v] = 1
        stack.append(v)
        for w in sorted(GRAPH[v]):
            if state.get(w) == 1:
                cycles.append(stack[stack.index(w):] + [w])
            elif w not in state:
                visit(w)
        stack.pop()
        state[v] = 2
    for v in sorted(GRAPH):
        if v not in state:
            visit(v)
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_the_checker_sees_function_local_imports(tmp_path):
    """The walk covers imports inside functions (the way cycles used to hide)."""
    assert "distla.pblas" in GRAPH["distla"]
    assert "distla.device" in GRAPH["distla.comm"]
    src = tmp_path / "m.py"
    src.write_text("def f():\n    from .matrix import DistMatrix\n")
    assert _imports("distla.x", src, _modules()) == {"distla.matrix"}
