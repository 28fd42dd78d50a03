"""``torchlint check --watch``: check, then check again whenever something it read changes.

What a run depends on: the source files under the given paths and in their projects
(engine/project_files.py: the summaries a given file is checked with) and the config files
that apply. Between runs the watcher waits on the directories discovery entered and those
holding the config files (filewatch.py: the kernel's file events on Linux, a poll that
backs off elsewhere), so an idle watch costs next to nothing. A wake-up re-stats the known files and directories; a
directory that changed (a file created, removed or renamed) re-runs discovery, and only a
different set of files, or a file or config file that changed, runs the check again (an
editor's swap file does not). The screen is cleared between runs on a terminal, as ruff
does (``--no-clear`` keeps it). Ctrl-C, SIGTERM and SIGHUP end the watch with the signal's
status (130, 143, 129: torchlint/stopping.py)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import click

from torchlint.config import CONFIG_NAMES
from torchlint.engine.discover import SOURCE_SUFFIXES
from torchlint.filewatch import Stamps, stamps, wait_for_change
from torchlint.terminal import clear_screen


@dataclass
class Snapshot:
    """What a run over the watched paths reads: its files' and config files' stamps, and
    the directories they are found in (with their stamps: an entry added or removed)."""

    files: Stamps = field(default_factory=dict)
    directories: Stamps = field(default_factory=dict)


def watch(run: Callable[[], object], paths: list[Path], config_file: Path | None, isolated: bool, clear: bool = True) -> None:
    """Call ``run`` (one whole `check`, report included), then again after each change."""
    while True:
        before = snapshot(paths, config_file, isolated)
        _once(run)
        click.echo("torchlint: watching for changes (Ctrl-C stops)", err=True)
        wait_for_change(lambda: before.directories, lambda: _changed(before, paths, config_file, isolated), _read_by_a_run)
        if clear and sys.stdout.isatty():
            clear_screen()  # the one control sequence written besides colours (terminal.py)
        click.echo("torchlint: files changed, checking again", err=True)


def _once(run: Callable[[], object]) -> None:
    """One run: its exit status and usage errors are said, never the end of the watch
    (a stop signal is: it raises KeyboardInterrupt, which no run catches)."""
    try:
        run()
    except SystemExit:
        pass
    except click.ClickException as error:
        error.show()


def _read_by_a_run(name: str) -> bool:
    """Whether a file of this name may be read by a run: a source file, a notebook, a
    config file or an ignore file (a log or a swap file beside them is not)."""
    return name.endswith(SOURCE_SUFFIXES) or name in CONFIG_NAMES or name == ".gitignore"


def _changed(before: Snapshot, paths: list[Path], config_file: Path | None, isolated: bool) -> bool:
    """Whether a run now would read something else than ``before`` did. A file's stamp is
    enough; a directory's only says to look again (discovery), and is then brought up to
    date, so that a swap file or a report written beside the sources runs nothing."""
    if stamps(before.files) != before.files:
        return True
    now = stamps(before.directories)
    if now == before.directories:
        return False
    again = snapshot(paths, config_file, isolated)
    if again.files != before.files:
        return True
    before.directories = again.directories
    return False


def snapshot(paths: list[Path], config_file: Path | None, isolated: bool) -> Snapshot:
    """The stamps of every file a run over ``paths`` reads, and of the directories it finds
    them in (from each given directory or project root down to them)."""
    from torchlint.config import ConfigError, Resolver
    from torchlint.engine.discover import MissingPathError, discover
    from torchlint.engine.project_files import project_root

    present = [p for p in paths if os.path.lexists(p)]
    walked: set[str] = set()  # every folder discovery entered: a file created in any of them is seen
    tops = {os.path.abspath(p) for p in present if os.path.isdir(p)}
    files = {os.path.abspath(p) for p in paths if os.path.abspath(p) not in tops}
    tops.update(os.path.dirname(name) for name in files)  # a given file's folder: the file may come back
    try:
        settings = Resolver(None, config_file, isolated)
        roots = [root for root in {project_root(p, settings) for p in present} if root is not None]
        found = list(discover(present + roots, settings, walked=walked))
        tops.update(str(root) for root in roots)
        files.update(os.path.abspath(file.path) for file in found)
        files.update(os.path.abspath(source) for source in {settings.source_for(file.path.parent) for file in found} if source is not None)
        files.update(os.path.join(root, name) for root in roots for name in CONFIG_NAMES)
        if config_file is not None:
            files.add(os.path.abspath(config_file))
    except (ConfigError, MissingPathError, OSError):
        pass  # a broken config or a path gone: what is there is watched, the run says the rest
    return Snapshot(stamps(files), stamps(_directories(files, tops) | walked))


def _directories(files: set[str], tops: set[str]) -> set[str]:
    """The folders holding ``files``, and each folder between them and the given directory
    or project root they are under (a new file in a folder of folders is found there)."""
    found = set(tops)
    for name in files:
        directory = os.path.dirname(name)
        while directory not in found:
            found.add(directory)
            if not any(directory.startswith(top + os.sep) for top in tops):
                break  # a config file outside them: its own folder only
            directory = os.path.dirname(directory)
    return found
