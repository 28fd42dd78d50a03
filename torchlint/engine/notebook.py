"""Putting fixed code back into a notebook: the joined source split into its cells, and
each changed cell's ``source`` spliced into the file's own JSON. Every other byte of the
file (outputs, metadata, ids, indentation, key order, escapes) is kept as it was."""

from __future__ import annotations

import bisect
import difflib
import functools
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from json.decoder import scanstring

from torchlint.engine.source import Source, notebook_source, python_lines
from torchlint.textlines import lines_with_ends

_WHITESPACE = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()
# A run of backslashes before u and four hex digits: a \uXXXX escape when the run is odd.
_ESCAPE = re.compile(r"(\\+)u([0-9a-fA-F]{4})")


@dataclass(frozen=True, slots=True)
class CodeCell:
    """A code cell as the file holds it: its lines (with their line ends) and where its
    ``source`` value lies in the file's text."""

    number: int
    lines: tuple[str, ...]
    start: int
    end: int


def _skip(text: str, position: int) -> int:
    return _WHITESPACE.match(text, position).end()  # type: ignore[union-attr]


def _members(text: str, position: int) -> Iterator[tuple[str, int, int]]:
    """(key, value start, value end) of each member of the JSON object at ``position``."""
    position = _skip(text, position + 1)
    while text[position] != "}":
        key, position = scanstring(text, position + 1)
        position = _skip(text, _skip(text, position) + 1)  # past the colon
        _, end = _DECODER.raw_decode(text, position)
        yield key, position, end
        position = _skip(text, end)
        if text[position] == ",":
            position = _skip(text, position + 1)


def _elements(text: str, position: int) -> Iterator[tuple[int, int]]:
    """(start, end) of each element of the JSON array at ``position``."""
    position = _skip(text, position + 1)
    while text[position] != "]":
        _, end = _DECODER.raw_decode(text, position)
        yield position, end
        position = _skip(text, end)
        if text[position] == ",":
            position = _skip(text, position + 1)


def _body(value: object) -> str:
    return "".join(value) if isinstance(value, list) else str(value)


@functools.lru_cache(maxsize=2)  # a round tries each of its fixes on the same notebook
def code_cells(text: str) -> tuple[CodeCell, ...]:
    """The code cells of the notebook ``text`` (which notebook_source has read)."""
    start = _skip(text, 0)
    cells_at = None
    for key, value_start, _ in _members(text, start):
        if key == "cells":
            cells_at = value_start  # the last one wins, as in json.loads
    found = []
    for number, (cell_start, _) in enumerate(_elements(text, cells_at), start=1):  # type: ignore[arg-type]
        if text[cell_start] != "{":
            continue  # not a cell (the reader skips it too)
        members = {key: (s, e) for key, s, e in _members(text, cell_start)}
        if "cell_type" not in members or json.loads(text[slice(*members["cell_type"])]) != "code":
            continue
        value_start, value_end = members.get("source", (-1, -1))
        body = _body(json.loads(text[value_start:value_end])) if value_start >= 0 else ""
        found.append(CodeCell(number, tuple(lines_with_ends(body)), value_start, value_end))
    return tuple(found)


def file_lines(text: str) -> dict[int, tuple[int, ...]]:
    """For each code cell of the notebook ``text`` (by number), the line of the file that
    holds each of its source lines: Jupyter writes ``source`` as a list of lines, one per
    file line; a ``source`` written as one string is on one line. Empty when the file
    cannot be read so."""
    try:
        cells = code_cells(text)
    except (ValueError, KeyError, IndexError, TypeError, RecursionError):
        return {}
    breaks = [match.start() for match in re.finditer("\n", text)]
    line_of = lambda offset: bisect.bisect_left(breaks, offset) + 1  # noqa: E731
    found = {}
    for cell in cells:
        if cell.start < 0:
            continue
        if text[cell.start] != "[":
            found[cell.number] = (line_of(cell.start),) * max(len(cell.lines), 1)
            continue
        lines: list[int] = []
        for start, end in _elements(text, cell.start):
            piece = json.loads(text[start:end])
            lines += [line_of(start)] * (len(lines_with_ends(piece)) if isinstance(piece, str) and piece else 1)
        found[cell.number] = tuple(lines)
    return found


