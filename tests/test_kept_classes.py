"""An object built by calling the class another attribute keeps (``self.policy = self.policy_class(...)``,
stable-baselines3's algorithms) is the class its annotation names (``policy: ActorCriticPolicy``): the
step reaches that class's methods and the distributions they build (fixtures/projects/kept_classes)."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest
from conftest import FIXTURES, assert_markers_hold, checked_here, project_findings

from torchlint.analysis.context import FileContext
from torchlint.analysis.steps import StepSummarizer


def test_findings_match_the_markers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = checked_here("kept_classes", tmp_path, monkeypatch)
    assert_markers_hold(root, project_findings(root, "TL107"))


def _attributes(name: str) -> dict[str, tuple]:  # type: ignore[type-arg]
    source = (FIXTURES / "projects" / "kept_classes" / "algorithm.py").read_text()
    summary = StepSummarizer(FileContext(cst.parse_module(source), "algorithm.py")).summary("algorithm.py", lambda node: None)  # type: ignore[arg-type,return-value]
    return dict(next(c for c in summary.classes if c.key == name).attributes)


def test_a_class_kept_in_an_attribute_is_the_annotated_class() -> None:
    assert _attributes("Algorithm")["policy"] == ("import", 0, "heads.Policy")


def test_a_method_of_the_class_that_builds_the_object_keeps_its_own_answer() -> None:
    assert _attributes("QuietAlgorithm")["policy"] == ("returned", ("method", "QuietAlgorithm", "build_policy"), None)
