"""The cheap pre-filter: a file that never mentions torch or a step call is checked by
CPython's parser alone (its syntax, and the light summary of what it passes on to the
steps), so a run whose files are all such never imports libcst or the checks."""

from __future__ import annotations

import ast
import os
from dataclasses import replace

from torchlint.analysis.light import light_summary
from torchlint.engine.results import FileResult
from torchlint.engine.source import Source, newer_python_syntax, python_lines, syntax_error, unencodable
from torchlint.findings import Finding

# What a module that never imports torch shows when it holds a helper a step calls with
# its tensors (a metric that calls ``.item()``): such a module is checked in full.
_STEP_MARKERS = (".backward(", ".item()", ".tolist()", ".cpu()", ".numpy()", "synchronize(", "_step(")


def may_hold_a_step(text: str) -> bool:
    """A module that never imports torch can still hold a helper that a step calls with
    its tensors: it shows one of the calls the per-step rules are about."""
    return any(marker in text for marker in _STEP_MARKERS)


def needs_parse(text: str) -> bool:
    """Whether any check can fire in ``text`` (libcst parses it, the checks run): only in
    a file that mentions torch or a step call."""
    return "torch" in text or may_hold_a_step(text)


def encodable(source: Source, result: FileResult) -> Source | None:
    """``source`` ready to parse, or None when it holds a lone surrogate (reported in
    ``result``); a notebook's cells that hold one are reported and blanked out, so one
    such cell never hides the others."""
    problem = unencodable(source)
    if problem is None:
        return source
    if source.cells is None:  # every parser fails on it: say where
        result.findings.append(problem)
        return None
    lines = python_lines(source.text)
    for number, first, last in source.cell_spans():
        problem = unencodable(Source(source.path, "\n".join(lines[first - 1:last]) + "\n"))
        if problem is not None:
            result.findings.append(syntax_error(source.path, problem.message, problem.location.line, problem.location.column, number))
            lines[first - 1:last] = ["#"] * (last - first + 1)
    return replace(source, text="\n".join(lines) + "\n")


def light_check(source: Source, result: FileResult, file: str | None = None) -> FileResult:
    """``result`` for a file no check can fire in (``needs_parse`` is False): only syntax
    matters, and what the file passes on to the steps (re-exports, helper calls)."""
    tree = quick_parse(source)
    if isinstance(tree, Finding):
        result.findings.append(tree)
    elif source.cells is None:
        result.summary = light_summary(tree, os.path.abspath(file if file is not None else source.path))
    return result


def quick_syntax_check(source: Source) -> Finding | None:
    tree = quick_parse(source)
    return tree if isinstance(tree, Finding) else None


def quick_parse(source: Source) -> ast.Module | Finding:
    """CPython's own parse (about a tenth of libcst's): its AST, or its syntax error."""
    try:
        return compile(source.text, source.path, "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
    except SyntaxError as error:
        if newer_python_syntax(source.text, error):
            return ast.Module(body=[], type_ignores=[])  # valid for Python 3.12: nothing to report
        location = source.location(error.lineno or 1, error.offset or 1)
        return syntax_error(source.path, f"cannot parse: {error.msg}", location.line, location.column, location.cell)
    except (ValueError, RecursionError, MemoryError) as error:
        return syntax_error(source.path, f"cannot parse: {error}")
