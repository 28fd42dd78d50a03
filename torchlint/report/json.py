"""The JSON report: an array of findings with 1-based positions (docs/output.md)."""

from __future__ import annotations

import json
from collections.abc import Sequence

from torchlint.findings import Finding


def render(findings: Sequence[Finding]) -> str:
    return json.dumps([f.to_dict() for f in findings], indent=2)
