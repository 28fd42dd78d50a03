"""The waiter under `check --watch`: what it is told to watch, and when it returns."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import pytest

from torchlint import filewatch

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux's")


def test_a_folder_found_while_the_watches_are_added_is_watched_before_the_wait(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A folder made between the first look and the first watch (CI saw it: `mkdir data`
    right after a run) is found by the look after the watches are added; a file written
    into it later must wake the waiter, not wait for the slow safety poll."""
    monkeypatch.delenv("TORCHLINT_WATCH_POLL", raising=False)
    monkeypatch.setattr(filewatch, "EVENTS_POLL_S", 20.0)
    data = tmp_path / "data"
    folders = [str(tmp_path)]
    asked = 0

    def directories():
        yield from list(folders)
        if not data.exists():  # made after the list of folders was taken, before they are watched
            data.mkdir()

    def changed() -> bool:
        nonlocal asked
        asked += 1
        if asked == 2:  # the look after the first watches finds the new folder (no source yet)
            folders.append(str(data))
        return (data / "c.py").exists()

    writer = threading.Timer(0.5, lambda: (data / "c.py").write_text("x = 1\n"))
    writer.start()
    started = time.monotonic()
    try:
        filewatch.wait_for_change(directories, changed, lambda name: name.endswith(".py"))
    finally:
        writer.cancel()
    assert time.monotonic() - started < 10, "the new folder was not watched: only the safety poll woke the waiter"


def test_a_file_nobody_reads_does_not_end_the_wait(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A log written beside the sources is read and dropped; the source written after it ends the wait."""
    monkeypatch.delenv("TORCHLINT_WATCH_POLL", raising=False)
    asked = []

    def changed() -> bool:
        asked.append(time.monotonic())
        return (tmp_path / "a.py").exists()

    def write() -> None:
        for _ in range(5):
            (tmp_path / "train.log").write_text("loss 1.0\n")
            time.sleep(0.05)
        (tmp_path / "a.py").write_text("x = 1\n")

    writer = threading.Thread(target=write)
    started = time.monotonic()
    writer.start()
    filewatch.wait_for_change(lambda: [str(tmp_path)], changed, lambda name: name.endswith(".py"))
    writer.join()
    assert time.monotonic() - started < 10
    assert len(asked) <= 3, f"the log's writes each asked again: {len(asked)} looks"
