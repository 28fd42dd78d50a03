"""so-vits-svc's helpers (review 16): ``slice_segments`` reads a 0-d device start per batch row,
though a function nothing calls passes it an index too; the loss helper's ``(1 - dr) ** 2`` is
where ``dr`` is, not on the host for the number beside it (fixtures/projects/segments)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import assert_markers_hold, checked_here, project_findings


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return checked_here("segments", tmp_path, monkeypatch)


def test_findings_match_the_markers(project: Path) -> None:
    assert_markers_hold(project, project_findings(project))
