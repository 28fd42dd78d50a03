"""Host allocator churn (TLR09): page faults the process took for memory it already had.

glibc's malloc hands large blocks (from 128 KiB, a threshold it raises as it goes)
to the kernel with ``munmap`` when they are freed, and trims the top of its heap.
A training step that allocates and frees the same activations every time then
takes a fresh page fault, and the kernel zeroes the page, for every 4 KiB of them
on every step. Measured on this project's CPU machine, that was 20 % of a small CNN's
run (rules/TLR09).

What the child records: minor page faults (``getrusage``) and peak resident
memory at the third optimizer step (the first two allocate the optimizer state)
and at the end of the run, the allocator the process runs on, whether its options
were already set, and the kernel's work per page of churn on this machine. The
decision is made in the parent, on plain data (``correlate/allocator.py``).

Linux only: elsewhere ``summary`` says why it measured nothing.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import sys
import time
from typing import Any

try:
    import resource
except ImportError:  # not on Windows: FaultWatch.supported is False there
    resource = None  # type: ignore[assignment]

PAGE = mmap.PAGESIZE
#: environment variables that set glibc malloc's thresholds (then it no longer adapts them)
GLIBC_ENV = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_")
GLIBC_TUNABLES = ("glibc.malloc.mmap_threshold", "glibc.malloc.trim_threshold", "glibc.malloc.top_pad")
#: allocators a user preloads instead of glibc's (the usual CPU advice for PyTorch)
OTHER_ALLOCATORS = ("jemalloc", "tcmalloc", "mimalloc")
_CALIBRATION_BYTES = 8 << 20  # 2,048 pages: a few ms a round


def snapshot() -> tuple[int, int]:
    """(minor page faults so far, peak resident memory in bytes) of this process."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return int(usage.ru_minflt), int(usage.ru_maxrss) * 1024  # Linux reports KiB


def allocator() -> str:
    """The malloc this process runs on: a preloaded one if mapped, else the C library's."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            maps = f.read()
    except OSError:
        maps = ""
    for name in OTHER_ALLOCATORS:
        if f"lib{name}" in maps:
            return name
    try:
        libc = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (ValueError, OSError, AttributeError):
        libc = ""
    return "glibc" if libc.startswith("glibc") else (libc or "unknown")


def glibc_options() -> list[str]:
    """The malloc options already set for this process (environment or tunables)."""
    found = [name for name in GLIBC_ENV if os.environ.get(name)]
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    found += [t.split("=")[0] for t in tunables.split(":") if t.split("=")[0] in GLIBC_TUNABLES]
    return found


def fault_cost_s() -> float:
    """Seconds of kernel work per page of churn here: map, first touch (a fault and a
    zeroed page), unmap, less the write itself (a second write to the same pages); the
    median of three rounds on 8 MiB of anonymous memory."""
    pages = _CALIBRATION_BYTES // PAGE
    costs = []
    for _ in range(3):
        t0 = time.perf_counter()
        buf = mmap.mmap(-1, _CALIBRATION_BYTES)
        address = ctypes.addressof(ctypes.c_char.from_buffer(buf))  # the exporting object dies here
        ctypes.memset(address, 1, _CALIBRATION_BYTES)
        t1 = time.perf_counter()
        ctypes.memset(address, 2, _CALIBRATION_BYTES)
        t2 = time.perf_counter()
        buf.close()
        t3 = time.perf_counter()
        costs.append(max((t1 - t0) + (t3 - t2) - (t2 - t1), 0.0) / pages)
    costs.sort()
    return costs[1]


class FaultWatch:
    """Faults and peak memory from the steady state (third optimizer step) to the end."""

    STEADY_STEP = 3

    def __init__(self) -> None:
        self.start: tuple[int, int] | None = None
        self.end: tuple[int, int] | None = None
        self.shared = [0, 0]  # bytes of worker batches so far, at the start and at the end
        self.tool_faults = 0  # torchlint's own work in the step hook (trace export) is not the script's
        self._tool_start = 0
        self.supported = sys.platform.startswith("linux") and resource is not None

    def on_step(self, step: int, shared_bytes: int = 0) -> None:
        """``shared_bytes``: the worker batches received so far (their pages fault too)."""
        if self.supported and step == self.STEADY_STEP:
            self.start = snapshot()
            self.shared[0] = shared_bytes

    def tool_begin(self) -> None:
        if self.start is not None:
            self._tool_start = resource.getrusage(resource.RUSAGE_SELF).ru_minflt

    def tool_end(self) -> None:
        if self.start is not None:
            self.tool_faults += resource.getrusage(resource.RUSAGE_SELF).ru_minflt - self._tool_start

    def stop(self, shared_bytes: int = 0) -> None:
        """The end of the script's time: called before torchlint's final trace export."""
        if self.start is not None and self.end is None:
            self.end = snapshot()
            self.shared[1] = shared_bytes

    def summary(self) -> dict[str, Any]:
        if not self.supported:
            return {"skipped": "page faults are read on Linux only"}
        if self.start is None:
            return {"skipped": f"the run took fewer than {self.STEADY_STEP} optimizer steps"}
        self.stop()
        assert self.end is not None
        return {
            "allocator": allocator(),
            "options": glibc_options(),
            "faults": max(self.end[0] - self.start[0] - self.tool_faults, 0),
            "peak_growth_bytes": max(self.end[1] - self.start[1], 0),
            "worker_batch_bytes": max(self.shared[1] - self.shared[0], 0),
            "page_bytes": PAGE,
            "fault_cost_s": fault_cost_s(),
        }
