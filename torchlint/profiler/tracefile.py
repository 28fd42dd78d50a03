"""torch.profiler windows summarised from their Chrome trace files. Pure: no torch.

The profiled child only exports each window (``export_chrome_trace``, done in C++:
about 0.08 s for a 40k-event GRU window); building torch's ``FunctionEvent`` tree
for the same window (``prof.events()``) took 2.2 s of the script's time, and about
three times that under cProfile. So the child writes the trace and the parent
reads it back when it loads the run: the summary is off the script's critical path.

From each trace: the aten ops under each ``torchlint <file>:<line> <call>`` range
(charged to that call site, nested ranges excluded), a table of ops by self time,
CUDA synchronisations, memcpys and the device's busy time over the window; for each
synchronisation inside a call site's range, how long the host waited in it and the
GPU idle gap it left (from its return to the next kernel's start: what the sync model
of estimate.py charges); and the device time of the matmul kernels (TLR08's model). The
totals over a run's windows are tracewindows.py's.
"""

from __future__ import annotations

import json
import os
import socket
from bisect import bisect_left
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from torchlint.profiler.tracelines import BACKWARD_PREFIX, LINE_PREFIX, MODULE_PREFIX, NO_FORWARD, charge_backward
from torchlint.profiler.traceregions import RegionStats

LABEL_PREFIX = "torchlint "
#: Each window's trace is ``traces/<window>/<worker>.<time_ms>.pt.trace.json``, the layout
#: of torch's ``tensorboard_trace_handler``: ``tensorboard --logdir RUN_DIR/traces`` shows
#: each window as a run, and HTA's ``TraceAnalysis(trace_dir=RUN_DIR/traces/<window>)``
#: reads one (one file per rank). Runs made before this layout have ``trace*.json``.
TRACES_DIR = "traces"
TRACE_SUFFIX = ".pt.trace.json"
SYNCS = frozenset({"cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize"})
DEVICE_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
#: aten ops that launch the GEMM kernels TF32 would speed up; a kernel counts when the op whose
#: External id it carries is one of these, or when its name says GEMM (cuBLAS's names vary by
#: GPU and version: ``ampere_sgemm_*``, ``sm90_xmma_gemm_*``, ``cutlass_*gemm*``, ``nvjet_*``)
MATMUL_OPS = frozenset({"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::addbmm",
                        "aten::_addmm_activation", "aten::addmv", "aten::mv", "aten::matmul", "aten::linear"})
_GEMM_NAMES = ("gemm", "gemv", "nvjet")


def _is_gemm(kernel: str) -> bool:
    low = kernel.lower()
    return any(word in low for word in _GEMM_NAMES)


def trace_name(window: str, worker: str | None = None, when_ms: int | None = None) -> str:
    """The run-relative name of a window's trace file (its folder is made by the caller)."""
    worker = worker or f"{socket.gethostname()}_{os.getpid()}"
    when_ms = int(time.time() * 1000) if when_ms is None else when_ms
    return f"{TRACES_DIR}/{window}/{worker}.{when_ms}{TRACE_SUFFIX}"


def trace_files(run_dir: Path) -> list[Path]:
    """Every trace in a run directory, in either layout."""
    run_dir = Path(run_dir)
    return sorted(run_dir.glob("trace*.json")) + sorted(run_dir.glob(f"{TRACES_DIR}/*/*{TRACE_SUFFIX}"))


