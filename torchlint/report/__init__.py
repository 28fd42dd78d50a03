"""Reporters: one module per ``--output-format`` (and the profile report's two)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from torchlint.findings import Finding

# --output-format name -> module in this package. `text` is the old name of `full`.
FORMATS = {
    "full": "full",
    "concise": "concise",
    "json": "json",
    "json-lines": "json_lines",
    "sarif": "sarif",
    "github": "github",
    "gitlab": "gitlab",
    "junit": "junit",
    "text": "full",
}
# Formats a person reads: they get colour, a summary line and the statistics table.
HUMAN_FORMATS = {"full", "concise", "text"}


def _no_lines(path: str, cell: int | None, line: int) -> str | None:
    return None


def _no_file_line(path: str, cell: int, line: int) -> int | None:
    return None


@dataclass(frozen=True)
class ReportContext:
    """What a reporter may need besides the findings."""

    files_checked: int = 0
    fixed: int = 0
    failed: int = 0  # files an internal error kept from being checked in full
    left_out: dict[str, int] = field(default_factory=dict)  # findings below min-impact, by impact
    color: bool = False
    root: Path = field(default_factory=Path.cwd)  # URIs in SARIF and GitLab reports are relative to it
    # The text of a source line: (display path, notebook cell or None, 1-based line) -> text.
    line_text: Callable[[str, int | None, int], str | None] = _no_lines
    # A notebook's file line that holds a cell's line: (display path, cell, line in cell) -> line.
    file_line: Callable[[str, int, int], int | None] = _no_file_line


# Machine formats escape control characters in their own grammar (exact and valid); every
# other format is text a terminal may show, with them as visible escapes (torchlint/terminal.py).
_MACHINE_SAFE = {"json": "json_safe", "json-lines": "json_safe", "sarif": "json_safe", "gitlab": "json_safe", "junit": "xml_safe"}


def render(output_format: str, findings: Sequence[Finding], context: ReportContext) -> str:
    """The report in ``output_format`` (a key of FORMATS), without a trailing newline."""
    from torchlint import terminal as escape

    module = importlib.import_module(f"torchlint.report.{FORMATS[output_format]}")
    text = module.render(findings, context)
    if output_format in _MACHINE_SAFE:
        return getattr(escape, _MACHINE_SAFE[output_format])(text)
    # A coloured report escaped what it quotes before colouring it: only its colours remain.
    return escape.printable(text, keep_colour=context.color)
