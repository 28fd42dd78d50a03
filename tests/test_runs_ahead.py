"""The scheduler of the child runs made ahead (made_ahead.RunsAhead), on made-up runs that
sleep: two at once at most, a run made alone with nothing beside it, and a waiting test's thread helping."""

from __future__ import annotations

import threading
import time

import pytest

from made_ahead import RunsAhead


class Recorder:
    """Made-up runs: each records its thread and how many runs went beside it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.going: set[str] = set()
        self.beside: dict[str, set[str]] = {}
        self.thread: dict[str, str] = {}

    def maker(self, key: str, seconds: float):  # type: ignore[no-untyped-def]
        def make(_factory):  # type: ignore[no-untyped-def]
            with self.lock:
                self.thread[key] = threading.current_thread().name
                self.beside[key] = set(self.going)
                for other in self.going:
                    self.beside[other].add(key)
                self.going.add(key)
            time.sleep(seconds)
            with self.lock:
                self.going.discard(key)
            if key.endswith("skips"):
                pytest.skip("made-up skip")
            return key
        return make


@pytest.fixture
def runs(tmp_path_factory):  # type: ignore[no-untyped-def]
    recorder = Recorder()
    plan = {"a": 0.3, "b": 0.3, "wide": 0.2, "c": 0.2, "d-skips": 0.1, "quiet": 0.1}
    makers = {key: recorder.maker(key, seconds) for key, seconds in plan.items()}
    ahead = RunsAhead(tmp_path_factory, {}, makers, alone={"wide", "quiet"})
    yield ahead, recorder
    ahead.close()


def test_a_waiting_thread_makes_what_it_waits_for_and_two_go_at_once_at_most(runs) -> None:  # type: ignore[no-untyped-def]
    ahead, rec = runs
    ahead.start(["a", "b", "wide", "c", "d-skips", "quiet"])
    time.sleep(0.05)  # the background thread has started "a"
    assert ahead.result("b") == "b"  # not started when asked: made here, beside "a"
    main = threading.current_thread().name
    assert rec.thread["a"] == "runs-ahead" and rec.thread["b"] == main and rec.beside["b"] == {"a"}
    assert ahead.result("c") == "c"
    with pytest.raises(pytest.skip.Exception):
        ahead.result("d-skips")  # raised in every test that uses it
    assert ahead.result("wide") == "wide"
    assert rec.beside["wide"] == set()  # a run of several children: alone
    assert ahead.result("quiet") == "quiet" and rec.beside["quiet"] == set()  # a run that weighs time: alone
    assert all(len(b) <= 1 for b in rec.beside.values())  # two at once at most


def test_a_run_made_alone_goes_ahead_while_the_tests_go_on(runs) -> None:  # type: ignore[no-untyped-def]
    """A run made alone is made in the background: the test's thread is free for the
    in-process tests meanwhile (it was made in its test's turn, the second core idle)."""
    ahead, rec = runs
    ahead.start(["quiet", "a"])
    deadline = time.monotonic() + 10
    while "quiet" not in rec.thread and time.monotonic() < deadline:  # no test asks for it yet
        time.sleep(0.01)
    assert rec.thread.get("quiet") == "runs-ahead"
    assert ahead.result("a") == "a" and ahead.result("quiet") == "quiet"
    assert rec.beside["quiet"] == set() and "quiet" not in rec.beside["a"]  # alone
