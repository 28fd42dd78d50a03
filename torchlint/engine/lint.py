"""``lint_paths``: discover the files, take what the cache holds, check the rest (on every
core), join the project's steps, and plan the fixes."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from torchlint.config import Config, Resolver
from torchlint.engine.cache import Cache, keys_of, look_up, unchanged
from torchlint.engine.call_sites import at_call_sites, kept, stepped_elsewhere
from torchlint.engine.discover import SourceFile, discover
from torchlint.engine.isolate import settle_project
from torchlint.engine.pool import check_files, guarded
from torchlint.engine.progress import Bar
from torchlint.engine.project_files import Context
from torchlint.engine.results import FileResult, InternalError
from torchlint.engine.settle import settle_steps
from torchlint.engine.source import Source
from torchlint.findings import UNUSED_NOQA, Finding, FixSafety, at_least

if TYPE_CHECKING:
    from torchlint.analysis.join_steps import Steps
    from torchlint.engine.fixes import Edit


@dataclass(slots=True)
class LintResult:
    findings: list[Finding] = field(default_factory=list)
    errors: list[InternalError] = field(default_factory=list)
    files_checked: int = 0
    edits: list[Edit] = field(default_factory=list)  # planned by fix=..., not yet written
    cached: int = 0  # files whose result came from the cache
    note: str | None = None  # what the run wants said besides its findings (a project too large to join)
    config_errors: list[str] = field(default_factory=list)  # configs that could not be read: their files unchecked


def lint_paths(
    paths: Iterable[Path],
    config: Config | Resolver,
    *,
    force_exclude: bool = False,
    fix: str | None = None,
    debug: bool = False,
    on_file: Callable[[SourceFile], None] | None = None,
    jobs: int = 1,
    cache: Path | None = None,
    progress: bool = False,
    project: bool = False,
    fix_shown: bool = False,
) -> LintResult:
    """Lint every source file under ``paths`` (MissingPathError for a missing path).

    ``jobs`` processes check the files (each returns plain data, so memory is bounded by
    the largest file per process); ``cache`` is a cache directory (None: no cache).
    ``fix="safe"`` or ``fix="unsafe"`` also plans the fixes (``result.edits``) and
    reports what would remain after them. The output does not depend on ``jobs`` or on
    what the cache held. ``config`` is every file's, or a Resolver that gives each file its
    own (files are checked with the config of their directory; the join spans them all).
    ``project``: the other files of the given paths' projects join too (their summaries,
    from the cache or summarised), so a helper given alone is per-step when a loop in
    another file calls it; only the given files' findings are reported.
    ``fix_shown``: fix only the findings at or above each file's ``min-impact`` (what
    ``check`` shows), as ruff fixes only what its selection shows.
    """
    resolver = config if isinstance(config, Resolver) else Resolver.fixed(config)
    paths = list(paths)
    files = list(discover(paths, resolver, force_exclude=force_exclude))
    if on_file is not None:
        for file in files:
            on_file(file)
    configs = [resolver.for_file(file.path) for file in files]
    if any(c.broken for c in configs):  # a file named under a config that could not be read: not checked
        files, configs = [f for f, c in zip(files, configs) if not c.broken], [c for c in configs if not c.broken]
    broken_given = dict(getattr(resolver, "broken", {}))  # what the given paths met; the project walk's is a note
    keys = keys_of(configs)  # raises ConfigError for an unknown code in any of them
    store = Cache(cache) if cache is not None else None
    context = Context.around(paths, [f.path for f in files], resolver, store) if project and files else Context()
    tails = context.tails_with(files)  # every module the join may resolve a call to ends in one of these
    looked_up = [look_up(store, keys[id(c)], file, tails) for file, c in zip(files, configs)]
    results: list[FileResult | None] = [hit for hit, _ in looked_up]
    todo = [i for i, r in enumerate(results) if r is None]
    bar = Bar(len(todo) + len(context.todo), progress)
    try:
        checked = check_files(
            [files[i] for i in todo] + context.todo_files(),
            [configs[i] for i in todo] + context.todo_configs(),
            jobs=jobs, debug=debug, progress=bar.advance, tails=tails,
        )
    finally:
        bar.close()
    for index, file_result in zip(todo, checked):
        entry = looked_up[index][1]
        if store is not None and entry is not None and not file_result.errors and unchanged(files[index], entry):
            store.store(entry.key, file_result)
        results[index] = file_result
    context.take(checked[len(todo):], store)
    if store is not None:
        store.prune()
    done = [r for r in results if r is not None]
    displays = {id(r): file.display for r, file in zip(done, files)}
    summaries = [*(r.summary for r in done if r.summary is not None), *context.summaries]
    steps, elsewhere_errors = settle_project(done, summaries, lambda some, joined: settle_steps(some, joined, debug=debug), debug,
                                             lambda r: displays[id(r)])
    result = LintResult(files_checked=len(files), cached=len(files) - len(todo), note=context.note, errors=elsewhere_errors)
    at_calls = _at_call_sites(files, done, configs, context, steps, store, jobs, debug, result.errors) if context.by_path else {}
    if fix is not None:
        _plan_fixes(files, done, configs, steps, fix, debug, result, at_calls, fix_shown)
    for index, (_, shown) in at_calls.items():
        done[index].findings = sorted([*done[index].findings, *shown], key=Finding.sort_key)
    for file_result in done:
        result.findings.extend(file_result.findings)
        result.errors.extend(file_result.errors)
    result.findings.sort(key=Finding.sort_key)  # by path, notebook cell, line, column, code
    result.config_errors = sorted(set(broken_given.values()))
    elsewhere = sorted({message for source, message in getattr(resolver, "broken", {}).items() if source not in broken_given})
    if elsewhere and result.note is None:  # a broken config elsewhere in the project: `check .` says so
        result.note = f"a config elsewhere in the project could not be read, so its files were left out of the project's join: {elsewhere[0]}"
    return result


def _at_call_sites(files: list[SourceFile], done: list[FileResult], configs: list[Config], context: Context, steps: Steps,
                   store: Cache | None, jobs: int, debug: bool, errors: list[InternalError]) -> dict[int, tuple[list[Finding], list[Finding]]]:
    """By given file: the per-step findings of the project's other files that its calls
    put into the step (``engine/call_sites.py``), all of them and those it reports (its
    selection and ``# noqa`` comments applied). A file whose ``# noqa`` suppressed one is
    checked again so that TL001 counts that comment as used."""
    displays = {file.display for file in files}
    given = {r.summary.path for r in done if r.summary is not None}
    elsewhere = stepped_elsewhere(steps, displays, given)
    if not elsewhere:
        return {}
    found = at_call_sites(context.full_results(elsewhere, store, jobs), steps, displays, errors=errors, debug=debug)
    at_calls: dict[int, tuple[list[Finding], list[Finding]]] = {}
    for index, file in enumerate(files):
        mine = [f for f in found if f.path == file.display]
        if not mine:
            continue
        source = file.read()
        shown = kept(mine, configs[index], file.path, source if isinstance(source, Source) else None)
        if len(shown) < len(mine) and any(f.code == UNUSED_NOQA[0] for f in done[index].findings):
            from torchlint.engine.linter import Linter

            again = guarded(file, debug, lambda: Linter(configs[index], debug).lint_file(file, steps, used=mine))
            if not again.errors:
                done[index].findings = again.findings
        at_calls[index] = (mine, shown)
    return at_calls


def _plan_fixes(files: list[SourceFile], done: list[FileResult], configs: list[Config], steps: Steps, fix: str, debug: bool, result: LintResult,
                at_calls: dict[int, tuple[list[Finding], list[Finding]]], fix_shown: bool = False) -> None:
    """Check again, in this process, each file with a fix to apply: fixing needs its tree,
    which no worker or cache entry keeps (the file is checked again before writing)."""
    allowed = {FixSafety.SAFE, FixSafety.UNSAFE} if fix == "unsafe" else {FixSafety.SAFE}
    floors = [config.min_impact if fix_shown else None for config in configs]
    wanted = [i for i, r in enumerate(done) if any(f.fix is not None and f.fix.safety in allowed and (floors[i] is None or at_least(f.impact, floors[i]))
                                                   for f in r.findings)]
    if not wanted:
        return
    from torchlint.engine.linter import Linter

    linters: dict[int, Linter] = {}
    for index in wanted:
        file = files[index]
        if id(configs[index]) not in linters:  # one linter per config with a file to fix
            linters[id(configs[index])] = Linter(configs[index], debug)
        linter = linters[id(configs[index])]
        used = at_calls.get(index, ([], []))[0]  # what its `# noqa` comments may suppress besides its own
        fresh = guarded(file, debug, lambda: linter.lint_file(file, steps, used))
        if fresh.module is None and fresh.errors:  # checking it again raised: report that
            done[index].errors.extend(fresh.errors)
            continue
        edit = guarded(file, debug, lambda: linter.fix(fresh, unsafe=fix == "unsafe", steps=steps, used=used, floor=floors[index]))
        if isinstance(edit, FileResult):  # fixing raised: report it, keep what the check found
            done[index].errors.extend(edit.errors)
        elif edit is not None:
            result.edits.append(edit)
            fresh.module = fresh.source = None
            done[index] = fresh
