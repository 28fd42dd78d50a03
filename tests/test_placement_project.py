"""Facts the join settles across files: a size kept as a tensor attribute is a host tensor
where every construction passes one (`torch.LongTensor` lists in another module); a read
behind a parameter off by default runs only through callers that pass it (`**kwargs` handed
on with a key set, `kwargs.update(early_exit=True)`)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conftest import FIXTURES, expected_impacts, expected_markers
from torchlint.config import from_table
from torchlint.engine import lint_paths

PROJECT = FIXTURES / "projects" / "placement"


def test_placement_project_markers_and_impacts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "placement"
    shutil.copytree(PROJECT, root)
    monkeypatch.chdir(root)
    result = lint_paths([Path(".")], from_table({"select": ["TL101"]}, root))
    assert not result.errors
    actual = {(Path(f.path).as_posix(), f.line, f.code): f for f in result.findings}
    files = sorted(root.rglob("*.py"))
    expected = {(p.relative_to(root).as_posix(), line, code) for p in files for line, code in expected_markers(p.read_text())}
    assert set(actual) == expected, "\n".join(f"{k}: {f.message}" for k, f in actual.items())
    impacts = {(p.relative_to(root).as_posix(), *key): impact for p in files for key, impact in expected_impacts(p.read_text()).items()}
    assert {key: actual[key].impact for key in impacts} == impacts
    low = actual[("layers/equivariant.py", 36, "TL101")]
    assert "opt-in path: `trace` is off by default" in low.impact_reason
