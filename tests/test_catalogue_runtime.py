"""The runtime rules (TLR..) share the catalogue: pages, `torchlint rules`, `rule`, and
`check`'s selections, which accept ignoring them and refuse selecting them."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import RULES_DIR
from torchlint import catalogue
from torchlint.cli import main
from torchlint.correlate.runtime import RUNTIME_RULES
from torchlint.report.rule_info import description

RUNTIME = catalogue.runtime_rules()
SECTIONS = ["What it measures", "Threshold", "Why is this bad?", "How to fix", "Evidence", "When it is skipped", "Static twin", "References"]


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


def _cli(*args: str, cwd: Path | None = None, monkeypatch: pytest.MonkeyPatch | None = None) -> Result:
    """The command in process (click's runner), as test_cli runs it."""
    if cwd is not None:
        assert monkeypatch is not None
        monkeypatch.chdir(cwd)
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return Result(result.exit_code, result.stdout, result.stderr)


def test_catalogue_agrees_with_the_runtime_findings() -> None:
    assert {r.code: r.name for r in RUNTIME} == {code: rule.name for code, rule in RUNTIME_RULES.items()}
    assert all(r.runtime and r.family == "TLR" for r in RUNTIME)
    assert not {r.code for r in catalogue.rules()} & {r.code for r in RUNTIME}, "rules() stays static (the engine runs it)"


@pytest.mark.parametrize("rule", RUNTIME, ids=lambda r: r.code)
def test_runtime_page_shape(rule: catalogue.Rule) -> None:
    text = (RULES_DIR / f"{rule.code}-{rule.name}.md").read_text(encoding="utf-8")
    assert text.splitlines()[0] == f"# {rule.code} {rule.name}"
    titles = re.findall(r"^## (.+)$", text, re.M)
    assert titles == SECTIONS
    twin = re.search(r"^\| TLR runtime \| `torchlint profile` \| (.+) \|$", text, re.M)
    assert twin, "the metadata row (family | reported by | static twin) is missing"
    for code in re.findall(r"\bTL\d{3}\b", twin.group(1)):
        assert catalogue.find(code) is not None, f"{rule.code} names an unknown twin {code}"
    assert len(description(rule.code)) > 40, "reports quote the first paragraph of 'What it measures'"


def test_rules_lists_static_then_runtime_marked() -> None:
    proc = _cli("rules")
    assert proc.returncode == 0, proc.stderr
    rows = [line.split() for line in proc.stdout.splitlines()[1:]]
    codes = [row[0] for row in rows]
    assert codes == [r.code for r in catalogue.all_rules()]
    assert codes.index("TLR01") > codes.index("TL602")
    assert {row[2] for row in rows if row[0].startswith("TLR")} == {"runtime"}
    assert "runtime" not in {row[2] for row in rows if not row[0].startswith("TLR")}
    listed = json.loads(_cli("rules", "--output-format", "json").stdout)
    assert {r["code"]: r["kind"] for r in listed}["TLR05"] == "runtime"
    assert {r["code"]: r["kind"] for r in listed}["TL101"] == "static"


def test_rule_prints_a_runtime_page_by_code_or_name() -> None:
    by_code = _cli("rule", "TLR01")
    assert by_code.returncode == 0, by_code.stderr
    assert by_code.stdout.startswith("# TLR01 dataloader-wait-share")
    assert "## Threshold" in by_code.stdout
    by_name = _cli("rule", "low-precision-matmul-misaligned")
    assert by_name.returncode == 0 and by_name.stdout.startswith("# TLR07 ")


@pytest.mark.parametrize("option", ["--select", "--extend-select"])
@pytest.mark.parametrize("code", ["TLR01", "TLR", "dataloader-wait-share"])
def test_check_refuses_to_select_a_runtime_rule(tmp_path: Path, option: str, code: str, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "a.py").write_text("import torch\n")
    proc = _cli("check", "--no-cache", option, code, "a.py", cwd=tmp_path, monkeypatch=monkeypatch)
    assert proc.returncode == 2
    assert "is a runtime rule" in proc.stderr and "torchlint profile" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_check_accepts_ignoring_a_runtime_rule(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "a.py").write_text("import torch\nx = torch.zeros(3).cuda()\n")
    (tmp_path / "pyproject.toml").write_text('[tool.torchlint]\nignore = ["TLR06"]\n[tool.torchlint.per-file-ignores]\n"a.py" = ["TLR07"]\n')
    proc = _cli("check", "--no-cache", "--min-impact", "low", "--ignore", "TLR01", "--output-format", "concise", "a.py", cwd=tmp_path, monkeypatch=monkeypatch)
    assert proc.returncode == 1, proc.stderr
    assert "TL110" in proc.stdout and proc.stderr == ""


def test_an_unknown_tlr_code_is_still_unknown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "a.py").write_text("import torch\n")
    proc = _cli("check", "--no-cache", "--select", "TLR99", "a.py", cwd=tmp_path, monkeypatch=monkeypatch)
    assert proc.returncode == 2 and "unknown rule code `TLR99`" in proc.stderr