class Unmappable(Exception):
    """The fixed code cannot be put back into the cells: the message says why, and
    ``lines`` holds the joined lines (1-based) around each change that has no place."""

    def __init__(self, message: str, lines: frozenset[int] = frozenset()) -> None:
        super().__init__(message)
        self.lines = lines


def put_back(source: Source, fixed: str) -> Source:
    """The notebook ``source`` with its code replaced by ``fixed`` (the joined cells, as
    fixed), read again as a notebook; Unmappable when :func:`place` finds no place."""
    assert source.notebook is not None
    text = splice(source.notebook, code_cells(source.notebook), place(source, fixed))
    reread = notebook_source(source.path, text)
    if not isinstance(reread, Source) or _without_sources(text) != _without_sources(source.notebook):
        raise Unmappable("the rewritten notebook would not be the same notebook besides its code")
    return replace(reread, encoding=source.encoding, digest=source.digest)


def place(source: Source, fixed: str) -> dict[int, str]:
    """Each code cell's new text (by cell number) once ``fixed`` replaces the joined cells
    of ``source``; Unmappable when a change crosses a cell boundary, adds lines between
    two cells or touches an IPython line the reader masked."""
    assert source.notebook is not None
    cells = code_cells(source.notebook)
    raw = [(index, line) for index, cell in enumerate(cells) for line in cell.lines]
    old = python_lines(source.text)
    if len(old) != len(raw):
        raise Unmappable("its cells could not be matched with the code that was checked")
    placed: list[list[tuple[str, str | None]]] = [[] for _ in cells]  # per cell: (line, its end)
    new = python_lines(fixed)
    problems: list[tuple[str, range]] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if tag == "equal":
            for i in range(i1, i2):
                line = raw[i][1]
                placed[raw[i][0]].append((line.rstrip("\r\n"), _end(line)))
            continue
        if tag == "replace" and i2 - i1 == j2 - j1:
            # Lines rewritten one for one: each stays in its own cell, so two fixes on
            # neighbouring lines of two cells (one run of the diff) both go back.
            try:
                owners = [_owner(cells, raw, old, i, i + 1) for i in range(i1, i2)]
            except Unmappable as problem:
                problems.append((str(problem), range(i1, i2 + 1)))
                continue
            for owner, i, line in zip(owners, range(i1, i2), new[j1:j2]):
                placed[owner].append((line, _end(raw[i][1])))
            continue
        try:
            owner = _owner(cells, raw, old, i1, i2)
        except Unmappable as problem:
            problems.append((str(problem), range(i1, max(i2, i1 + 1) + 1)))  # with the lines beside it
            continue
        end = _end(raw[i1][1]) if i1 < i2 else None  # a rewritten line ends as the line it replaces
        placed[owner].extend((line, end) for line in new[j1:j2])
    if problems:
        raise Unmappable(problems[0][0], frozenset(line for _, lines in problems for line in lines))
    return {cells[i].number: _assemble(cells[i], lines) for i, lines in enumerate(placed)}


def _without_sources(text: str) -> object:
    """The notebook with every cell's ``source`` left out: what a fix must not change."""
    notebook = json.loads(text)
    for cell in notebook["cells"]:
        if isinstance(cell, dict):
            cell.pop("source", None)
    return notebook


def _owner(cells: tuple[CodeCell, ...], raw: list[tuple[int, str]], old: list[str], i1: int, i2: int) -> int:
    """The one cell that the changed lines ``old[i1:i2]`` (or an insertion at ``i1``) belong to."""
    if i1 == i2:  # an insertion: inside a cell, or at the very start or end
        before = raw[i1 - 1][0] if i1 > 0 else None
        after = raw[i1][0] if i1 < len(raw) else None
        if before is not None and after is not None and before != after:
            raise Unmappable(f"it would add lines between cells {cells[before].number} and {cells[after].number}")
        return before if before is not None else after  # type: ignore[return-value]
    owners = {raw[i][0] for i in range(i1, i2)}
    if len(owners) > 1:
        numbers = sorted(cells[o].number for o in owners)
        raise Unmappable(f"it would change lines across cells {numbers[0]} and {numbers[-1]}")
    for i in range(i1, i2):
        if old[i] != raw[i][1].rstrip("\r\n"):
            raise Unmappable(f"it would change an IPython line of cell {cells[raw[i][0]].number}")
    return owners.pop()


