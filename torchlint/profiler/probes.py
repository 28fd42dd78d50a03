"""Call-site probes: a few torch entry points wrapped and timed at the user's line.

Imported only in the profiled child (after torchprof has imported and timed torch).
See docs/profiling.md, "Call probes".
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import torch

from torchlint.profiler.anomalywatch import install_anomaly_watch
from torchlint.profiler.fillwatch import install_fill_watch, note_moved
from torchlint.profiler.patterns import install_matmul_watch, install_optimizer_watch
from torchlint.profiler.session import Hotspot
from torchlint.profiler.tooltime import as_probe
from torchlint.profiler.usercode import is_user_file

LABEL_PREFIX = "torchlint "


# --------------------------------------------------------------------------
# call-site attribution
# --------------------------------------------------------------------------

_user_cache: dict[str, bool] = {}
_positions: dict[Any, list[tuple[int | None, int | None, int | None, int | None]]] = {}


def user_site(frame: Any) -> tuple[str, int, str, int | None, int | None] | None:
    """``(file, line, function, column, end column)`` of the innermost user frame at or
    above ``frame``. The columns (1-based, end exclusive) are those of the call
    expression being executed (``co_positions``), so that two calls on one line, and
    two findings about them, are told apart."""
    depth = 0
    while frame is not None and depth < 96:
        code = frame.f_code
        filename = code.co_filename
        user = _user_cache.get(filename)
        if user is None:
            user = _user_cache[filename] = is_user_file(filename)
        if user:
            line = frame.f_lineno
            col = end = None
            table = _positions.get(code)
            if table is None:
                table = _positions[code] = list(code.co_positions())
            i = frame.f_lasti // 2
            if 0 <= i < len(table):
                start_line, end_line, c0, c1 = table[i]
                if start_line == line and c0 is not None:
                    col = c0 + 1
                    end = c1 + 1 if (c1 is not None and end_line == line) else None
            return (filename, line, code.co_name, col, end)
        frame = frame.f_back
        depth += 1
    return None


class Recorder:
    """Accumulates probe measurements; shared with the sampler thread."""

    def __init__(self) -> None:
        self.main_ident = threading.main_thread().ident
        # (file, line, function, op, kind, column, end column) -> [calls, self_s, total_s]
        self.calls: dict[tuple[Any, ...], list[float]] = {}
        self.stack: list[float] = [0.0]  # child time of each probed call in progress
        self.ops: list[str] = []  # the probed calls in progress
        self.busy = False  # torchlint's own work: probes pass through, samples go to tool time
        self.in_fetch = 0  # > 0 while a DataLoader batch is being fetched
        self.stepping = False  # after the first optimizer step: the steps the step times measure
        self.labels_on = False  # torch.profiler is recording: wrap probed calls in ranges
        self.labels: dict[str, tuple[str, int, str, str]] = {}
        self._label_of: dict[tuple[str, int, str], str] = {}
        self.tool_s = 0.0
        self.tool_at_first_fetch = 0.0  # torchlint's work before the loop: not in its span
        self.loaders: dict[tuple[str, int], dict[str, Any]] = {}  # iter(loader) site -> options
        self.fetch_first: float | None = None
        self.fetch_s = 0.0
        self.fetch_cpu_s = 0.0  # CPU time of the main thread inside fetches (the rest waited)
        self.fetches = 0
        self.worker_batch_bytes = 0  # batches from worker processes: shared memory the main process maps (TLR09)
        self.fetch_hook: Callable[[], None] | None = None

    def label(self, site: tuple[Any, ...], op: str) -> str:
        key = (site[0], site[1], op)
        name = self._label_of.get(key)
        if name is None:
            name = f"{LABEL_PREFIX}{os.path.basename(site[0])}:{site[1]} {op}"
            if name in self.labels:  # same basename in two directories
                name = f"{LABEL_PREFIX}{site[0]}:{site[1]} {op}"
            self._label_of[key] = name
            self.labels[name] = (site[0], site[1], site[2], op)
        return name

    def loader_options(self) -> list[dict[str, Any]]:
        return [{"path": path, "line": line, **opts} for (path, line), opts in self.loaders.items()]

    def hotspots(self) -> list[Hotspot]:
        out = []
        for (path, line, func, op, kind, col, end), (calls, self_s, total_s) in self.calls.items():
            out.append(
                Hotspot(
                    source="probe",
                    path=path,
                    line=line,
                    granularity="line",
                    function=func,
                    op=op,
                    self_s=self_s,
                    total_s=total_s,
                    calls=int(calls),
                    kind=kind,
                    column=col,
                    end_column=end,
                )
            )
        return out


RECORDER = Recorder()


def _transfer_kind(args: tuple[Any, ...], result: Any) -> str | None:
    """Direction of a copy done by ``.to()``/``.cpu()``/``.cuda()``; None when nothing moved."""
    try:
        src = args[0].device.type
        dst = result.device.type
    except Exception:
        return None
    if src == dst:
        return None
    if src == "cpu":
        try:
            kind = "HtoD pinned" if args[0].is_pinned() else "HtoD pageable"
        except Exception:
            kind = "HtoD"
        note_moved(args[0], kind)  # TLR06: a tensor made or filled on the host, then moved
        return kind
    if dst == "cpu":
        return "DtoH"
    return "DtoD"


def _batch_bytes(batch: Any, depth: int = 0) -> int:
    """Bytes of the tensors in a batch (nested lists, tuples, dicts; bounded walk). A
    worker's batch arrives in shared memory, and mapping it faults in the main process:
    page faults that are not the allocator's churn (TLR09 leaves them out)."""
    if isinstance(batch, torch.Tensor):
        try:
            return int(batch.untyped_storage().nbytes())
        except Exception:
            return 0
    if depth < 3 and isinstance(batch, (list, tuple)):
        return sum(_batch_bytes(b, depth + 1) for b in batch[:64])
    if depth < 3 and isinstance(batch, dict):
        return sum(_batch_bytes(b, depth + 1) for b in list(batch.values())[:64])
    return 0


