"""`--statistics` puts the rules worth fixing first: by their highest impact, then by how
many findings have it, then by count (ruff, with no impact, orders by count alone); and a
run that shows nothing says, in English, which impacts it found nothing of."""

from __future__ import annotations

from pathlib import Path

from conftest import run_check

from torchlint.findings import Finding, Location
from torchlint.report.statistics import counts


def _finding(code: str, impact: str, line: int) -> Finding:
    return Finding(code, code.lower(), "m", Location("t.py", line), impact=impact)


def test_a_rare_high_impact_rule_comes_before_a_frequent_low_one() -> None:
    findings = [_finding("TL303", "low", n) for n in range(1, 6)] + [_finding("TL101", "high", 10)]
    findings += [_finding("TL110", "medium", 20), _finding("TL110", "low", 21), _finding("TL203", "medium", 30),
                 _finding("TL203", "medium", 31)]
    assert [row["code"] for row in counts(findings)] == ["TL101", "TL203", "TL110", "TL303"]


def test_the_cli_orders_by_impact_then_count(tmp_path: Path) -> None:
    loop = "import torch\nfor x, y in loader:\n    loss = model(x).sum()\n    loss.backward()\n    print(loss.item())\n"
    zero = "    opt.zero_grad(set_to_none=False)\n"
    (tmp_path / "a.py").write_text(loop + zero * 1)
    for name in "bcd":
        (tmp_path / f"{name}.py").write_text("import torch\nfor x, y in loader:\n    loss = model(x).sum()\n    loss.backward()\n" + zero)
    _, out, _ = run_check(tmp_path, "--min-impact", "low", "--statistics", ".")
    rows = out.splitlines()
    assert rows[0].split("\t")[:2] == ["1", "TL101"] and rows[1].split("\t")[:2] == ["4", "TL303"], out


def test_no_findings_shown_says_which_impacts_are_clear() -> None:
    from torchlint.report.concise import summary

    assert summary([], 1, left_out={"low": 1}).splitlines()[0] == "No high- or medium-impact problems found in 1 file."
    assert summary([], 2, left_out={"medium": 1, "low": 3}).splitlines()[0] == "No high-impact problems found in 2 files."
    assert summary([], 1).splitlines()[0] == "No problems found in 1 file."
