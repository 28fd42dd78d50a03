"""A layer size from a config class's field default, where the config is built in another
file: the default is the model's size only where some construction leaves the field out
(`LMConfig(vocab_size=50304)` in the training script makes 50257 no run's vocabulary)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import assert_markers_hold, checked_here, project_findings


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return checked_here("config_built", tmp_path, monkeypatch)


def misaligned(project: Path) -> list:
    return [f for f in project_findings(project, "TL402") if f.code == "TL402"]


def test_a_default_every_construction_overrides_is_not_the_size(project: Path) -> None:
    assert_markers_hold(project, misaligned(project))


@pytest.mark.parametrize("construction", ["LMConfig(n_layer=6)", "LMConfig()"])
def test_a_construction_that_leaves_the_field_out_keeps_it(project: Path, construction: str) -> None:
    train = project / "train.py"
    train.write_text(train.read_text().replace("LMConfig(vocab_size=50304, n_layer=6)", construction))
    lines = {(f.path, f.line) for f in misaligned(project)}
    assert ("model.py", 26) in lines and ("model.py", 38) in lines


def test_a_positional_value_overrides_it(project: Path) -> None:
    train = project / "train.py"
    train.write_text(train.read_text().replace("LMConfig(vocab_size=50304, n_layer=6)", "LMConfig(50304)"))
    assert_markers_hold(project, misaligned(project))


def test_with_no_construction_in_the_project_the_default_stands(project: Path) -> None:
    (project / "train.py").unlink()
    assert ("model.py", 26) in {(f.path, f.line) for f in misaligned(project)}
