"""`--fix` and `--diff` change what the report shows: the selection and `--min-impact`
(ruff fixes what its selection reports). `--min-impact low` fixes every tier."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from conftest import run_check

from torchlint.cli import main

SOURCE = """import torch

model = torch.nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.zeros(3).cuda()
for xb, yb in loader:
    opt.zero_grad(set_to_none=False)
    m = torch.ones(3).cuda()
    loss = model(xb).sum()
    loss.backward()
    opt.step()
"""
HIGH_FIXED = "    m = torch.ones(3, device=\"cuda\")\n"
LOW_LINES = ("x = torch.zeros(3).cuda()\n", "    opt.zero_grad(set_to_none=False)\n")  # TL110 once, TL303: low


def test_fix_leaves_the_findings_min_impact_hides(tmp_path: Path) -> None:
    path = tmp_path / "train.py"
    path.write_text(SOURCE)
    code, out, err = run_check(tmp_path, "--no-cache", "--fix", "train.py")
    fixed = path.read_text()
    assert HIGH_FIXED in fixed and all(line in fixed for line in LOW_LINES), fixed
    assert code == 0 and "Fixed 1 " in out + err, out + err

    path.write_text(SOURCE)
    run_check(tmp_path, "--no-cache", "--fix", "--min-impact", "low", "train.py")
    fixed = path.read_text()
    assert HIGH_FIXED in fixed and not any(line in fixed for line in LOW_LINES), fixed


def test_diff_shows_only_what_min_impact_shows(tmp_path: Path) -> None:
    path = tmp_path / "train.py"
    path.write_text(SOURCE)
    _, out, _ = run_check(tmp_path, "--no-cache", "--diff", "train.py")
    assert "+    m = torch.ones(3, device=" in out and "-x = torch.zeros(3).cuda()" not in out
    _, out, _ = run_check(tmp_path, "--no-cache", "--diff", "--min-impact", "low", "train.py")
    assert "-x = torch.zeros(3).cuda()" in out and "-    opt.zero_grad(set_to_none=False)" in out
    assert path.read_text() == SOURCE


def test_the_selection_limits_fixes_too(tmp_path: Path) -> None:
    path = tmp_path / "train.py"
    path.write_text(SOURCE)
    run_check(tmp_path, "--no-cache", "--fix", "--min-impact", "low", "--select", "TL303", "train.py")
    fixed = path.read_text()
    assert "    m = torch.ones(3).cuda()\n" in fixed and LOW_LINES[1] not in fixed


def test_stdin_fix_follows_min_impact(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["check", "-", "--stdin-filename", str(tmp_path / "train.py"), "--fix"], input=SOURCE)
    assert HIGH_FIXED in result.stdout and all(line in result.stdout for line in LOW_LINES), result.stdout
