"""TL001's safe fix (ruff's RUF100): the codes a `# noqa` suppresses nothing with go, and
the comment when none is left; what it still suppresses, and other tools' codes, stay."""

from __future__ import annotations

from pathlib import Path

from conftest import run_check

from torchlint import catalogue
from torchlint.findings import FixSafety

LOOP = """import torch

x = torch.zeros(3)  # noqa: TL101
for xb, yb in loader:
    loss = model(xb).sum()
    loss.backward()
    opt.step()
    print(loss.item())  # noqa: TL101, TL104, E501
    total = loss  # noqa: TL101
"""
FIXED = """import torch

x = torch.zeros(3)
for xb, yb in loader:
    loss = model(xb).sum()
    loss.backward()
    opt.step()
    print(loss.item())  # noqa: TL101, E501
    total = loss
"""


def test_fix_takes_out_the_unused_codes_and_keeps_the_used_ones(tmp_path: Path) -> None:
    path = tmp_path / "train.py"
    path.write_text(LOOP)
    code, out, err = run_check(tmp_path, "--no-cache", "--select", "TL001,TL101,TL104", "--min-impact", "low", "--fix", "train.py")
    assert path.read_text() == FIXED, out + err
    assert code == 0 and "Fixed 3 " in out + err, out + err
    # Idempotent, and the TL101 the kept code suppresses is still suppressed.
    assert run_check(tmp_path, "--no-cache", "--select", "TL001,TL101,TL104", "--min-impact", "low", "train.py")[0] == 0


def test_a_code_of_a_rule_not_selected_stays(tmp_path: Path) -> None:
    path = tmp_path / "train.py"
    path.write_text(LOOP)
    code, out, _ = run_check(tmp_path, "--no-cache", "--select", "TL001,TL101", "--min-impact", "low", "--fix", "train.py")
    assert "# noqa: TL101, TL104, E501" in path.read_text()  # TL104 does not run here: not this run's to drop
    assert code == 1 and "TL104 (not selected)" in out


def test_a_noqa_a_call_site_finding_uses_is_kept(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'p'\n")
    (tmp_path / "helper.py").write_text("def acc(x):\n    return x.item()\n")
    train = tmp_path / "train.py"
    train.write_text("import torch\nfrom helper import acc\n\nfor x, y in loader:\n    loss = model(x.cuda()).sum()\n"
                     "    loss.backward()\n    opt.step()\n    a = acc(loss)  # noqa: TL101, TL103\n")
    run_check(tmp_path, "--no-cache", "--select", "TL001,TL101,TL103", "--min-impact", "low", "--fix", "train.py")
    assert "    a = acc(loss)  # noqa: TL101\n" in train.read_text()


def test_the_catalogue_says_tl001_has_a_safe_fix() -> None:
    (rule,) = [r for r in catalogue.rules() if r.code == "TL001"]
    assert rule.fix is FixSafety.SAFE
