"""``--statistics``: how many findings each rule has, most first (as ruff prints them)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence

from torchlint.findings import Finding, FixSafety


def counts(findings: Sequence[Finding]) -> list[dict[str, object]]:
    by_rule = Counter((f.code, f.name) for f in findings)
    fixable = {f.code for f in findings if f.fix is not None and f.fix.safety is FixSafety.SAFE}
    rows = [{"code": code, "name": name, "count": count, "fixable": code in fixable} for (code, name), count in by_rule.items()]
    return sorted(rows, key=lambda row: (-int(row["count"]), str(row["code"])))  # type: ignore[call-overload]


def render(findings: Sequence[Finding], as_json: bool = False) -> str:
    rows = counts(findings)
    if as_json:
        return json.dumps(rows, indent=2)
    width = max((len(str(row["count"])) for row in rows), default=1)
    return "\n".join(f"{row['count']:>{width}}\t{row['code']}\t{'[*] ' if row['fixable'] else '    '}{row['name']}" for row in rows)
