"""A file's text to libcst's tree: parsed without libcst's per-node validation, a syntax error
as CPython words it, and a notebook's cells that parse checked though another cell does not."""

from __future__ import annotations

import libcst as cst

from torchlint.engine.prefilter import quick_syntax_check
from torchlint.engine.results import FileResult
from torchlint.engine.source import Source, python_lines, syntax_error
from torchlint.findings import Finding


def _unchecked(node: cst.CSTNode) -> None:
    """What ``CSTNode.__post_init__`` does while a file is parsed: nothing."""


def parse_module(text: str) -> cst.Module:
    """``libcst.parse_module`` without its per-node validation: the parser builds every node
    through the node's constructor, which validates it (parentheses, the whitespace around
    keywords) as if a program had built it; a parsed node is valid by construction, and the
    checks cost about a tenth of the parse (libcst's own comment there says as much). Nodes
    built afterwards (fixes) are validated as before."""
    validate = cst.CSTNode.__dict__.get("__post_init__")
    if validate is None:  # (a libcst whose nodes no longer validate there: nothing to skip)
        return cst.parse_module(text)
    cst.CSTNode.__post_init__ = _unchecked  # type: ignore[method-assign]
    try:
        return cst.parse_module(text)
    finally:
        cst.CSTNode.__post_init__ = validate  # type: ignore[method-assign]


def parse(source: Source) -> cst.Module | Finding:
    """``source``'s tree, or the syntax error that stops it (an empty tree where only libcst fails)."""
    try:
        return parse_module(source.text)
    except cst.ParserSyntaxError:
        # CPython's own message and position are the ones users know; libcst's
        # are used only when CPython accepts what libcst cannot parse.
        cpython = quick_syntax_check(source)
        if cpython is not None:
            return cpython
        # Valid Python that libcst cannot parse (`(x): int = 1`) is no TL000 (the user
        # has nothing to fix): the file is checked as if it were empty.
        return cst.parse_module("")
    except RecursionError:
        return syntax_error(source.path, "cannot parse: an expression is nested too deeply for libcst", hint="Split the expression into steps (named intermediate values)")
    except MemoryError as error:
        return syntax_error(source.path, f"cannot parse: {type(error).__name__}")


def parse_good_cells(source: Source, error: Finding, result: FileResult) -> tuple[Source, cst.Module | Finding]:
    """A notebook whose cells do not parse together: report each cell that does not
    parse on its own and check the others, so one broken cell never hides the rest."""
    lines = python_lines(source.text)  # Python's line breaks, as the cell map counts them
    bad = []
    for number, first, last in source.cell_spans():
        cell = Source(source.path, "\n".join(lines[first - 1:last]) + "\n")
        problem = quick_syntax_check(cell)
        if problem is not None:
            location = problem.location
            result.findings.append(syntax_error(source.path, problem.message, location.line, location.column, number))
            bad.append((first, last))
    if not bad:
        return source, error  # only the joined cells fail: report that
    rest = source.without_lines(bad)
    return rest, parse(rest)
