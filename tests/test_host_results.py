"""A value returned by another file's function that builds it on the host (``torch.tensor(list)``,
no device) is a host tensor: reading it is no wait (``FileSummary.host_results``); one returned
from the device logits is (fixtures/projects/host_returns)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import assert_markers_hold, checked_here

from torchlint.config import from_table
from torchlint.engine import lint_paths


def test_reads_of_host_returns_are_quiet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = checked_here("host_returns", tmp_path, monkeypatch)
    findings = lint_paths([Path(".")], from_table({"select": ["TL101"]}, root)).findings
    assert_markers_hold(root, findings)


def test_the_summary_names_the_host_sampler_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import libcst as cst

    from torchlint.analysis.context import FileContext
    from torchlint.analysis.steps import StepSummarizer

    source = (Path(__file__).parent.parent / "fixtures/projects/host_returns/sampling.py").read_text()
    ctx = FileContext(cst.parse_module(source), "sampling.py")
    summary = StepSummarizer(ctx).summary("sampling.py", lambda node: None)  # type: ignore[arg-type,return-value]
    assert summary.host_results == frozenset({"Sampler.pick_from_list", "ListSampler.pick_from_list"})


def test_a_model_returning_a_list_of_lengths_names_that_element() -> None:
    # `forward` returns `(scores, caps, lengths.tolist(), caplens - 1)`: position 2 is a Python list, 3 a device tensor
    import libcst as cst

    from torchlint.analysis.context import FileContext
    from torchlint.analysis.steps import StepSummarizer

    source = (Path(__file__).parent.parent / "fixtures/projects/host_returns/captioner.py").read_text()
    ctx = FileContext(cst.parse_module(source), "captioner.py")
    summary = StepSummarizer(ctx).summary("captioner.py", lambda node: None)  # type: ignore[arg-type,return-value]
    assert summary.host_returns == (("Captioner.forward", 2),)
