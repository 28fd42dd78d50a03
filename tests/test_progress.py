"""The progress bar: on a terminal's stderr for long runs only; never in pipes, JSON or --quiet."""

from __future__ import annotations

import io
import sys

import pytest

from torchlint.engine import progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_wanted_only_on_a_terminal_without_quiet_or_machine_output(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stderr", Terminal())
    assert progress.wanted(quiet=False, machine_output=False)
    assert not progress.wanted(quiet=True, machine_output=False)
    assert not progress.wanted(quiet=False, machine_output=True)
    monkeypatch.setattr(sys, "stderr", io.StringIO())  # a pipe, a CI log
    assert not progress.wanted(quiet=False, machine_output=False)


def test_a_long_run_draws_on_stderr_and_a_short_one_does_not(monkeypatch: pytest.MonkeyPatch) -> None:
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    short = progress.Bar(5, enabled=True)
    short.advance(5)
    short.close()
    assert terminal.getvalue() == ""
    long = progress.Bar(progress.LONG_RUN_FILES, enabled=True)
    long.advance(1)
    long.advance(progress.LONG_RUN_FILES - 1)
    long.close()
    assert "checking" in terminal.getvalue() and f"{progress.LONG_RUN_FILES}/{progress.LONG_RUN_FILES}" in terminal.getvalue()


def test_a_few_slow_files_draw_once_a_second_has_passed(monkeypatch: pytest.MonkeyPatch) -> None:
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    bar = progress.Bar(10, enabled=True)
    bar.advance(1)
    assert bar._rich is None
    bar.started -= progress.LONG_RUN_S  # as if a second had passed
    bar.advance(1)
    assert bar._rich is not None
    bar.close()
    assert "2/10" in terminal.getvalue()


def test_disabled_never_draws(monkeypatch: pytest.MonkeyPatch) -> None:
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    bar = progress.Bar(10_000, enabled=False)
    bar.advance(10_000)
    bar.close()
    assert terminal.getvalue() == "" and bar.done == 10_000
