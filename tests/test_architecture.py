"""Import directions between torchlint's parts (docs/architecture.md), and torch stays out
of the static half."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from conftest import ROOT

PACKAGE = ROOT / "torchlint"

# part -> parts it may import (besides itself). `cli` may import anything.
ALLOWED = {
    "findings": set(),
    "savings": set(),
    "config": set(),
    "analysis": {"findings"},
    "checks": {"analysis", "findings"},
    "engine": {"checks", "analysis", "findings", "config", "catalogue"},
    "catalogue": {"checks", "findings"},
    "profiler": {"findings", "profiler", "savings"},
    "correlate": {"findings", "profiler", "savings"},
    "estimate": {"findings", "profiler", "savings", "correlate"},
    "experiment": {"findings", "profiler", "savings", "correlate", "estimate", "engine", "config"},
    "report": {"findings", "correlate", "profiler", "catalogue", "savings", "estimate", "experiment"},
}
# The `profile` command is a CLI module that lives beside the profiler it drives.
CLI_MODULES = {"cli", "cli_check", "server", "__main__", "__init__", "profiler.command", "profiler.command_ranks"}


def _part(module: str) -> str:
    return module.split(".")[0]


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names if node.module == "torchlint")
    return found


MODULES = sorted(PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_import_directions(path: Path) -> None:
    dotted = ".".join(path.relative_to(PACKAGE).with_suffix("").parts)
    if dotted in CLI_MODULES or dotted.endswith("__init__") and dotted.count(".") == 0:
        return
    part = _part(dotted)
    allowed = ALLOWED[part] | {part}
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
