"""What torch.compile traces, across a project (analysis/compiled_roots.py,
analysis/compiled_reach.py) and TL504 on it: a model compiled in the training script
whose submodules, in a package, break the graph in their own forward and in a helper
of a third module; a disabled helper and methods forward never calls stay quiet."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conftest import FIXTURES, expected_markers
from torchlint.analysis.compiled_reach import CompiledInfo
from torchlint.config import from_table
from torchlint.engine import lint_paths

PROJECT = FIXTURES / "projects" / "compiled"


@pytest.fixture()
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    copy = tmp_path / "compiled"
    shutil.copytree(PROJECT, copy)
    monkeypatch.chdir(copy)
    return copy


def test_project_findings_match_markers(root: Path) -> None:
    result = lint_paths([Path(".")], from_table({"select": ["TL504"]}, root))
    actual = {(Path(f.path).as_posix(), f.line, f.code) for f in result.findings}
    expected = {(p.relative_to(root).as_posix(), line, code) for p in sorted(root.rglob("*.py"))
                for line, code in expected_markers(p.read_text())}
    assert actual == expected and expected
    assert not result.errors
    (finding,) = result.findings
    assert "`Layer.forward()` (called from `Encoder.forward()`, compiled by `torch.compile(model)` in train.py)" in finding.message
    assert finding.impact == "high"  # the compiled model runs every step of a training loop


def test_without_the_compiling_script_nothing_is_traced(root: Path) -> None:
    """The same package checked alone: nothing compiles it, so nothing breaks a graph."""
    result = lint_paths([root / "nets"], from_table({"select": ["TL504"]}, root))
    assert not result.findings and not result.errors


def test_the_text_names_the_chain() -> None:
    root = CompiledInfo("Net.forward", "`@torch.compile` in a.py")
    assert root.text("Net.forward") == "`Net.forward()` (compiled by `@torch.compile` in a.py)"
    deep = CompiledInfo("Net.forward", "`torch.compile(model)` in a.py", "Block.forward")
    assert deep.text("helper") == "`helper()` (called from `Block.forward()`, traced from `Net.forward()`, compiled by `torch.compile(model)` in a.py)"
