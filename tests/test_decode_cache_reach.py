"""TL407 across files: a decode loop that gives a model of another file its whole growing
sequence is reported where that class keeps no cache, and quiet where the method it runs
must be given one (``past``, ``start_pos`` with no default) or the class, or a project base
of it, keeps one on ``self`` (fixtures/projects/decoders); a cache parameter the call leaves
at its default (``past=None``) runs without one."""

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


def test_a_cache_the_other_file_keeps_silences_it(project: Path) -> None:
    models = project / "models.py"
    models.write_text(models.read_text().replace("return self.forward(ys, memory)[:, -1]",
                                                 "self.kv_cache = self.forward(ys, memory)\n        return self.kv_cache[:, -1]"))
    assert _lines(project) == {25}  # each call of a `Decoder` (held, passed, or by method) goes quiet; the `PastDecoder` stays


def test_a_cache_parameter_the_call_must_fill_silences_it(project: Path) -> None:
    models, search = project / "models.py", project / "search.py"
    models.write_text(models.read_text().replace("def forward(self, ys, memory, past=None):", "def forward(self, ys, memory, past):"))
    search.write_text(search.read_text().replace("self.past(ys, memory)", "self.past(ys, memory, kept)").replace(
        "def greedy_past(self, memory, ys, n):", "def greedy_past(self, memory, ys, n, kept):"))
    assert 25 not in _lines(project) and 17 in _lines(project)


def test_the_base_class_keeping_no_cache_is_reported(project: Path) -> None:
    models = project / "models.py"
    models.write_text(models.read_text().replace("self.kv_cache = torch.zeros(1, max_len, dim)", "self.buffer = torch.zeros(1, max_len, dim)"))
    assert 58 in _lines(project)


def test_a_cache_installed_as_one_of_two_targets_counts(project: Path) -> None:
    models = project / "models.py"
    models.write_text(models.read_text().replace("self.kv_cache, self.hooks =", "self.store, self.hooks ="))
    assert 41 in _lines(project)
