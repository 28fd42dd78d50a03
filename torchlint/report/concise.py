"""The concise report: ``path:line:col: CODE message``, one line per finding, and a summary."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import click

from collections import Counter

from torchlint.findings import IMPACT_RANK, IMPACTS, SYNTAX_ERROR, Finding, FixSafety
from torchlint.terminal import printable

if TYPE_CHECKING:
    from torchlint.report import ReportContext


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def headline(finding: Finding, color: bool) -> str:
    """The finding's one line: where, which rule ([*] when --fix repairs it), what."""
    location = printable(str(finding.location), one_line=True)
    code = finding.code
    fixable = " [*]" if finding.fix is not None and finding.fix.safety is FixSafety.SAFE else ""
    if color:
        location = click.style(location, bold=True)
        code = click.style(code, fg="red", bold=True)
    return f"{location}: {code}{fixable} {printable(finding.message, one_line=True)}"


def summary(findings: Sequence[Finding], files_checked: int, fixed: int = 0, failed: int = 0, left_out: dict[str, int] | None = None) -> str:
    parts = []
    if fixed:
        parts.append(f"Fixed {_plural(fixed, 'problem')}.")
    # A file an internal error stopped is not a file without problems: never say so of it.
    unchecked = f"; {_plural(failed, 'file')} could not be checked in full (internal error, on stderr)" if failed else ""
    # A file that could not be read or parsed (TL000) is no performance finding, so it has no tier:
    # the summary says it was not checked, as ruff's does (and, as ruff's, it counts as a problem: exit 1).
    unparsed = len({f.path for f in findings if f.code == SYNTAX_ERROR[0]})
    unchecked += f"; {_plural(unparsed, 'file')} could not be parsed" if unparsed else ""
    hidden = _left_out(left_out or {})
    if not findings:
        clean = files_checked - failed
        what = f"{_shown_tiers(left_out or {})} problems" if hidden else "problems"
        parts.append(f"No {what} found in {_plural(clean, 'file')}{unchecked}." if clean or not failed
                     else f"{_plural(failed, 'file')} could not be checked in full (internal error, on stderr).")
        parts.extend(hidden)
        return "\n".join(parts)
    files = len({f.path for f in findings})
    tiers = Counter(f.impact for f in findings if f.impact)
    by_impact = f" ({', '.join(f'{tiers[i]} {i}' for i in IMPACTS if tiers[i])})" if tiers else ""
    parts.append(f"Found {_plural(len(findings), 'problem')}{by_impact} in {_plural(files, 'file')} ({files_checked} checked{unchecked}).")
    parts.extend(hidden)
    safe = sum(1 for f in findings if f.fix is not None and f.fix.safety is FixSafety.SAFE)
    unsafe = sum(1 for f in findings if f.fix is not None and f.fix.safety is FixSafety.UNSAFE)
    if safe:
        parts.append(f"{safe} fixable with `--fix` (marked [*]).")
    if unsafe:
        parts.append(f"{unsafe} more fixable with `--fix --unsafe-fixes`.")
    return "\n".join(parts)


def _shown_tiers(left_out: dict[str, int]) -> str:
    """The impacts of which there is no finding, when those in ``left_out`` were left out
    and nothing was shown: the tiers above the highest one left out ("high- or medium-impact")."""
    first_hidden = min(IMPACTS.index(i) for i in IMPACTS if left_out.get(i))
    shown = IMPACTS[:first_hidden] or IMPACTS[:1]
    return " or ".join(f"{tier}-" for tier in shown[:-1]) + (" or " if len(shown) > 1 else "") + f"{shown[-1]}-impact"


def _left_out(left_out: dict[str, int]) -> list[str]:
    """The line that says how many lower-impact findings were not shown, and how to see them."""
    count = sum(left_out.values())
    if not count:
        return []
    lowest = next(i for i in reversed(IMPACTS) if left_out.get(i))
    tiers = " or ".join(i for i in IMPACTS if left_out.get(i))
    return [f"{_plural(count, f'{tiers}-impact finding')} not shown (`--min-impact {lowest}` shows {'it' if count == 1 else 'them'})."]


def by_impact(findings: Sequence[Finding]) -> list[Finding]:
    """Highest impact first, then by file and line (what is worth fixing first leads); a finding
    with no tier (TL000: a file that could not be parsed) after the ranked ones."""
    return sorted(findings, key=lambda f: (IMPACT_RANK.get(f.impact, len(IMPACT_RANK)), f.sort_key()))


def render(findings: Sequence[Finding], context: ReportContext) -> str:
    body = [headline(f, context.color) for f in by_impact(findings)]
    return "\n".join([*body, *([""] if body else []), summary(findings, context.files_checked, context.fixed, context.failed, context.left_out)])
