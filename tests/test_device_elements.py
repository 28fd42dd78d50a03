"""A dict of device tensors built in the step and handed to a helper of another file that reads
each value into Python (demucs' `averager(losses)`, review 13's misses): the join carries the
"device elements" of the argument to the helper's parameter (`CallSite.elements`, the `elements:`
keys of `Steps.device_params`), and the helper is found through `averager = EMA()`, a function
named like a class that returns the closure it defines."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import assert_markers_hold, checked_here, project_findings


def test_the_project_findings_and_tiers_match_the_markers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = checked_here("metric_dicts", tmp_path, monkeypatch)
    assert_markers_hold(root, project_findings(root, "TL105"))


def test_the_averager_read_says_per_metric_and_where_the_step_calls_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = checked_here("metric_dicts", tmp_path, monkeypatch)
    (found,) = project_findings(root, "TL105")
    assert "`EMA._update()`" in found.message and "training loop at trainer/solver.py:28" in found.message
    assert "(per metric per step)" in found.message


def test_values_read_in_the_step_first_leave_nothing_to_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = checked_here("metric_dicts", tmp_path, monkeypatch)
    solver = root / "trainer" / "solver.py"
    solver.write_text(solver.read_text().replace('losses["loss"] = loss\n', 'losses["loss"] = loss.item()\n')
                      .replace('losses[f"reco_{k}"] = reco[k]', 'losses[f"reco_{k}"] = reco[k].item()'))
    assert project_findings(root, "TL105") == []
