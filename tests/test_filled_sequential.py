"""``nn.Sequential(*layers)`` where ``layers`` is appended to in a loop (a glow-style flow
of ActNorm and coupling blocks) runs each block's forward once per iteration: a read in the
block says how many times per step; a list filled without a loop runs each block once
(fixtures/projects/flows)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import assert_markers_hold, copied_project

from torchlint.config import from_table
from torchlint.engine import lint_paths


@pytest.fixture
def findings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    root = copied_project("flows", tmp_path)
    monkeypatch.chdir(root)
    result = lint_paths([Path(".")], from_table({"select": ["TL101"], "min-impact": "low"}, root))
    assert not result.errors
    return root, result.findings


def test_findings_match_the_markers(findings) -> None:  # type: ignore[no-untyped-def]
    assert_markers_hold(*findings)


def test_a_block_appended_in_a_loop_counts_its_iterations(findings) -> None:  # type: ignore[no-untyped-def]
    block = next(f for f in findings[1] if "initialized" in f.message)
    assert "(16 times per step: once in each `ActNorm.forward()`)" in block.message


def test_a_list_filled_without_a_loop_runs_its_block_once(findings) -> None:  # type: ignore[no-untyped-def]
    stem = next(f for f in findings[1] if "self.scale" in f.message)
    assert "times per step" not in stem.message and "once in each" not in stem.message


def test_a_block_appended_in_a_branch_of_the_loop_is_not_counted_per_iteration(findings) -> None:  # type: ignore[no-untyped-def]
    gate = next(f for f in findings[1] if "self.gate" in f.message)
    assert "once in each" not in gate.message
