"""A progress bar on stderr for long runs, only where a person watches a terminal."""

from __future__ import annotations

import sys
import time
from typing import Any

# A run shows its bar once it has this many files to check, or once it has taken this long.
LONG_RUN_FILES = 200
LONG_RUN_S = 1.0


def wanted(quiet: bool, machine_output: bool) -> bool:
    """Whether a bar may be shown: not ``--quiet``, not JSON or a diff, stderr a terminal
    (so never in pipes or CI logs)."""
    return not quiet and not machine_output and sys.stderr.isatty()


class Bar:
    """Counts checked files; draws (rich, transient) only once the run turns out long."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.total = total
        self.enabled = enabled and total > 0
        self.started = time.monotonic()
        self.done = 0
        self._rich: Any = None
        self._task: Any = None

    def advance(self, count: int) -> None:
        self.done += count
        if not self.enabled:
            return
        if self._rich is None and (self.total >= LONG_RUN_FILES or time.monotonic() - self.started >= LONG_RUN_S):
            self._start()
        if self._rich is not None:
            self._rich.update(self._task, completed=self.done)

    def close(self) -> None:
        if self._rich is not None:
            self._rich.stop()
            self._rich = None

    def _start(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        from torchlint.terminal import raw

        console = Console(file=raw(sys.stderr))  # the bar's own cursor codes, no user text
        self._rich = Progress(
            TextColumn("checking"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            console=console, transient=True,
        )
        self._rich.start()
        self._task = self._rich.add_task("check", total=self.total, completed=self.done)
