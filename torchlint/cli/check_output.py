"""What ``torchlint check`` does beyond linting: the report in its format and where it
goes, stdin, ``--add-noqa``, ``--statistics`` and ``--show-fixes``. cli/__init__.py holds the
options and exit codes; this module the work they ask for."""

from __future__ import annotations

import re
import sys
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import click

if TYPE_CHECKING:
    from torchlint.engine import LintResult
    from torchlint.engine.fixes import Edit
    from torchlint.engine.source import Source
    from torchlint.findings import Finding


MAX_SNIPPET_FILE = 8 * 1024 * 1024  # bytes; larger files are reported without source lines


class SourceLines:
    """Source lines for the reports, read once per file (stdin's text given up front).
    Only the lines are kept, and only of files that have findings."""

    def __init__(self, given: dict[str, Source] | None = None) -> None:
        self.files: dict[str, tuple[list[str], Source | None, dict[int, tuple[int, ...]]] | None] = {}
        for path, source in (given or {}).items():
            self.files[path] = self._entry(source)

    @staticmethod
    def _entry(source: Source) -> tuple[list[str], Source | None, dict[int, tuple[int, ...]]]:
        # A notebook also keeps its Source: its cell map says which lines are which cell,
        # and which line of the file holds each cell line (not its JSON, which may be
        # megabytes of outputs).
        cells = replace(source, notebook=None) if source.cells is not None else None
        from torchlint.engine.source import python_lines

        in_file = {}
        if source.notebook is not None:
            from torchlint.engine.notebook import file_lines  # a notebook's only: difflib and JSON splicing

            in_file = file_lines(source.notebook)
        return python_lines(source.text), cells, in_file  # Python's line breaks: findings count lines as it does

    def _file(self, path: str) -> tuple[list[str], Source | None, dict[int, tuple[int, ...]]] | None:
        if path not in self.files:
            from torchlint.engine.source import Source, byte_limit, read_bytes, source_from_bytes

            self.files[path] = None
            file = Path(path)
            try:
                # Only regular files of a sane size: a FIFO would block, a huge file (its
                # finding a TL000 saying so) is not worth reading for a few lines.
                readable = file.is_file() and file.stat().st_size <= MAX_SNIPPET_FILE
            except OSError:
                readable = False
            if readable:
                try:
                    data = read_bytes(file, byte_limit(file, MAX_SNIPPET_FILE))
                except OSError:
                    return None
                # The text whether or not it parses: a syntax error (TL000) shows its line too.
                read = source_from_bytes(file, path, data, compiled=False)
                if isinstance(read, Source):
                    self.files[path] = self._entry(read)
        return self.files[path]

    def __call__(self, path: str, cell: int | None, line: int) -> str | None:
        entry = self._file(path)
        if entry is None:
            return None
        lines, notebook, _ = entry
        if cell is not None and notebook is not None and notebook.cells is not None:
            line = notebook.cells.joined_line(cell, line)
            spans = {number: (first, last) for number, first, last in notebook.cell_spans()}
            first, last = spans.get(cell, (0, 0))
            if not first <= line <= last:
                return None
        return lines[line - 1] if 0 < line <= len(lines) else None

    def file_line(self, path: str, cell: int, line: int) -> int | None:
        """The line of the notebook file ``path`` that holds line ``line`` of cell ``cell``."""
        entry = self._file(path)
        in_cell = entry[2].get(cell, ()) if entry is not None else ()
        return in_cell[line - 1] if 0 < line <= len(in_cell) else None


def keep_shown(result: LintResult, config_for: Any) -> Counter[str]:
    """Keep in ``result`` the findings at or above each file's ``min-impact`` (what the
    report shows and the exit status follows); how many of each impact were left out."""
    from torchlint.findings import at_least

    shown, left_out = [], Counter()
    for finding in result.findings:
        if at_least(finding.impact, config_for(Path(finding.path)).min_impact):
            shown.append(finding)
        else:
            left_out[finding.impact] += 1
    result.findings = shown
    return left_out


