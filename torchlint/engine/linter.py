"""The checks of one configuration applied to one file (libcst and every check are
imported when the first file that needs them is checked: engine/prefilter.py)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torchlint import catalogue
from torchlint.analysis.join_steps import Steps
from torchlint.config import Config
from torchlint.engine.discover import SourceFile
from torchlint.engine.prefilter import encodable, light_check, needs_parse
from torchlint.engine.results import FileResult
from torchlint.engine.settle import settle_steps
from torchlint.engine.source import Source
from torchlint.engine.suppress import PerFileIgnores, is_suppressed, selected_codes, unused_noqa
from torchlint.findings import UNUSED_NOQA, Finding, at_least

if TYPE_CHECKING:
    from torchlint.analysis.context import Options
    from torchlint.checks.base import Check
    from torchlint.engine.fixes import Edit

# The fix machinery (engine/fixes.py, engine/notebook.py, difflib) is imported by the
# methods that fix: a plain check never loads it.


def options_of(config: Config) -> Options:
    from torchlint.analysis.context import Options  # imports libcst

    return Options(config.tensor_core_multiple, config.min_dimension, config.target_torch_version)


class Linter:
    """The selected checks and filters of one configuration, applied file by file."""

    def __init__(self, config: Config, debug: bool = False, tails: frozenset[str] | None = None) -> None:
        known = catalogue.defaults()
        self.tails = tails  # the module tails of the project its files join in, where the run knows them (`run_checks`)
        self.known = set(known)
        self.codes = selected_codes(config, known)
        self.per_file = PerFileIgnores(config, known)
        self.config = config
        self.debug = debug

    @cached_property
    def checks(self) -> list[type[Check]]:
        from torchlint.checks import all_checks  # imports libcst and every check

        return [c for c in all_checks() if c.code in self.codes]

    @cached_property
    def options(self) -> Options:
        return options_of(self.config)

    def _run(self, source: Source, path: Path, ignored: set[str]) -> FileResult:
        """The checks not ignored for ``path`` run over ``source``; a file no check can fire
        in is checked by CPython's parser alone, with neither libcst nor the checks loaded."""
        if needs_parse(source.text):
            from torchlint.engine.runner import run_checks

            return run_checks(source, [c for c in self.checks if c.code not in ignored], self.options, self.debug, file=str(path), tails=self.tails)
        result = FileResult(source)
        ready = encodable(source, result)
        return result if ready is None else light_check(ready, result, str(path))

    def _keep(self, findings: list[Finding], source: Source | None, ignored: set[str]) -> list[Finding]:
        return [
            f for f in findings
            if (f.code in self.codes or f.code == "TL000") and f.code not in ignored and not is_suppressed(f, source)
        ]

    def lint(self, source: Source, path: Path, steps: Steps | None = None, used: Sequence[Finding] = ()) -> FileResult:
        """Check one file. With ``steps`` (the project-wide join, already made), findings
        that hold only in per-step functions are settled at once; without, they stay in
        ``result.conditional`` for :func:`settle_steps`. ``used``: findings the project
        adds to this file (at its call sites, ``engine/call_sites.py``), which a ``# noqa``
        may suppress: such a comment is no unused one (TL001)."""
        ignored = self.per_file.ignored_codes(path)
        result = self._run(source, path, ignored)
        if UNUSED_NOQA[0] in self.codes and UNUSED_NOQA[0] not in ignored and result.source is not None:
            found = [*result.findings, *(c.finding for c in result.conditional), *(d.finding for d in result.pending), *used]
            candidates = [f for f in found if f.code in self.codes and f.code not in ignored]
            result.findings += unused_noqa(result.source, candidates, self.known, self.codes - ignored, result.module)
        result.findings = self._keep(result.findings, source, ignored)
        kept = {id(f) for f in self._keep([c.finding for c in result.conditional], source, ignored)}
        result.conditional = [c for c in result.conditional if id(c.finding) in kept]  # by identity: `in` a list of N was N²
        kept = {id(f) for f in self._keep([d.finding for d in result.pending], source, ignored)}
        result.pending = [d for d in result.pending if id(d.finding) in kept]
        result.path = path
        if steps is not None:
            settle_steps([result], steps, debug=self.debug)
        return result

    def lint_file(self, file: SourceFile, steps: Steps | None = None, used: Sequence[Finding] = ()) -> FileResult:
        source = file.read()  # the size limit and odd files (FIFOs, loops) as discover set them
        if isinstance(source, Finding):
            return FileResult(None, self._keep([source], None, set()), path=file.path)
        return self.lint(source, file.path, steps, used)

    def fix(self, result: FileResult, unsafe: bool, steps: Steps | None = None, max_rounds: int = 10, used: Sequence[Finding] = (),
            floor: str | None = None) -> Edit | None:
        """Apply fixes round by round until none is left; ``result.findings`` becomes what
        remains. Each round's code must parse, so a second --fix changes nothing. A
        notebook's fixed code goes back into its cells (fixes that cannot are noted).
        ``floor``: only the fixes of findings at or above that impact (what ``check``
        shows under ``min-impact``); None: every one."""
        source, path = result.source, result.path
        if source is None or path is None or result.module is None or (source.cells is not None and source.notebook is None):
            return None  # unreadable files (and a notebook whose kernel is not Python) are not rewritten
        from torchlint.engine.fixes import applicable

        current, module, fixed_total, notes = source, result.module, 0, []
        original = tuple(result.findings)  # reported again if the fixed text cannot be written
        for _ in range(max_rounds):
            todo = [f for f in applicable(result.findings, unsafe) if floor is None or at_least(f.impact, floor)]
            if not todo:
                break
            try:
                fixed_source, fixed = self._fix_round(current, module, todo, notes)
                if fixed_source is None:
                    break
                rerun = self.lint(fixed_source, path, steps if steps is not None else {}, used)
            except RecursionError:
                # libcst's rewriting visitor needs more frames per level of nesting than
                # the walk that found these: the findings stand, the file is not rewritten.
                notes.append(f"{source.path}: not fixed: an expression is nested too deeply to rewrite safely")
                break
            if rerun.module is None or rerun.source is None:
                notes.append(f"{source.path}: not fixed: the fixed code could not be checked again")
                break
            fixed_total += len(fixed)
            current, module, result.findings = rerun.source, rerun.module, rerun.findings
        return _edit(path, source, current, fixed_total, original, notes)

    def _fix_round(self, source: Source, module: Any, todo: list[Finding], notes: list[str]) -> tuple[Source | None, list[Finding]]:
        """``source`` with the fixes of ``todo`` applied (None when none applies). In a
        notebook, a fix whose change cannot go back into the cells is left out, and why noted."""
        from torchlint.engine.fixes import apply_fixes, keep_untouched, python_problem
        from torchlint.engine.notebook import Unmappable, put_back

        new_text, fixed = apply_fixes(module, todo)
        new_text = keep_untouched(source.text, new_text, module)
        if not fixed or new_text == source.text:
            return None, []
        problem = python_problem(new_text)
        if problem is not None:  # never silently: the findings stay marked fixable
            codes = ", ".join(sorted({f.code for f in fixed}))
            notes.append(f"{source.path}: {codes} fix{'es' if len(fixed) > 1 else ''} not applied: {problem}")
            return None, []
        if source.cells is None:
            return Source(source.path, new_text), fixed
        try:
            return put_back(source, new_text), fixed
        except Unmappable as failure:
            near = failure.lines  # first try alone only the fixes near the changes with no place
        for suspects in ([f for f in fixed if _joined_lines(source, f) & near], fixed):
            kept = [f for f in fixed if f not in suspects or _fits_cells(source, module, f, notes)]
            if not kept:
                break
            new_text, applied = apply_fixes(module, kept)
            new_text = keep_untouched(source.text, new_text, module)
            if not applied:
                break
            try:
                return put_back(source, new_text), applied
            except Unmappable:
                continue  # together they still do not fit: try every fix alone
        for finding in fixed:  # each fits alone but not all together: one now, the rest next round
            if _fits_cells(source, module, finding, notes):
                alone, applied = apply_fixes(module, [finding])
                return put_back(source, keep_untouched(source.text, alone, module)), applied
        return None, []


