"""Import directions between torchlint's parts (docs/architecture.md), and torch stays out
of the static half."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

from conftest import ROOT

PACKAGE = ROOT / "torchlint"

# part -> parts it may import (besides itself). `cli` may import anything.
ALLOWED = {
    "findings": set(),
    "savings": set(),
    "config": set(),
    "stopping": set(),
    "filewatch": set(),
    "terminal": set(),
    "analysis": {"findings"},
    "checks": {"analysis", "findings"},
    "engine": {"checks", "analysis", "findings", "config", "catalogue", "terminal", "stopping"},
    "catalogue": {"checks", "findings"},
    "profiler": {"findings", "profiler", "savings", "stopping"},
    "correlate": {"findings", "profiler", "savings"},
    "estimate": {"findings", "profiler", "savings", "correlate"},
    "experiment": {"findings", "profiler", "savings", "correlate", "estimate", "engine", "config", "stopping"},
    "report": {"findings", "correlate", "profiler", "catalogue", "savings", "terminal"},
    "textlines": set(),
}
# Leaf modules every part may import: the one line model of a user's source.
SHARED_LEAVES = {"textlines"}
# The application layer: the commands (cli/) and the Language Server (server/), which drive
# the parts and may import any of them; `profile`'s orchestration lives in cli/, beside
# `check`'s, not inside the collectors. Plus the package's own __init__ and __main__.
APPLICATION = {"cli", "server", "__main__", "__init__"}


def _part(module: str) -> str:
    return module.split(".")[0]


@cache  # each module is asked about by several tests: parsed once a session
def _imports(path: Path) -> frozenset[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names if node.module == "torchlint")
    return frozenset(found)  # (cached: no caller may change it)


MODULES = sorted(PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_import_directions(path: Path) -> None:
    dotted = ".".join(path.relative_to(PACKAGE).with_suffix("").parts)
    part = _part(dotted)
    if part in APPLICATION:
        return
    allowed = ALLOWED[part] | {part} | SHARED_LEAVES
    for name in _imports(path):
        if name.startswith("torchlint."):
            target = _part(name[len("torchlint."):])
            if target in ("__version__",):
                continue
            assert target in allowed, f"{dotted} imports torchlint.{target}"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_torch_is_imported_only_by_the_profiler(path: Path) -> None:
    dotted = ".".join(path.relative_to(PACKAGE).with_suffix("").parts)
    if dotted.startswith("profiler."):
        return
    for name in _imports(path):
        assert name.split(".")[0] not in ("torch", "snakeviz"), f"{dotted} imports {name}"


def _module_graph(package: str) -> dict[str, set[str]]:
    """Module -> the modules of ``package`` it imports (anywhere in it, lazily too)."""
    graph: dict[str, set[str]] = {}
    for path in sorted((PACKAGE / package).glob("*.py")):
        name = f"{package}.{path.stem}"
        graph[name] = {t[len("torchlint."):] for t in _imports(path) if t.startswith(f"torchlint.{package}.")}
    return {m: {d for d in deps if d in graph and d != m} for m, deps in graph.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


@pytest.mark.parametrize("package", ["profiler", "correlate", "experiment", "report"])
def test_no_import_circle_inside_the_runtime_half(package: str) -> None:
    """collect -> session -> join -> estimate / experiment -> render reads one way inside
    each part too (the session's loading, the hotspot index, kineto's settings were the
    seams of the circles there were)."""
    assert _cycles(_module_graph(package)) == []


def test_the_collectors_import_nothing_above_them() -> None:
    """profiler/ holds what collects (and the session data it leaves): nothing in it
    imports the join, the estimates, the experiment, the reports or the commands."""
    above = ("correlate", "estimate", "experiment", "report", "engine", "checks", "analysis", "cli")
    for path in sorted((PACKAGE / "profiler").glob("*.py")):
        for name in _imports(path):
            if name.startswith("torchlint."):
                assert not name[len("torchlint."):].startswith(above), f"profiler/{path.name} imports {name}"