def _end(line: str) -> str | None:
    return line[len(line.rstrip("\r\n")):] or None


def _assemble(cell: CodeCell, placed: list[tuple[str, str | None]]) -> str:
    """A cell's new text: each line with its end (a new line takes the cell's first line
    end), and the last line ended as the cell's last line was."""
    ending = next((end for end in map(_end, cell.lines) if end), "\n")
    final_end = _end(cell.lines[-1]) is not None
    out = []
    for index, (text, end) in enumerate(placed):
        last = index == len(placed) - 1
        out.append(text + ((end or ending) if not last or final_end else ""))
    return "".join(out)


def splice(text: str, cells: tuple[CodeCell, ...], bodies: dict[int, str]) -> str:
    """``text`` with the ``source`` of each changed cell rewritten in the file's style."""
    ascii_only = None
    parts, position = [], 0
    for cell in cells:
        body = bodies[cell.number]
        if body == "".join(cell.lines):
            continue
        if cell.start < 0:
            raise Unmappable(f"cell {cell.number} has no `source` to write the fix into")
        if ascii_only is None:
            ascii_only = _escapes_non_ascii(text)
        parts += [text[position:cell.start], _source_value(text, cell, body, ascii_only)]
        position = cell.end
    return "".join(parts) + text[position:]


def _escapes_non_ascii(text: str) -> bool:
    """Whether the file was written with ``ensure_ascii``: all ASCII, and some character
    above ASCII written as a \\uXXXX escape (Jupyter's own files keep such characters)."""
    if not text.isascii() or "\\u" not in text:
        return False
    return any(len(m.group(1)) % 2 and int(m.group(2), 16) > 0x7F for m in _ESCAPE.finditer(text))


def _source_value(text: str, cell: CodeCell, body: str, ascii_only: bool) -> str:
    """The JSON of ``body`` as the cell's ``source`` was written: a string, or a list of
    lines laid out as the old list was."""
    old = text[cell.start:cell.end]
    if not old.startswith("["):
        return json.dumps(body, ensure_ascii=ascii_only)
    pieces = [json.dumps(line, ensure_ascii=ascii_only) for line in re.findall(r"[^\n]*\n|[^\n]+$", body)]
    if not pieces:
        return "[]"
    elements = list(_elements(text, cell.start))
    if elements:
        opening, closing = text[cell.start + 1:elements[0][0]], text[elements[-1][1]:cell.end - 1]
        separator = text[elements[0][1]:elements[1][0]] if len(elements) > 1 else "," + opening
    else:
        opening, closing, separator = _fresh_layout(text, cell.start)
    return "[" + opening + separator.join(pieces) + closing + "]"


def _fresh_layout(text: str, start: int) -> tuple[str, str, str]:
    """Opening, closing and separating whitespace for a list that was empty: one line per
    element, one indentation step deeper than the line of its key (the file's step and
    line end)."""
    line = text[text.rfind("\n", 0, start) + 1:start]
    indent = line[:len(line) - len(line.lstrip(" \t"))]
    step = re.search(r"(\r?\n)([ \t]+)\S", text)
    if step is None:  # a file on one line
        return "", "", ", "
    newline, unit = step.groups()
    inner = newline + indent + unit
    return inner, newline + indent, "," + inner


def cell_changes(before: str, after: str) -> tuple[tuple[int, str, str], ...]:
    """(cell number, old text, new text) of each code cell the fixes changed."""
    old = {cell.number: "".join(cell.lines) for cell in code_cells(before)}
    return tuple((cell.number, old.get(cell.number, ""), "".join(cell.lines)) for cell in code_cells(after) if "".join(cell.lines) != old.get(cell.number, ""))
