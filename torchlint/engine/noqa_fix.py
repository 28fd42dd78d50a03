"""TL001's fix: the codes a ``# noqa`` suppresses nothing with go, and the comment with
them when none is left (ruff's RUF100). Safe: what the comment still suppresses stays.

The comment is found in the libcst tree by its place among the file's comments (the
tokenizer's and libcst's comments are the same tokens, in the same order), and its text
must match, or no fix is offered.
"""

from __future__ import annotations

import re

import libcst as cst

from torchlint.findings import Fix, FixSafety


class _Holders(cst.CSTVisitor):
    """Every node that holds a comment, in source order."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[cst.TrailingWhitespace | cst.EmptyLine] = []

    def visit_TrailingWhitespace(self, node: cst.TrailingWhitespace) -> None:
        if node.comment is not None:
            self.found.append(node)

    def visit_EmptyLine(self, node: cst.EmptyLine) -> None:
        if node.comment is not None:
            self.found.append(node)


def holders_of(module: cst.Module) -> list[cst.TrailingWhitespace | cst.EmptyLine]:
    visitor = _Holders()
    module.visit(visitor)
    return visitor.found


def without_codes(text: str, noqa: re.Match[str], codes_end: int, drop: set[str]) -> str | None:
    """The comment ``text`` with ``drop`` taken out of its ``# noqa: ...`` list (``noqa``
    its match, the list ending at ``codes_end``); None when nothing is left of it."""
    start = noqa.start("rest")
    listed = [c for c in re.split(r"[\s,]+", text[start:codes_end].strip()) if c]
    kept = [c for c in listed if c.upper() not in drop]
    if kept:
        return text[:start] + ", ".join(kept) + text[codes_end:]
    before = text[:noqa.start()].rstrip()
    return before or None  # `# type: ignore  # noqa: TL101` keeps `# type: ignore`


def removal(holder: cst.TrailingWhitespace | cst.EmptyLine, new_text: str | None, what: str) -> Fix:
    """The fix that gives ``holder``'s comment the text ``new_text`` (None: no comment)."""
    if new_text is not None:
        new: cst.CSTNode | cst.RemovalSentinel = holder.with_changes(comment=cst.Comment(new_text))
    elif isinstance(holder, cst.TrailingWhitespace):
        new = holder.with_changes(whitespace=cst.SimpleWhitespace(""), comment=None)
    else:
        new = cst.RemovalSentinel.REMOVE  # a comment line of its own: the line goes
    return Fix(holder, new, FixSafety.SAFE, what, rewrites_comments=True)


__all__ = ["holders_of", "removal", "without_codes"]