class FileSummary:
    """One trace file's totals. Independent of the run's label table, so the parent
    can read a window's trace while the script is still running (watch())."""

    def __init__(self) -> None:
        self.site_ops: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0, 0.0, 0.0, 0.0])
        self.ops: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0, 0.0])
        self.memcpy: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
        self.events = 0
        self.syncs = 0
        self.pageable = 0
        self.window_us = 0.0
        self.busy_us = 0.0
        # line range name -> [forward CPU us, backward CPU us, forward device us, backward device us]
        self.lines: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
        self.module_backward: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])  # module range -> [cpu, device]
        self.backward_unattributed = [0.0, 0.0]  # no forward op of the window made the node (AccumulateGrad)
        self.seen: dict[str, set[str]] = defaultdict(set)  # line range -> the ProfilerStep ranges it ran in ("" outside)
        self.steps: set[str] = set()  # the ProfilerStep ranges of the window
        self._seq_site: dict[Any, tuple[str | None, str | None]] = {}  # forward op's sequence number -> (line, module)
        self._backward: dict[Any, list[float]] = defaultdict(lambda: [0.0, 0.0])  # sequence number -> [cpu, device]
        self._flows: dict[tuple[Any, ...], Any] = {}  # ("s" | "f", tid, ts) -> fwdbwd flow id
        self._flow_site: dict[Any, tuple[str | None, str | None]] = {}  # flow id -> forward op's (line, module)
        self._flow_seq: dict[Any, Any] = {}  # flow id -> the backward node's sequence number
        self.gemm_us = 0.0  # device time of the GEMM kernels (TLR08's model)
        #: call-site range (None: outside any) -> [syncs, waited_us, gap_us, saving_us, syncs with a next kernel]
        self.sync_sites: dict[str | None, list[float]] = defaultdict(lambda: [0, 0.0, 0.0, 0.0, 0])
        self._syncs: list[tuple[str | None, float, float]] = []  # (range, end, waited), this file
        self.regions = RegionStats()  # torch.compile's compiled regions (traceregions.py)

    def read(self, path: Path) -> None:
        with open(path, encoding="utf-8") as f:
            events = json.load(f).get("traceEvents") or []
        cpu: dict[Any, list[dict[str, Any]]] = defaultdict(list)
        device: list[tuple[float, float]] = []
        kernel_us: dict[Any, float] = defaultdict(float)  # External id -> device time it launched
        self._flows = {}
        kernels: list[tuple[Any, str, float]] = []  # (External id, name, µs): the GEMMs are picked below
        op_names: dict[Any, str] = {}  # External id -> the CPU op that holds it
        for e in events:
            if e.get("cat") == "fwdbwd" and e.get("ph") in ("s", "f"):
                # torch's link from the forward op that made an autograd node to the node's backward
                self._flows[(e.get("ph"), e.get("tid"), float(e.get("ts", 0.0)))] = e.get("id")
                continue
            if e.get("ph") != "X" or e.get("cat") == "Trace":  # "Trace": the profiler's own span
                continue
            self.events += 1
            name, ts, dur = str(e.get("name", "")), float(e.get("ts", 0.0)), float(e.get("dur", 0.0))
            cat = e.get("cat")
            if cat in DEVICE_CATS:
                device.append((ts, ts + dur))
                ext = (e.get("args") or {}).get("External id")
                if ext is not None:
                    kernel_us[ext] += dur
                if cat == "kernel":
                    kernels.append((ext, name, dur))
                if "Memcpy" in name:
                    m = self.memcpy[name]
                    m[0] += 1
                    m[1] += dur
                    if "Pageable" in name:
                        self.pageable += 1
                continue
            if name in SYNCS:
                self.syncs += 1
            if cat == "cpu_op":
                op_names[(e.get("args") or {}).get("External id")] = name
            cpu[e.get("tid")].append(e)
        lo, hi = float("inf"), float("-inf")
        for thread in cpu.values():
            thread.sort(key=lambda e: (float(e.get("ts", 0.0)), -float(e.get("dur", 0.0))))
            lo = min(lo, float(thread[0].get("ts", 0.0)))
            hi = max(hi, max(float(e.get("ts", 0.0)) + float(e.get("dur", 0.0)) for e in thread))
            self._thread(thread, kernel_us)
            # torchlint's own ranges (lines, modules, probed calls) are left out of the regions' nesting
            self.regions.read_thread([e for e in thread if not str(e.get("name", "")).startswith(LABEL_PREFIX)])
        charge_backward(self)
        if hi > lo:
            self.window_us += hi - lo
            self.busy_us += _union_length(device, lo, hi)
        self._sync_gaps(sorted(start for start, _ in device))
        self.gemm_us += sum(dur for ext, name, dur in kernels if op_names.get(ext) in MATMUL_OPS or _is_gemm(name))

    def _sync_gaps(self, starts: list[float]) -> None:
        """The GPU idle gap after each sync: from its return to the next device activity
        (kernel, memcpy, memset). A sync the window's last kernel precedes has no gap to
        read; it is counted, not measured."""
        for label, end, waited in self._syncs:
            row = self.sync_sites[label]
            row[0] += 1
            row[1] += waited
            i = bisect_left(starts, end)
            if i < len(starts):
                gap = max(starts[i] - end, 0.0)
                row[2] += gap
                row[3] += min(gap, waited)
                row[4] += 1
        self._syncs = []

    def _thread(self, events: list[dict[str, Any]], kernel_us: dict[Any, float]) -> None:
        """Self times by nesting (an event inside another's span is its child); the
        innermost call-site range around each op, its innermost line and module range,
        and the autograd node (sequence number) whose backward it belongs to."""
        stack: list[list[Any]] = []  # [end, name, child_us, label, dur, device_us, line, module, backward seq, range, step]

        def close(item: list[Any]) -> None:
            end, name, child, label, dur, dev, line, module, seq, is_range, _step = item
            if is_range:
                return
            self_us = max(dur - child, 0.0)
            row = self.ops[name]
            row[0] += 1
            row[1] += self_us
            row[2] += dur
            row[3] += dev
            if label is not None:
                site = self.site_ops[(label, name)]
                site[0] += 1
                site[1] += self_us
                site[2] += dur
                site[3] += dev
            if seq is not None:  # backward: charged to the forward op's line once all threads are read
                bwd = self._backward[seq]
                bwd[0] += self_us
                bwd[1] += dev
            elif line is not None:
                cost = self.lines[line]
                cost[0] += self_us
                cost[2] += dev

        for e in events:
            ts, dur = float(e.get("ts", 0.0)), float(e.get("dur", 0.0))
            while stack and stack[-1][0] <= ts:
                close(stack.pop())
            name = str(e.get("name", ""))
            args = e.get("args") or {}
            parent = stack[-1] if stack else None
            if parent is not None:
                parent[2] += dur
            label, line, module, seq, step = (parent[3], parent[6], parent[7], parent[8], parent[10]) if parent is not None else (None,) * 5
            is_range = name.startswith(LABEL_PREFIX) or name.startswith("ProfilerStep")
            if name.startswith("ProfilerStep"):
                step = name
                self.steps.add(name)
            if name.startswith(LINE_PREFIX):
                line = name
                self.seen[name].add(step or "")
            elif name.startswith(MODULE_PREFIX):
                module = name
            elif name.startswith(LABEL_PREFIX):
                label = name  # a nested probed call charges its own site
            number = args.get("Sequence number")
            if name.startswith(BACKWARD_PREFIX):
                seq = number if number is not None else NO_FORWARD  # AccumulateGrad: no forward op made it
            elif seq is None and number is not None and not is_range:
                # every op carries the number of the next node: the last one made it
                self._seq_site[number] = (line, module)
            if self._flows:
                where = (e.get("tid"), ts)
                flow = self._flows.get(("s",) + where)
                if flow is not None and seq is None:
                    self._flow_site[flow] = (line, module)
                flow = self._flows.get(("f",) + where)
                if flow is not None and number is not None:
                    self._flow_seq[flow] = number
            dev = kernel_us.get(args.get("External id"), 0.0)
            if name in SYNCS:
                self._syncs.append((label, ts + dur, dur))
            stack.append([ts + dur, name, 0.0, label, dur, dev, line, module, seq, is_range, step])
        while stack:
            close(stack.pop())



