"""The JSON report: an array of findings with 1-based positions (docs/output.md)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from torchlint.findings import Finding
from torchlint.report.rule_info import SCHEMA_VERSION, rule_url

if TYPE_CHECKING:
    from torchlint.report import ReportContext


def finding_dict(finding: Finding) -> dict[str, Any]:
    """``Finding.to_dict`` plus the schema version and the rule page's address."""
    data = finding.to_dict()
    data["url"] = rule_url(finding.code, finding.name)
    data["schema_version"] = SCHEMA_VERSION
    return data


def render(findings: Sequence[Finding], context: ReportContext | None = None) -> str:
    return json.dumps([finding_dict(f) for f in findings], indent=2)
