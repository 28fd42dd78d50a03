"""Report paths as CI services want them: relative to the project root, with ``/``; and
where a notebook finding is, in the one convention every format follows (docs/output.md).

A notebook finding names the ``.ipynb`` file. Its place in the notebook is ``cell C,
line L, column N`` (cells counted from 1 over all cells, markdown included, as Jupyter
and VS Code number them; lines within the cell), and every format says so: ``path:cell
C:L:N`` in the text formats, ``cell``/``line``/``column`` in JSON, and a message that
starts ``cell C, line L, column N: `` in JUnit, SARIF, GitLab and GitHub. Where a format
has a line of the file (a SARIF region, GitLab's lines, GitHub's and JUnit's ``line``), it
holds the line of the ``.ipynb`` that holds that source line (Jupyter writes one source
line per file line), 1 when that is not known."""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING
from urllib.parse import quote

from torchlint.findings import Location

if TYPE_CHECKING:
    from torchlint.report import ReportContext


def relative(path: str, root: Path) -> str:
    """``path`` (as findings name it: relative to the cwd, or absolute) relative to ``root``,
    or absolute when it lies outside."""
    absolute = Path(path) if Path(path).is_absolute() else Path.cwd() / path
    try:
        return absolute.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return absolute.resolve().as_posix()


def notebook_place(loc: Location) -> str:
    """``cell C, line L, column N: `` for a notebook finding; empty for a Python file."""
    return f"cell {loc.cell}, line {loc.line}, column {loc.column}: " if loc.cell is not None else ""


def file_line(loc: Location, context: ReportContext) -> int:
    """The line of the file itself: a Python file's line, a notebook's file line (1 unknown)."""
    if loc.cell is None:
        return loc.line
    return context.file_line(loc.path, loc.cell, loc.line) or 1


def uri(path: str, root: Path) -> str:
    """A URI reference: relative (to the checkout root) when possible, else ``file://``."""
    rel = relative(path, root)
    if PurePosixPath(rel).is_absolute():
        return Path(rel).as_uri()
    return quote(rel)