def _note_loader(site: tuple[Any, ...], args: tuple[Any, ...]) -> None:
    """Remember how the loader iterated at ``site`` was configured, so that runtime
    findings agree with the code (no "give it workers" to a loader that has them)."""
    loader = args[0] if args else None
    key = (site[0], site[1])
    if loader is None or key in RECORDER.loaders:
        return
    opts: dict[str, Any] = {}
    for name in ("num_workers", "pin_memory", "persistent_workers", "batch_size"):
        value = getattr(loader, name, None)
        if isinstance(value, (bool, int)) or value is None:
            opts[name] = value
    RECORDER.loaders[key] = opts


def _make_probe(
    orig: Callable[..., Any],
    op: str,
    classify: Callable[[tuple[Any, ...], Any], str | None] | None = None,
    fetch: bool = False,
    note: Callable[[tuple[Any, ...], tuple[Any, ...]], None] | None = None,
) -> Callable[..., Any]:
    rec = RECORDER
    getframe = sys._getframe
    perf = time.perf_counter
    get_ident = threading.get_ident
    compiling = torch.compiler.is_compiling
    record_function = torch.autograd.profiler.record_function
    thread_time = time.thread_time

    @functools.wraps(orig)
    def probe(*args: Any, **kwargs: Any) -> Any:
        if compiling() or rec.busy or get_ident() != rec.main_ident:
            return orig(*args, **kwargs)
        ops = rec.ops
        if ops and ops[-1] == op:  # re-dispatch through a subclass's __torch_function__
            return orig(*args, **kwargs)
        site = user_site(getframe(1))
        if site is None:
            return orig(*args, **kwargs)
        stack = rec.stack
        stack.append(0.0)
        ops.append(op)
        rf = None
        if rec.labels_on:
            try:
                rf = record_function(rec.label(site, op))
                rf.__enter__()
            except Exception:
                rf = None
        if fetch:
            rec.in_fetch += 1
        if note is not None:
            try:
                note(site, args)
            except Exception:
                pass
        kind = result = None
        c0 = thread_time() if fetch else 0.0
        t0 = perf()
        try:
            result = orig(*args, **kwargs)
            if classify is not None:
                kind = classify(args, result)
            return result
        finally:
            dt = perf() - t0
            if fetch:
                rec.in_fetch -= 1
                rec.fetch_s += dt
                rec.fetch_cpu_s += thread_time() - c0
                if op == "DataLoader.__next__":
                    rec.fetches += 1
                    if result is not None and getattr(args[0], "_num_workers", 0):
                        # counted after the fetch's time is taken: torchlint's walk is not the loader's
                        rec.worker_batch_bytes += _batch_bytes(result)
                if rec.fetch_first is None:
                    rec.fetch_first = t0
                    rec.tool_at_first_fetch = rec.tool_s
            if rf is not None:
                try:
                    rf.__exit__(None, None, None)
                except Exception:
                    pass
            child = stack.pop()
            ops.pop()
            stack[-1] += dt
            key = (site[0], site[1], site[2], op, kind, site[3], site[4])
            entry = rec.calls.get(key)
            if entry is None:
                rec.calls[key] = [1, dt - child, dt]
            else:
                entry[0] += 1
                entry[1] += dt - child
                entry[2] += dt
            if fetch and rec.fetch_hook is not None and not ops:
                rec.fetch_hook()  # the evaluation window counts its batches

    # One code object per probed call, named after it, so that cProfile keeps them
    # apart and cprof.user_view can put the wrapped function in the wrapper's place.
    return as_probe(probe, op)  # hidden from torch.compile's frame evaluation too


