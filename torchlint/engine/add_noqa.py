"""``--add-noqa``: a ``# noqa: CODE`` comment on the line of each current finding.

Existing comments stay; codes join an existing ``# noqa:`` list; a line that already
has a bare ``# noqa`` is left alone. A line that cannot end in a comment (it goes on
with a backslash, or a string continues past it) is skipped and reported."""

from __future__ import annotations

import io
import tokenize
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from torchlint.engine.suppress import _CODES, _NOQA, ALL, line_directive
from torchlint.findings import Finding


@dataclass(slots=True)
class NoqaPlan:
    text: str
    added: int = 0  # codes added
    skipped: list[int] = field(default_factory=list)  # lines that cannot hold a comment


def commentable_lines(text: str) -> set[int] | None:
    """Lines whose end is outside any string and not continued by a backslash
    (None when the text does not tokenize)."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return None
    return {tok.start[0] for tok in tokens if tok.type in (tokenize.NEWLINE, tokenize.NL)} | {
        tok.start[0] for tok in tokens if tok.type == tokenize.COMMENT
    }


def codes_by_line(findings: Iterable[Finding]) -> dict[int, set[str]]:
    """Which codes to suppress on which line (syntax errors cannot be suppressed)."""
    lines: dict[int, set[str]] = defaultdict(set)
    for finding in findings:
        if finding.code != "TL000" and finding.location.cell is None:
            lines[finding.line].add(finding.code)
    return lines


def _with_codes(line: str, codes: set[str]) -> tuple[str, int]:
    """``line`` (without its line ending) suppressing ``codes`` too, and how many were added."""
    directive = line_directive(line)
    if directive is None:
        return f"{line.rstrip()}  # noqa: {', '.join(sorted(codes))}", len(codes)
    if directive.codes is ALL:
        return line, 0
    assert directive.codes is not None
    missing = codes - directive.codes
    if not missing:
        return line, 0
    match = _NOQA.search(line)
    assert match is not None
    listed = _CODES.match(line, match.start("rest"))
    assert listed is not None
    merged = ", ".join(sorted(directive.codes | missing))
    return line[: listed.start()] + merged + line[listed.end():], len(missing)


def add_noqa(text: str, findings: Iterable[Finding]) -> NoqaPlan:
    """``text`` with the noqa comments the findings need."""
    wanted = codes_by_line(findings)
    plan = NoqaPlan(text)
    if not wanted:
        return plan
    safe = commentable_lines(text) or set()
    lines = text.splitlines(keepends=True)
    for number, codes in sorted(wanted.items()):
        if number > len(lines):
            continue
        body = lines[number - 1]
        ending = body[len(body.rstrip("\r\n")):]
        body = body[: len(body) - len(ending)]
        directive = line_directive(body)
        if number not in safe or (directive is not None and directive.codes is None):
            plan.skipped.append(number)
            continue
        new, added = _with_codes(body, codes)
        lines[number - 1] = new + ending
        plan.added += added
    plan.text = "".join(lines)
    return plan


__all__ = ["NoqaPlan", "add_noqa", "codes_by_line", "commentable_lines"]
