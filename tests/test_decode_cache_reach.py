"""TL407 across files: a decode loop that gives a model of another file its whole growing
sequence is reported where that class keeps no cache, and quiet where the method it runs
takes one (``past``, ``start_pos``) or the class, or a project base of it, keeps one on
``self`` (fixtures/projects/decoders)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import assert_markers_hold, checked_here, project_findings


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return checked_here("decoders", tmp_path, monkeypatch)


def _lines(root: Path) -> set[int]:
    return {f.line for f in project_findings(root, "TL407")}


def test_findings_match_the_markers(project: Path) -> None:
    assert_markers_hold(project, project_findings(project, "TL407"))


def test_a_cache_the_other_file_adds_silences_it(project: Path) -> None:
    models = project / "models.py"
    models.write_text(models.read_text().replace("def step(self, ys, memory):", "def step(self, ys, memory, kv_cache=None):"))
    assert 17 not in _lines(project) and 49 in _lines(project)


def test_a_cache_the_other_file_drops_is_reported(project: Path) -> None:
    models = project / "models.py"
    text = models.read_text().replace("def forward(self, ys, memory, past=None):", "def forward(self, ys, memory):")
    models.write_text(text.replace("ys if past is None else ys[:, -1:]", "ys"))
    assert 25 in _lines(project)


def test_the_base_class_keeping_no_cache_is_reported(project: Path) -> None:
    models = project / "models.py"
    models.write_text(models.read_text().replace("self.kv_cache = torch.zeros(1, max_len, dim)", "self.buffer = torch.zeros(1, max_len, dim)"))
    assert 58 in _lines(project)


def test_a_cache_installed_as_one_of_two_targets_counts(project: Path) -> None:
    models = project / "models.py"
    models.write_text(models.read_text().replace("self.kv_cache, self.hooks =", "self.store, self.hooks ="))
    assert 41 in _lines(project)
