"""The JSON Lines report: one JSON object per finding per line, the fields of ``json``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING

from torchlint.findings import Finding
from torchlint.report.json import finding_dict

if TYPE_CHECKING:
    from torchlint.report import ReportContext


def render(findings: Sequence[Finding], context: ReportContext) -> str:
    return "\n".join(json.dumps(finding_dict(f), ensure_ascii=False) for f in findings)
