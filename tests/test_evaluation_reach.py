"""An evaluation of the file that a training loop calls on every iteration (ogb's full-batch
``loss = train(...)`` then ``result = test(...)``, ``CallSite.evaluates``) runs what it calls once
per evaluation, tiered as an evaluation's: its evaluator's copies for a NumPy metric are low, while
a helper the training step itself calls keeps the step's tier (fixtures/projects/evalcall)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import assert_markers_hold, copied_project

from torchlint.config import from_table
from torchlint.engine import lint_paths


def _findings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, edits: dict[str, tuple[str, str]] | None = None):  # type: ignore[no-untyped-def]
    root = copied_project("evalcall", tmp_path, edits)
    monkeypatch.chdir(root)
    result = lint_paths([Path(".")], from_table({"select": ["TL102"], "min-impact": "low"}, root))
    assert not result.errors
    return root, result.findings


def test_findings_match_the_markers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert_markers_hold(*_findings(tmp_path, monkeypatch))


def test_the_evaluators_copy_says_once_per_evaluation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, findings = _findings(tmp_path, monkeypatch)
    copy = next(f for f in findings if f.line == 10)
    assert "run once per evaluation from an evaluation called on every iteration of a training loop" in copy.message
    assert copy.message.endswith("waits for it once per evaluation")


def test_an_evaluation_that_trains_is_a_training_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # (a `test()` that also steps the optimizer is no evaluation: its evaluator's copies are the step's)
    edits = {"fullbatch.py": ('    return evaluator.eval({"y_true": y, "y_pred": y_pred})["acc"]',
                              '    optimizer.step()\n    return evaluator.eval({"y_true": y, "y_pred": y_pred})["acc"]')}
    _, findings = _findings(tmp_path, monkeypatch, edits)
    assert {f.line: f.impact for f in findings if f.path.endswith("metrics.py")} == {10: "medium", 12: "medium", 17: "medium"}
