"""Fix fixtures: fixtures/rules/<CODE>/fix.in.py → fix.out.py (safe fixes only) and
fix-unsafe.in.py → fix-unsafe.out.py (with --unsafe-fixes), applied with only that rule
selected, through the same code path as `torchlint check --fix`."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conftest import FIXTURES
from torchlint.config import from_table
from torchlint.engine import lint_paths
from torchlint.engine.fixes import write_atomically

FIX_INPUTS = sorted(FIXTURES.glob("rules/TL*/fix*.in.py"))


def fix_file(path: Path, code: str, unsafe: bool) -> tuple[str, list]:  # type: ignore[type-arg]
    config = from_table({"select": [code]}, path.parent)
    result = lint_paths([path], config, fix="unsafe" if unsafe else "safe")
    for edit in result.edits:
        write_atomically(edit)
    return path.read_text(encoding="utf-8"), result.findings


@pytest.mark.parametrize("source", FIX_INPUTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_fix_fixture(source: Path, tmp_path: Path) -> None:
    code = source.parent.name
    unsafe = "unsafe" in source.name
    expected = source.with_name(source.name.replace(".in.py", ".out.py")).read_text(encoding="utf-8")
    work = tmp_path / "target.py"
    shutil.copy(source, work)
    fixed, _ = fix_file(work, code, unsafe)
    assert fixed == expected
    # A second --fix changes nothing (idempotent).
    again, _ = fix_file(work, code, unsafe)
    assert again == fixed
