"""The cyclic garbage collector is paused while a file is checked (engine/pool.py,
collector_paused): the file's tree must then be freed by reference counting alone once the
file is done (FileContext.close), and the collector must always come back on."""

from __future__ import annotations

import gc

import libcst as cst
import pytest

from conftest import FIXTURES
from torchlint.analysis.context import FileContext
from torchlint.config import Config
from torchlint.engine.discover import discover
from torchlint.engine.linter import Linter
from torchlint.engine.pool import check_file, collector_paused
from torchlint.engine.runner import run_checks
from torchlint.engine.source import Source

# A multi-file project whose files use every analysis the step summary needs.
PROJECT = FIXTURES / "projects" / "steps"


def _alive(kinds: tuple[type, ...], generation: int | None = None) -> dict[type, int]:
    """How many objects of each of ``kinds`` the collector tracks (in ``generation``: all)."""
    counts = dict.fromkeys(kinds, 0)
    for o in gc.get_objects() if generation is None else gc.get_objects(generation=generation):
        if type(o) in counts:
            counts[type(o)] += 1
    return counts


def _collections() -> list[int]:
    return [stats["collections"] for stats in gc.get_stats()]


def test_a_checked_file_leaves_no_analysis_for_the_collector() -> None:
    linter = Linter(Config(select=["ALL"]))
    paths = sorted(PROJECT.rglob("*.py"))
    assert paths
    kinds, none = (FileContext, cst.Module), {FileContext: 0, cst.Module: 0}
    gc.collect()
    gc.disable()
    try:
        assert _alive(kinds) == none  # none from before (the collector ran: all older objects are in the oldest generation)
        ran = _collections()
        for path in paths:
            result = run_checks(Source(str(path), path.read_text()), linter.checks, linter.options)
            assert result.module is not None or "torch" not in path.read_text()
            del result
            # No cycle holds the context (and with it the tree): reference counting freed it.
            # With the collector off, every object made since is in the youngest generation:
            # scanning it alone sees what the whole heap would (the whole heap is again checked below).
            assert _collections() == ran, "a collection ran: objects made here may have left the youngest generation"
            assert _alive(kinds, generation=0) == none, path
        assert _alive(kinds) == none
    finally:
        gc.enable()


def test_check_file_keeps_the_collector_on_and_finds_the_same() -> None:
    files = list(discover([PROJECT], Config()))
    linter = Linter(Config(select=["ALL"]))
    assert gc.isenabled()
    paused = [check_file(linter, file) for file in files]
    assert gc.isenabled()
    gc.disable()
    try:
        unpaused = [plain_findings(linter, file) for file in files]
    finally:
        gc.enable()
    assert [_found(r.findings) for r in paused] == unpaused
    assert any(r.findings for r in paused)


def plain_findings(linter: Linter, file) -> list[tuple[str, str, str]]:  # type: ignore[no-untyped-def]
    return _found(linter.lint_file(file).findings)


def _found(findings) -> list[tuple[str, str, str]]:  # type: ignore[no-untyped-def]
    """What a report shows (a plain result has no fix nodes to compare)."""
    return sorted((f.code, str(f.location), f.message) for f in findings)


def test_collector_comes_back_after_an_error_and_stays_off_when_it_was() -> None:
    with pytest.raises(ValueError):
        with collector_paused():
            assert not gc.isenabled()
            raise ValueError("a check failed")
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()  # someone else turned it off: not ours to turn on
    finally:
        gc.enable()
