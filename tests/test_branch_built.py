"""A module chosen by a string the project never passes (stylegan2-pytorch's bundled LPIPS): `self.net`
is an `L2()` only under `elif self.model in ["L2", "l2"]:`, and the one construction passes
`model="net-lin"`, so what `L2.forward()` runs is low, saying why (fixtures/projects/branch_built)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import assert_markers_hold, checked_here, project_findings


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return checked_here("branch_built", tmp_path, monkeypatch)


def _copies(project: Path) -> dict[str, tuple[str, str]]:
    return {Path(f.path).name: (f.impact.value if hasattr(f.impact, "value") else str(f.impact), f.impact_reason)
            for f in project_findings(project, "TL102")}


def _construction(project: Path, old: str, new: str) -> None:
    projector = project / "projector.py"
    text = projector.read_text()
    assert old in text
    projector.write_text(text.replace(old, new))


def test_the_findings_match_the_markers(project: Path) -> None:
    assert_markers_hold(project, project_findings(project, "TL102"))


def test_the_words_name_the_branch_and_the_value_passed(project: Path) -> None:
    _, reason = _copies(project)["__init__.py"]
    assert "only when `model in ('L2', 'l2')`" in reason and "`DistModel.initialize()`" in reason
    assert "only that branch builds the object it runs" in reason


def test_a_value_read_from_the_command_line_keeps_every_branch(project: Path) -> None:
    _construction(project, 'percept = perceptual.PerceptualLoss(model="net-lin", use_gpu=True)',
                  'import sys\npercept = perceptual.PerceptualLoss(model=sys.argv[1], use_gpu=True)')
    assert {name: impact for name, (impact, _) in _copies(project).items()} == {"__init__.py": "medium", "networks.py": "medium"}


def test_the_default_left_is_the_value_the_branch_tests(project: Path) -> None:
    _construction(project, 'PerceptualLoss(model="net-lin", use_gpu=True)', "PerceptualLoss(use_gpu=True)")
    assert {name: impact for name, (impact, _) in _copies(project).items()} == {"__init__.py": "low", "networks.py": "low"}


def test_the_branch_the_project_takes_still_fires(project: Path) -> None:
    _construction(project, 'model="net-lin"', 'model="l2"')
    assert {name: impact for name, (impact, _) in _copies(project).items()} == {"__init__.py": "medium", "networks.py": "low"}


def test_a_class_two_branches_build_runs_whichever_is_taken(project: Path) -> None:
    dist = project / "perceptual" / "dist_model.py"
    dist.write_text(dist.read_text().replace("self.net = networks.PNetLin(lpips=False)", "self.net = networks.DSSIM()"))
    assert _copies(project)["networks.py"][0] == "medium"
