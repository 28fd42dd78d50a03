"""Whole training scripts, every rule selected, compared with a reviewed snapshot of the
full report (each finding, its source lines with carets, its help). Rewrite snapshots with `pytest --update-snapshots` and review the diff."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import FIXTURES, ROOT
from torchlint.config import from_table
from torchlint.engine import lint_paths
from torchlint.cli.check_output import SourceLines
from torchlint.report import ReportContext, render

SCRIPTS = sorted(p for p in (FIXTURES / "scripts").glob("*.py") if p.with_suffix(".expected.txt").exists() or p.name == "cifar_train.py")


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.stem)
def test_script_report_matches_snapshot(script: Path, update_snapshots: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    result = lint_paths([script.relative_to(ROOT)], from_table({"select": ["ALL"]}, ROOT))
    report = render("full", result.findings, ReportContext(files_checked=result.files_checked, root=ROOT, line_text=SourceLines())) + "\n"
    snapshot = script.with_suffix(".expected.txt")
    if update_snapshots:
        snapshot.write_text(report, encoding="utf-8")
    assert snapshot.exists(), f"no snapshot for {script.name}: run pytest --update-snapshots and review it"
    assert report == snapshot.read_text(encoding="utf-8")
    assert not result.errors
