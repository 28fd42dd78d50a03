"""A method handed to a project function that calls it (dreamerv3's ``static_scan(lambda prev, inp:
self.obs_step(...), ...)`` and ``static_scan(self.img_step, ...)``): a loop in the helper calling its
own parameter is a repeat within the caller's step, so what the method does runs once per iteration
(high); a helper calling it once, in no loop, runs it once per step (medium) (fixtures/projects/scans,
issue 32)."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest
from conftest import assert_markers_hold, checked_here, project_findings

from torchlint.analysis.context import FileContext
from torchlint.analysis.steps import StepSummarizer


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return checked_here("scans", tmp_path, monkeypatch)


def test_findings_match_the_markers(project: Path) -> None:
    assert_markers_hold(project, project_findings(project, "TL107"))


def test_a_lambda_and_a_bound_method_hand_the_method_they_call(project: Path) -> None:
    path = project / "model.py"
    summary = StepSummarizer(FileContext(cst.parse_module(path.read_text()), str(path))).summary(str(path), lambda node: None)  # type: ignore[arg-type,return-value]
    handed = {call.caller: dict(call.args).get(0) for call in summary.calls if str(call.target[-1]).endswith(("static_scan", "apply_once"))}
    assert handed == {"RSSM.observe": ("local", "RSSM.obs_step"), "RSSM.imagine": ("local", "RSSM.img_step"),
                      "RSSM.start": ("local", "RSSM.first_step")}


def test_the_scan_reaches_each_time_step(project: Path) -> None:
    by_line = {f.line: f for f in project_findings(project, "TL107")}
    assert "per iteration" in by_line[27].message and "`static_scan()`" in by_line[27].message
    assert "per iteration" not in by_line[37].message  # `apply_once` calls it once


def test_a_model_handed_to_an_evaluation_helper_is_no_scan(project: Path) -> None:
    # (a loop over `tqdm(loader)` calling the model its caller hands it: each iteration a batch of the evaluation)
    found = [f for f in project_findings(project, "TL107") if f.path.endswith("evaluate.py")]
    assert len(found) == 1 and "from an evaluation loop at line 20" in found[0].message
