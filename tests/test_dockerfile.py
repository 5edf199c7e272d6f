"""The Dockerfile parses and names the expected stages.

A static check; tests/integration/containers.sh builds and runs the images in CI, outside the
unit suite. Instructions are valid Dockerfile keywords, every stage is ``FROM ... AS name`` with
a unique name, ``COPY --from`` names an earlier stage, the sources copied exist, the base images
are build arguments, and the CPU / GPU targets install what they should (MPICH wheel; CUDA base
+ mpi4py built against the image's MPI + CuPy).
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
KEYWORDS = {"FROM", "RUN", "CMD", "LABEL", "MAINTAINER", "EXPOSE", "ENV", "ADD", "COPY",
            "ENTRYPOINT", "VOLUME", "USER", "WORKDIR", "ARG", "ONBUILD", "STOPSIGNAL",
            "HEALTHCHECK", "SHELL"}


def parse(text: str) -> list[tuple[int, str, str]]:
    """(line number, INSTRUCTION, arguments) with continuations joined and comments dropped;
    raises ValueError on a malformed line."""
    out, buf, start = [], "", 0
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not buf and (not line or line.startswith("#")):
            continue
        if buf and line.startswith("#"):  # comment lines inside a continuation are skipped
            continue
        if not buf:
            start = no
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        m = re.match(r"^([A-Za-z]+)(\s+(.*))?$", buf)
        if not m:
            raise ValueError(f"line {start}: cannot parse {buf!r}")
        out.append((start, m.group(1).upper(), (m.group(3) or "").strip()))
        buf = ""
    if buf:
        raise ValueError(f"line {start}: unterminated continuation")
    return out


def stages(instrs):
    """{name: {"base": image, "instrs": [(kw, args)]}} in order, plus global ARG defaults."""
    args, st, cur = {}, {}, None
    for no, kw, rest in instrs:
        if kw == "FROM":
            m = re.match(r"^(--platform=\S+\s+)?(\S+)(\s+AS\s+(\S+))?$", rest, re.I)
            assert m, f"line {no}: malformed FROM {rest!r}"
            assert m.group(4), f"line {no}: every stage must be named (FROM ... AS name)"
            name = m.group(4).lower()
            assert name not in st, f"line {no}: stage {name!r} defined twice"
            base = re.sub(r"\$\{(\w+)\}|\$(\w+)",
                          lambda v: args.get(v.group(1) or v.group(2), v.group(0)),
                          m.group(2))
            cur = st[name] = {"base": base, "instrs": [], "line": no}
        elif cur is None:
            assert kw == "ARG", f"line {no}: only ARG may come before the first FROM"
            k, _, v = rest.partition("=")
            args[k.strip()] = v.strip()
        else:
            cur["instrs"].append((kw, rest))
    return st


@pytest.fixture(scope="module")
def dockerfile():
    path = ROOT / "Dockerfile"
    assert path.exists(), "Dockerfile missing at the repository root"
    return path.read_text()


def test_instructions_are_valid(dockerfile):
    instrs = parse(dockerfile)
    assert instrs, "empty Dockerfile"
    bad = [(no, kw) for no, kw, _ in instrs if kw not in KEYWORDS]
    assert not bad, f"unknown instructions: {bad}"
    for no, kw, rest in instrs:
        assert rest, f"line {no}: {kw} without arguments"


def test_stages(dockerfile):
    st = stages(parse(dockerfile))
    assert {"cpu", "gpu"} <= set(st), f"stages: {list(st)}"
    names = list(st)
    for i, (name, s) in enumerate(st.items()):
        for kw, rest in s["instrs"]:
            m = re.search(r"--from=(\S+)", rest)
            if kw == "COPY" and m:
                assert m.group(1).lower() in names[:i], \
                    f"stage {name}: COPY --from={m.group(1)} is not an earlier stage"
        if s["base"] in st:
            assert names.index(s["base"]) < i


def test_cpu_target(dockerfile):
    s = stages(parse(dockerfile))["cpu"]
    assert re.match(r"python:[\w.]+-slim", s["base"]), s["base"]
    runs = " ".join(r for kw, r in s["instrs"] if kw == "RUN")
    assert "[mpi]" in runs  # the MPICH wheel: no system MPI needed
    assert any(kw == "CMD" for kw, _ in s["instrs"])


def test_gpu_target(dockerfile):
    st = stages(parse(dockerfile))
    gpu = st["gpu"]
    assert gpu["base"].startswith("nvidia/cuda:") and "runtime" in gpu["base"], gpu["base"]
    everything = " ".join(r for s in st.values() if s["base"].startswith("nvidia/cuda:")
                          for kw, r in s["instrs"])
    assert "--no-binary=mpi4py" in everything  # built against the image's MPI
    assert "openmpi" in everything and "[gpu]" in everything
    env = " ".join(r for kw, r in gpu["instrs"] if kw == "ENV")
    assert "NCCL_NVLS_ENABLE=0" in env


def test_buildable_offline(dockerfile):
    """No `# syntax=` directive (BuildKit would fetch a frontend from the network) and the base
    images are build arguments, so a local base can stand in for a registry's."""
    assert not re.search(r"^#\s*syntax\s*=", dockerfile, re.M | re.I)
    froms = {m.group(2).lower(): m.group(1)
             for m in re.finditer(r"^FROM\s+(\S+)\s+AS\s+(\S+)", dockerfile, re.M | re.I)}
    head = dockerfile[:dockerfile.index("\nFROM")]
    for stage, arg in (("cpu", "CPU_IMAGE"), ("gpu", "CUDA_IMAGE"), ("gpu-build", "CUDA_IMAGE")):
        assert froms[stage] == "${%s}" % arg, (stage, froms[stage])
        assert re.search(rf"^ARG {arg}=\S+", head, re.M), f"ARG {arg} must come before FROM"
    cpu_env = " ".join(r for kw, r in stages(parse(dockerfile))["cpu"]["instrs"] if kw == "ENV")
    assert "MPIR_CVAR_CH4_CMA_ENABLE=0" in cpu_env  # Docker's seccomp blocks MPICH's CMA


def test_copied_sources_exist(dockerfile):
    for _, kw, rest in parse(dockerfile):
        if kw in ("COPY", "ADD") and "--from=" not in rest:
            *srcs, _dest = [a for a in rest.split() if not a.startswith("--")]
            for src in srcs:
                assert (ROOT / src).exists(), f"{kw} source {src} does not exist"


def test_parser_rejects_garbage():
    with pytest.raises(ValueError):
        parse("FROM x AS a\nRUN echo \\\n")
    with pytest.raises(AssertionError):
        stages(parse("FROM python:3.12-slim\n"))
    with pytest.raises(AssertionError):
        stages(parse("RUN echo\nFROM a AS b\n"))
