"""The static pipeline: files → parse → checks → findings → suppressions and config."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from torchlint import catalogue
from torchlint.analysis.context import Options
from torchlint.checks import all_checks
from torchlint.config import Config
from torchlint.engine.fixes import Edit, applicable, apply_fixes, is_valid_python
from torchlint.engine.discover import MissingPathError, SourceFile, discover
from torchlint.engine.runner import FileResult, InternalError, run_checks
from torchlint.engine.source import Source, read_source
from torchlint.engine.suppress import PerFileIgnores, is_suppressed, selected_codes
from torchlint.findings import Finding


@dataclass(slots=True)
class LintResult:
    findings: list[Finding] = field(default_factory=list)
    errors: list[InternalError] = field(default_factory=list)
    files_checked: int = 0
    # Per file: the parsed source, for --fix (only kept when asked for).
    files: list[FileResult] = field(default_factory=list)


def options_of(config: Config) -> Options:
    return Options(config.tensor_core_multiple, config.min_dimension, config.target_torch_version)


def lint_paths(
    paths: Iterable[Path],
    config: Config,
    *,
    force_exclude: bool = False,
    keep_files: bool = False,
    debug: bool = False,
    on_file: Callable[[SourceFile], None] | None = None,
) -> LintResult:
    """Lint every source file under ``paths``; raises MissingPathError for a missing path."""
    known = catalogue.defaults()
    codes = selected_codes(config, known)
    checks = [c for c in all_checks() if c.code in codes]
    per_file = PerFileIgnores(config, known)
    options = options_of(config)
    result = LintResult()
    files = list(discover(list(paths), config, force_exclude=force_exclude))
    for file in files:
        if on_file is not None:
            on_file(file)
        ignored = per_file.ignored_codes(file.path)
        file_checks = [c for c in checks if c.code not in ignored]
        file_result = lint_file(file, file_checks, options, debug)
        file_result.findings = [
            f for f in file_result.findings
            if (f.code in codes or f.code == "TL000") and f.code not in ignored and not is_suppressed(f, file_result.source)
        ]
        result.files_checked += 1
        result.findings.extend(file_result.findings)
        result.errors.extend(file_result.errors)
        if keep_files:
            result.files.append(file_result)
    result.findings.sort(key=Finding.sort_key)
    return result


def plan_fixes(result: LintResult, config: Config, unsafe: bool, max_rounds: int = 10) -> list[Edit]:
    """Compute the edits --fix would make; ``result.findings`` becomes what remains after them.

    Each round applies the non-overlapping fixes, checks the new code parses and
    lints it again, until no fix is left (so a second --fix changes nothing).
    """
    known = catalogue.defaults()
    codes = selected_codes(config, known)
    per_file = PerFileIgnores(config, known)
    options = options_of(config)
    edits: list[Edit] = []
    remaining: list[Finding] = []
    for file_result in result.files:
        source = file_result.source
        kept = [f for f in result.findings if source is not None and f.path == source.path]
        if source is None or source.cells is not None or file_result.module is None or not applicable(kept, unsafe):
            remaining.extend(kept)
            continue
        ignored = per_file.ignored_codes(Path(source.path))
        checks = [c for c in all_checks() if c.code in codes and c.code not in ignored]
        module, text, fixed_total = file_result.module, source.text, 0
        for _ in range(max_rounds):
            todo = applicable(kept, unsafe)
            if not todo:
                break
            new_text, fixed = apply_fixes(module, todo)
            if not fixed or new_text == text or not is_valid_python(new_text):
                break
            fixed_total += len(fixed)
            text = new_text
            rerun = run_checks(Source(source.path, text), checks, options)
            if rerun.module is None:
                break
            module = rerun.module
            kept = [f for f in rerun.findings if f.code not in ignored and not is_suppressed(f, Source(source.path, text))]
        remaining.extend(kept)
        if text != source.text:
            path = _path_of(result, source)
            edits.append(Edit(path, source.path, source.text, text, source.encoding, source.digest, fixed_total))
    result.findings = sorted(remaining + [f for f in result.findings if f.path not in {r.source.path for r in result.files if r.source}], key=Finding.sort_key)
    return edits


def _path_of(result: LintResult, source: Source) -> Path:
    for file_result in result.files:
        if file_result.source is source and file_result.path is not None:
            return file_result.path
    return Path(source.path)


def lint_file(file: SourceFile, checks: list, options: Options, debug: bool = False) -> FileResult:  # type: ignore[type-arg]
    source = read_source(file.path, file.display)
    if isinstance(source, Finding):
        return FileResult(None, [source], path=file.path)
    file_result = run_checks(source, checks, options, debug)
    file_result.path = file.path
    return file_result


def lint_source(text: str, path: str = "<string>", config: Config | None = None) -> list[Finding]:
    """Lint source text (for tests and editors); selection and ``# noqa`` apply."""
    config = config or Config()
    codes = selected_codes(config, catalogue.defaults())
    checks = [c for c in all_checks() if c.code in codes]
    source = Source(path, text)
    result = run_checks(source, checks, options_of(config))
    if result.errors:
        raise RuntimeError(result.errors[0].traceback)
    kept = [f for f in result.findings if (f.code in codes or f.code == "TL000") and not is_suppressed(f, source)]
    return sorted(kept, key=Finding.sort_key)


__all__ = ["LintResult", "MissingPathError", "lint_paths", "lint_source"]
