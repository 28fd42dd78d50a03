"""Paths to source files: directories walked, tool and virtualenv folders skipped, ignores honoured."""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from torchlint.config import DEFAULT_MAX_FILE_SIZE, Config, Resolver, gitignore_spec
from torchlint.engine.source import Source, byte_limit, read_source
from torchlint.engine.tempfiles import TEMP_SUFFIX, remove_stale_temporaries
from torchlint.findings import Finding

if TYPE_CHECKING:
    import pathspec

SOURCE_SUFFIXES = (".py", ".ipynb")
_SKIPPED_DIRS = {
    ".git", ".hg", ".svn", ".bzr", "__pycache__", ".venv", "venv", ".tox", ".nox", ".mypy_cache",
    ".pytest_cache", ".ruff_cache", ".ipynb_checkpoints", "node_modules", "site-packages",
    "__pypackages__", ".eggs", "build", "dist", "torchlint-profile",
}


class MissingPathError(Exception):
    """A path named on the command line does not exist."""


@dataclass(frozen=True, slots=True)
class SourceFile:
    path: Path  # as found on disk
    display: str  # how findings name it: relative to the cwd when it lies below it
    max_bytes: int | None = DEFAULT_MAX_FILE_SIZE  # larger files are reported, not parsed

    def read(self) -> Source | Finding:
        """The file's source, or the TL000 that says why it cannot be checked."""
        return read_source(self.path, self.display, self.max_bytes)

    @property
    def byte_limit(self) -> int | None:
        """The most bytes worth reading (a notebook's outputs do not count against it)."""
        return byte_limit(self.path, self.max_bytes)


def real(path: Path | str) -> Path:
    """The path with every symlink resolved; never raises (a loop stays as it is)."""
    return Path(os.path.realpath(path))


# Resolved directories, kept for one discovery (``discover`` empties it): a walk asks for
# the same few directories once per file, and ``os.path.realpath`` is pure Python.
_real_directories: dict[str, Path] = {}


def real_directory(directory: Path | str) -> Path:
    """``real(directory)``, remembered for the rest of the current discovery."""
    key = os.fspath(directory)
    found = _real_directories.get(key)
    if found is None:
        found = _real_directories[key] = real(key)
    return found


def real_file(path: Path) -> Path:
    """``real(path)`` for a file, its directory resolved once per discovery."""
    if not path.name or os.path.islink(path):
        return real(path)
    return real_directory(path.parent) / path.name


