"""Which findings are kept: rule selection, per-file ignores and ``# noqa`` comments."""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath

import pathspec

from torchlint.config import Config, ConfigError, validate_codes
from torchlint.engine.source import Source
from torchlint.findings import Finding

_NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Z]+[0-9]+(?:[\s,]+[A-Z]+[0-9]+)*))?", re.IGNORECASE)


def _expand(codes: tuple[str, ...], known: dict[str, bool]) -> set[str]:
    selected: set[str] = set()
    for code in codes:
        if code == "ALL":
            selected.update(known)
        else:
            selected.update(k for k in known if k.startswith(code))
    return selected


def selected_codes(config: Config, known: dict[str, bool]) -> set[str]:
    """The rule codes to run; ``known`` maps every code to whether it is on by default."""
    for key in ("select", "extend_select", "ignore"):
        validate_codes(getattr(config, key), set(known), key.replace("_", "-"))
    for pattern, codes in config.per_file_ignores.items():
        validate_codes(codes, set(known), f"per-file-ignores.{pattern}")
    if config.select:
        chosen = _expand(config.select, known)
    else:
        chosen = {code for code, default in known.items() if default}
    chosen |= _expand(config.extend_select, known)
    chosen -= _expand(config.ignore, known)
    return chosen


def noqa_codes(line: str) -> set[str] | None:
    """Codes a ``# noqa`` comment on ``line`` suppresses; an empty set means all of them."""
    if "noqa" not in line.lower():
        return None
    match = _NOQA.search(line)
    if match is None:
        return None
    codes = match.group("codes")
    return set(re.split(r"[\s,]+", codes.upper().strip())) if codes else set()


def is_suppressed(finding: Finding, source: Source | None) -> bool:
    if source is None or finding.code == "TL000":
        return False
    codes = noqa_codes(source.line_text(finding.location))
    return codes is not None and (not codes or finding.code in codes)


class PerFileIgnores:
    def __init__(self, config: Config, known: dict[str, bool]) -> None:
        self.root = config.root.resolve()
        self.rules = [
            (pathspec.GitIgnoreSpec.from_lines([pattern]), _expand(codes, known))
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


__all__ = ["ConfigError", "PerFileIgnores", "is_suppressed", "noqa_codes", "selected_codes"]
