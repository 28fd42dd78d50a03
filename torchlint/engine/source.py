"""Reading a file into Python source: encodings, notebooks, and TL000 for what cannot be read."""

from __future__ import annotations

import functools
import hashlib
import io
import json
import os
import re
import stat
import sys
import tokenize
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path

from torchlint.config import DEFAULT_MAX_FILE_SIZE, format_size
from torchlint.findings import SYNTAX_ERROR, Finding, Location
from torchlint.textlines import line_and_column, python_lines  # noqa: F401 - the engine's names for them

# What TL000 says instead of a tier: it is no performance finding (no impact, so no ranking among them),
# and it is always shown, whatever `min-impact` says: nothing else in the file could be checked.
UNCHECKED = "the file could not be checked: none of its problems can be found"

# IPython syntax a notebook cell may hold that is not Python: magics, shell escapes, help.
# IPython syntax a cell may hold that is not Python: line magics, shell escapes, help
# (`?x`, `torch.*Tensor?`). Each becomes `pass` at its indentation, so a magic that is
# the only statement of a block (`if x:\n    %pip install y`) leaves the block valid.
_IPYTHON_LINE = re.compile(r"^(?P<indent>\s*)(%|!|\?|[\w.*]+\?{1,2}\s*$)")
# IPython's assignment forms (`files = !ls`, `t = %timeit -o f()`): the name stays bound.
_IPYTHON_ASSIGNMENT = re.compile(r"^(?P<indent>\s*)(?P<target>[A-Za-z_][\w.]*(?:\s*,\s*[A-Za-z_][\w.]*)*)\s*=\s*[!%]")
# Cell magics whose body is still Python; the body of any other (%%bash...) is not.
_PYTHON_CELL_MAGICS = {"%%time", "%%timeit", "%%capture", "%%prun"}


@functools.lru_cache(maxsize=4)  # a file's findings ask for its lines one after another
def _cached_lines(text: str) -> tuple[str, ...]:
    return tuple(python_lines(text))


def _cell_lines(body: str) -> list[str]:
    raw_lines = python_lines(body) or [""]
    first = raw_lines[0].strip()
    if first.startswith("%%") and first.split()[0] not in _PYTHON_CELL_MAGICS:
        return ["# " + raw for raw in raw_lines]
    lines = []
    continued = False  # the previous IPython line ended in `\`: this one belongs to it
    for raw in raw_lines:
        if continued:
            lines.append("# " + raw.strip())  # a comment: no indentation to keep
        else:
            match = _IPYTHON_LINE.match(raw)
            assigned = None if match else _IPYTHON_ASSIGNMENT.match(raw)
            if match:
                lines.append(f"{match.group('indent')}pass  # {raw.strip()}")
            elif assigned:
                lines.append(f"{assigned.group('indent')}{assigned.group('target')} = None  # {raw.strip()}")
            else:
                lines.append(raw)
                continue
        continued = raw.rstrip().endswith("\\")
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
    notebook: str | None = None  # a notebook's file text (its JSON), which --fix rewrites

    def cell_spans(self) -> list[tuple[int, int, int]]:
        """(cell number, first joined line, last joined line) of each code cell."""
        if self.cells is None:
            return []
        total = len(python_lines(self.text))
        starts = self.cells.starts
        return [
            (number, start, (starts[i + 1][0] - 1) if i + 1 < len(starts) else total)
            for i, (start, number) in enumerate(starts)
        ]

    def without_lines(self, spans: list[tuple[int, int]]) -> Source:
        """The same source with the lines in ``spans`` (1-based, inclusive) commented out."""
        lines = python_lines(self.text)
        for first, last in spans:
            for i in range(first - 1, last):
                lines[i] = "# " + lines[i]
        return replace(self, text="\n".join(lines) + "\n")

    def text_line(self, location: Location) -> int:
        """The line of ``self.text`` that ``location`` points at (a cell's line, joined)."""
        if self.cells is not None and location.cell is not None:
            return self.cells.joined_line(location.cell, location.line)
        return location.line

    def line_text(self, location: Location) -> str:
        """The text of the line ``location`` points at."""
        line = self.text_line(location)
        lines = _cached_lines(self.text)
        return lines[line - 1] if 0 < line <= len(lines) else ""

    def location(self, line: int, column: int, end_line: int | None = None, end_column: int | None = None) -> Location:
        """A 1-based Location; in a notebook, lines count within the cell."""
        if self.cells is None:
            return Location(self.path, line, column, end_line, end_column)
        cell, cell_line = self.cells.locate(line)
        end = None if end_line is None else end_line - (line - cell_line)
        return Location(self.path, cell_line, column, end, end_column, cell=cell)


_PARSE_HINT = "Fix the file so that Python can parse it"
_READ_HINT = "Make it a readable regular file, or exclude it (`exclude` in [tool.torchlint])"


