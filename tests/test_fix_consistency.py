"""Rules do not contradict each other: applying every fix (safe and unsafe) to every rule
fixture never makes a rule report more than before."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import pytest

from conftest import FIXTURES
from torchlint.config import from_table
from torchlint.engine import lint_paths
from torchlint.engine.fixes import is_valid_python, write_atomically

SOURCES = sorted(p for p in FIXTURES.glob("rules/TL*/*.py") if not p.name.endswith(".out.py") and p.parent.name != "TL000")


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_fixes_introduce_no_new_findings(source: Path, tmp_path: Path) -> None:
    work = tmp_path / source.name
    shutil.copy(source, work)
    config = from_table({"select": ["ALL"]}, tmp_path)
    # The fix run checks the file before it plans its fixes, and keeps that check in a cache
    # of this test's own: the count before is read back from it, not checked a second time
    # (a check is most of this test's time; the cache gives what the check gives).
    cache = tmp_path / "cache"
    edits = lint_paths([work], config, fix="unsafe", cache=cache).edits
    if not edits:  # (asked first: the count before matters only where a fix is written)
        return
    counts_before = Counter(f.code for f in lint_paths([work], config, cache=cache).findings)
    for edit in edits:
        write_atomically(edit)
    fixed = work.read_text(encoding="utf-8")
    assert is_valid_python(fixed)
    after = Counter(f.code for f in lint_paths([work], config).findings)
    grown = {code: (counts_before[code], n) for code, n in after.items() if n > counts_before[code]}
    assert not grown, f"fixes made these rules report more (before, after): {grown}"
