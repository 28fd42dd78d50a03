"""Every fixture under fixtures/rules/<CODE>/ yields exactly its `# expect:` markers, with
the impact a marker names (`# expect: TL101 (high)`).

Each file runs with only its rule selected, so fixtures stay stable as rules are added.
A file may set options on its first lines: `# torchlint-options: tensor-core-multiple=64`.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest

from conftest import FIXTURES, expected_impacts, expected_markers
from torchlint.config import Config, from_table
from torchlint.engine import lint_source
from torchlint.findings import Finding

RULE_FIXTURES = sorted(
    p for p in (FIXTURES / "rules").glob("TL*/*.py") if not p.name.startswith("fix")
)


def _config(code: str, text: str) -> Config:
    table: dict[str, object] = {"select": [code]}
    for line in text.splitlines()[:5]:
        if line.startswith("# torchlint-options:"):
            for pair in line.split(":", 1)[1].split():
                key, value = pair.split("=")
                table[key] = int(value) if value.isdigit() else value
    return from_table(table, FIXTURES)


@cache
def fixture_findings(path: Path) -> tuple[Finding, ...]:
    """The findings of a rule fixture where it is, with only its rule selected: made once a
    session for this file's tests and test_test_code's, which move each flagged fixture."""
    text = path.read_text(encoding="utf-8")
    return tuple(lint_source(text, str(path), _config(path.parent.name, text)))


@pytest.mark.parametrize("path", RULE_FIXTURES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_fixture_findings_match_markers(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    findings = fixture_findings(path)
    actual = {(f.line, f.code) for f in findings}
    assert len(actual) == len(findings), "one finding per rule per line"
    expected = expected_markers(text)
    missing = sorted(expected - actual)
    unexpected = sorted(actual - expected)
    assert not missing and not unexpected, (
        f"{path.relative_to(FIXTURES.parent)}\n"
        f"  expected but not reported: {missing}\n"
        f"  reported but not expected: {unexpected}\n"
        + "\n".join(f"    {f.location}: {f.code} {f.message}" for f in findings)
    )
    impacts = {(f.line, f.code): f.impact for f in findings}
    wrong = {key: (impact, impacts.get(key)) for key, impact in expected_impacts(text).items() if impacts.get(key) != impact}
    assert not wrong, f"{path.relative_to(FIXTURES.parent)}: (expected impact, actual) by (line, code): {wrong}"


def test_every_rule_has_fixtures() -> None:
    from torchlint.checks import all_checks

    for check in all_checks():
        folder = FIXTURES / "rules" / check.code
        flagged = [p for p in folder.glob("*.py") if expected_markers(p.read_text()) and not p.name.startswith("fix")]
        clean = list(folder.glob("clean*.py"))
        assert flagged, f"{check.code} has no fixture that expects it"
        assert clean, f"{check.code} has no clean (near-miss) fixture"