def emit(text: str, output_file: Path | None, err: bool = False, color: bool = False) -> None:
    """The report to stdout (stderr when stdout carries fixed source), or written to
    ``output_file`` (its folder made if needed)."""
    if output_file is None:
        if text:  # (no findings in JSON Lines is no line at all, not an empty one a reader fails to parse)
            click.echo(text, err=err, color=color or None)  # click strips styles off a pipe unless told
        return
    try:
        output_file.parent.mkdir(parents=True, exist_ok=True)
        output_file.write_text(text + "\n" if text else "", encoding="utf-8")
    except OSError as error:
        click.echo(f"torchlint: error: cannot write the report to {output_file}: {error.strerror or error}", err=True)
        sys.exit(2)


def report(
    result: LintResult,
    output_format: str,
    *,
    fixed: int = 0,
    color: str = "auto",
    output_file: Path | None = None,
    statistics: bool = False,
    lines: SourceLines | None = None,
    err: bool = False,
    left_out: Counter[str] | None = None,
    unsafe: bool = False,
) -> None:
    """Print (or write) the report of ``result`` and its internal errors; ``left_out``
    counts the findings below ``min-impact``, by impact (the summary says how to see them)."""
    from torchlint.report import HUMAN_FORMATS, ReportContext, render
    from torchlint.report.color import use_color

    if statistics:
        from torchlint.report import statistics as stats

        emit(stats.render(result.findings, as_json=output_format not in HUMAN_FORMATS, left_out=left_out, unsafe=unsafe), output_file, err)
    else:
        stream: TextIO = sys.stderr if err else sys.stdout
        lines = lines or SourceLines()
        context = ReportContext(
            files_checked=result.files_checked,
            fixed=fixed,
            failed=len({error.path for error in result.errors}),
            left_out=dict(left_out or {}),
            color=output_file is None and output_format in HUMAN_FORMATS and use_color(color, stream.isatty()),
            root=Path.cwd(),
            line_text=lines,
            file_line=lines.file_line,
        )
        emit(render(output_format, result.findings, context), output_file, err, context.color)
    if result.files_checked == 0 and not result.errors and not result.config_errors:
        # As ruff: an empty selection is worth saying (a mistyped path pattern, a tree
        # that `exclude` or .gitignore empties), though it is not an error.
        click.echo("torchlint: warning: no Python files or notebooks found under the given paths "
                   "(check `exclude`, .gitignore and --force-exclude)", err=True)
    for error in result.errors:
        # One line per error, never a traceback: the user's terminal is not a debugger. The
        # innermost frame in torchlint is what a bug report needs; `--debug` raises the whole one.
        at = raised_at(error.traceback)
        click.echo(f"torchlint: internal error in {error.code} on {error.path}: {error.error}{f' (at {at})' if at else ''}", err=True)
    if result.errors:
        click.echo("torchlint: this is a bug in torchlint; please report it with the file that triggered it "
                   "(`--debug` shows the traceback).", err=True)


_FRAME = re.compile(r'File "(?P<file>[^"]*torchlint[/\\][^"]+)", line (?P<line>\d+), in (?P<function>\S+)')


def raised_at(trace: str) -> str | None:
    """The innermost frame of torchlint's own code in a formatted traceback, as
    ``torchlint/checks/arch/x.py:416 in f``; None when there is none (a cross-file stage's
    error carries no traceback)."""
    frames = list(_FRAME.finditer(trace))
    if not frames:
        return None
    last = frames[-1]
    file = last["file"].replace("\\", "/")
    return f"{file[file.rindex('torchlint/'):]}:{last['line']} in {last['function']}"


def fixes_by_file(before: list[Finding], after: list[Finding], paths: set[str] | None = None) -> dict[str, Counter[tuple[str, str]]]:
    """Per file and rule, how many findings with a fix went away between two runs."""
    gone: dict[str, Counter[tuple[str, str]]] = {}
    remaining = Counter((f.path, f.code) for f in after)
    for finding in before:
        if finding.fix is None or (paths is not None and finding.path not in paths):
            continue
        key = (finding.path, finding.code)
        if remaining[key]:
            remaining[key] -= 1
            continue
        gone.setdefault(finding.path, Counter())[(finding.code, finding.name)] += 1
    return gone


