"""``--statistics``: how many findings each rule has, split by impact: the rules with the
highest-impact findings first, then the most of those (ruff, which has no impact, orders
by count alone). ``[*]`` marks a rule whose findings ``--fix`` repairs, ``[-]`` one whose
fixes are unsafe, applied only with ``--unsafe-fixes`` (``[*]`` once that is given)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence

from torchlint.findings import IMPACT_RANK, IMPACTS, Finding, FixSafety
from torchlint.terminal import json_safe, printable


def counts(findings: Sequence[Finding], unsafe: bool = False) -> list[dict[str, object]]:
    """One row per rule; ``fixable``: some finding ``--fix`` repairs (unsafe fixes count
    with ``unsafe``, as ``--unsafe-fixes`` applies them); ``unsafe_fixable``: not fixable,
    but some finding has an unsafe fix."""
    by_rule = Counter((f.code, f.name) for f in findings)
    by_impact: dict[str, Counter[str]] = {}
    for finding in findings:
        by_impact.setdefault(finding.code, Counter())[finding.impact or "unassessed"] += 1
    allowed = {FixSafety.SAFE, FixSafety.UNSAFE} if unsafe else {FixSafety.SAFE}
    fixable = {f.code for f in findings if f.fix is not None and f.fix.safety in allowed}
    unsafe_only = {f.code for f in findings if f.fix is not None and f.fix.safety is FixSafety.UNSAFE} - fixable
    rows = [
        {"code": code, "name": name, "count": count, "fixable": code in fixable, "unsafe_fixable": code in unsafe_only,
         "impact": {tier: n for tier in (*IMPACTS, "unassessed") if (n := by_impact[code][tier])}}
        for (code, name), count in by_rule.items()
    ]
    return sorted(rows, key=_by_impact_then_count)


def _by_impact_then_count(row: dict[str, object]) -> tuple[int, int, int, str]:
    """The rule's highest impact, then how many findings have it, then how many in all."""
    tiers: dict[str, int] = row["impact"]  # type: ignore[assignment]
    best = min(tiers, key=lambda tier: IMPACT_RANK.get(tier, len(IMPACTS)))
    return IMPACT_RANK.get(best, len(IMPACTS)), -tiers[best], -int(row["count"]), str(row["code"])  # type: ignore[call-overload]


def _mark(row: dict[str, object]) -> str:
    return "[*] " if row["fixable"] else "[-] " if row["unsafe_fixable"] else "    "


def render(findings: Sequence[Finding], as_json: bool = False, left_out: Counter[str] | None = None, unsafe: bool = False) -> str:
    rows = counts(findings, unsafe)
    if as_json:
        return json_safe(json.dumps(rows, indent=2))
    width = max((len(str(row["count"])) for row in rows), default=1)
    lines = [
        f"{row['count']:>{width}}\t{row['code']}\t{_mark(row)}{row['name']}\t"
        + ", ".join(f"{n} {tier}" for tier, n in row["impact"].items())  # type: ignore[attr-defined]
        for row in rows
    ]
    if any(row["unsafe_fixable"] for row in rows):
        lines.append("([-]: fixable with `--fix --unsafe-fixes`)")
    hidden = sum((left_out or {}).values())
    if hidden:
        lines.append(f"({hidden} lower-impact finding{'s' if hidden != 1 else ''} not counted: `--min-impact low` counts them)")
    return printable("\n".join(lines))
