"""A constructor switch off by default, on a class the project never builds by name, keeps its
tier where a call hands a keyword of the switch's name to code that does not take it by name
(a `**options` builder: decision-diffuser's `utils.Config("models.X", returns_condition=...)`),
and is low where none does (fixtures/projects/reflected)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conftest import FIXTURES, expected_impacts
from torchlint.config import from_table
from torchlint.engine import lint_paths

PROJECT = FIXTURES / "projects" / "reflected"
READ = ("models/diffusion.py", 25)


def _impact(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, old: str = "", new: str = "") -> tuple[str, str]:
    root = tmp_path / "reflected"
    shutil.copytree(PROJECT, root)
    text = (root / "sample.py").read_text()
    assert old in text
    (root / "sample.py").write_text(text.replace(old, new))
    monkeypatch.chdir(root)
    result = lint_paths([Path(".")], from_table({"select": ["TL101"]}, root))
    assert not result.errors
    found = {(Path(f.path).as_posix(), f.line): f for f in result.findings}
    return found[READ].impact, found[READ].impact_reason  # type: ignore[return-value]


def test_a_switch_handed_to_a_reflective_builder_keeps_the_tier(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert expected_impacts((PROJECT / READ[0]).read_text()) == {(READ[1], "TL101"): "medium"}
    impact, reason = _impact(tmp_path, monkeypatch)
    assert impact == "medium" and "off by default" not in reason


@pytest.mark.parametrize("keyword", ["", ", guided=False"])
def test_no_keyword_of_that_name_or_a_literal_off_is_low(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, keyword: str) -> None:
    impact, reason = _impact(tmp_path, monkeypatch, ", guided=GUIDED", keyword)
    assert impact == "low" and "`Diffusion()` runs it only with `guided=True`, off by default" in reason
