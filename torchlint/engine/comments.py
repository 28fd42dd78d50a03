"""Where a file's comments are, as Python's tokenizer sees them.

A ``#`` inside a string is no comment, and a line that ends inside a string or goes on
with a backslash cannot end in one. ``# noqa`` suppression and ``--add-noqa`` both ask
this module, so the comment ``--add-noqa`` writes is the one suppression reads: on the
finding's line when that line can end in a comment, otherwise on the line that ends the
string or the backslash continuation (after the last token of the logical line)."""

from __future__ import annotations

import bisect
import functools
import tokenize
from dataclasses import dataclass

from torchlint.textlines import lines_with_ends

# Tokens that are not code: what follows the last of the others on a line is its end.
_NOT_CODE = frozenset({
    tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
    tokenize.ENCODING, tokenize.ENDMARKER,
})


@dataclass(frozen=True, slots=True)
class Comments:
    """The comments of one text, by line (1-based, Python's own line breaks)."""

    text_of: dict[int, tuple[int, str]]  # line -> (column, the comment's text)
    code_end: dict[int, int]  # line -> the column after its last code token
    open_lines: tuple[int, ...]  # sorted: the lines that can end in a comment
    tokenized: bool  # False: the text does not tokenize (no comment is trusted)

    def home(self, line: int) -> int | None:
        """The line whose end holds the ``# noqa`` for a finding on ``line``: itself, or
        the first line after it that can end in a comment (None past the end)."""
        at = bisect.bisect_left(self.open_lines, line)
        return self.open_lines[at] if at < len(self.open_lines) else None

    def comment(self, line: int) -> str | None:
        """The text of the comment on ``line`` (``# ...``), if it has one."""
        found = self.text_of.get(line)
        return found[1] if found is not None else None

    def own_line_comments(self, lines: list[str]) -> list[tuple[int, str]]:
        """``(line, text)`` of each comment alone on its line (only blanks before it)."""
        return [
            (number, text) for number, (column, text) in sorted(self.text_of.items())
            if number <= len(lines) and not lines[number - 1][:column].strip()
        ]


_UNTOKENIZED = Comments({}, {}, (), False)


@functools.lru_cache(maxsize=8)  # keyed on the text, whose hash Python caches
def comments(text: str) -> Comments:
    """The comments of ``text``; an untokenizable text has none that can be trusted."""
    text_of: dict[int, tuple[int, str]] = {}
    code_end: dict[int, int] = {}
    open_lines: set[int] = set()
    # Fed line by line at Python's own breaks (\n, \r\n, \r), each ending as \n: a
    # StringIO would break only at \n, and str.splitlines also at form feeds and U+2028.
    lines = [line.rstrip("\r\n") + "\n" if line.endswith(("\r", "\n")) else line for line in lines_with_ends(text)]
    try:
        for token in tokenize.generate_tokens(iter(lines).__next__):
            kind = token.type
            if kind == tokenize.COMMENT:
                text_of[token.start[0]] = (token.start[1], token.string)
            elif kind in (tokenize.NEWLINE, tokenize.NL):
                open_lines.add(token.start[0])
            elif kind not in _NOT_CODE:
                code_end[token.end[0]] = token.end[1]
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return _UNTOKENIZED
    open_lines.update(text_of)  # a comment ends its line, whatever comes before it
    return Comments(text_of, code_end, tuple(sorted(open_lines)), True)


__all__ = ["Comments", "comments"]
