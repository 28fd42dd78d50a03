"""Reports one fix removes together (``Report.group``, keyed by data their check gives) made one.

A host index copied over at each of eight indexings of a step is one problem with one fix (the
index built on the device once): one finding at the first indexing, the others its related
places, its message saying how many and where, repeated in its step once per member so that its
tier is the group's (``multiplicity.one_fix``). The engine knows nothing of what is grouped: equal keys
of one check are one group.

``# noqa``: the finding stands at the group's first line, so a comment there suppresses it whole
(``--add-noqa`` writes it there). A comment on another member's line that suppresses the rule
takes that member out of the group before it is counted: it is reported alone, where its own
comment suppresses it (so that comment is used, no TL001), and the group stands for the rest,
placed where its check placed its members (``Report.placed_as``: the costliest of the whole
group, one taken out included).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable

from torchlint.analysis.multiplicity import one_fix
from torchlint.checks.base import Check, Report
from torchlint.engine.source import Source
from torchlint.engine.suppress import comment_directive
from torchlint.findings import Location


def merge_groups(made: list[tuple[type[Check], Report]], source: Source, where: Callable[[Any], Location]) -> list[tuple[type[Check], Report]]:
    """``made`` with each group of two or more members (after those a ``# noqa`` takes out)
    replaced by one report at its first member; a lone member is a report of its own.
    ``where``: a reported node's location."""
    groups: dict[tuple[str, Any], list[tuple[Location, Report]]] = {}
    for check_type, report in made:
        if report.group is not None:
            groups.setdefault((check_type.code, report.group.key), []).append((where(report.node), report))
    if not groups:
        return made
    merged: dict[int, Report | None] = {}  # by the member's identity: its replacement, or None (merged away)
    for (code, _), members in groups.items():
        members.sort(key=lambda member: (member[0].cell or 0, member[0].line, member[0].column))
        first = members[0]
        # (a member whose own line suppresses the rule leaves the group: its comment suppresses it alone)
        kept = [first] + [member for member in members[1:] if not _suppressed(source, member[0], code)]
        for _, report in members:
            merged[id(report)] = replace(report, group=None)
        if len(kept) < 2:
            continue
        for _, report in kept[1:]:
            merged[id(report)] = None
        merged[id(first[1])] = _one(first, kept[1:])
    return [(check_type, merged.get(id(report), report)) for check_type, report in made if merged.get(id(report), report) is not None]  # type: ignore[misc]


def _one(first: tuple[Location, Report], others: list[tuple[Location, Report]]) -> Report:
    """The report standing for a group: the first member's, with the others' nodes related,
    the group's words and hint, and one repetition in its step per member."""
    location, report = first
    group = report.group
    assert group is not None
    lines = sorted({other.line for other, _ in others if other.line != location.line or other.cell != location.cell})
    where = f", here and at line{'s' if len(lines) > 1 else ''} {', '.join(map(str, lines))}" if lines else ""
    words = group.words.replace("{count}", str(len(others) + 1)).replace("{lines}", where)
    return replace(report, message=report.message + words, related=tuple(r.node for _, r in others) + report.related,
                   hint=group.hint or report.hint, itself=one_fix(group.what, len(others) + 1, group.adjacent), group=None)


def _suppressed(source: Source, location: Location, code: str) -> bool:
    """Does a ``# noqa`` governing ``location``'s line suppress ``code``?"""
    governing = comment_directive(source, location)
    return governing is not None and governing[1].suppresses(code)
