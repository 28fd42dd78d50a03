"""SARIF 2.1.0, as GitHub code scanning reads it (docs/ci.md).

Every rule is described in ``tool.driver.rules``; each result points at a repo-relative
URI with a 1-based region. A notebook finding points at the ``.ipynb`` file (the region's
line is the file's line holding the source line), its cell, line and column in the
message (report/paths.py: the convention every format follows)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from torchlint import __version__, catalogue
from torchlint.findings import HIGH, LOW, MEDIUM, Finding, Location
from torchlint.report.paths import file_line, notebook_place, uri
from torchlint.report.rule_info import HOME, description, rule_url

if TYPE_CHECKING:
    from torchlint.report import ReportContext

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"


# SARIF's levels by impact (TL000 is always high): what GitHub code scanning shows as
# error, warning and note.
_LEVELS = {HIGH: "error", MEDIUM: "warning", LOW: "note"}


def _level(code: str) -> str:
    """A rule's default level (its findings carry their own)."""
    return "error" if code == "TL000" else "warning"


def _finding_level(finding: Finding) -> str:
    return _LEVELS.get(finding.impact, _level(finding.code))


def _rule(rule: catalogue.Rule) -> dict[str, Any]:
    url = rule_url(rule.code, rule.name)
    full = description(rule.code) or rule.summary
    return {
        "id": rule.code,
        "name": rule.name,
        "shortDescription": {"text": rule.summary},
        "fullDescription": {"text": full},
        "helpUri": url,
        "help": {"text": f"{full}\n\nSee {url}", "markdown": f"{full}\n\n[{rule.code} {rule.name}]({url})"},
        "defaultConfiguration": {"level": _level(rule.code), "enabled": rule.default},
        "properties": {"tags": [catalogue.FAMILY_TITLES.get(rule.family, rule.family)]},
    }


def _location(loc: Location, context: ReportContext) -> dict[str, Any]:
    physical: dict[str, Any] = {"artifactLocation": {"uri": uri(loc.path, context.root)}}
    if loc.cell is None:
        region = {"startLine": loc.line, "startColumn": loc.column}
        if loc.end_line is not None:
            region["endLine"] = loc.end_line
        if loc.end_column is not None:
            region["endColumn"] = loc.end_column
        physical["region"] = region
    else:
        physical["region"] = {"startLine": file_line(loc, context)}  # the file's line; the cell's is in the message
    return {"physicalLocation": physical}


def _where(loc: Location) -> str:
    """A notebook place, which the region cannot give: ``cell C, line L, column N: ``."""
    return notebook_place(loc)


def _message(finding: Finding) -> str:
    where = _where(finding.location)
    hint = f"\nhelp: {finding.fix_hint}" if finding.fix_hint else ""
    return f"{where}{finding.message}{hint}"


def _result(finding: Finding, index: dict[str, int], context: ReportContext) -> dict[str, Any]:
    result: dict[str, Any] = {
        "ruleId": finding.code,
        "level": _finding_level(finding),
        "message": {"text": _message(finding)},
        "locations": [_location(finding.location, context)],
    }
    if finding.code in index:
        result["ruleIndex"] = index[finding.code]
    if finding.impact:
        result["properties"] = {"impact": finding.impact, "impactReason": finding.impact_reason}
    if finding.related:
        result["relatedLocations"] = [
            {"id": number, **_location(related, context), "message": {"text": _where(related) + "where this costs time"}}
            for number, related in enumerate(finding.related)
        ]
    return result


def build(findings: Sequence[Finding], context: ReportContext) -> dict[str, Any]:
    rules = catalogue.rules()
    index = {rule.code: number for number, rule in enumerate(rules)}
    driver = {
        "name": "torchlint",
        "version": __version__,
        "semanticVersion": __version__,
        "informationUri": HOME,
        "rules": [_rule(rule) for rule in rules],
    }
    return {
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": driver},
            "columnKind": "unicodeCodePoints",
            "results": [_result(f, index, context) for f in findings],
        }],
    }


def render(findings: Sequence[Finding], context: ReportContext) -> str:
    return json.dumps(build(findings, context), indent=2, ensure_ascii=False)
