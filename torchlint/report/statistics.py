"""``--statistics``: how many findings each rule has, most first (as ruff prints them),
split by impact."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence

from torchlint.findings import IMPACTS, Finding, FixSafety


def counts(findings: Sequence[Finding]) -> list[dict[str, object]]:
    by_rule = Counter((f.code, f.name) for f in findings)
    by_impact: dict[str, Counter[str]] = {}
    for finding in findings:
        by_impact.setdefault(finding.code, Counter())[finding.impact or "unassessed"] += 1
    fixable = {f.code for f in findings if f.fix is not None and f.fix.safety is FixSafety.SAFE}
    rows = [
        {"code": code, "name": name, "count": count, "fixable": code in fixable,
         "impact": {tier: n for tier in (*IMPACTS, "unassessed") if (n := by_impact[code][tier])}}
        for (code, name), count in by_rule.items()
    ]
    return sorted(rows, key=lambda row: (-int(row["count"]), str(row["code"])))  # type: ignore[call-overload]


def render(findings: Sequence[Finding], as_json: bool = False, left_out: Counter[str] | None = None) -> str:
    rows = counts(findings)
    if as_json:
        return json.dumps(rows, indent=2)
    width = max((len(str(row["count"])) for row in rows), default=1)
    lines = [
        f"{row['count']:>{width}}\t{row['code']}\t{'[*] ' if row['fixable'] else '    '}{row['name']}\t"
        + ", ".join(f"{n} {tier}" for tier, n in row["impact"].items())  # type: ignore[attr-defined]
        for row in rows
    ]
    hidden = sum((left_out or {}).values())
    if hidden:
        lines.append(f"({hidden} lower-impact finding{'s' if hidden != 1 else ''} not counted: `--min-impact low` counts them)")
    return "\n".join(lines)