def printable(text: str) -> str:
    """``text`` with undecodable bytes (lone surrogates from the file system) as U+FFFD."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def _display(path: Path) -> str:
    """The path relative to the cwd when it lies below it; a symlink keeps its own name."""
    own = real_directory(path.parent) / path.name if path.name else real(path)
    try:
        shown = own.relative_to(real_directory(Path.cwd())).as_posix()
    except ValueError:
        shown = path.as_posix()
    return printable(shown)


def _test(path: Path, test: str) -> bool:
    """``path.is_file()`` and the like, False where the answer is an error (no permission)."""
    try:
        return bool(getattr(path, test)())
    except OSError:
        return False


def _spec(patterns: tuple[str, ...]) -> pathspec.PathSpec | None:
    return gitignore_spec(patterns) if patterns else None


def _is_virtualenv(directory: Path) -> bool:
    return _test(directory / "pyvenv.cfg", "is_file") or _test(directory / "conda-meta", "is_dir")


def _relative(path: Path, directory: Path) -> str | None:
    try:
        return path.relative_to(directory).as_posix()
    except ValueError:
        return None


def _matches(spec: pathspec.PathSpec, path: Path, base: Path, suffix: str, walk_root: Path | None) -> bool:
    """Whether ``spec`` (anchored at ``base``) ignores ``path``. A tree named explicitly
    (``walk_root``) is checked even when ``spec`` ignores it as a whole, as ruff does: its
    contents are then matched by their path inside it."""
    relative = _relative(path, base)
    if relative is None:
        return False
    if walk_root is not None and walk_root != base:
        root_relative = _relative(walk_root, base)
        if root_relative is not None and spec.match_file(root_relative + "/"):
            inside = _relative(path, walk_root)
            return inside is not None and spec.match_file(inside + suffix)
    return spec.match_file(relative + suffix)


class _Ignores:
    """exclude patterns (each file's, anchored at its config's root) and .gitignore files
    met while walking. A walked entry is judged by the config of the directory holding it."""

    def __init__(self, settings: Resolver) -> None:
        self.settings = settings
        self.excludes: dict[int, tuple[Config, Path, pathspec.PathSpec | None]] = {}
        self.gitignores: dict[Path, pathspec.PathSpec | None] = {}
        self.repository_roots: dict[Path, bool] = {}  # directory -> holds a `.git`: asked once, not once per file below it

    def _exclude(self, config: Config) -> tuple[Path, pathspec.PathSpec | None]:
        if id(config) not in self.excludes:  # the config is kept, so its id stays its own
            self.excludes[id(config)] = (config, real(config.root), _spec(config.exclude + config.extend_exclude))
        return self.excludes[id(config)][1:]

    def _gitignore(self, directory: Path) -> pathspec.PathSpec | None:
        if directory not in self.gitignores:
            file = directory / ".gitignore"
            spec = None
            if _test(file, "is_file"):
                try:
                    spec = gitignore_spec(file.read_text(encoding="utf-8", errors="replace").splitlines())
                except (OSError, ValueError, re.error):  # a broken .gitignore ignores nothing
                    spec = None
            self.gitignores[directory] = spec
        return self.gitignores[directory]

    def _repository_root(self, directory: Path) -> bool:
        known = self.repository_roots.get(directory)
        if known is None:
            known = self.repository_roots[directory] = _test(directory / ".git", "exists")
        return known

    def ignored(self, path: Path, is_dir: bool, walk_root: Path | None = None) -> bool:
        config = self.settings.for_file(path)  # the config of the directory holding it
        root, exclude = self._exclude(config)
        resolved = real_directory(path.parent) / path.name
        suffix = "/" if is_dir else ""
        if exclude is not None:
            if _matches(exclude, resolved, root, suffix, walk_root):
                return True
            if walk_root != resolved and exclude.match_file(path.name + suffix):
                return True
        if config.respect_gitignore:
            for directory in resolved.parents:
                spec = self._gitignore(directory)
                if spec is not None and _matches(spec, resolved, directory, suffix, walk_root):
                    return True
                if self._repository_root(directory):
                    break
        return False


def _walked_kind(file: Path) -> str:
    """'source' for a regular file (or a symlink to one), 'broken' for a symlink that
    leads nowhere (reported under its own name), 'other' for a FIFO, socket or device."""
    try:
        mode = os.stat(file).st_mode
    except OSError:
        return "broken"
    return "source" if stat.S_ISREG(mode) else "other"


def split_missing(paths: list[Path]) -> tuple[list[Path], list[str]]:
    """The paths that exist (a broken symlink does: it is reported by name) and the
    printable names of those that do not."""
    present = [p for p in paths if _exists(p)]
    return present, [printable(str(p)) for p in paths if not _exists(p)]


def _exists(path: Path) -> bool:
    """``os.path.lexists``, except that a path behind a directory without search
    permission exists (reading it reports the permission), it is not missing."""
    try:
        os.lstat(path)
    except PermissionError:
        return True
    except (OSError, ValueError):
        return False
    return True


def discover(paths: list[Path], settings: Config | Resolver, force_exclude: bool = False, walked: set[str] | None = None) -> Iterator[SourceFile]:
    """Yield the source files under ``paths`` in a stable order.

    Files and directories named explicitly are always checked (unless ``force_exclude``,
    as the pre-commit hook passes); what is found by walking a directory is filtered.
    What cannot be read (a broken symlink, a FIFO, an unreadable directory) is yielded
    too, so that it is reported by name. ``settings``: one Config, or each file's.
    ``walked`` receives every directory entered (`--watch` waits on them).
    """
    resolver = settings if isinstance(settings, Resolver) else Resolver.fixed(settings)
    ignores = _Ignores(resolver)
    seen: set[Path] = set()
    _real_directories.clear()  # symlinks may have changed since the last discovery

    def new(file: Path) -> bool:
        key = real_file(file)
        if key in seen:
            return False
        seen.add(key)
        return True

    for given in paths:
        if not _exists(given):
            raise MissingPathError(printable(str(given)))
        is_dir = _test(given, "is_dir")
        if force_exclude and ignores.ignored(given, is_dir):
            continue
        if not is_dir:
            if new(given):
                yield SourceFile(given, _display(given), resolver.for_path(given).max_file_size)
            continue
        yield from _walk(given, ignores, new, walked if walked is not None else set())


def _walk(given: Path, ignores: _Ignores, new, walked: set[str]) -> Iterator[SourceFile]:  # type: ignore[no-untyped-def]
    walk_root = real(given)
    unreadable: list[OSError] = []
    for directory, dirnames, filenames in os.walk(given, onerror=unreadable.append):
        walked.add(os.path.abspath(directory))
        base = Path(directory)
        yield from _unreadable(unreadable)
        if (dirnames or filenames) and not _enterable(base, (dirnames or filenames)[0]):
            dirnames[:] = []  # listed, but nothing in it can be opened: reported by its name
            yield SourceFile(base, _display(base))
            continue
        dirnames[:] = sorted(
            d for d in dirnames
            if d not in _SKIPPED_DIRS and not d.endswith(".egg-info")
            and not _is_virtualenv(base / d) and not ignores.ignored(base / d, True, walk_root)
        )
        if any(name.endswith(TEMP_SUFFIX) for name in filenames):
            remove_stale_temporaries(base)  # left by a `--fix` that was killed mid-write
        for filename in sorted(filenames):
            if not filename.endswith(SOURCE_SUFFIXES):
                continue
            file = base / filename
            if _walked_kind(file) == "other" or ignores.ignored(file, False, walk_root):
                continue
            if new(file):
                yield SourceFile(file, _display(file), ignores.settings.for_directory(base).max_file_size)
    yield from _unreadable(unreadable)


def _enterable(directory: Path, name: str) -> bool:
    """Whether the entries of a listed ``directory`` can be reached (it has search
    permission): a directory with read but no execute permission lists its names only."""
    try:
        os.lstat(directory / name)
    except PermissionError:
        return False
    except OSError:
        return True  # gone meanwhile, or the like: each file says so itself
    return True


def _unreadable(errors: list[OSError]) -> Iterator[SourceFile]:
    """A directory the walk could not list: reading it reports why (TL000, by its name)."""
    while errors:
        error = errors.pop(0)
        if error.filename:
            where = Path(error.filename)
            yield SourceFile(where, _display(where))
