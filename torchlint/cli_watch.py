"""``torchlint check --watch``: check, then check again whenever something it read changes.

No file-system events (no dependency): every half second the watcher compares the size
and modification time of what a run depends on: the source files under the given paths
and in their projects (engine/project_files.py: the summaries a given file is checked
with), the directories holding them (a file created, removed or renamed changes its
directory), and the config files that apply. Ctrl-C ends it with status 0."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import click

POLL_S = 0.5
Snapshot = dict[str, tuple[int, int]]


def watch(run: Callable[[], object], paths: list[Path], config_file: Path | None, isolated: bool) -> None:
    """Call ``run`` (one whole `check`, report included), then again after each change."""
    try:
        while True:
            before = snapshot(paths, config_file, isolated)
            _once(run)
            click.echo("torchlint: watching for changes (Ctrl-C stops)", err=True)
            while snapshot(paths, config_file, isolated) == before:
                time.sleep(POLL_S)
            if sys.stdout.isatty():
                from torchlint.terminal import clear_screen

                clear_screen()
            click.echo("torchlint: files changed, checking again", err=True)
    except KeyboardInterrupt:
        sys.exit(0)


def _once(run: Callable[[], object]) -> None:
    """One run: its exit status and usage errors are said, never the end of the watch."""
    try:
        run()
    except SystemExit:
        pass
    except click.ClickException as error:
        error.show()


def snapshot(paths: list[Path], config_file: Path | None, isolated: bool) -> Snapshot:
    """(size, mtime) of every file and directory a run over ``paths`` depends on."""
    from torchlint.config import ConfigError, Resolver
    from torchlint.engine.discover import MissingPathError, discover
    from torchlint.engine.project_files import project_root

    stamps: Snapshot = {}
    names = {str(p) for p in paths}
    try:
        settings = Resolver(None, config_file, isolated)
        roots = [root for root in {project_root(p, settings) for p in paths if os.path.lexists(p)} if root is not None]
        files = list(discover([p for p in paths if os.path.lexists(p)] + roots, settings))
        configs = {settings.source_for(file.path.parent) for file in files}
        names.update(str(file.path) for file in files)
        names.update(str(file.path.parent) for file in files)
        names.update(str(source) for source in configs if source is not None)
        names.update(str(root / name) for root in roots for name in ("pyproject.toml", "torchlint.toml", ".torchlint.toml"))
    except (ConfigError, MissingPathError, OSError):
        pass  # a broken config or a path gone: what is there is watched, the run says the rest
    for name in names:
        try:
            info = os.stat(name)
        except OSError:
            stamps[name] = (-1, -1)
            continue
        stamps[name] = (info.st_size, info.st_mtime_ns)
    return stamps
