"""``--show-fixes``: per file, how many findings of each rule ``--fix`` changed (or would)."""

from __future__ import annotations

from collections import Counter

from torchlint.terminal import printable


def render(per_file: dict[str, Counter[tuple[str, str]]], applied: bool) -> str:
    files = {path: rules for path, rules in sorted(per_file.items()) if +rules}
    total = sum(sum(rules.values()) for rules in files.values())
    if not files:
        return "No fixes applied." if applied else "No fixes available."
    verb = "Fixed" if applied else "Would fix"
    lines = [f"{verb} {total} problem{'s' if total != 1 else ''}:"]
    for path, rules in files.items():
        lines.append(f"- {printable(path, one_line=True)}:")
        for (code, name), count in sorted(rules.items()):
            lines.append(f"    {count} × {code} ({name})")
    return "\n".join(lines)
