"""torchlint's scheduled windows must not print torch's own warnings on the user's terminal:
with ``--repeat 2`` torch warned, at the second window, that the profiler clears a window's
events (found on the GPU check's log, then on the CPU with ``--repeat 2 --active 2``)."""

from __future__ import annotations

import warnings

import pytest


def _windows(step) -> list[str]:  # type: ignore[no-untyped-def]
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile, schedule
    from torch.profiler import profiler as torch_profiler

    # torch warns once per process: forget that it did, so this test can see the warning again
    shown = getattr(torch_profiler, "_WARNINGS_SHOWN", set())
    shown.difference_update({m for m in shown if "clears events" in m})
    prof = profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=0, active=1, repeat=2))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        prof.start()
        for _ in range(4):
            torch.ones(2) * 2
            step(prof)
        prof.stop()
    return [str(w.message) for w in caught if "clears events" in str(w.message)]


def test_a_second_window_warns_with_a_plain_step() -> None:
    """The near miss that keeps the test honest: torch does warn here."""
    assert _windows(lambda prof: prof.step())


def test_torchlints_step_keeps_the_warning_off_the_terminal() -> None:
    from torchlint.profiler.kineto import step_quietly

    assert _windows(step_quietly) == []
