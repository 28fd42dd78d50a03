"""GitLab Code Quality JSON (a ``codequality`` report artifact).

A fingerprint must stay the same while unrelated edits move the finding up or down,
so it hashes the rule, the file, the flagged line's text (whitespace-trimmed) and
which occurrence of that (rule, file, text) it is, never the line number."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from torchlint.findings import HIGH, LOW, MEDIUM, Finding
from torchlint.report.paths import file_line, notebook_place, relative

if TYPE_CHECKING:
    from torchlint.report import ReportContext


def _fingerprint(finding: Finding, path: str, text: str, occurrence: int) -> str:
    key = "\0".join((finding.code, path, str(finding.location.cell or ""), text, str(occurrence)))
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


# GitLab Code Quality's severities by impact (blocker and critical are left to security tools).
_SEVERITIES = {HIGH: "major", MEDIUM: "minor", LOW: "info"}


def _issue(finding: Finding, path: str, fingerprint: str, context: ReportContext) -> dict[str, Any]:
    loc = finding.location
    line = file_line(loc, context)
    return {
        "description": f"{notebook_place(loc)}{finding.message}",
        "check_name": f"{finding.code} {finding.name}",
        "fingerprint": fingerprint,
        "severity": _SEVERITIES.get(finding.impact, "major" if finding.code == "TL000" else "minor"),
        "location": {"path": path, "lines": {"begin": line, "end": max(loc.end_line or line, line) if loc.cell is None else line}},
    }


def build(findings: Sequence[Finding], context: ReportContext) -> list[dict[str, Any]]:
    seen: Counter[tuple[str, str, str, int | None]] = Counter()
    issues = []
    for finding in findings:
        path = relative(finding.path, context.root)
        text = (context.line_text(finding.path, finding.location.cell, finding.line) or finding.message).strip()
        key = (finding.code, path, text, finding.location.cell)
        seen[key] += 1
        issues.append(_issue(finding, path, _fingerprint(finding, path, text, seen[key]), context))
    return issues


def render(findings: Sequence[Finding], context: ReportContext) -> str:
    return json.dumps(build(findings, context), indent=2, ensure_ascii=False)
