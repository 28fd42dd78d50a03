"""The project around the files a run is given.

pre-commit passes only the files a commit changes, and an editor lints one buffer, but
the loop that makes a helper run every step may be in another file. So a given file is
checked in its project's context: the other files' step summaries join with its own,
and only the given files' findings are reported.

The project is the tree under the nearest directory, at or above a given path, that
holds a ``pyproject.toml``, a ``setup.py``, a ``.git`` or a ``.hg``; failing those, the
directory of the path's torchlint config file; failing that, the path stands alone. Its
files are those ``torchlint check`` would find walking that tree (exclude patterns,
.gitignore, virtual environments and tool folders skipped).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

from torchlint.analysis.project_index import module_tails
from torchlint.analysis.summary import FileSummary
from torchlint.config import Config, ConfigError, Resolver
from torchlint.engine.cache import Cache, Entry, Keys, look_up, unchanged
from torchlint.engine.discover import SOURCE_SUFFIXES, SourceFile, discover, real, real_file
from torchlint.engine.results import FileResult

PROJECT_MARKERS = ("pyproject.toml", "setup.py", ".git", ".hg")
# A tree this large is no project (a home directory under version control): beyond it,
# the given files are checked on their own, and the run says so.
MAX_PROJECT_FILES = 10_000


class TooLarge(Exception):
    """The project holds more than ``MAX_PROJECT_FILES`` source files."""

    def __init__(self, root: Path) -> None:
        super().__init__(str(root))
        self.root = root


def project_root(path: Path, settings: Resolver) -> Path | None:
    """The root of the project ``path`` (a file, a directory, or a name that need not
    exist yet, as ``--stdin-filename`` gives) belongs to; None outside any project."""
    absolute = real(path)
    directory = absolute if os.path.isdir(absolute) else absolute.parent
    for candidate in (directory, *directory.parents):
        if any(os.path.lexists(candidate / marker) for marker in PROJECT_MARKERS):
            return candidate
    source = settings.source_for(directory)
    return real(source).parent if source is not None else None


def _covered(root: Path, given_dirs: list[Path]) -> bool:
    """Whether a given directory already holds the whole tree under ``root``."""
    return any(root == directory or directory in root.parents for directory in given_dirs)


def context_files(paths: Iterable[Path], given: Iterable[Path], settings: Resolver, within: Path | None = None) -> list[SourceFile]:
    """The files of the projects of ``paths`` other than ``given`` (real paths compared):
    the files whose summaries give the given ones their context. TooLarge when a project
    holds more than ``MAX_PROJECT_FILES`` files. ``within`` (a real path holding
    ``paths``): a project reaching above it is walked from there (an editor's workspace)."""
    paths = list(paths)
    given_dirs = [real(p) for p in paths if os.path.isdir(p)]
    roots = {root for root in (project_root(p, settings) for p in paths) if root is not None}
    if within is not None:
        roots = {within if root in within.parents else root for root in roots}
    roots = sorted(root for root in roots if not any(other in root.parents for other in roots))  # the outer tree holds the inner
    seen = {real(p) for p in given}
    found: list[SourceFile] = []
    for root in roots:
        if _covered(root, given_dirs):
            continue  # `check .` at the root: every file is given
        for file in discover([root], settings):
            key = real_file(file.path)
            if key in seen or file.path.suffix not in SOURCE_SUFFIXES:
                continue  # a given file, or an unreadable directory (its own run reports it)
            seen.add(key)
            found.append(file)
            if len(found) > MAX_PROJECT_FILES:
                raise TooLarge(root)
    return found


def summary_config(config: Config) -> Config:
    """``config`` with no rule selected: checking a file with it gives the file's step
    summary alone, for the parse, the walk and the summary (no check runs). Its cache
    key is its own, so such a result never stands for a full one."""
    return replace(config, select=("ALL",), extend_select=(), ignore=("ALL",), per_file_ignores={})


@dataclass
class Context:
    """The other files of the given paths' projects, and their step summaries: from the
    cache where it holds their bytes' result (a whole-project run's, or a summary an
    earlier run stored), otherwise summarised (``todo``: checked with ``summary_config``,
    then given to ``take``). Their findings and errors are never reported."""

    files: list[SourceFile] = field(default_factory=list)
    configs: list[Config] = field(default_factory=list)
    entries: list[Entry | None] = field(default_factory=list)
    todo: list[int] = field(default_factory=list)
    summaries: list[FileSummary] = field(default_factory=list)
    note: str | None = None  # why the project could not be joined
    store: Cache | None = None  # the result cache it was read from
    by_path: dict[str, tuple[SourceFile, Config]] = field(default_factory=dict)  # every file, by absolute path, with its own config
    # the module tails (``project_index.module_tails``) of the given files and these: a summary made knowing them leaves
    # out the facts of calls the join cannot follow, and a cached one that left out a call of one of them is a miss
    tails: frozenset[str] | None = None

    @classmethod
    def around(cls, paths: Iterable[Path], given: Iterable[Path], settings: Resolver, store: Cache | None, within: Path | None = None) -> Context:
        context = cls(store=store)
        try:
            files = context_files(paths, given, settings, within)
        except TooLarge as error:
            context.note = (f"{error.root} holds more than {MAX_PROJECT_FILES} source files: the given files "
                            "were checked without the rest of their project")
            return context
        except ConfigError as error:  # a broken config elsewhere in the project: `check .` says so
            context.note = f"the given files were checked without the rest of their project: {error}"
            return context
        context.tails = module_tails(os.path.abspath(path) for path in [*given, *(file.path for file in files)])
        per_config: dict[int, tuple[Config, list[Keys]]] = {}
        for file in files:
            try:
                config = settings.for_file(file.path)
                if id(config) not in per_config:
                    per_config[id(config)] = _summary_keys(config)
            except ConfigError:
                continue  # that file's config is broken: it adds no steps
            own, keys = per_config[id(config)]
            context.by_path[os.path.abspath(file.path)] = (file, config)
            hit, entry = look_up(store, keys, file, context.tails)
            if hit is not None:
                if hit.summary is not None:
                    context.summaries.append(hit.summary)
                continue
            context.todo.append(len(context.files))
            context.files.append(file)
            context.configs.append(own)
            context.entries.append(entry)
        return context

    def todo_files(self) -> list[SourceFile]:
        return [self.files[i] for i in self.todo]

    def todo_configs(self) -> list[Config]:
        return [self.configs[i] for i in self.todo]

    def take(self, checked: list[FileResult], store: Cache | None) -> None:
        """The summaries of the files in ``todo``, as ``checked`` (their results, in order)."""
        for index, result in zip(self.todo, checked):
            entry = self.entries[index]
            if store is not None and entry is not None and not result.errors and unchanged(self.files[index], entry):
                store.store(entry.key, result)
            if result.summary is not None:
                self.summaries.append(result.summary)

    def full_results(self, paths: Iterable[str], store: Cache | None = None, jobs: int = 1) -> list[FileResult]:
        """The results of the files at ``paths`` (absolute) checked with their own config,
        conditional findings unsettled: from the cache, else checked now (and stored).
        What a given file's calls make per-step there is reported at those calls."""
        store = store if store is not None else self.store
        wanted = [self.by_path[path] for path in sorted(paths) if path in self.by_path]
        found: list[FileResult] = []
        todo: list[tuple[SourceFile, Config, Entry | None]] = []
        for file, config in wanted:
            try:
                hit, entry = look_up(store, Keys(config), file, self.tails)
            except ConfigError:
                continue  # an unknown code in that file's config: its findings are not ours to report
            if hit is not None:
                found.append(hit)
            else:
                todo.append((file, config, entry))
        from torchlint.engine.pool import check_files

        checked = check_files([file for file, _, _ in todo], [config for _, config, _ in todo], jobs=jobs)
        for (file, _, entry), result in zip(todo, checked):
            if store is not None and entry is not None and not result.errors and unchanged(file, entry):
                store.store(entry.key, result)
            found.append(result)
        return found

    def tails_with(self, files: Iterable[SourceFile]) -> frozenset[str] | None:
        """The module tails of the project joined: ``tails``, else (no project walked) those of ``files`` alone."""
        return self.tails if self.tails is not None else module_tails(os.path.abspath(file.path) for file in files)


def project_summaries(path: Path, settings: Resolver, *, cache: Path | None, jobs: int = 1, leave_out: Iterable[Path] = ()) -> Context:
    """The context of one text that is not read from disk (stdin with ``--stdin-filename``,
    an editor's buffer): the other files of ``path``'s project, summarised
    (``context.summaries``), but for ``path`` itself and ``leave_out``."""
    from torchlint.engine.pool import check_files

    store = Cache(cache) if cache is not None else None
    context = Context.around([path], [path, *leave_out], settings, store)
    context.take(check_files(context.todo_files(), context.todo_configs(), jobs=jobs, tails=context.tails), store)
    if store is not None:
        store.prune()
    return context


def _summary_keys(config: Config) -> tuple[Config, list[Keys]]:
    """The summary config of ``config``, and the keys to look a file up under: its full
    result first (a whole-project run stored it), then its summary."""
    own = summary_config(config)
    try:
        return own, [Keys(config), Keys(own)]
    except ConfigError:  # an unknown code in the file's config: only a summary can be had
        return own, [Keys(own)]


__all__ = ["MAX_PROJECT_FILES", "PROJECT_MARKERS", "Context", "TooLarge", "context_files", "project_root", "project_summaries", "summary_config"]
