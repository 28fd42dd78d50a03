"""A parameter handed on unpassed is not passed: `model(x)` reaches `Net.forward(x, kv_cache=None)`,
whose `block(x, kv_cache)` hands on what it was not given, so an attention's
`if kv_cache is None: ... else: <read>` (a parameter without a default, tested against None)
runs from the decode loop that passes a cache, not from the training loop."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import assert_markers_hold, checked_here, project_findings


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return checked_here("forwarded_cache", tmp_path, monkeypatch)


def test_the_read_is_placed_in_the_decode_loop_only(project: Path) -> None:
    findings = project_findings(project, "TL101")
    assert_markers_hold(project, [f for f in findings if f.code == "TL101"])
    read = next(f for f in findings if f.code == "TL101")
    assert "sampling loop" in read.message and "per decoded token" in read.message and "training loop" not in read.message


def test_a_training_loop_that_passes_the_cache_reaches_it(project: Path) -> None:
    train = project / "train.py"
    train.write_text(train.read_text().replace("model(x)", "model(x, kv_cache=object())"))
    (project / "generate.py").unlink()
    read = next(f for f in project_findings(project, "TL101") if f.code == "TL101")
    assert "training loop" in read.message


def test_with_no_decode_loop_the_training_loop_leaves_the_read_out(project: Path) -> None:
    (project / "generate.py").unlink()
    assert not [f for f in project_findings(project, "TL101") if f.code == "TL101"]
