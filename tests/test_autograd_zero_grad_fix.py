"""TL303's fix for a bare `zero_grad()`, which only applies when the target torch is < 2.0."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchlint.config import from_table
from torchlint.engine import lint_paths
from torchlint.engine.fixes import write_atomically

SOURCE = """import torch

optimizer = torch.optim.SGD(params, lr=0.1)
for x in loader:
    optimizer.zero_grad()  # reset
    model(x).sum().backward()
    optimizer.step()
"""


def _fix(tmp_path: Path, target: str) -> tuple[str, int]:
    path = tmp_path / "train.py"
    path.write_text(SOURCE, encoding="utf-8")
    config = from_table({"select": ["TL303"], "target-torch": target}, tmp_path)
    result = lint_paths([path], config, fix="safe")
    for edit in result.edits:
        write_atomically(edit)
    return path.read_text(encoding="utf-8"), len([f for f in result.findings if f.code == "TL303"])


def test_bare_zero_grad_fixed_below_torch_2(tmp_path: Path) -> None:
    fixed, _ = _fix(tmp_path, "1.13")
    assert fixed == SOURCE.replace("zero_grad()", "zero_grad(set_to_none=True)")


@pytest.mark.parametrize("target", ["2.0", "2.4"])
def test_bare_zero_grad_silent_from_torch_2(tmp_path: Path, target: str) -> None:
    fixed, count = _fix(tmp_path, target)
    assert count == 0 and fixed == SOURCE


def test_no_fix_before_set_to_none_existed(tmp_path: Path) -> None:
    fixed, count = _fix(tmp_path, "1.6")
    assert count == 1 and fixed == SOURCE
