"""Reading a file into Python source: encodings, notebooks, and TL000 for what cannot be read."""

from __future__ import annotations

import hashlib
import io
import json
import re
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

from torchlint.findings import SYNTAX_ERROR, Finding, Location

# IPython syntax a notebook cell may hold that is not Python: magics, shell escapes, help.
# IPython syntax a cell may hold that is not Python: line magics, shell escapes, help
# (`?x`, `torch.*Tensor?`). Each becomes `pass` at its indentation, so a magic that is
# the only statement of a block (`if x:\n    %pip install y`) leaves the block valid.
_IPYTHON_LINE = re.compile(r"^(?P<indent>\s*)(%|!|\?|[\w.*]+\?{1,2}\s*$)")
# Cell magics whose body is still Python; the body of any other (%%bash...) is not.
_PYTHON_CELL_MAGICS = {"%%time", "%%timeit", "%%capture", "%%prun"}


def _cell_lines(body: str) -> list[str]:
    raw_lines = body.splitlines() or [""]
    first = raw_lines[0].strip()
    if first.startswith("%%") and first.split()[0] not in _PYTHON_CELL_MAGICS:
        return ["# " + raw for raw in raw_lines]
    lines = []
    for raw in raw_lines:
        match = _IPYTHON_LINE.match(raw)
        lines.append(f"{match.group('indent')}pass  # {raw.strip()}" if match else raw)
    return lines


@dataclass(slots=True)
class CellMap:
    """Maps a line of the joined notebook source back to (cell number, line in cell)."""

    starts: list[tuple[int, int]] = field(default_factory=list)  # (first joined line, cell number)

    def locate(self, line: int) -> tuple[int, int]:
        cell_start, cell = 1, 1
        for start, number in self.starts:
            if start > line:
                break
            cell_start, cell = start, number
        return cell, line - cell_start + 1

    def joined_line(self, cell: int, line: int) -> int:
        for start, number in self.starts:
            if number == cell:
                return start + line - 1
        return line


@dataclass(slots=True)
class Source:
    path: str
    text: str
    cells: CellMap | None = None  # set for notebooks
    encoding: str = "utf-8"
    digest: str = ""  # sha256 of the bytes read, to detect a file changed before --fix writes

    def cell_spans(self) -> list[tuple[int, int, int]]:
        """(cell number, first joined line, last joined line) of each code cell."""
        if self.cells is None:
            return []
        total = len(self.text.splitlines())
        starts = self.cells.starts
        return [
            (number, start, (starts[i + 1][0] - 1) if i + 1 < len(starts) else total)
            for i, (start, number) in enumerate(starts)
        ]

    def without_lines(self, spans: list[tuple[int, int]]) -> Source:
        """The same source with the lines in ``spans`` (1-based, inclusive) commented out."""
        lines = self.text.splitlines()
        for first, last in spans:
            for i in range(first - 1, last):
                lines[i] = "# " + lines[i]
        return Source(self.path, "\n".join(lines) + "\n", self.cells, self.encoding, self.digest)

    def line_text(self, location: Location) -> str:
        """The text of the line ``location`` points at."""
        line = location.line
        if self.cells is not None and location.cell is not None:
            line = self.cells.joined_line(location.cell, line)
        lines = self.text.splitlines()
        return lines[line - 1] if 0 < line <= len(lines) else ""

    def location(self, line: int, column: int, end_line: int | None = None, end_column: int | None = None) -> Location:
        """A 1-based Location; in a notebook, lines count within the cell."""
        if self.cells is None:
            return Location(self.path, line, column, end_line, end_column)
        cell, cell_line = self.cells.locate(line)
        end = None if end_line is None else end_line - (line - cell_line)
        return Location(self.path, cell_line, column, end, end_column, cell=cell)


def syntax_error(path: str, message: str, line: int = 1, column: int = 1, cell: int | None = None) -> Finding:
    code, name = SYNTAX_ERROR
    return Finding(code, name, message, Location(path, max(line, 1), max(column, 1), cell=cell), fix_hint="Fix the file so that Python can parse it")


def decode(path: str, data: bytes) -> tuple[str, str] | Finding:
    """Bytes to text as Python would read them (PEP 263 cookie, BOM), or TL000."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as error:
        return syntax_error(path, f"cannot read the file's encoding: {error}")
    try:
        text = data.decode(encoding)
    except (UnicodeDecodeError, LookupError) as error:
        start = getattr(error, "start", 0)
        line = data.count(b"\n", 0, start) + 1
        column = start - (data.rfind(b"\n", 0, start) + 1) + 1
        return syntax_error(path, f"the file is not valid {encoding}: {error}", line, column)
    return text, encoding


def notebook_source(path: str, text: str) -> Source | Finding:
    """The code cells of a notebook joined into one module, IPython lines commented out."""
    try:
        notebook = json.loads(text)
        cells = notebook["cells"]
        if not isinstance(cells, list):
            raise TypeError("`cells` is not a list")
    except (json.JSONDecodeError, KeyError, TypeError) as error:
        line = getattr(error, "lineno", 1)
        column = getattr(error, "colno", 1)
        return syntax_error(path, f"not a valid notebook: {error}", line, column)
    lines: list[str] = []
    cell_map = CellMap()
    for number, cell in enumerate(cells, start=1):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        body = cell.get("source", "")
        body = "".join(body) if isinstance(body, list) else str(body)
        cell_map.starts.append((len(lines) + 1, number))
        lines.extend(_cell_lines(body))
    return Source(path, "\n".join(lines) + "\n", cell_map)


def read_source(path: Path, display: str) -> Source | Finding:
    """Read ``path`` for linting; problems become a TL000 finding, never an exception."""
    try:
        data = path.read_bytes()
    except OSError as error:
        return syntax_error(display, f"cannot read the file: {error.strerror or error}")
    decoded = decode(display, data)
    if isinstance(decoded, Finding):
        return decoded
    text, encoding = decoded
    if path.suffix == ".ipynb":
        return notebook_source(display, text)
    return Source(display, text, encoding=encoding, digest=hashlib.sha256(data).hexdigest())
