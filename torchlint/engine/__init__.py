"""The static pipeline: files → parse → checks → findings → suppressions and config (→ fixes)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

from torchlint import catalogue
from torchlint.analysis.context import Options
from torchlint.analysis.project import StepInfo, Steps, join
from torchlint.checks import all_checks
from torchlint.checks.base import STEP_PLACEHOLDER, Check
from torchlint.config import Config
from torchlint.engine.discover import MissingPathError, SourceFile, discover
from torchlint.engine.fixes import Edit, applicable, apply_fixes, is_valid_python
from torchlint.engine.runner import FileResult, InternalError, run_checks
from torchlint.engine.source import Source, read_source
from torchlint.engine.suppress import PerFileIgnores, is_suppressed, selected_codes
from torchlint.findings import Finding


@dataclass(slots=True)
class LintResult:
    findings: list[Finding] = field(default_factory=list)
    errors: list[InternalError] = field(default_factory=list)
    files_checked: int = 0
    edits: list[Edit] = field(default_factory=list)  # planned by fix=..., not yet written


def options_of(config: Config) -> Options:
    return Options(config.tensor_core_multiple, config.min_dimension, config.target_torch_version)


class Linter:
    """The selected checks and filters of one configuration, applied file by file."""

    def __init__(self, config: Config, debug: bool = False) -> None:
        known = catalogue.defaults()
        self.codes = selected_codes(config, known)
        self.checks = [c for c in all_checks() if c.code in self.codes]
        self.per_file = PerFileIgnores(config, known)
        self.options = options_of(config)
        self.debug = debug

    def _checks_for(self, path: Path) -> tuple[list[type[Check]], set[str]]:
        ignored = self.per_file.ignored_codes(path)
        return [c for c in self.checks if c.code not in ignored], ignored

    def _keep(self, findings: list[Finding], source: Source | None, ignored: set[str]) -> list[Finding]:
        return [
            f for f in findings
            if (f.code in self.codes or f.code == "TL000") and f.code not in ignored and not is_suppressed(f, source)
        ]

    def lint(self, source: Source, path: Path, steps: Steps | None = None) -> FileResult:
        """Check one file. With ``steps`` (the project-wide join, already made), findings
        that hold only in per-step functions are settled at once; without, they stay in
        ``result.conditional`` for :func:`settle_steps`."""
        checks, ignored = self._checks_for(path)
        result = run_checks(source, checks, self.options, self.debug)
        result.findings = self._keep(result.findings, source, ignored)
        kept = self._keep([f for _, f, _ in result.conditional], source, ignored)
        result.conditional = [entry for entry in result.conditional if entry[1] in kept]
        result.path = path
        if steps is not None:
            settle_steps([result], steps)
        return result

    def lint_file(self, file: SourceFile, steps: Steps | None = None) -> FileResult:
        source = file.read()  # the size limit and odd files (FIFOs, loops) as discover set them
        if isinstance(source, Finding):
            return FileResult(None, self._keep([source], None, set()), path=file.path)
        return self.lint(source, file.path, steps)

    def fix(self, result: FileResult, unsafe: bool, steps: Steps | None = None, max_rounds: int = 10) -> Edit | None:
        """Apply fixes round by round until none is left; ``result.findings`` becomes what
        remains. Each round's code must parse, so a second --fix changes nothing."""
        source, path = result.source, result.path
        if source is None or path is None or source.cells is not None or result.module is None:
            return None  # unreadable files and notebooks are not rewritten
        module, text, fixed_total = result.module, source.text, 0
        for _ in range(max_rounds):
            todo = applicable(result.findings, unsafe)
            if not todo:
                break
            new_text, fixed = apply_fixes(module, todo)
            if not fixed or new_text == text or not is_valid_python(new_text):
                break
            rerun = self.lint(Source(source.path, new_text), path, steps if steps is not None else {})
            if rerun.module is None:
                break
            fixed_total += len(fixed)
            text, module, result.findings = new_text, rerun.module, rerun.findings
        if text == source.text:
            return None
        return Edit(path, source.path, source.text, text, source.encoding, source.digest, fixed_total)


def lint_paths(
    paths: Iterable[Path],
    config: Config,
    *,
    force_exclude: bool = False,
    fix: str | None = None,
    debug: bool = False,
    on_file: Callable[[SourceFile], None] | None = None,
) -> LintResult:
    """Lint every source file under ``paths`` (MissingPathError for a missing path).

    ``fix="safe"`` or ``fix="unsafe"`` also plans the fixes (``result.edits``) and
    reports what would remain after them. Files are handled one at a time and their
    trees dropped, so memory is bounded by the largest file, not the project.
    """
    linter = Linter(config, debug)
    result = LintResult()
    files: list[tuple[SourceFile, FileResult]] = []
    for file in discover(list(paths), config, force_exclude=force_exclude):
        if on_file is not None:
            on_file(file)
        file_result = linter.lint_file(file)
        file_result.module = file_result.source = None  # memory stays bounded by one tree
        files.append((file, file_result))
    steps = settle_steps([r for _, r in files])
    for file, file_result in files:
        if fix is not None and applicable(file_result.findings, unsafe=fix == "unsafe"):
            # Fixing needs the tree back: re-read the file (it is checked again before writing).
            fresh = linter.lint_file(file, steps)
            edit = linter.fix(fresh, unsafe=fix == "unsafe", steps=steps)
            if edit is not None:
                result.edits.append(edit)
                file_result = fresh
        result.files_checked += 1
        result.findings.extend(file_result.findings)
        result.errors.extend(file_result.errors)
    result.findings.sort(key=Finding.sort_key)
    return result


def settle_steps(results: list[FileResult], steps: Steps | None = None) -> Steps:
    """The project-wide join (made from the results' summaries unless ``steps`` is given):
    each conditional finding whose function runs every step becomes a finding, its message
    saying where it runs and its ``related`` places carrying the hot call sites."""
    if steps is None:
        steps = join(r.summary for r in results if r.summary is not None)
    for file_result in results:
        if not file_result.conditional or file_result.summary is None:
            file_result.conditional = []
            continue
        per_step = steps.get(file_result.summary.path, {})
        for key, finding, device_bound in file_result.conditional:
            info = per_step.get(key)
            if info is not None and not (device_bound and info.host_only):
                file_result.findings.append(_per_step_finding(finding, key, info))
        file_result.conditional = []
        file_result.findings.sort(key=Finding.sort_key)
    return steps


def _per_step_finding(finding: Finding, key: str, info: StepInfo) -> Finding:
    related = finding.related + tuple(site for site in info.sites if site not in finding.related and site != finding.location)
    return replace(finding, message=finding.message.replace(STEP_PLACEHOLDER, info.text(key, finding.location.path)), related=related)


def lint_source(text: str, path: str = "<string>", config: Config | None = None) -> list[Finding]:
    """Lint source text (for tests and editors); selection and ``# noqa`` apply. The text
    is its own project: its per-step functions are those its own loops and hooks reach."""
    result = Linter(config or Config(), debug=True).lint(Source(path, text), Path(path))
    settle_steps([result])
    return sorted(result.findings, key=Finding.sort_key)


__all__ = ["LintResult", "Linter", "MissingPathError", "lint_paths", "lint_source", "settle_steps"]
