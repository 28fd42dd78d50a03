"""``--add-noqa``: a ``# noqa: CODE`` comment for each current finding.

The comment goes where suppression reads it (``engine/comments.py``): at the end of the
finding's line, or, when that line ends inside a string or goes on with a backslash,
after the last token of the line that ends it; never inside a string. Existing comments
stay; codes join an existing ``# noqa:`` list; a bare ``# noqa`` is left alone. A line
whose ``# noqa`` is malformed, or a text that does not tokenize, is skipped and reported."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from torchlint.engine.comments import comments
from torchlint.engine.suppress import _CODES, _NOQA, ALL, line_directive
from torchlint.findings import Finding
from torchlint.textlines import lines_with_ends


@dataclass(slots=True)
class NoqaPlan:
    text: str
    added: int = 0  # codes added
    skipped: list[int] = field(default_factory=list)  # lines that cannot hold a comment


def codes_by_line(findings: Iterable[Finding]) -> dict[int, set[str]]:
    """Which codes to suppress on which line (syntax errors cannot be suppressed)."""
    lines: dict[int, set[str]] = defaultdict(set)
    for finding in findings:
        if finding.code != "TL000" and finding.location.cell is None:
            lines[finding.line].add(finding.code)
    return lines


def _merged(comment: str, codes: set[str]) -> tuple[str, int] | None:
    """``comment`` (a ``#`` comment's text) suppressing ``codes`` too, and how many were
    added; None when its ``# noqa`` is malformed (it must be mended by hand)."""
    directive = line_directive(comment)
    if directive is None:
        kept = comment.rstrip(" \t")
        return f"{kept}  # noqa: {', '.join(sorted(codes))}", len(codes)
    if directive.codes is None:
        return None
    missing = codes - directive.codes
    if directive.codes is ALL or not missing:
        return comment, 0
    match = _NOQA.search(comment)
    assert match is not None
    listed = _CODES.match(comment, match.start("rest"))
    assert listed is not None
    merged = ", ".join(sorted(directive.codes | missing))
    return comment[: listed.start()] + merged + comment[listed.end():], len(missing)


def add_noqa(text: str, findings: Iterable[Finding]) -> NoqaPlan:
    """``text`` with the noqa comments the findings need."""
    wanted = codes_by_line(findings)
    plan = NoqaPlan(text)
    if not wanted:
        return plan
    found = comments(text)
    by_home: dict[int, set[str]] = defaultdict(set)
    for number, codes in sorted(wanted.items()):
        home = found.home(number) if found.tokenized else None
        if home is None:
            plan.skipped.append(number)
        else:
            by_home[home] |= codes
    lines = lines_with_ends(text)
    for home, codes in sorted(by_home.items()):
        if home > len(lines):
            plan.skipped.append(home)
            continue
        line = lines[home - 1]
        body = line.rstrip("\r\n")
        ending = line[len(body):]
        column, comment = found.text_of.get(home, (found.code_end.get(home, len(body.rstrip(" \t\f"))), ""))
        merged = _merged(comment, codes) if comment else (f"  # noqa: {', '.join(sorted(codes))}", len(codes))
        if merged is None:
            plan.skipped.append(home)
            continue
        new, added = merged
        lines[home - 1] = body[:column] + new + (body[column + len(comment):] if comment else "") + ending
        plan.added += added
    plan.text = "".join(lines)
    return plan


__all__ = ["NoqaPlan", "add_noqa", "codes_by_line"]
