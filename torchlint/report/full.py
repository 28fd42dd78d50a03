"""The full report (the default): each finding, its source lines with a caret span
under the flagged code, and the help line, as ruff prints them; then a summary."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import click

from torchlint.findings import Finding
from torchlint.report.concise import by_impact, headline, summary
from torchlint.terminal import printable

if TYPE_CHECKING:
    from torchlint.report import ReportContext

CONTEXT_LINES = 2  # shown before and after the flagged line


# Characters a Python line may hold that a terminal would move the cursor for (a form
# feed, U+2028): shown as one space each, so the carets stay under their columns.
_INVISIBLE = str.maketrans({c: " " for c in "\x0b\x0c\x1c\x1d\x1e\x1f\x85\u2028\u2029"})


def _expand(text: str) -> str:
    """The line as shown: tabs as spaces, other control characters as visible escapes
    (their display width counts, so the carets stay under their columns)."""
    return printable(text.replace("\t", "    ").translate(_INVISIBLE), one_line=True)


def _carets(finding: Finding, text: str) -> tuple[int, int]:
    """Display offset and width of the flagged span on its first line (a span that goes
    on past the line is marked to the line's end)."""
    loc = finding.location
    start = loc.column - 1
    if loc.end_line in (None, loc.line) and loc.end_column is not None:
        end = loc.end_column - 1
    else:
        end = len(text.rstrip())
    offset = len(_expand(text[:start]))
    return offset, max(len(_expand(text[start:end])), 1)


def snippet(finding: Finding, context: ReportContext) -> tuple[list[str], int]:
    """The source lines around the finding with carets under its span (empty if
    unreadable), and the width of the line-number gutter."""
    loc = finding.location
    lines: dict[int, str] = {}
    for number in range(max(loc.line - CONTEXT_LINES, 1), loc.line + CONTEXT_LINES + 1):
        text = context.line_text(loc.path, loc.cell, number)
        if text is None:
            if number <= loc.line:
                lines.clear()  # lines before the flagged one may be missing; the flagged one may not
                if number == loc.line:
                    return [], 0
                continue
            break
        lines[number] = text
    for number in sorted(lines):  # blank context lines at the edges say nothing
        if number < loc.line and not lines[number].strip():
            del lines[number]
        elif number >= loc.line:
            break
    for number in sorted(lines, reverse=True):
        if number > loc.line and not lines[number].strip():
            del lines[number]
        else:
            break
    width = len(str(max(lines)))
    style = (lambda s, **kw: click.style(s, **kw)) if context.color else (lambda s, **kw: s)
    gutter = style(f"{'':>{width}} |", fg="blue", bold=True)
    out = [gutter]
    for number, text in sorted(lines.items()):
        out.append(f"{style(f'{number:>{width}} |', fg='blue', bold=True)} {_expand(text)}".rstrip())
        if number == loc.line:
            offset, carets = _carets(finding, text)
            out.append(f"{gutter} {' ' * offset}{style('^' * carets + ' ' + finding.code, fg='red', bold=True)}")
    out.append(gutter)
    return out, width


def render_finding(finding: Finding, context: ReportContext) -> str:
    source, width = snippet(finding, context)
    lines = [headline(finding, context.color), *source]
    # Under the gutter's `|` as ruff puts it; the same shape when there is no source to show
    # (a file that cannot be read: its TL000).
    lead = f"{' ' * width} = " if source else "  = "
    if finding.impact:
        label = click.style("impact:", fg="magenta", bold=True) if context.color else "impact:"
        lines.append(f"{lead}{label} {finding.impact} ({printable(finding.impact_reason or '')})")
    elif finding.impact_reason:  # no tier (TL000): what it means instead
        label = click.style("note:", fg="magenta", bold=True) if context.color else "note:"
        lines.append(f"{lead}{label} {printable(finding.impact_reason)}")
    if finding.fix_hint:
        hint = click.style("help:", fg="cyan", bold=True) if context.color else "help:"
        lines.append(f"{lead}{hint} {printable(finding.fix_hint)}")
    return "\n".join(lines)


def render(findings: Sequence[Finding], context: ReportContext) -> str:
    body = [render_finding(f, context) + "\n" for f in by_impact(findings)]
    return "\n".join([*body, summary(findings, context.files_checked, context.fixed, context.failed, context.left_out)])
