"""A package vendored into a project (nested in one of its packages, calling nothing of the project
outside itself, called into from outside) whose decode loop no code of the project reaches: what
that loop runs is low, its words saying so (``SettingDefaults.uncalled_vendored``;
fixtures/projects/vendored: the project runs a recogniser's encoder, never its ``decode()``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import assert_markers_hold, checked_here, project_findings


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return checked_here("vendored", tmp_path, monkeypatch)


def _read(root: Path) -> tuple[str, str]:
    found = [f for f in project_findings(root, "TL101") if f.path.endswith("decoding.py") and f.line == 12]
    assert len(found) == 1
    return found[0].impact, found[0].impact_reason


def test_findings_match_the_markers(project: Path) -> None:
    assert_markers_hold(project, project_findings(project))
    assert "no code of this project calls it" in _read(project)[1]


def test_a_script_calling_decode_keeps_it(project: Path) -> None:
    (project / "transcribe.py").write_text(
        "from app.asr.decoding import decode\nfrom app.asr.model import Recogniser\n\n\n"
        "def transcribe(mels):\n    model = Recogniser().cuda()\n    return [decode(model, mel) for mel in mels]\n")
    assert _read(project)[0] == "medium"


def test_a_call_of_the_bound_method_keeps_it(project: Path) -> None:
    features = project / "app" / "features.py"
    features.write_text(features.read_text() + "\n    def transcribe(self, mel):\n        return self.model.decode(mel.to(self.device))\n")
    assert _read(project)[0] == "medium"


def test_a_library_at_the_top_of_its_project_keeps_it(project: Path) -> None:
    (project / "app" / "__init__.py").unlink()  # `app/asr` is no package nested in another: a library's own
    assert _read(project)[0] == "medium"


def test_a_package_using_the_project_is_no_copy(project: Path) -> None:
    (project / "app" / "tools.py").write_text("def log(value):\n    print(value.shape)\n")
    decoding = project / "app" / "asr" / "decoding.py"
    decoding.write_text(decoding.read_text().replace("features = self.model.encoder(mel)", "log(mel)\n        features = self.model.encoder(mel)")
                        + "\n\nfrom app.tools import log\n")
    assert _read(project)[0] == "medium"
