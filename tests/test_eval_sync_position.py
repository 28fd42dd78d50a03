"""An evaluation loop over test batches that the join makes a step loop (its model run
through a wrapper of a module-level model, dlrm's ``inference()``) is an evaluation loop, not
a sampling loop, and tiered as one (a sync there is low); of a synchronize and a read right
after it the pair waits once: the synchronize keeps its tier, the read is low (fixtures/projects/evalsync)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import assert_markers_hold, copied_project

from torchlint.config import from_table
from torchlint.engine import lint_paths


@pytest.fixture
def findings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    root = copied_project("evalsync", tmp_path)
    monkeypatch.chdir(root)
    result = lint_paths([Path(".")], from_table({"select": ["TL102", "TL103"], "min-impact": "low"}, root))
    assert not result.errors
    return root, result.findings


def test_findings_match_the_markers(findings) -> None:  # type: ignore[no-untyped-def]
    assert_markers_hold(*findings)


def test_the_test_batches_loop_is_an_evaluation_loop(findings) -> None:  # type: ignore[no-untyped-def]
    evaluation = [f for f in findings[1] if f.line in (21, 22)]
    assert len(evaluation) == 2 and all("in an evaluation loop" in f.message for f in evaluation)


def test_of_a_sync_and_the_read_after_it_one_wait_keeps_its_tier(findings) -> None:  # type: ignore[no-untyped-def]
    # (the pair waits once: the synchronize at the step's end is medium, the read after it low)
    training = sorted((f.line, f.code, f.impact) for f in findings[1] if f.line > 31)
    assert training == [(38, "TL103", "medium"), (39, "TL102", "low")]
