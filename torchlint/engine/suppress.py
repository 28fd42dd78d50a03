"""Which findings are kept: rule selection, per-file ignores and ``# noqa`` comments.

Selections accept rule names as well as codes (``--select scalar-sync-in-loop``).
``# noqa`` comments take codes only, as ruff's do: a ``# noqa: scalar-sync-in-loop``
is malformed, suppresses nothing, and is reported once on stderr with the code to use.
"""

from __future__ import annotations

import functools
import re
import sys
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import Any

from torchlint import catalogue
from torchlint.config import Config, ConfigError, gitignore_spec, validate_codes
from torchlint.engine.comments import comments
from torchlint.engine.source import Source, python_lines
from torchlint.findings import UNUSED_NOQA, Finding, Location

_CODE_LIST = r"[A-Z]+[0-9]+(?:[\s,]+[A-Z]+[0-9]+)*"
# `# noqa`, `# noqa: TL101, TL102`, or a malformed `# noqa:` followed by something else.
_NOQA = re.compile(r"#\s*noqa(?P<colon>:[ \t]*(?P<rest>\S*))?", re.IGNORECASE)
_CODES = re.compile(_CODE_LIST, re.IGNORECASE)
# The file-level form, a comment on a line of its own: `# torchlint: noqa[: TL101, ...]`.
_FILE_NOQA = re.compile(r"^[ \t]*#[ \t]*torchlint:[ \t]*noqa(?P<colon>:[ \t]*(?P<rest>[^\n]*))?[ \t\r]*$", re.IGNORECASE | re.MULTILINE)

ALL = frozenset()  # a directive that suppresses every rule
_warned: set[tuple[str, int]] = set()


@dataclass(frozen=True, slots=True)
class Directive:
    """A parsed ``noqa`` comment: the codes it suppresses (ALL: every rule), or malformed."""

    codes: frozenset[str] | None  # None: malformed, suppresses nothing
    text: str

    def suppresses(self, code: str) -> bool:
        return self.codes is not None and (self.codes is ALL or code in self.codes)


def _directive(match: re.Match[str], rest: str | None) -> Directive:
    if match.group("colon") is None:
        return Directive(ALL, match.group(0))
    codes = _CODES.match(rest or "")
    if codes is None:
        return Directive(None, match.group(0).strip())
    return Directive(frozenset(re.split(r"[\s,]+", codes.group(0).upper().strip())), match.group(0))


def line_directive(line: str) -> Directive | None:
    """The ``# noqa`` comment on ``line``, if it has one."""
    if "noqa" not in line.lower():
        return None
    match = _NOQA.search(line)
    if match is None:
        return None
    rest = line[match.start("rest"):] if match.group("colon") is not None else None
    return _directive(match, rest)


def noqa_codes(line: str) -> set[str] | None:
    """Codes a well-formed ``# noqa`` comment on ``line`` suppresses; an empty set means all."""
    directive = line_directive(line)
    if directive is None or directive.codes is None:
        return None
    return set(directive.codes)


@functools.lru_cache(maxsize=8)  # keyed on the text, whose hash Python caches
def _mentions_noqa(text: str) -> bool:
    return "noqa" in text.lower()


@functools.lru_cache(maxsize=8)
def file_directives(text: str) -> tuple[tuple[int, Directive], ...]:
    """``(line, directive)`` for each file-level ``# torchlint: noqa`` comment: a real
    comment alone on its line (one inside a docstring is text, not a directive)."""
    if "torchlint:" not in text or not _mentions_noqa(text):
        return ()
    found = comments(text)
    if not found.tokenized:  # no comment can be told from text: as a line of its own
        candidates = [(text.count("\n", 0, m.start()) + 1, m.group(0)) for m in _FILE_NOQA.finditer(text)]
    else:
        candidates = found.own_line_comments(python_lines(text))
    directives = []
    for line, comment in candidates:
        match = _FILE_NOQA.match(comment)
        if match is not None:
            directives.append((line, _directive(match, match.group("rest"))))
    return tuple(directives)


def comment_directive(source: Source, location: Location) -> tuple[int, Directive] | None:
    """The line and ``# noqa`` comment that govern a finding at ``location``: the comment
    ending its line, or, for a line that ends inside a string or goes on with a
    backslash, the comment ending the line where that logical line can first take one."""
    if not _mentions_noqa(source.text):
        return None
    line = source.text_line(location)
    found = comments(source.text)
    if not found.tokenized:  # e.g. syntax newer than this Python's tokenizer: the line's text
        directive = line_directive(source.line_text(location))
        return (line, directive) if directive is not None else None
    home = found.home(line)
    text = found.comment(home) if home is not None else None
    directive = line_directive(text) if text is not None else None
    return (home, directive) if directive is not None and home is not None else None


