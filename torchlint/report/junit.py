"""JUnit XML: one test suite per file, one failing test case per finding (as ruff writes it)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from itertools import groupby
from typing import TYPE_CHECKING

from torchlint.findings import Finding
from torchlint.terminal import xml_safe
from torchlint.report.paths import file_line, notebook_place

if TYPE_CHECKING:
    from torchlint.report import ReportContext


def render(findings: Sequence[Finding], context: ReportContext) -> str:
    suites = ET.Element("testsuites", name="torchlint", tests=str(max(len(findings), 1)), failures=str(len(findings)), errors="0")
    if not findings:
        suite = ET.SubElement(suites, "testsuite", name="torchlint", tests="1", failures="0", errors="0")
        ET.SubElement(suite, "testcase", name="torchlint", classname="torchlint")
    for path, group in groupby(sorted(findings, key=Finding.sort_key), key=lambda f: f.path):
        cases = list(group)
        suite = ET.SubElement(suites, "testsuite", name=path, tests=str(len(cases)), failures=str(len(cases)), errors="0")
        for finding in cases:
            loc = finding.location
            case = ET.SubElement(suite, "testcase", name=f"torchlint.{finding.code}", classname=path, file=path, line=str(file_line(loc, context)))
            failure = ET.SubElement(case, "failure", message=notebook_place(loc) + finding.message, type=f"{finding.code} {finding.name}")
            impact = f" (impact: {finding.impact}: {finding.impact_reason})" if finding.impact else ""
            where = notebook_place(loc) if loc.cell is not None else f"line {loc.line}, col {loc.column}, "
            failure.text = f"{where}{finding.message}{impact}"
    ET.indent(suites)
    # XML 1.0 cannot hold C0 controls, which a message quoting source may: escaped validly.
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + xml_safe(ET.tostring(suites, encoding="unicode"))
