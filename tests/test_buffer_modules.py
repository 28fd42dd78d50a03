"""TL301 and a module that registers buffers and no weights (rl_games' ``RunningMeanStd``, review 16):
called in eval mode on tensors made without grad, it records no graph, so the join drops the finding
where the module's class, another file's, keeps buffers only (``ClassSummary.weights`` ``BUFFERS``).
Near misses stay: a subclass adding a layer, a buffer beside an ``nn.Parameter``, buffers and a module
it is handed and runs, a library's normalizer, an attribute that may be either class
(fixtures/projects/buffers, issue 32)."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest
from conftest import assert_markers_hold, checked_here, project_findings

from torchlint.analysis.context import FileContext
from torchlint.analysis.steps import StepSummarizer
from torchlint.analysis.weight_kinds import BUFFERS


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return checked_here("buffers", tmp_path, monkeypatch)


def test_findings_match_the_markers(project: Path) -> None:
    assert_markers_hold(project, project_findings(project))


def test_only_the_running_statistics_keep_buffers_only(project: Path) -> None:
    path = project / "normalizers.py"
    ctx = FileContext(cst.parse_module(path.read_text()), str(path))
    summary = StepSummarizer(ctx).summary(str(path), lambda node: None)  # type: ignore[arg-type,return-value]
    weights = {cls.key: cls.weights for cls in summary.classes}
    assert weights["RunningMeanStd"] == BUFFERS
    assert weights["ScaledMeanStd"] != BUFFERS and weights["LearnedShift"] != BUFFERS and weights["HandedNorm"] != BUFFERS


def test_the_caller_alone_keeps_its_findings(project: Path) -> None:
    """Without the normalizers' file the join cannot see the class: the findings stay."""
    text = (project / "agent.py").read_text().splitlines()
    quiet = {number for number, line in enumerate(text, 1) if "= self.value_norm(" in line or "= stats(" in line}
    assert len(quiet) == 3 and not quiet & {f.line for f in project_findings(project, "TL301")}
    (project / "normalizers.py").unlink()
    assert quiet.issubset({f.line for f in project_findings(project, "TL301")})


def test_a_copied_attribute_is_looked_up_where_it_is_kept(project: Path) -> None:
    """``self.value_stats`` of a base class, set by a subclass in another file as a copy of a critic's:
    quiet while the critic's class keeps running statistics; flagged once the copy is of a library model's."""
    line = next(n for n, text in enumerate((project / "learner_base.py").read_text().splitlines(), 1) if "= self.value_stats(" in text)
    assert line not in {f.line for f in project_findings(project, "TL301") if f.location.path.endswith("learner_base.py")}
    learner = project / "learner.py"
    learner.write_text(learner.read_text().replace("self.central.value_stats if central else self.critic.value_stats",
                                                   "self.critic.value_stats if central else self.backbone.value_stats"))
    assert line in {f.line for f in project_findings(project, "TL301") if f.location.path.endswith("learner_base.py")}