_cache: dict[tuple[str, int, int], FileSummary] = {}
_cache_lock = threading.Lock()


def _key(path: Path) -> tuple[str, int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (str(path.resolve()), st.st_size, st.st_mtime_ns)


def read_file(path: Path) -> FileSummary:
    """A trace file's summary, from the cache when watch() already read this version."""
    key = _key(path)
    with _cache_lock:
        cached = _cache.get(key) if key is not None else None
    if cached is not None:
        return cached
    summary = FileSummary()
    summary.read(path)
    if key is not None:
        with _cache_lock:
            _cache[key] = summary
    return summary


def watch(run_dir: Path, interval: float = 0.5) -> Callable[[], None]:
    """Read each window's trace as soon as the child has finished writing it (its
    size held still for one interval), while the script runs on: the parent is
    otherwise idle. Returns the function that stops watching."""
    stop = threading.Event()
    seen: dict[Path, int] = {}

    def loop() -> None:
        while not stop.wait(interval):
            try:
                for path in trace_files(run_dir):
                    key = _key(path)
                    if key is None or key in _cache:
                        continue
                    if seen.get(path) == key[1]:
                        try:
                            read_file(path)
                        except (OSError, ValueError, AttributeError):
                            pass  # still being written, or broken: the report reads it again
                    seen[path] = key[1]
            except Exception:  # never let a watcher error reach the user
                pass

    thread = threading.Thread(target=loop, name="torchlint-traces", daemon=True)
    thread.start()

    def stop_watching() -> None:
        stop.set()
        thread.join(timeout=5)

    return stop_watching


def _union_length(intervals: list[tuple[float, float]], lo: float, hi: float) -> float:
    total = 0.0
    cur_s = cur_e = None
    for s, e in sorted(intervals):
        s, e = max(s, lo), min(e, hi)
        if e <= s:
            continue
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s  # type: ignore[operator]
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s  # type: ignore[operator]
    return total