def unused_noqa(source: Source, candidates: list[Finding], known: set[str], selected: set[str], module: Any = None) -> list[Finding]:
    """TL001 for each ``# noqa: CODE, ...`` comment that names a torchlint code which
    suppresses nothing there: no finding of that code governed by the comment among
    ``candidates`` (what would be reported without suppression), a code that is no rule
    (``known``: the static codes), or a rule not run on the file (``selected``). Other
    tools' codes (``E501``) and a bare ``# noqa``, which other linters read too, are left
    alone; runtime codes (``TLR``) are `torchlint profile`'s. With ``module`` (the file's
    libcst tree), each carries the safe fix that takes the unused and unknown codes out
    (``engine/noqa_fix.py``); a code of a rule not selected in this run stays."""
    if not _mentions_noqa(source.text):
        return []
    found = comments(source.text)
    if not found.tokenized:
        return []
    used: set[tuple[int, str]] = set()
    for finding in candidates:
        home = found.home(source.text_line(finding.location))
        if home is not None:
            used.add((home, finding.code))
    reports = []
    holders: list[Any] | None = None
    for line, (column, text) in sorted(found.text_of.items()):
        directive = line_directive(text)
        if directive is None or not directive.codes:  # absent, malformed or bare
            continue
        ours = sorted(c for c in directive.codes if c.startswith("TL") and not c.startswith("TLR") and c != UNUSED_NOQA[0])
        unknown = [c for c in ours if c not in known]
        disabled = [c for c in ours if c in known and c not in selected]
        unused = [c for c in ours if c in selected and (line, c) not in used]
        if unknown or disabled or unused:
            noqa = _NOQA.search(text)
            assert noqa is not None  # line_directive found it
            finding = _unused_finding(source, line, column + noqa.start(), column + len(text), unused, unknown, disabled)
            if module is not None and (unused or unknown):
                if holders is None:  # the tree's comments, found once per file, when a fix needs them
                    from torchlint.engine.noqa_fix import holders_of

                    holders = holders_of(module)
                finding = _with_fix(finding, holders, sorted(found.text_of).index(line), text, noqa, {*unused, *unknown})
            reports.append(finding)
    return reports


def _with_fix(finding: Finding, holders: list[Any], index: int, text: str, noqa: re.Match[str], drop: set[str]) -> Finding:
    """``finding`` with the fix that takes ``drop`` out of its comment (the ``index``-th of
    the file, ``text``), when the tree's comment at that place (``holders``) is that text."""
    from torchlint.engine import noqa_fix

    holder = holders[index] if index < len(holders) else None
    if holder is None or holder.comment is None or holder.comment.value != text:
        return finding  # the tree and the tokenizer disagree: no fix rather than a wrong one
    codes = _CODES.match(text, noqa.start("rest"))
    if codes is None:
        return finding
    new_text = noqa_fix.without_codes(text, noqa, codes.end(), drop)
    what = f"Remove {', '.join(sorted(drop))} from the `# noqa`" if new_text is not None else "Remove the unused `# noqa`"
    return replace(finding, fix=noqa_fix.removal(holder, new_text, what))


def _unused_finding(source: Source, line: int, start: int, end: int, unused: list[str], unknown: list[str], disabled: list[str]) -> Finding:
    from torchlint.analysis.impact import Cost, assess
    from torchlint.analysis.multiplicity import Where

    parts = [f"{', '.join(unused)} (nothing reported here)"] if unused else []
    parts += [f"{', '.join(unknown)} (no such rule)"] if unknown else []
    parts += [f"{', '.join(disabled)} (not selected)"] if disabled else []
    impact, reason = assess(Cost.SUPPRESSION, Where.ONCE)
    code, name = UNUSED_NOQA
    return Finding(
        code, name, f"`# noqa` suppresses nothing for {'; '.join(parts)}", source.location(line, start + 1, line, end + 1),
        "Remove the codes that suppress nothing, or the whole comment when none is left", impact=impact, impact_reason=reason,
    )


