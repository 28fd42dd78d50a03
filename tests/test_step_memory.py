"""The per-step pieces of the profiled child that need no GPU to check: memory growth per
step (TL302's evidence) and the CUDA sync-debug counter's bookkeeping."""

from __future__ import annotations

import pytest

from torchlint.profiler.stepmemory import StepMemory
from torchlint.profiler.syncdebug import SyncDebug


def test_growth_per_step_is_the_least_squares_slope_after_the_first_two_steps() -> None:
    mem = StepMemory()
    mem.samples = [10_000, 50_000] + [1_000_000 + 4096 * i for i in range(20)]
    out = mem.summary()
    assert out["growth_per_step"] == pytest.approx(4096)
    assert out["first_bytes"] == 1_000_000 and out["samples"] == 20 and out["source"] == "rss"


def test_unreadable_samples_are_dropped_and_too_few_give_no_growth() -> None:
    mem = StepMemory()
    mem.samples = [1, 2, 5, -1, 7]
    assert mem.summary()["growth_per_step"] is None  # two readable samples after the first two


def test_resident_memory_is_read_on_each_step() -> None:
    mem = StepMemory()
    for _ in range(3):
        mem.on_step()
    assert len(mem.samples) == 3 and all(s > 1_000_000 for s in mem.samples)


def test_sync_debug_unavailable_is_a_warning_not_an_error() -> None:
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA build enables it")
    notes: list[str] = []
    sync = SyncDebug()
    sync.enable(notes)
    assert not sync.enabled and notes and notes[0].startswith("sync debug mode unavailable")
    sync.disable()  # a no-op, never raises


def test_sync_sites_become_call_count_hotspots() -> None:
    sync = SyncDebug()
    sync.sites[("/x/train.py", 41, "train")] = 120
    (spot,) = sync.hotspots()
    assert (spot.source, spot.path, spot.line, spot.calls, spot.op) == ("sync", "/x/train.py", 41, 120, "cuda sync")
    assert spot.self_s == 0.0  # a count: the time is the probes' and the trace's
