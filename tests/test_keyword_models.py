"""A decode loop's model the file cannot name (bark: ``model = load_model()["model"]``, out of a
module's table of loaded models) is the ``forward`` of the project's module class taking every
keyword the call gives (``Project.forwards_taking``): its attention's cache grown by ``torch.cat``
is reported per block per decoded token (fixtures/projects/keyword_models), and not where the
keywords name no class, or where the loop is no decode loop."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import assert_markers_hold, checked_here, project_findings


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return checked_here("keyword_models", tmp_path, monkeypatch)


def test_findings_match_the_markers(project: Path) -> None:
    assert_markers_hold(project, project_findings(project, "TL408"))


def test_a_keyword_no_forward_takes_names_no_class(project: Path) -> None:
    generation = project / "tts" / "generation.py"
    generation.write_text(generation.read_text().replace("merge_context=True", "temperature=0.7"))
    assert not project_findings(project, "TL408")


def test_a_call_outside_a_decode_loop_is_not_taken_for_the_model(project: Path) -> None:
    generation = project / "tts" / "generation.py"
    generation.write_text(generation.read_text().replace("    for n in range(n_tot_steps):\n", "    if n_tot_steps:\n"))
    assert not project_findings(project, "TL408")
