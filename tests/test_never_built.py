"""A class no code of an application builds, imports or names (deit's `hMLP_stem`) is dead code
there: its per-step findings are low and say so (``FileSummary.unnamed``, ``join_params.never_built``);
a class named only as a default value, imported by another file, named in a string, in a library
(no file trains or samples), or in a project that builds classes from names keeps its tier
(fixtures/projects/never_built)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import assert_markers_hold, copied_project

from torchlint.config import from_table
from torchlint.engine import lint_paths


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = copied_project("never_built", tmp_path)
    monkeypatch.chdir(root)
    return root


def _tiers(root: Path) -> dict[str, str]:
    """The impact of each finding by the class whose method holds it."""
    findings = lint_paths([Path(".")], from_table({}, root)).findings
    return {f.message.split("`")[3].split(".")[0]: f.impact for f in findings if f.path == "zoo.py"}


def test_project_findings_match_markers(project: Path) -> None:
    assert_markers_hold(project, lint_paths([Path(".")], from_table({}, project)).findings)


def test_the_message_says_the_class_is_never_built(project: Path) -> None:
    spare = [f for f in lint_paths([Path(".")], from_table({}, project)).findings if "SpareHead" in f.message]
    assert len(spare) == 1 and "`SpareHead` is never built in this project" in spare[0].message


@pytest.mark.parametrize("name, text", [
    ("use.py", "from zoo import SpareHead, SpareAttention\n"),  # imported: another file may build it
    ("registry.py", "import importlib\n\n\ndef build(name):\n    return getattr(importlib.import_module('zoo'), name)(64)\n"),
    ("star.py", "from zoo import *\n"),
])
def test_a_class_another_file_may_build_keeps_its_tier(project: Path, name: str, text: str) -> None:
    (project / name).write_text(text)
    tiers = _tiers(project)
    assert (tiers["SpareHead"], tiers["SpareAttention"]) == ("medium", "high")


def test_a_class_its_file_names_in_a_string_keeps_its_tier(project: Path) -> None:
    zoo = project / "zoo.py"
    zoo.write_text(zoo.read_text() + '\n\n__all__ = ["Net", "SpareHead"]\n')
    tiers = _tiers(project)
    assert (tiers["SpareHead"], tiers["SpareAttention"]) == ("medium", "low")


def test_a_library_keeps_its_tier(project: Path) -> None:
    (project / "train.py").unlink()  # no file trains or samples: the classes are its users' to build
    tiers = _tiers(project)
    assert (tiers["SpareHead"], tiers["SpareAttention"]) == ("medium", "high")
