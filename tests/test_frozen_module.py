"""TL308 and TL309 across files: a network built from a class of another module of the project
(a star import, as PyTorch-GAN's esrgan does) is flagged only where that class keeps trainable
weights and never freezes them; the join reads the class's summary (``ClassSummary.weights``)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conftest import FIXTURES, expected_impacts, expected_markers
from torchlint.config import from_table
from torchlint.engine import lint_paths

PROJECT = FIXTURES / "projects" / "frozen"


def _lint(root: Path, cache: Path | None = None):  # type: ignore[no-untyped-def]
    result = lint_paths([root], from_table({"select": ["TL308", "TL309"], "min-impact": "low"}, root), cache=cache)
    assert not result.errors
    return result.findings


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "frozen"
    shutil.copytree(PROJECT, root)
    return root


def test_only_the_unfrozen_class_of_another_file_is_flagged(project: Path) -> None:
    findings = _lint(project)
    for script in ("train.py", "finetune.py"):  # a star import, and names imported one by one
        text = (project / script).read_text()
        assert {(f.line, f.code) for f in findings if f.location.path.endswith(script)} == expected_markers(text), script
        assert {(f.line, f.code): f.impact for f in findings if f.location.path.endswith(script)} == expected_impacts(text), script
    assert not [f for f in findings if f.location.path.endswith("models.py")]
    assert "`features.requires_grad_(False)`" in next(f for f in findings if f.code == "TL308" and f.path.endswith("train.py")).fix_hint


def test_a_class_that_freezes_itself_in_its_own_file_is_not_flagged(project: Path) -> None:
    models = project / "models.py"
    models.write_text(models.read_text().replace(
        "        self.layers = nn.Sequential(*list(backbone.features.children())[:35])\n",
        "        self.layers = nn.Sequential(*list(backbone.features.children())[:35])\n"
        "        for p in self.layers.parameters():\n            p.requires_grad = False\n"))
    # (only the critic, a plain class of conv layers, is left: medium, not a backbone's high)
    assert [(f.location.path.rsplit("/", 1)[-1], f.code, f.impact) for f in _lint(project)] == [("train.py", "TL308", "medium")]


def test_the_cached_results_settle_the_same(project: Path, tmp_path: Path) -> None:
    first = _lint(project, tmp_path / "cache")
    again = _lint(project, tmp_path / "cache")
    assert [(f.line, f.impact, f.message) for f in first] == [(f.line, f.impact, f.message) for f in again]
    assert len(first) == 4
    assert sorted(f.impact for f in first) == ["high", "high", "low", "medium"]  # the backbone's tier survives the cache
