"""rules/ pages agree with the registered checks, and their examples behave as they say."""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile

import pytest

from conftest import ROOT, RULES_DIR, ahead, session_env
from torchlint import catalogue
from torchlint.config import from_table
from torchlint.engine import lint_source

SECTIONS = ["What it does", "Why is this bad?", "Example", "Use instead", "When it stays silent", "References"]
RULES = catalogue.rules()


def _page(rule: catalogue.Rule) -> str:
    path = RULES_DIR / f"{rule.code}-{rule.name}.md"
    assert path.is_file(), f"missing page {path.name}"
    return path.read_text(encoding="utf-8")


def _section(text: str, title: str) -> str:
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert match, f"no `## {title}` section"
    return match.group(1)


def _code_block(section: str) -> str:
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, "no ```python block"
    return match.group(1)


def test_one_page_per_rule_and_nothing_else() -> None:
    pages = {p.name for p in RULES_DIR.glob("TL*.md")}
    expected = {f"{r.code}-{r.name}.md" for r in catalogue.all_rules()}
    assert pages == expected
    assert not list(RULES_DIR.rglob("*.py")), "rules/ holds pages only"


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.code)
def test_page_shape_and_metadata(rule: catalogue.Rule) -> None:
    text = _page(rule)
    assert text.splitlines()[0] == f"# {rule.code} {rule.name}"
    titles = re.findall(r"^## (.+)$", text, re.M)
    assert [t for t in titles if t in SECTIONS] == SECTIONS
    row = re.search(r"^\|[^\n]*\|\s*(on|opt-in)\s*\|\s*(none|safe|unsafe)\s*\|$", text, re.M)
    assert row, "the metadata table row (family | default | autofix) is missing"
    assert row.group(1) == ("on" if rule.default else "opt-in")
    assert row.group(2) == rule.fix.value


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.code)
def test_page_examples_trigger_and_fix(rule: catalogue.Rule) -> None:
    text = _page(rule)
    config = from_table({"select": [rule.code]}, RULES_DIR)
    bad = _code_block(_section(text, "Example"))
    good = _code_block(_section(text, "Use instead"))
    assert rule.code in {f.code for f in lint_source(bad, "example.py", config)}, "the Example does not trigger the rule"
    assert not [f for f in lint_source(good, "use_instead.py", config) if f.code == rule.code], "the Use instead block triggers the rule"


def test_index_lists_every_rule() -> None:
    index = (RULES_DIR / "README.md").read_text(encoding="utf-8")
    for rule in catalogue.all_rules():
        assert f"{rule.code}-{rule.name}.md" in index, f"{rule.code} is not in rules/README.md"


@ahead()
def built_wheel(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], subprocess.CompletedProcess[str]]:
    """The wheel pip builds from this checkout (an isolated build: mostly pip fetching and installing
    the build backend, a wait on the network, made ahead of the tests), installed into a folder of
    its own, and `torchlint rule TL101` run from that folder alone: (the wheel's names, that run)."""
    tmp_path = tmp_path_factory.mktemp("wheel")
    env = session_env()
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(tmp_path), str(ROOT)],
        check=True, capture_output=True, timeout=600, env=env,
    )
    (wheel,) = tmp_path.glob("torchlint-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target), str(wheel)],
                   check=True, capture_output=True, timeout=600, env=env)
    proc = subprocess.run(
        [sys.executable, "-m", "torchlint", "rule", "TL101"],
        cwd=tmp_path, env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=120,
    )
    return names, proc


@pytest.mark.slow
def test_wheel_ships_pages_and_only_the_package(built_wheel: tuple[list[str], subprocess.CompletedProcess[str]]) -> None:
    names, proc = built_wheel
    assert {n.split("/")[0] for n in names} == {"torchlint", next(n.split("/")[0] for n in names if ".dist-info" in n)}
    assert any(n.startswith("torchlint/_rules/TL101-") for n in names)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("# TL101 scalar-sync-in-loop")
