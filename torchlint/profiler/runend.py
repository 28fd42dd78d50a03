"""The end of a child run: everything stopped, and the torch part of the session (TorchRun.finish)."""

from __future__ import annotations

import os
import statistics
from typing import Any

import torch


def _usable_cores() -> int:
    """Cores this process may run on (its affinity), which caps what workers overlap."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


class RunEnd:
    """TorchRun's end of run: stop the instruments, then summarise what they recorded."""

    def finish(self) -> dict[str, Any]:
        """Stop everything and return the torch part of the session."""
        rec = self.rec
        rec.busy = True  # from here on, nothing is the script's time
        self.faults.stop(rec.worker_batch_bytes)
        if self.eval_window.recording:
            self.eval_window.stop("the run ended")
        self.eval_window.uninstall()
        rec.labels_on = False
        self.modules.stop()
        self.lines.stop()
        partial = False
        if self.prof is not None:
            from torch.profiler import ProfilerAction

            action = getattr(self.prof, "current_action", None)
            partial = action in (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)
            try:
                self.prof.stop()
            except Exception as exc:
                self.prof_error = f"{type(exc).__name__}: {exc}"
            if partial and self.cycles:
                # the last window ran from its first step to the end of the script
                last = self.cycles[-1]
                last["steps"] = [n for n in last["steps"] if n <= self.steps]
                last["partial"] = True
        try:
            self._hook.remove()
        except Exception:
            pass
        self.sync_debug.disable()
        self.compile.finish()
        if self.modules.blocked and (self.modules.used or self.cycles):  # a window ran without them
            self.warnings.append(f"module times {self.modules.blocked}")
        hotspots = rec.hotspots() + self.sync_debug.hotspots()
        active_steps = sum(len(c["steps"]) for c in self.cycles)
        device = "cpu"
        if self.cuda:
            try:
                device = f"cuda ({torch.cuda.get_device_name()})"
            except Exception:
                device = "cuda"
        durations = self.step_times
        sched = self.options.get("schedule") or {}
        return {
            "device": device,
            "cuda": self.cuda,
            "hotspots": hotspots,
            "steps": {
                "count": self.steps,
                "optimizers": sorted(self.optimizers),
                "first_step_at_s": (self.first_step_at - self.t0_ref[0]) if self.first_step_at else None,
                "last_step_at_s": (self.last_step_at - self.t0_ref[0]) if self.last_step_at else None,
                "durations_s": durations,
                "mean_s": statistics.fmean(durations) if durations else None,
                "median_s": statistics.median(durations) if durations else None,
                "max_steps": self.max_steps,
                "memory": self.memory.summary(),
            },
            "cpus": _usable_cores(),
            "one_time": self.one_time_costs(),
            "torch_profiler": {
                "enabled": bool(self.options.get("torch_profiler", True)),
                "ran": bool(self.cycles),
                "activities": getattr(self, "activities", []),
                "schedule": {
                    "wait": int(sched.get("wait", 1)),
                    "warmup": int(sched.get("warmup", 1)),
                    "active": int(sched.get("active", 5)),
                    "repeat": int(sched.get("repeat", 1)),
                },
                "with_stack": False,
                "record_shapes": bool(self.options.get("record_shapes")),
                "profile_memory": bool(self.options.get("profile_memory")),
                "cycles": self.cycles,
                "rolling_budget": self.rolling_budget if self.rolling else None,
                "active_steps": active_steps,
                "partial": partial and bool(self.cycles),
                "error": self.prof_error,
                "not_run_reason": None if self.cycles else self._not_run_reason(),
            },
            "probes": {"ops": self.probed},
            "patterns": _patterns_summary(),  # TLR05-TLR08 evidence (patterns.py)
            "allocator": self._allocator_summary(),  # TLR09 evidence (allocator.py)
            "compile": self._compile_summary(),  # TLR14, TLR15 evidence (compilewatch.py)
            "sync_debug": {"enabled": self.sync_debug.enabled},
            # summarised from the trace files by the parent (tracefile.py)
            "torch_window": {
                "active_steps": active_steps,
                "labels": {name: list(site) for name, site in rec.labels.items()},
                "modules": self.modules.summary(),
                "line_ranges": {"recorded": self.lines.lines_seen, "refused": self.lines.refused},
            },
            "warnings": self.warnings,
        }

    def _compile_summary(self) -> dict[str, Any]:
        try:
            return self.compile.summary()
        except Exception as exc:  # never cost the rest of the session
            return {"errors": [f"{type(exc).__name__}: {exc}"]}

    def _allocator_summary(self) -> dict[str, Any]:
        try:
            return self.faults.summary()
        except Exception as exc:  # never cost the rest of the session
            return {"skipped": f"{type(exc).__name__}: {exc}"}

    def _not_run_reason(self) -> str:
        if not self.options.get("torch_profiler", True):
            return "disabled"
        if self.prof_error:
            return f"error: {self.prof_error}"
        if self.steps == 0:
            return "no optimizer step was detected"
        sched = self.options.get("schedule") or {}
        first = int(sched.get("wait", 1)) + int(sched.get("warmup", 1)) + 2
        return f"the run ended after {self.steps} steps, before the window (step {first})"


def _patterns_summary() -> dict[str, Any]:
    from torchlint.profiler.patterns import summary

    try:
        return summary()
    except Exception as exc:  # the patterns must never cost the rest of the session
        return {"error": f"{type(exc).__name__}: {exc}"}
