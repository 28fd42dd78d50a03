"""The fixtures made ahead of their tests (``ahead``): child runs started in the background
as the session begins, on CI's two cores, and the scheduler that keeps them there
(``RunsAhead``). conftest.py holds the session's instance (the ``runs_ahead`` fixture)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import pytest

# -- child runs made ahead --------------------------------------------------------------
#
# A `torchlint profile` child of a torch script costs seconds of one core (the interpreter,
# torch's and torch._dynamo's imports, the profilers), while most tests run in this process
# on one core: on CI's two cores the other sat idle through them. A fixture made with
# `ahead()` starts in a background thread as the session begins, in the order the selected
# tests need it, one at a time; its tests wait for it. A test that waits lends its thread:
# it makes the next run not yet started (the one it waits for first, if that has not
# started), so that on two cores two runs go at once while no test runs, never more (the
# runs are about three quarters of the suite's CPU: with one thread making them, the tests
# waited for it with a core idle). A run that starts two children or more at once, or whose
# findings weigh time against time (the call tree's comparison, TLR09's faults, the
# experiment's verdicts), is made ahead alone (`ahead(alone=True)`): no other run beside it,
# the in-process tests on the other core. Such runs were made in their tests' turn, the
# test's thread waiting and so the second core idle through them (about 80 s of CI's one
# core); a test process on the other core is what every run made ahead already has beside it.

_AHEAD_MAKERS: dict[str, Callable[[pytest.TempPathFactory], Any]] = {}
_AHEAD_ALONE: set[str] = set()
AHEAD_ENV = threading.local()  # .base: the environment a run made ahead starts its children with
_CORES = 2  # CI's: how many runs of one child each go at once


class RunsAhead:
    """The fixtures made ahead of their tests: a queue in the order their tests come, one
    background thread that works through it, the waiting test's thread that helps, and the
    gate that keeps to two children at once (a run made alone: nothing beside it)."""

    def __init__(self, factory: pytest.TempPathFactory, env: dict[str, str], makers: dict[str, Callable[[pytest.TempPathFactory], Any]] | None = None,
                 alone: set[str] | None = None) -> None:
        self._factory = factory
        self._env = env  # the session's: a test's monkeypatched variables are not a background run's
        # the fixtures' (tests/test_runs_ahead.py gives made-up ones)
        self._makers = _AHEAD_MAKERS if makers is None else makers
        self._alone = _AHEAD_ALONE if alone is None else alone
        self._gate = threading.Condition()
        self._width = 0  # the children of the runs going now (a run made alone counts as all)
        self._pending: list[str] = []  # made ahead, not started, in their tests' order
        self._futures: dict[str, Future[Any]] = {}
        self._thread: threading.Thread | None = None

    def start(self, keys: list[str]) -> None:
        for key in keys:
            if key not in self._futures:
                self._futures[key] = Future()
                self._pending.append(key)
        if self._pending and self._thread is None:
            self._thread = threading.Thread(target=self._work, name="runs-ahead", daemon=True)
            self._thread.start()

    def result(self, key: str) -> Any:
        """The fixture's value: the run made ahead (waited for, this thread making the runs
        not yet started meanwhile: the one it waits for first), or made now."""
        future = self._futures.get(key)
        if future is None or future.cancelled():
            return self._make(key)
        while not future.done() and self._run_next(first=key, until=future):
            pass
        return future.result()

    def _work(self) -> None:
        while self._run_next():
            pass

    def _width_of(self, key: str) -> int:
        return _CORES if key in self._alone else 1

    def _fits(self, width: int) -> bool:
        return self._width + width <= _CORES

    def _run_next(self, first: str | None = None, until: Future[Any] | None = None) -> bool:
        """Make a pending run (``first`` if it is pending, else the first in the queue) in
        this thread once the gate lets it start; False when none is pending, or ``until``
        is done before one could start (a waiting test goes back to its tests)."""
        with self._gate:
            while True:
                if not self._pending or (until is not None and until.done()):
                    return False
                key = first if first in self._pending else self._pending[0]
                width = self._width_of(key)
                if self._fits(width):
                    break
                self._gate.wait()
            self._pending.remove(key)
            future = self._futures[key]
            if not future.set_running_or_notify_cancel():
                return True
            self._width += width
        value, error = None, None
        try:
            value = self._call(key)
        except BaseException as raised:  # pytest's skip and failure included: raised in the tests that use it
            error = raised
        with self._gate:  # the result and the freed width at once: a waiting test sees both
            self._width -= width
            if error is None:
                future.set_result(value)
            else:
                future.set_exception(error)
            self._gate.notify_all()
        return True

    def _make(self, key: str) -> Any:
        """Make ``key`` in this thread (not made ahead: a session stopped early), once the gate lets it."""
        width = self._width_of(key)
        with self._gate:
            while not self._fits(width):
                self._gate.wait()
            self._width += width
        try:
            return self._call(key)
        finally:
            with self._gate:
                self._width -= width
                self._gate.notify_all()

    def _call(self, key: str) -> Any:
        # a cache of its own: the background thread has no test's private one
        AHEAD_ENV.base = dict(self._env, TORCHLINT_CACHE_DIR=str(self._factory.mktemp("torchlint-cache")))
        try:
            return self._makers[key](self._factory)
        finally:
            del AHEAD_ENV.base

    def close(self) -> None:
        with self._gate:
            pending, self._pending = self._pending, []
        for key in pending:
            self._futures[key].cancel()  # a session stopped early (-x) starts no more runs
        if self._thread is not None:
            self._thread.join()


def ahead(scope: str = "module", alone: bool = False) -> Callable[[Callable[[pytest.TempPathFactory], Any]], Any]:
    """A fixture of ``scope`` whose value is ``make(tmp_path_factory)``, made ahead in the
    background (``alone``: with no other run beside it, for a ``make`` that starts two
    children or more at once, or whose findings weigh time against time).
    ``make`` starts its children with ``child_env``; it may skip (``pytest.importorskip``)."""

    def wrap(make: Callable[[pytest.TempPathFactory], Any]) -> Any:
        key = f"{make.__module__}.{make.__name__}"
        _AHEAD_MAKERS[key] = make
        if alone:
            _AHEAD_ALONE.add(key)

        def fixture(runs_ahead: RunsAhead) -> Any:
            return runs_ahead.result(key)

        fixture.__doc__ = make.__doc__
        return pytest.fixture(scope=scope, name=make.__name__)(fixture)  # type: ignore[call-overload]

    return wrap


def ahead_keys(items: list[pytest.Item]) -> list[str]:
    """The fixtures made ahead that ``items`` use, in the order their first test comes."""
    keys: dict[str, None] = {}
    for item in items:
        module = getattr(getattr(item, "module", None), "__name__", "")
        for name in getattr(item, "fixturenames", ()):
            for key in (f"{module}.{name}", f"conftest.{name}"):
                if key in _AHEAD_MAKERS:
                    keys.setdefault(key)
                    break
    return list(keys)