def _warn_malformed(path: str, line: int, directive: Directive) -> None:
    if (path, line) in _warned:
        return
    _warned.add((path, line))
    rest = directive.text.split(":", 1)[-1].strip() if ":" in directive.text else ""
    rule = catalogue.find(rest.split(",")[0].strip()) if rest else None
    hint = f"`# noqa: {rule.code}`" if rule is not None else "codes such as `# noqa: TL101`"
    from torchlint.terminal import printable  # a worker's stderr is no SafeStream

    print(printable(f"torchlint: warning: {path}:{line}: malformed `{directive.text}` suppresses nothing; use {hint}"), file=sys.stderr)


def is_suppressed(finding: Finding, source: Source | None) -> bool:
    if source is None or finding.code == "TL000":
        return False
    for line, directive in file_directives(source.text):
        if directive.codes is None:
            _warn_malformed(finding.path, line, directive)
        elif directive.suppresses(finding.code):
            return True
    governing = comment_directive(source, finding.location)
    if governing is None:
        return False
    line, directive = governing
    if directive.codes is None:
        _warn_malformed(finding.path, finding.line + line - source.text_line(finding.location), directive)
        return False
    return directive.suppresses(finding.code)


@functools.lru_cache(maxsize=1)
def _codes_by_name() -> dict[str, str]:
    return {rule.name.upper(): rule.code for rule in catalogue.all_rules()}


def resolve_names(codes: tuple[str, ...]) -> tuple[str, ...]:
    """Codes for rule names (in any case), so names work wherever codes do."""
    names = _codes_by_name()
    return tuple(names.get(code.upper(), code) for code in codes)


def _expand(codes: tuple[str, ...], known: dict[str, bool]) -> set[str]:
    selected: set[str] = set()
    for code in resolve_names(codes):
        if code == "ALL":
            selected.update(known)
        else:
            selected.update(k for k in known if k.startswith(code))
    return selected


def _runtime_only(code: str, known: dict[str, bool]) -> bool:
    """``code`` names runtime rules (``TLR01``, ``TLR``) and no static one."""
    return not any(k.startswith(code) for k in known) and any(r.startswith(code) for r in catalogue.runtime_codes())


def _static(codes: tuple[str, ...], known: dict[str, bool], key: str) -> tuple[str, ...]:
    """``codes`` without runtime codes: ignoring one is fine (a config shared with
    `torchlint profile`), selecting one is an error, as `check` cannot run it."""
    kept = []
    for code in resolve_names(codes):
        if not _runtime_only(code, known):
            kept.append(code)
        elif key in ("select", "extend-select"):
            raise ConfigError(
                f"`{code}` in `{key}` is a runtime rule: `torchlint profile` reports it from a run of the "
                "script; `check` runs the static rules only"
            )
    return tuple(kept)


def selected_codes(config: Config, known: dict[str, bool]) -> set[str]:
    """The rule codes to run; ``known`` maps every code to whether it is on by default."""
    for key in ("select", "extend_select", "ignore"):
        name = key.replace("_", "-")
        validate_codes(_static(getattr(config, key), known, name), set(known), name)
    for pattern, codes in config.per_file_ignores.items():
        validate_codes(_static(codes, known, "per-file-ignores"), set(known), f"per-file-ignores.{pattern}")
    if config.select:
        chosen = _expand(config.select, known)
    else:
        chosen = {code for code, default in known.items() if default}
    chosen |= _expand(config.extend_select, known)
    chosen -= _expand(config.ignore, known)
    return chosen


class PerFileIgnores:
    def __init__(self, config: Config, known: dict[str, bool]) -> None:
        self.root = config.root.resolve()
        self.rules = [
            (gitignore_spec([pattern]), _expand(codes, known))
            for pattern, codes in config.per_file_ignores.items()
        ]

    def ignored_codes(self, path: Path) -> set[str]:
        if not self.rules:
            return set()
        resolved = path.resolve()
        try:
            relative = resolved.relative_to(self.root).as_posix()
        except ValueError:
            relative = PurePosixPath(resolved.as_posix()).name
        codes: set[str] = set()
        for spec, rule_codes in self.rules:
            if spec.match_file(relative) or spec.match_file(resolved.name):
                codes |= rule_codes
        return codes


__all__ = ["ConfigError", "Directive", "comment_directive", "unused_noqa", "PerFileIgnores", "file_directives", "is_suppressed", "line_directive", "noqa_codes", "resolve_names", "selected_codes"]
