"""`check --fix`, `--diff` and `--unsafe-fixes` from the command line, and the safety of writes."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from conftest import run_check
from torchlint.config import from_table
from torchlint.engine import lint_paths
from torchlint.engine.fixes import ChangedOnDiskError, write_atomically

SOURCE = "import torch\n\nopt = torch.optim.SGD(params, lr=0.1)\nopt.zero_grad(set_to_none=False)  # reset\n"
FIXED = "import torch\n\nopt = torch.optim.SGD(params, lr=0.1)\nopt.zero_grad(set_to_none=True)  # reset\n"


def invoke(cwd: Path, *args: str) -> tuple[int, str, str]:
    """`check ARGS` showing every finding: TL303 (a memset per step) is low impact."""
    return run_check(cwd, "--min-impact", "low", *args)


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "train.py"
    path.write_text(SOURCE)
    path.chmod(0o640)
    return path


def test_report_says_what_is_fixable(script: Path) -> None:
    code, out, _ = invoke(script.parent, "train.py", "--select", "TL303")
    assert code == 1
    assert "TL303 [*]" in out and "1 fixable with `--fix`" in out


def test_diff_prints_and_writes_nothing(script: Path) -> None:
    code, out, err = invoke(script.parent, "train.py", "--select", "TL303", "--diff")
    assert code == 1
    assert "-opt.zero_grad(set_to_none=False)  # reset" in out
    assert "+opt.zero_grad(set_to_none=True)  # reset" in out
    assert "Would fix 1 problem in 1 file." in err
    assert script.read_text() == SOURCE


def test_fix_rewrites_keeps_comments_and_permissions(script: Path) -> None:
    code, out, _ = invoke(script.parent, "train.py", "--select", "TL303", "--fix")
    assert code == 0, out
    assert "Fixed 1 problem." in out
    assert script.read_text() == FIXED
    assert stat.S_IMODE(script.stat().st_mode) == 0o640
    assert not [p for p in script.parent.iterdir() if p.name.endswith(".torchlint")], "temporary file left behind"
    # A second run has nothing left to fix.
    assert invoke(script.parent, "train.py", "--select", "TL303", "--fix")[0] == 0
    assert script.read_text() == FIXED


def test_a_file_changed_on_disk_is_not_overwritten(script: Path) -> None:
    result = lint_paths([script], from_table({"select": ["TL303"]}, script.parent), fix="safe")
    (edit,) = result.edits
    script.write_text(SOURCE + "# edited meanwhile\n")
    with pytest.raises(ChangedOnDiskError):
        write_atomically(edit)
    assert script.read_text().endswith("# edited meanwhile\n")


def test_failed_write_leaves_the_original_intact(script: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result = lint_paths([script], from_table({"select": ["TL303"]}, script.parent), fix="safe")
    (edit,) = result.edits

    def interrupted(src: str, dst: str) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_atomically(edit)
    assert script.read_text() == SOURCE
    assert not [p for p in script.parent.iterdir() if p.name.endswith(".torchlint")]


def test_unsafe_fixes_need_the_flag(tmp_path: Path) -> None:
    path = tmp_path / "net.py"
    source = "import torch.nn as nn\n\nnet = nn.Sequential(nn.Conv2d(3, 64, 3), nn.BatchNorm2d(64))\n"
    path.write_text(source)
    assert invoke(tmp_path, "net.py", "--select", "TL401", "--fix")[0] == 1
    assert path.read_text() == source
    code, out, _ = invoke(tmp_path, "net.py", "--select", "TL401", "--fix", "--unsafe-fixes")
    assert code == 0, out
    assert "nn.Conv2d(3, 64, 3, bias=False)" in path.read_text()
