"""A model built by a classmethod (``cls(...)``, through another classmethod, returned in a
tuple: Speech-Transformer's ``model, a, b = Transformer.load_model(path)``) is followed: its
``recognize(x)``, called once per utterance, runs every step of that loop
(fixtures/projects/classbuilt)."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest
from conftest import assert_markers_hold, checked_here, project_findings

from torchlint.analysis.context import FileContext
from torchlint.analysis.steps import StepSummarizer
from torchlint.findings import Location


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return checked_here("classbuilt", tmp_path, monkeypatch)


def _findings(root: Path):  # type: ignore[no-untyped-def]
    return project_findings(root)


def test_findings_match_the_markers(project: Path) -> None:
    assert_markers_hold(project, _findings(project))


def test_the_per_utterance_read_names_the_recognize_call(project: Path) -> None:
    read = next(f for f in _findings(project) if f.code == "TL105")
    assert "`Recognizer.recognize()`" in read.message and "sampling loop" in read.message


def _returns(source: str) -> dict:  # type: ignore[type-arg]
    ctx = FileContext(cst.parse_module(source), "m.py")
    summarizer = StepSummarizer(ctx)
    return dict(summarizer.summary("m.py", lambda node: Location("m.py", 1, 1)).returns)


def test_cls_is_the_class_only_in_a_classmethod() -> None:
    source = ("class A:\n    @classmethod\n    def build(cls):\n        return cls()\n\n"
              "    @staticmethod\n    def other(cls):\n        return cls()\n")
    returns = _returns(source)
    assert returns["A.build"] == (("local", "A"),)
    assert "A.other" not in returns  # a staticmethod's parameter named `cls` is whatever its callers pass