def syntax_error(path: str, message: str, line: int = 1, column: int = 1, cell: int | None = None, hint: str = _PARSE_HINT) -> Finding:
    code, name = SYNTAX_ERROR
    return Finding(code, name, message, Location(path, max(line, 1), max(column, 1), cell=cell), fix_hint=hint,
                   impact="", impact_reason=UNCHECKED)


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
    except ValueError as error:  # valid JSON Python will not read: an integer of 5,000 digits
        return syntax_error(path, f"not a valid notebook: {error}")
    except RecursionError:  # JSON nested deeper than any notebook (the decoder recurses)
        return syntax_error(path, "not a valid notebook: its JSON is nested too deeply to read")
    if not _python_kernel(notebook):
        return Source(path, "", CellMap())  # an R or Julia notebook: nothing to check
    lines: list[str] = []
    cell_map = CellMap()
    for number, cell in enumerate(cells, start=1):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        body = cell.get("source", "")
        if isinstance(body, list) and all(isinstance(part, str) for part in body):
            body = "".join(body)
        if not isinstance(body, str):
            return syntax_error(path, f"not a valid notebook: the source of cell {number} is not text")
        cell_map.starts.append((len(lines) + 1, number))
        lines.extend(_cell_lines(body))
    return Source(path, "\n".join(lines) + "\n", cell_map, notebook=text)


def _python_kernel(notebook: object) -> bool:
    """Whether the notebook's kernel runs Python (true when it does not say)."""
    metadata = notebook.get("metadata") if isinstance(notebook, dict) else None
    if not isinstance(metadata, dict):
        return True
    for key, field_name in (("kernelspec", "language"), ("language_info", "name")):
        table = metadata.get(key)
        language = table.get(field_name) if isinstance(table, dict) else None
        if isinstance(language, str) and language:
            return language.lower() == "python"
    return True


def unencodable(source: Source) -> Finding | None:
    """TL000 where ``source`` holds a lone surrogate (a notebook's ``"\\ud800"``, an
    editor's buffer): no Python file can hold one, and every parser fails on it."""
    try:
        source.text.encode("utf-8")
        return None
    except UnicodeEncodeError as error:
        line, column = line_and_column(source.text, error.start)
        where = source.location(line + 1, column + 1)
        character = source.text[error.start]
        return syntax_error(source.path, f"lone surrogate {character!a} (UTF-8 cannot encode it, no Python file can hold it)", where.line, where.column, where.cell)


def compile_error(path: str, text: str) -> Finding | None:
    """TL000 where the running Python's own compiler rejects ``text`` (parser and
    compile-time errors alike: a misplaced ``from __future__``, too deep nesting)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escapes warn; that is not a syntax error
            compile(text, path, "exec", dont_inherit=True)
    except SyntaxError as error:
        if newer_python_syntax(text, error):
            return None
        return syntax_error(path, f"cannot parse: {error.msg}", error.lineno or 1, error.offset or 1)
    except (ValueError, RecursionError, MemoryError, OverflowError) as error:
        return syntax_error(path, f"cannot parse: {error or type(error).__name__}")
    return None


# What PEP 695 adds: `def f[T](...)`, `class C[T]:`, `type Alias = ...` (a cheap test first).
_TYPE_PARAMETERS_OR_ALIAS = re.compile(r"\b(?:def|class)\s+\w+\s*\[|^[ \t]*type\s+\w+", re.MULTILINE)


def newer_python_syntax(text: str, error: SyntaxError) -> bool:
    """Whether the running Python (before 3.12) rejects ``text`` only for syntax that
    Python 3.12 accepts and libcst parses: PEP 695 type parameters and ``type`` aliases,
    PEP 701 f-strings. Such code is valid for the Python it targets: no TL000."""
    if sys.version_info >= (3, 12):
        return False
    if not (error.msg or "").startswith("f-string") and not _TYPE_PARAMETERS_OR_ALIAS.search(text):
        # No 3.12 syntax can be behind the error: libcst's parse, only to say so, would cost
        # as much as the check (500 nested calls: 10 s, before CPython's one-line answer).
        return False
    import libcst as cst  # only on this error path: `import torchlint.engine` loads no libcst

    try:
        module = cst.parse_module(text)
    except Exception:
        return False
    if (error.msg or "").startswith("f-string"):
        return True  # libcst reads every f-string as 3.12 does (quotes reused inside, ...)

    class NewSyntax(cst.CSTVisitor):
        found = False

        def visit_TypeAlias(self, node: cst.TypeAlias) -> bool:
            NewSyntax.found = True
            return False

        def visit_TypeParameters(self, node: cst.TypeParameters) -> bool:
            NewSyntax.found = True
            return False

    module.visit(NewSyntax())
    return NewSyntax.found


class FileTooLargeError(OSError):
    """The file is larger than ``max-file-size``: libcst needs ~700x its size in memory."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(
            f"the file is {format_size(size)}, above the {format_size(limit)} limit; not checked "
            "(raise `max-file-size` in [tool.torchlint] to check it)"
        )


