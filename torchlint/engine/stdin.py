"""``torchlint check -``: lint text from standard input under the name an editor gives it."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

from torchlint.analysis.summary import FileSummary
from torchlint.config import Config, gitignore_spec
from torchlint.engine import LintResult, Linter, settle_steps
from torchlint.engine.call_sites import for_file, kept
from torchlint.engine.discover import SourceFile
from torchlint.engine.fixes import Edit
from torchlint.engine.isolate import settle_project
from torchlint.engine.pool import collector_paused, guarded
from torchlint.engine.results import FileResult
from torchlint.engine.source import source_within_limit
from torchlint.findings import UNUSED_NOQA, Finding

STDIN = "-"


def excluded(path: Path, config: Config) -> bool:
    """Whether the config's exclude patterns (anchored at its root) cover ``path``, as
    they cover a file named on the command line with ``--force-exclude``."""
    patterns = config.exclude + config.extend_exclude
    if not patterns:
        return False
    spec = gitignore_spec(patterns)
    absolute = path if path.is_absolute() else Path.cwd() / path
    try:
        relative = absolute.resolve().relative_to(config.root.resolve()).as_posix()
    except ValueError:
        relative = path.name
    return spec.match_file(relative) or spec.match_file(path.name)


def _display(path: Path) -> str:
    try:
        return path.resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return path.as_posix()


def lint_stdin(data: bytes, filename: str | None, config: Config, *, fix: str | None = None, debug: bool = False, context: Iterable[FileSummary] = (),
               elsewhere: Callable[[set[str]], list[FileResult]] | None = None) -> tuple[LintResult, Edit | None]:
    """Findings for ``data`` as if it were the file ``filename`` (per-file ignores apply
    by that name), and with ``fix``, the planned edit whose ``after`` is the fixed text.
    ``context``: the summaries of the other files of its project, joined with its own;
    ``elsewhere``: their results by absolute path, for what its calls put into the step
    there (``engine/call_sites.py``). Fixes apply to what ``min-impact`` shows.

    Standard input is one file like any other: the size limit, the raised recursion
    limit and the guard that turns any exception into an internal error all apply. A
    run with an internal error plans no edit, so the caller echoes the input unchanged."""
    path = Path(filename) if filename else Path(STDIN)
    display = _display(path) if filename else STDIN
    result = LintResult(files_checked=1)
    source = source_within_limit(path, display, data, config.max_file_size)
    if isinstance(source, Finding):
        result.findings.append(source)
        return result, None
    linter = Linter(config, debug)
    file = SourceFile(path, display, config.max_file_size)
    with collector_paused():
        file_result = guarded(file, debug, lambda: linter.lint(source, path))  # errors held, not raised
        edit = None
        summaries = [*context, *([file_result.summary] if file_result.summary is not None else [])]
        steps, elsewhere_errors = settle_project([file_result], summaries, lambda some, joined: settle_steps(some, joined, debug=debug), debug,
                                                  lambda _: display)
        file_result.errors.extend(elsewhere_errors)
        used: list[Finding] = []
        if elsewhere is not None and file_result.summary is not None and not file_result.errors:
            used = for_file(display, file_result.summary.path, steps, elsewhere, file_result.errors, debug)
            shown = kept(used, config, path, source)
            if len(shown) < len(used) and any(f.code == UNUSED_NOQA[0] for f in file_result.findings):  # a `# noqa` they use is no TL001
                file_result.findings = linter.lint(source, path, steps, used).findings
        if fix and not file_result.errors:
            planned = guarded(file, debug, lambda: linter.fix(file_result, unsafe=fix == "unsafe", steps=steps, used=used, floor=config.min_impact))
            if isinstance(planned, FileResult):  # the fix raised: no edit, the error reported
                file_result.errors.extend(planned.errors)
            else:
                edit = planned
        if used:
            file_result.findings = [*file_result.findings, *kept(used, config, path, source)]
    result.findings = sorted(file_result.findings, key=Finding.sort_key)
    result.errors = list(file_result.errors)
    return result, edit
