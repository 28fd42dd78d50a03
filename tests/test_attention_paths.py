"""TL405 in a module built only off its constructor's default path (``if attention_type ==
"flash": Fused() else: Legacy()`` with ``attention_type="flash"``) is low, and says so; in a
module whose only builder no code of the project builds, where a step reaches the file, it is
quiet; a module built on the default path keeps its tier (fixtures/projects/attention_paths)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import assert_markers_hold, checked_here, project_findings



@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return checked_here("attention_paths", tmp_path, monkeypatch)


def _findings(root: Path):  # type: ignore[no-untyped-def]
    return project_findings(root, "TL405")


def test_findings_match_the_markers(project: Path) -> None:
    assert_markers_hold(project, _findings(project))


def test_the_off_default_path_is_named(project: Path) -> None:
    legacy = next(f for f in _findings(project) if "LegacyAttention" in f.message)
    assert "built with `attention_type` other than its default" in legacy.message


def test_a_builder_built_somewhere_reports_its_attention(project: Path) -> None:
    model = project / "model.py"
    model.write_text(model.read_text().replace("return [AttentionBlock(), OtherBlock()]", "return [AttentionBlock(), OtherBlock(), AttentionPool()]"))
    assert any("PoolAttention" in f.message and f.impact == "high" for f in _findings(project))


def test_a_project_that_builds_classes_from_names_may_build_any(project: Path) -> None:
    (project / "configs.py").write_text("import importlib\n\n\ndef build(target):\n    module, name = target.rsplit('.', 1)\n"
                                        "    return getattr(importlib.import_module(module), name)()\n")
    assert any("PoolAttention" in f.message and f.impact == "high" for f in _findings(project))