def read_bytes(path: Path, max_bytes: int | None = DEFAULT_MAX_FILE_SIZE) -> bytes:
    """The file's bytes; OSError for what is not a regular file, FileTooLargeError above
    ``max_bytes``. The file is opened without blocking and checked with fstat before it
    is read, so a FIFO or socket named ``*.py`` never hangs the run."""
    _check_regular(os.stat(path), max_bytes)  # before opening: opening a FIFO touches its writer
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    with os.fdopen(fd, "rb") as stream:
        _check_regular(os.fstat(stream.fileno()), max_bytes)  # it may have been swapped meanwhile
        return stream.read()


def _check_regular(info: os.stat_result, max_bytes: int | None) -> None:
    if not stat.S_ISREG(info.st_mode):
        raise OSError(f"not a regular file ({_file_kind(info.st_mode)})")
    if max_bytes is not None and info.st_size > max_bytes:
        raise FileTooLargeError(info.st_size, max_bytes)


def _file_kind(mode: int) -> str:
    kinds = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
             (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))
    return next((name for test, name in kinds if test(mode)), "an unusual file")


#: A notebook's file is mostly outputs (images, tables): its limit is this many times
#: ``max-file-size``, and its code cells are held to ``max-file-size`` itself.
NOTEBOOK_SIZE_FACTOR = 64


def byte_limit(path: Path, max_bytes: int | None) -> int | None:
    """The most bytes of ``path`` worth reading: ``max_bytes``, more for a notebook."""
    if max_bytes is None or path.suffix != ".ipynb":
        return max_bytes
    return max_bytes * NOTEBOOK_SIZE_FACTOR


def read_source(path: Path, display: str, max_bytes: int | None = DEFAULT_MAX_FILE_SIZE) -> Source | Finding:
    """Read ``path`` for linting; problems become a TL000 finding, never an exception."""
    try:
        data = read_bytes(path, byte_limit(path, max_bytes))
    except FileTooLargeError as error:
        return syntax_error(display, str(error), hint=_SIZE_HINT)
    except OSError as error:
        if os.path.isdir(path):
            return syntax_error(display, f"cannot read the directory: {_listing_problem(path)}", hint=_READ_HINT)
        return syntax_error(display, f"cannot read the file: {error.strerror or error}", hint=_READ_HINT)
    return source_within_limit(path, display, data, max_bytes)


_SIZE_HINT = "Raise `max-file-size`, or exclude the file"


def source_within_limit(path: Path, display: str, data: bytes, max_bytes: int | None) -> Source | Finding:
    """``data`` (read from a file or standard input) as source, or the TL000 that says why
    not: above ``max-file-size`` (a notebook's outputs aside), undecodable, not Python."""
    limit = byte_limit(path, max_bytes)
    if limit is not None and len(data) > limit:
        return syntax_error(display, str(FileTooLargeError(len(data), limit)), hint=_SIZE_HINT)
    source = source_from_bytes(path, display, data)
    if isinstance(source, Source) and max_bytes is not None and path.suffix == ".ipynb":
        code = len(source.text.encode("utf-8", "surrogatepass"))
        if code > max_bytes:  # what libcst parses is the code cells, not the outputs
            message = f"the notebook's code is {format_size(code)}, above the {format_size(max_bytes)} limit; not checked"
            return syntax_error(display, message, hint=_SIZE_HINT)
    return source


def _listing_problem(directory: Path) -> str:
    """Why a directory the walk met could not be listed."""
    try:
        with os.scandir(directory) as entries:
            first = next(entries, None)
    except OSError as error:
        return error.strerror or str(error)
    try:
        if first is not None:
            os.lstat(first.path)  # listed but not entered: no search permission
    except OSError as error:
        return f"it can be listed but not entered ({error.strerror or error})"
    return "it is a directory"


def source_from_bytes(path: Path, display: str, data: bytes, compiled: bool = True) -> Source | Finding:
    """The bytes of ``path`` as source text (a notebook's code cells joined), or TL000;
    ``compiled=False``: the text whether or not Python can parse it (for a report's lines)."""
    decoded = decode(display, data)
    if isinstance(decoded, Finding):
        return decoded
    text, encoding = decoded
    digest = hashlib.sha256(data).hexdigest()
    if path.suffix == ".ipynb":
        notebook = notebook_source(display, text)
        return replace(notebook, encoding=encoding, digest=digest) if isinstance(notebook, Source) else notebook
    problem = compile_error(display, text) if compiled else None
    if problem is not None:
        return problem
    return Source(display, text, encoding=encoding, digest=digest)
