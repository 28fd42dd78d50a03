"""The text report: ``path:line:col: CODE message``, a hint line, and a summary."""

from __future__ import annotations

from collections.abc import Sequence

import click

from torchlint.findings import Finding, FixSafety


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def render_finding(finding: Finding, color: bool) -> str:
    location = str(finding.location)
    code = finding.code
    fixable = " [*]" if finding.fix is not None and finding.fix.safety is FixSafety.SAFE else ""
    if color:
        location = click.style(location, bold=True)
        code = click.style(code, fg="red", bold=True)
    lines = [f"{location}: {code}{fixable} {finding.message}"]
    if finding.fix_hint:
        hint = click.style("help:", fg="cyan", bold=True) if color else "help:"
        lines.append(f"  {hint} {finding.fix_hint}")
    return "\n".join(lines)


def summary(findings: Sequence[Finding], files_checked: int, fixed: int = 0) -> str:
    parts = []
    if fixed:
        parts.append(f"Fixed {_plural(fixed, 'problem')}.")
    if not findings:
        parts.append(f"No problems found in {_plural(files_checked, 'file')}.")
        return "\n".join(parts)
    files = len({f.path for f in findings})
    parts.append(f"Found {_plural(len(findings), 'problem')} in {_plural(files, 'file')} ({files_checked} checked).")
    safe = sum(1 for f in findings if f.fix is not None and f.fix.safety is FixSafety.SAFE)
    unsafe = sum(1 for f in findings if f.fix is not None and f.fix.safety is FixSafety.UNSAFE)
    if safe:
        parts.append(f"{safe} fixable with `--fix` (marked [*]).")
    if unsafe:
        parts.append(f"{unsafe} more fixable with `--fix --unsafe-fixes`.")
    return "\n".join(parts)


def render(findings: Sequence[Finding], files_checked: int, color: bool = False, fixed: int = 0) -> str:
    body = [render_finding(f, color) for f in findings]
    return "\n".join([*body, *([""] if body else []), summary(findings, files_checked, fixed)])