def _joined_lines(source: Source, finding: Finding) -> set[int]:
    """The lines of the joined notebook code that ``finding`` spans."""
    assert source.cells is not None
    location = finding.location
    first = source.cells.joined_line(location.cell or 1, location.line)
    return set(range(first, first + (location.end_line or location.line) - location.line + 1))


def _fits_cells(source: Source, module: Any, finding: Finding, notes: list[str]) -> bool:
    """Whether ``finding``'s fix alone can be put back into the notebook's cells."""
    from torchlint.engine.fixes import apply_fixes
    from torchlint.engine.notebook import Unmappable, place

    try:
        place(source, apply_fixes(module, [finding])[0])
    except Unmappable as why:
        note = f"{finding.location}: {finding.code} not fixed: {why}"
        if note not in notes:
            notes.append(note)
        return False
    return True


def _edit(path: Path, source: Source, fixed: Source, count: int, original: tuple[Finding, ...], notes: list[str]) -> Edit | None:
    """The planned write of ``path``: its text, or for a notebook its JSON, as fixed."""
    from torchlint.engine.fixes import Edit
    from torchlint.engine.notebook import cell_changes

    if source.notebook is None:
        if fixed.text == source.text and not notes:
            return None
        return Edit(path, source.path, source.text, fixed.text, source.encoding, source.digest, count, original, notes=tuple(notes))
    after = fixed.notebook or source.notebook
    if after == source.notebook and not notes:
        return None
    cells = cell_changes(source.notebook, after)
    return Edit(path, source.path, source.notebook, after, source.encoding, source.digest, count, original, cells, tuple(notes))


def lint_source(text: str, path: str = "<string>", config: Config | None = None) -> list[Finding]:
    """Lint source text (for tests and editors); selection and ``# noqa`` apply. The text
    is its own project: its per-step functions are those its own loops and hooks reach."""
    result = Linter(config or Config(), debug=True).lint(Source(path, text), Path(path))
    settle_steps([result], debug=True)  # a test sees what raised
    return sorted(result.findings, key=Finding.sort_key)
