"""The one line model for a user's source: lines end at ``\\n``, ``\\r\\n`` and ``\\r``, as
Python's tokenizer ends them, and nowhere else.

``str.splitlines()`` also breaks at form feeds, U+2028, U+0085 and other characters that
Python keeps inside a line: a finding's line number, a diff's hunk header and a report's
source excerpt would then name different lines. Every output that numbers or shows the
lines of a user's file splits them here. Imports nothing from torchlint, so every part
may use it."""

from __future__ import annotations

import io
import re
import tokenize

LINE_BREAK = re.compile(r"\r\n|\r|\n")


def python_lines(text: str) -> list[str]:
    """``text`` split into lines as Python's tokenizer counts them (no line ends kept)."""
    lines = LINE_BREAK.split(text)
    if lines and lines[-1] == "":
        lines.pop()  # a final line break ends the last line; it does not start one
    return lines


def lines_with_ends(body: str) -> list[str]:
    """``body`` split at Python's line breaks, each line keeping its end; as many lines as
    the reader gives the cell (an empty cell is one empty line)."""
    lines, position = [], 0
    for match in LINE_BREAK.finditer(body):
        lines.append(body[position:match.end()])
        position = match.end()
    if position < len(body):
        lines.append(body[position:])
    return lines or [""]


def line_and_column(text: str, offset: int) -> tuple[int, int]:
    """0-based (line, column) of ``offset`` in ``text``, lines broken as Python (and the
    Language Server Protocol) break them: at ``\\n``, ``\\r\\n`` and ``\\r`` only."""
    line, start = 0, 0
    for match in LINE_BREAK.finditer(text, 0, offset):
        line, start = line + 1, match.end()
    return line, offset - start


def decoded(data: bytes) -> str:
    """A Python file's bytes as text, in the encoding its cookie or BOM names (UTF-8
    otherwise); undecodable bytes replaced, for showing, never for writing back."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError:  # a bad cookie: the bytes are still worth showing
        encoding = "utf-8"
    try:
        return data.decode(encoding, errors="replace").removeprefix("\ufeff")
    except LookupError:
        return data.decode("utf-8", errors="replace").removeprefix("\ufeff")


def read_lines(path: str) -> tuple[str, ...]:
    """The lines of the Python file ``path`` for a report (none if it cannot be read)."""
    try:
        with open(path, "rb") as stream:
            return tuple(python_lines(decoded(stream.read())))
    except OSError:
        return ()
