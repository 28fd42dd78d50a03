"""Paths to source files: directories walked, tool and virtualenv folders skipped, ignores honoured."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pathspec

from torchlint.config import Config

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


def _display(path: Path) -> str:
    try:
        return path.resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return path.as_posix()


def _spec(patterns: tuple[str, ...]) -> pathspec.PathSpec | None:
    return pathspec.GitIgnoreSpec.from_lines(patterns) if patterns else None


def _is_virtualenv(directory: Path) -> bool:
    return (directory / "pyvenv.cfg").is_file() or (directory / "conda-meta").is_dir()


class _Ignores:
    """exclude patterns (anchored at the config root) and .gitignore files met while walking."""

    def __init__(self, config: Config) -> None:
        self.root = config.root.resolve()
        self.exclude = _spec(config.exclude + config.extend_exclude)
        self.respect_gitignore = config.respect_gitignore
        self.gitignores: dict[Path, pathspec.PathSpec | None] = {}

    def _gitignore(self, directory: Path) -> pathspec.PathSpec | None:
        if directory not in self.gitignores:
            file = directory / ".gitignore"
            spec = None
            if file.is_file():
                try:
                    spec = pathspec.GitIgnoreSpec.from_lines(file.read_text(encoding="utf-8", errors="replace").splitlines())
                except (OSError, ValueError):
                    spec = None
            self.gitignores[directory] = spec
        return self.gitignores[directory]

    def ignored(self, path: Path, is_dir: bool, walk_root: Path) -> bool:
        resolved = path.resolve()
        suffix = "/" if is_dir else ""
        if self.exclude is not None:
            try:
                relative = resolved.relative_to(self.root).as_posix()
            except ValueError:
                relative = None
            if relative is not None and self.exclude.match_file(relative + suffix):
                return True
            if self.exclude.match_file(path.name + suffix):
                return True
        if self.respect_gitignore:
            for directory in (resolved.parent, *resolved.parent.parents):
                spec = self._gitignore(directory)
                if spec is not None and spec.match_file(resolved.relative_to(directory).as_posix() + suffix):
                    return True
                if (directory / ".git").exists():  # the repository root
                    break
        return False


def discover(paths: list[Path], config: Config, force_exclude: bool = False) -> Iterator[SourceFile]:
    """Yield the source files under ``paths`` in a stable order.

    Files named explicitly are always checked (unless ``force_exclude``, as the
    pre-commit hook passes); files found by walking a directory are filtered.
    """
    ignores = _Ignores(config)
    seen: set[Path] = set()
    for given in paths:
        if not given.exists():
            raise MissingPathError(str(given))
        if given.is_file():
            if force_exclude and ignores.ignored(given, False, given.parent.resolve()):
                continue
            if given.resolve() not in seen:
                seen.add(given.resolve())
                yield SourceFile(given, _display(given))
            continue
        walk_root = given.resolve()
        for directory, dirnames, filenames in os.walk(given):
            base = Path(directory)
            dirnames[:] = sorted(
                d for d in dirnames
                if d not in _SKIPPED_DIRS and not d.endswith(".egg-info")
                and not _is_virtualenv(base / d) and not ignores.ignored(base / d, True, walk_root)
            )
            for filename in sorted(filenames):
                if not filename.endswith(SOURCE_SUFFIXES):
                    continue
                file = base / filename
                if ignores.ignored(file, False, walk_root):
                    continue
                if file.resolve() not in seen:
                    seen.add(file.resolve())
                    yield SourceFile(file, _display(file))