def applied_fixes(result: LintResult, config: Any) -> dict[str, Counter[tuple[str, str]]]:
    """What the written fixes changed: each fixed file's text from before the fixes is
    linted again (as its own project, with its own config: ``config`` is a Config or a
    Resolver) and compared with what remains."""
    from torchlint.config import Resolver
    from torchlint.engine import Linter, settle_steps

    settings = config if isinstance(config, Resolver) else Resolver.fixed(config)
    before: list[Finding] = []
    for edit in result.edits:
        linter = Linter(settings.for_path(edit.path))
        file_result = linter.lint(edit.source_before(), edit.path)
        settle_steps([file_result])
        before.extend(file_result.findings)
    return fixes_by_file(before, result.findings, {edit.display for edit in result.edits})


def would_fix(findings: list[Finding], unsafe: bool) -> dict[str, Counter[tuple[str, str]]]:
    from torchlint.engine.fixes import applicable

    planned: dict[str, Counter[tuple[str, str]]] = {}
    for finding in applicable(findings, unsafe):
        planned.setdefault(finding.path, Counter())[(finding.code, finding.name)] += 1
    return planned


def show_fixes(per_file: dict[str, Counter[tuple[str, str]]], applied: bool) -> None:
    from torchlint.report import show_fixes as render_fixes

    click.echo(render_fixes.render(per_file, applied), err=True)


def add_noqa(result: LintResult, targets: list[Path]) -> tuple[int, int]:
    """Add ``# noqa: CODE`` for each finding, file by file: ``(codes added, files that
    could not be written)``. A file is written as ``--fix`` writes one: atomically, never
    a read-only file or a symlink whose target lies outside the checked trees."""
    from torchlint.engine.add_noqa import add_noqa as plan_noqa
    from torchlint.engine.fixes import ChangedOnDiskError, Edit, RefusedWriteError, checked_roots, write_atomically
    from torchlint.engine.source import Source, read_source

    by_file: dict[str, list[Finding]] = {}
    for finding in result.findings:
        by_file.setdefault(finding.path, []).append(finding)
    roots = checked_roots(targets)
    added = failed = 0
    for display, findings in sorted(by_file.items()):
        if display.endswith(".ipynb"):
            click.echo(f"torchlint: {display}: --add-noqa does not edit notebooks; add the comments in the cells", err=True)
            continue
        source = read_source(Path(display), display)
        if not isinstance(source, Source):
            continue
        plan = plan_noqa(source.text, findings)
        for line in plan.skipped:
            click.echo(f"torchlint: {display}:{line}: cannot add a `# noqa` comment for this line (mend its malformed `# noqa` by hand)", err=True)
        if plan.text == source.text:
            continue
        try:
            note = write_atomically(Edit(Path(display), display, source.text, plan.text, source.encoding, source.digest, plan.added), roots)
        except ChangedOnDiskError:
            click.echo(f"torchlint: {display} changed on disk while it was being checked; left as it was", err=True)
        except RefusedWriteError as error:
            click.echo(f"torchlint: {error}", err=True)
        except OSError as error:
            click.echo(f"torchlint: cannot write {display}: {error.strerror or error}", err=True)
        else:
            if note is not None:
                click.echo(f"torchlint: {note}", err=True)
            added += plan.added
            continue
        failed += 1
    click.echo(f"Added {added} noqa directive{'s' if added != 1 else ''}.", err=True)
    if failed:
        click.echo(f"torchlint: {failed} file{'s' if failed != 1 else ''} could not be written", err=True)
    return added, failed


@dataclass(frozen=True)
class Project:
    """Where stdin's project context comes from: each file's settings, the result cache
    and the processes that may summarise what the cache lacks."""

    settings: Any
    cache: Path | None
    jobs: int

    def context(self, filename: str) -> Any:
        """The project around ``filename``: the other files' summaries, and their results on demand."""
        from torchlint.engine.project_files import project_summaries

        context = project_summaries(Path(filename), self.settings, cache=self.cache, jobs=self.jobs)
        if context.note:
            click.echo(f"torchlint: note: {context.note}", err=True)
        return context


