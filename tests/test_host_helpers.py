"""A tensor another file's helper builds on the host, moved by its caller per step, is TL110's
(``FileSummary.host_helpers``, ``project_callees.builds_on_host``): not where the helper builds on the
device, nor where the call passes the device its CPU-default parameter takes
(fixtures/projects/host_helpers: wenet's ``subsequent_mask(i).to(device)``)."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest
from conftest import assert_markers_hold, checked_here

from torchlint.analysis.context import FileContext
from torchlint.analysis.steps import StepSummarizer
from torchlint.config import from_table
from torchlint.engine import lint_paths


def test_moves_of_other_files_host_helpers_are_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = checked_here("host_helpers", tmp_path, monkeypatch)
    findings = lint_paths([Path(".")], from_table({"select": ["TL110"]}, root)).findings
    assert_markers_hold(root, findings)


def test_the_summary_names_the_host_helpers_and_their_device_parameter() -> None:
    source = (Path(__file__).parent.parent / "fixtures/projects/host_helpers/masks.py").read_text()
    ctx = FileContext(cst.parse_module(source), "masks.py")
    summary = StepSummarizer(ctx).summary("masks.py", lambda node: None)  # type: ignore[arg-type,return-value]
    assert set(summary.host_helpers) == {("causal_mask", "device", 1), ("pad_row", "", -1), ("range_mask", "device", 1)}
