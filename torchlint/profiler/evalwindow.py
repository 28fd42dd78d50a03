"""A torch.profiler window over the script's evaluation pass.

The scheduled window records optimizer steps; an evaluation (``model.eval()`` then
forwards, no optimizer step) falls outside it, although that is where TL301 and
TL304 findings live. When the script switches a module to eval mode and the
scheduled windows are over (or never started), this records one more window, from
``eval()`` until training resumes (``train()`` or the next optimizer step), the
run ends, or ``--active`` evaluation batches have been fetched, whichever comes
first. Its trace is in ``traces/eval/`` (tracefile.trace_name); its ops are charged to probed call sites
like any window's. Imported only in the profiled child.
"""

from __future__ import annotations

import sys
import threading
import time
import warnings
from typing import Any

import torch

from torchlint.profiler.kineto import add_rank_metadata, kineto_quiet
from torchlint.profiler.tooltime import TOOL, as_probe

EVAL_WINDOW = "eval"  # its folder under traces/


class EvalWindow:
    def __init__(self, run: Any) -> None:
        self.run = run
        self.prof: Any = None
        self.done = False
        self.batches = 0
        self.after_step = 0
        self._in_train = False
        self._orig_train = torch.nn.Module.train
        window = self
        orig = self._orig_train

        def train(module: Any, mode: bool = True) -> Any:
            if window._in_train or threading.get_ident() != run.rec.main_ident or run.rec.busy:
                return orig(module, mode)  # a child module, another thread, or torchlint itself
            window._in_train = True
            try:
                result = orig(module, mode)
            finally:
                window._in_train = False
            try:
                window.on_mode(bool(mode))
            except Exception as exc:  # the profiler must never break the user's script
                run.warnings.append(f"evaluation window: {type(exc).__name__}: {exc}")
                window.done = True
            return result

        torch.nn.Module.train = as_probe(train, "Module.train")  # type: ignore[method-assign]

    @property
    def recording(self) -> bool:
        return self.prof is not None

    def uninstall(self) -> None:
        torch.nn.Module.train = self._orig_train  # type: ignore[method-assign]

    def _scheduled_done(self) -> bool:
        run = self.run
        if not run.options.get("torch_profiler", True):
            return False
        if run.prof is None:
            return True  # no optimizer step yet (evaluation first), or no profiler
        repeat = int((run.options.get("schedule") or {}).get("repeat", 1))
        return repeat > 0 and len(run.cycles) >= repeat and not run.rec.labels_on

    def on_mode(self, training: bool) -> None:
        if training:
            if self.recording:
                self.stop("train() called")
            return
        if self.done or self.recording or not self._scheduled_done():
            return
        self.start()

    def start(self) -> None:
        from torch.profiler import ProfilerActivity, profile

        run = self.run
        activities = [ProfilerActivity.CPU]
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            activities.append(ProfilerActivity.CUDA)
        rec = run.rec
        rec.busy = True
        t = time.perf_counter()
        t_tool = TOOL.begin()
        try:
            with warnings.catch_warnings(), kineto_quiet():
                warnings.simplefilter("ignore")
                prof = profile(
                    activities=activities,
                    record_shapes=bool(run.options.get("record_shapes")),
                    profile_memory=bool(run.options.get("profile_memory")),
                    with_stack=False,
                )
                add_rank_metadata(prof)
                prof.start()
            self.prof = prof
            self.after_step = run.steps
            self.batches = 0
            rec.fetch_hook = self._on_fetch
            rec.labels_on = True
            run.lines.start(sys._getframe())
        finally:
            rec.busy = False
            rec.tool_s += time.perf_counter() - t
            TOOL.end(t_tool, sys._getframe())

    def _on_fetch(self) -> None:
        self.batches += 1
        active = int((self.run.options.get("schedule") or {}).get("active", 5))
        if self.batches > active:  # the first batch warms up, like the scheduled window
            self.stop(f"{active} evaluation batches recorded")

    def stop(self, why: str) -> None:
        prof, self.prof = self.prof, None
        if prof is None:
            return
        self.done = True
        run = self.run
        rec = run.rec
        rec.fetch_hook = None
        was_busy = rec.busy
        rec.busy = True
        rec.labels_on = False
        run.lines.stop()
        t = time.perf_counter()
        t_tool = TOOL.begin()
        cycle: dict[str, Any] = {
            "cycle": len(run.cycles) + 1,
            "steps": [],
            "trace": None,
            "eval": True,
            "after_step": self.after_step,
            "batches": max(self.batches - 1, 0) if self.batches else 0,
            "ended": why,
        }
        try:
            prof.stop()
            try:
                from torchlint.profiler.tracefile import trace_name

                name = trace_name(EVAL_WINDOW)
                (run.run_dir / name).parent.mkdir(parents=True, exist_ok=True)
                prof.export_chrome_trace(str(run.run_dir / name))
                cycle["trace"] = name
            except Exception as exc:
                cycle["trace_error"] = f"{type(exc).__name__}: {exc}"
        except Exception as exc:
            cycle["events_error"] = f"{type(exc).__name__}: {exc}"
        run.cycles.append(cycle)
        rec.busy = was_busy
        if not was_busy:
            rec.tool_s += time.perf_counter() - t
        TOOL.end(t_tool, sys._getframe())
