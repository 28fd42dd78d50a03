"""``lint_paths``: discover the files, take what the cache holds, check the rest (on every
core), join the project's steps, and plan the fixes."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING

from torchlint import catalogue
from torchlint.config import Config, Resolver
from torchlint.engine.cache import Cache, FileKey, content_digest
from torchlint.engine.discover import SourceFile, discover
from torchlint.engine.pool import check_files, guarded
from torchlint.engine.progress import Bar
from torchlint.engine.results import FileResult, InternalError
from torchlint.engine.settle import settle_steps
from torchlint.engine.suppress import PerFileIgnores, selected_codes
from torchlint.findings import Finding, FixSafety

if TYPE_CHECKING:
    from torchlint.analysis.project import Steps
    from torchlint.engine.fixes import Edit


@dataclass(slots=True)
class LintResult:
    findings: list[Finding] = field(default_factory=list)
    errors: list[InternalError] = field(default_factory=list)
    files_checked: int = 0
    edits: list[Edit] = field(default_factory=list)  # planned by fix=..., not yet written
    cached: int = 0  # files whose result came from the cache


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
) -> LintResult:
    """Lint every source file under ``paths`` (MissingPathError for a missing path).

    ``jobs`` processes check the files (each returns plain data, so memory is bounded by
    the largest file per process); ``cache`` is a cache directory (None: no cache).
    ``fix="safe"`` or ``fix="unsafe"`` also plans the fixes (``result.edits``) and
    reports what would remain after them. The output does not depend on ``jobs`` or on
    what the cache held. ``config`` is every file's, or a Resolver that gives each file its
    own (files are checked with the config of their directory; the join spans them all).
    """
    resolver = config if isinstance(config, Resolver) else Resolver.fixed(config)
    files = list(discover(list(paths), resolver, force_exclude=force_exclude))
    if on_file is not None:
        for file in files:
            on_file(file)
    configs = [resolver.for_file(file.path) for file in files]
    keys = _keys_of(configs)  # raises ConfigError for an unknown code in any of them
    store = Cache(cache) if cache is not None else None
    looked_up = [_look_up(store, keys[id(c)], file) for file, c in zip(files, configs)]
    results: list[FileResult | None] = [hit for hit, _ in looked_up]
    todo = [i for i, r in enumerate(results) if r is None]
    bar = Bar(len(todo), progress)
    try:
        checked = check_files([files[i] for i in todo], [configs[i] for i in todo], jobs=jobs, debug=debug, progress=bar.advance)
    finally:
        bar.close()
    for index, file_result in zip(todo, checked):
        entry = looked_up[index][1]
        if store is not None and entry is not None and not file_result.errors and _unchanged(files[index], entry):
            store.store(entry.key, file_result)
        results[index] = file_result
    if store is not None:
        store.prune()
    done = [r for r in results if r is not None]
    steps = settle_steps(done)
    result = LintResult(files_checked=len(files), cached=len(files) - len(todo))
    if fix is not None:
        _plan_fixes(files, done, configs, steps, fix, debug, result)
    for file_result in done:
        result.findings.extend(file_result.findings)
        result.errors.extend(file_result.errors)
    result.findings.sort(key=Finding.sort_key)  # by path, notebook cell, line, column, code
    return result


_NOT_IN_KEY = {"root", "source", "extended", "per_file_ignores"}


def _keys_of(configs: list[Config]) -> dict[int, _Keys]:
    """The cache keys of each distinct config (one object per config file), by its id."""
    keys: dict[int, _Keys] = {}
    for config in configs:
        if id(config) not in keys:
            keys[id(config)] = _Keys(config)
    return keys


class _Keys:
    """What, besides its bytes, each file's result depends on (see cache.FileKey)."""

    def __init__(self, config: Config) -> None:
        known = catalogue.defaults()
        self.codes = selected_codes(config, known)  # raises ConfigError for an unknown code
        self.per_file = PerFileIgnores(config, known)
        # Every setting but where the config lives and the per-file ignores (which enter the
        # key as each file's own ignored codes), so a new setting can never be left out.
        self.options = tuple((f.name, repr(getattr(config, f.name))) for f in fields(config) if f.name not in _NOT_IN_KEY)

    def of(self, file: SourceFile) -> FileKey:
        ignored = self.per_file.ignored_codes(file.path)
        codes = tuple(sorted(self.codes - ignored))
        return FileKey(file.display, os.path.abspath(file.path), codes, tuple(sorted(ignored)), self.options)


@dataclass(frozen=True, slots=True)
class _Entry:
    """A file's cache key, and its size and time as they were when its bytes were hashed."""

    key: str
    stamp: tuple[int, int]


def _look_up(store: Cache | None, keys: _Keys, file: SourceFile) -> tuple[FileResult | None, _Entry | None]:
    """The cached result of ``file`` (or None), and the entry its result is to go in."""
    if store is None:
        return None, None
    try:
        info = file.path.stat()
        if not stat.S_ISREG(info.st_mode) or (file.byte_limit is not None and info.st_size > file.byte_limit):
            return None, None  # a FIFO (reading would block), a file too large: TL000 there
        stamp = (info.st_mtime_ns, info.st_size)
        data = file.path.read_bytes()
    except OSError:
        return None, None  # checked as usual (it becomes TL000 there), never cached
    entry = _Entry(store.key(keys.of(file), content_digest(data)), stamp)
    hit = store.load(entry.key)
    if hit is not None:
        hit.path = file.path
    return hit, entry


def _stamp(path: Path) -> tuple[int, int]:
    info = path.stat()
    return info.st_mtime_ns, info.st_size


def _unchanged(file: SourceFile, entry: _Entry) -> bool:
    """Whether the file still is what was hashed: a file edited while it was being
    checked must not have its new result stored under its old bytes."""
    try:
        return _stamp(file.path) == entry.stamp
    except OSError:
        return False


def _plan_fixes(files: list[SourceFile], done: list[FileResult], configs: list[Config], steps: Steps, fix: str, debug: bool, result: LintResult) -> None:
    """Check again, in this process, each file with a fix to apply: fixing needs its tree,
    which no worker or cache entry keeps (the file is checked again before writing)."""
    allowed = {FixSafety.SAFE, FixSafety.UNSAFE} if fix == "unsafe" else {FixSafety.SAFE}
    wanted = [i for i, r in enumerate(done) if any(f.fix is not None and f.fix.safety in allowed for f in r.findings)]
    if not wanted:
        return
    from torchlint.engine.linter import Linter

    linters: dict[int, Linter] = {}
    for index in wanted:
        file = files[index]
        if id(configs[index]) not in linters:  # one linter per config with a file to fix
            linters[id(configs[index])] = Linter(configs[index], debug)
        linter = linters[id(configs[index])]
        fresh = guarded(file, debug, lambda: linter.lint_file(file, steps))
        if fresh.module is None and fresh.errors:  # checking it again raised: report that
            done[index].errors.extend(fresh.errors)
            continue
        edit = guarded(file, debug, lambda: linter.fix(fresh, unsafe=fix == "unsafe", steps=steps))
        if isinstance(edit, FileResult):  # fixing raised: report it, keep what the check found
            done[index].errors.extend(edit.errors)
        elif edit is not None:
            result.edits.append(edit)
            fresh.module = fresh.source = None
            done[index] = fresh