def check_stdin(filename: str | None, config: Any, mode: str | None, *, diff: bool, debug: bool, force_exclude: bool, project: Project | None = None) -> tuple[LintResult, Edit | None, SourceLines]:
    """Lint standard input; with --fix the fixed text goes to stdout (the report to stderr).
    With ``--stdin-filename``, the text is checked in the context of that file's project
    (the other files' summaries; the file on disk is the one stdin replaces)."""
    from torchlint.engine import LintResult
    from torchlint.engine.source import Source, decode
    from torchlint.engine.stdin import excluded, lint_stdin

    data = sys.stdin.buffer.read()
    if filename and force_exclude and excluded(Path(filename), config):
        if mode and not diff:
            _binary_stdout().write(data)  # an excluded file passes through unchanged
        return LintResult(), None, SourceLines()
    try:
        context = project.context(filename) if filename and project is not None else None
        summaries, elsewhere = (context.summaries, lambda paths: context.full_results(paths, jobs=project.jobs)) if context is not None else ([], None)
        result, edit = lint_stdin(data, filename, config, fix=mode, debug=debug, context=summaries, elsewhere=elsewhere)
    except BaseException:
        if mode and not diff:  # an editor takes stdout as the new buffer: never leave it empty
            _binary_stdout().write(data)
            sys.stdout.flush()
        raise
    display = result.findings[0].path if result.findings else (edit.display if edit else None)
    lines = SourceLines()
    if display is not None and not display.endswith(".ipynb"):
        decoded = decode(display, data)
        text = edit.after if edit is not None and not diff else decoded[0] if isinstance(decoded, tuple) else ""
        lines = SourceLines({display: Source(display, text)})
    if mode and not diff:
        stdout = _binary_stdout()
        stdout.write(edit.after.encode(edit.encoding) if edit is not None else data)
        stdout.flush()
    return result, edit, lines


def _binary_stdout():  # type: ignore[no-untyped-def]
    """stdout's bytes, for source that must pass through exact (fixed, or unchanged)."""
    from torchlint.terminal import raw

    return raw(sys.stdout).buffer


def show_files(targets: list[Path], settings: Any, force_exclude: bool) -> None:
    """``--show-files``: each file that would be checked, one per line, sorted."""
    from torchlint.engine.discover import discover
    from torchlint.terminal import printable

    for name in sorted(file.display for file in discover(targets, settings, force_exclude)):
        click.echo(printable(name, one_line=True))  # one name a line, whatever it holds


def show_settings(path: Path, settings: Any) -> None:
    """``--show-settings FILE``: the config file FILE's settings come from, its ``extend``
    chain, the settings (as TOML) and the rules that run on it."""
    from dataclasses import fields

    from torchlint import catalogue
    from torchlint.engine.suppress import PerFileIgnores, selected_codes

    config = settings.for_path(path)
    known = catalogue.defaults()
    rules = selected_codes(config, known) - PerFileIgnores(config, known).ignored_codes(path)
    click.echo(f"Settings for: {path}")
    click.echo(f"Config file: {config.source or '(none: the defaults)'}")
    for base in config.extended:
        click.echo(f"Extends: {base}")
    click.echo(f"root = {_toml(str(config.root))}")
    for item in fields(config):
        if item.name not in ("root", "source", "extended"):
            click.echo(f"{item.name.replace('_', '-')} = {_toml(getattr(config, item.name))}")
    click.echo(f"# rules run on this file\nrules = {_toml(tuple(sorted(rules)))}")


def _toml(value: Any) -> str:
    """``value`` written as a TOML value (strings quoted, lists, inline tables)."""
    import json

    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_toml(k)} = {_toml(v)}" for k, v in value.items()) + "}"
    return str(value) if isinstance(value, int) else json.dumps(str(value))