def _patch(owner: Any, name: str, op: str, **kw: Any) -> bool:
    orig = getattr(owner, name, None)
    if orig is None or getattr(orig, "__torchlint_probe__", False):
        return False
    try:
        setattr(owner, name, _make_probe(orig, op, **kw))
    except (AttributeError, TypeError):
        return False
    return True


def install_probes() -> list[str]:
    """Wrap the probed torch entry points; returns the names of those wrapped."""
    from torch.utils.data import dataloader as dl

    probed: list[str] = []
    tensor_methods = {
        "item": None,
        "tolist": None,
        "numpy": None,
        "cpu": _transfer_kind,
        "cuda": _transfer_kind,
        "to": _transfer_kind,
        "__bool__": None,
        "__float__": None,
        "__int__": None,
    }
    for name, classify in tensor_methods.items():
        if _patch(torch.Tensor, name, f"Tensor.{name}", classify=classify):
            probed.append(f"Tensor.{name}")
    for name in ("tensor", "as_tensor"):
        if _patch(torch, name, f"torch.{name}"):
            probed.append(f"torch.{name}")
    for name in ("synchronize", "empty_cache"):
        if _patch(torch.cuda, name, f"torch.cuda.{name}"):
            probed.append(f"torch.cuda.{name}")
    if _patch(dl._BaseDataLoaderIter, "__next__", "DataLoader.__next__", fetch=True):
        probed.append("DataLoader.__next__")
    if _patch(dl.DataLoader, "__iter__", "DataLoader.__iter__", fetch=True, note=_note_loader):
        probed.append("DataLoader.__iter__")
    # the runtime patterns (TLR05-TLR08, patterns.py): cheap where nothing matches
    install_optimizer_watch(RECORDER.main_ident, user_site)
    probed.extend(install_matmul_watch(RECORDER.main_ident, user_site, RECORDER))
    probed.extend(install_fill_watch(RECORDER.main_ident, user_site, RECORDER))
    probed.extend(install_anomaly_watch(RECORDER.main_ident, user_site, RECORDER))
    return probed
