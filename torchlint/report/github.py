"""GitHub Actions workflow commands: one ``::warning`` annotation per finding.

Values are escaped as the runner unescapes them (``%``, CR and LF everywhere; ``:``
and ``,`` also in properties). A notebook finding annotates the file's line that holds
its source line (the runner counts lines of the file's JSON), its cell, line and column
in the message (report/paths.py: the convention every format follows)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from torchlint.findings import HIGH, LOW, MEDIUM, Finding
from torchlint.report.paths import file_line, notebook_place, relative

if TYPE_CHECKING:
    from torchlint.report import ReportContext


def escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


# GitHub's workflow commands by impact: an annotation's colour and where it is listed.
_LEVELS = {HIGH: "error", MEDIUM: "warning", LOW: "notice"}


def command(finding: Finding, context: ReportContext) -> str:
    loc = finding.location
    properties = {"file": relative(loc.path, context.root)}
    if loc.cell is None:
        properties |= {"line": str(loc.line), "col": str(loc.column)}
        if loc.end_line is not None:
            properties["endLine"] = str(loc.end_line)
        if loc.end_column is not None:
            properties["endColumn"] = str(loc.end_column)
    else:
        properties["line"] = str(file_line(loc, context))
    properties["title"] = f"{finding.code} {finding.name}"
    level = _LEVELS.get(finding.impact, "error" if finding.code == "TL000" else "warning")
    message = notebook_place(loc) + finding.message + (f"\nhelp: {finding.fix_hint}" if finding.fix_hint else "")
    props = ",".join(f"{key}={escape_property(value)}" for key, value in properties.items())
    return f"::{level} {props}::{escape_data(message)}"


def render(findings: Sequence[Finding], context: ReportContext) -> str:
    return "\n".join(command(f, context) for f in findings)
