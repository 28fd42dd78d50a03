"""Memory at each optimizer step, and its growth per step: what a retained graph (TL302)
costs. In the profiled child only; reads CUDA's allocator on a GPU, else the resident set."""

from __future__ import annotations

import os
from typing import Any

try:
    _PAGE = os.sysconf("SC_PAGE_SIZE")
except (AttributeError, ValueError, OSError):  # not POSIX
    _PAGE = 4096

MAX_SAMPLES = 10_000  # a long run keeps the first ones: growth shows early


class StepMemory:
    """One sample per optimizer step: CUDA allocated bytes, else resident bytes (-1 when
    unreadable)."""

    def __init__(self) -> None:
        self.samples: list[int] = []
        self.cuda = False  # set once the profiler sees CUDA initialised

    def on_step(self) -> None:
        if len(self.samples) < MAX_SAMPLES:
            self.samples.append(self._now())

    def _now(self) -> int:
        if self.cuda:
            try:
                import torch

                return int(torch.cuda.memory_allocated())
            except Exception:
                return -1
        try:  # resident set size, Linux: pages in /proc/self/statm
            with open("/proc/self/statm", "rb") as f:
                return int(f.read().split()[1]) * _PAGE
        except (OSError, ValueError, IndexError):
            return -1

    def summary(self) -> dict[str, Any]:
        """Growth per step by least squares after the first two steps (which allocate the
        optimizer state)."""
        values = [v for v in self.samples[2:] if v >= 0]
        out: dict[str, Any] = {"source": "cuda" if self.cuda else "rss", "samples": len(values)}
        if len(values) < 3:
            out["growth_per_step"] = None
            return out
        n = len(values)
        mean_x = (n - 1) / 2
        mean_y = sum(values) / n
        sxx = sum((i - mean_x) ** 2 for i in range(n))
        sxy = sum((i - mean_x) * (v - mean_y) for i, v in enumerate(values))
        out.update(first_bytes=values[0], last_bytes=values[-1], growth_per_step=sxy / sxx)
        return out
