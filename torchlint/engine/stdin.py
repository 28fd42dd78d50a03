"""``torchlint check -``: lint text from standard input under the name an editor gives it."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pathspec

from torchlint.config import Config
from torchlint.engine import LintResult, Linter, settle_steps
from torchlint.engine.fixes import Edit
from torchlint.engine.source import Source, decode, notebook_source
from torchlint.findings import Finding

STDIN = "-"


def excluded(path: Path, config: Config) -> bool:
    """Whether the config's exclude patterns (anchored at its root) cover ``path``, as
    they cover a file named on the command line with ``--force-exclude``."""
    patterns = config.exclude + config.extend_exclude
    if not patterns:
        return False
    spec = pathspec.GitIgnoreSpec.from_lines(patterns)
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


def lint_stdin(data: bytes, filename: str | None, config: Config, *, fix: str | None = None, debug: bool = False) -> tuple[LintResult, Edit | None]:
    """Findings for ``data`` as if it were the file ``filename`` (per-file ignores apply
    by that name), and with ``fix``, the planned edit whose ``after`` is the fixed text."""
    path = Path(filename) if filename else Path(STDIN)
    display = _display(path) if filename else STDIN
    result = LintResult(files_checked=1)
    decoded = decode(display, data)
    if isinstance(decoded, Finding):
        result.findings.append(decoded)
        return result, None
    text, encoding = decoded
    source = notebook_source(display, text) if path.suffix == ".ipynb" else Source(display, text, encoding=encoding, digest=hashlib.sha256(data).hexdigest())
    if isinstance(source, Finding):
        result.findings.append(source)
        return result, None
    linter = Linter(config, debug)
    file_result = linter.lint(source, path)
    steps = settle_steps([file_result])
    edit = linter.fix(file_result, unsafe=fix == "unsafe", steps=steps) if fix else None
    result.findings = sorted(file_result.findings, key=Finding.sort_key)
    result.errors = list(file_result.errors)
    return result, edit
