"""Everything in the profiled child that touches torch. The only module that imports it.

Three instruments, all on public torch API (see docs/profiling.md):

1. **Call-site probes** (probes.py). A handful of torch entry points that sync, copy or
   fetch data (``Tensor.item``/``tolist``/``cpu``/``numpy``/``to``/``cuda``/
   ``__bool__``/``__float__``/``__int__``, ``torch.tensor``, ``torch.as_tensor``,
   ``torch.cuda.synchronize``, ``DataLoader.__iter__`` and the batch iterator's
   ``__next__``) are wrapped. Each call is timed with ``perf_counter`` and charged
   to its innermost *user* frame: the ``file:line`` that made it. They run for
   the whole script, on the main thread.
2. **torch.profiler without its Python tracer** (``with_stack=False``), so it
   does not fight cProfile for the 3.11 profiling hook. It is driven by
   ``torch.optim.optimizer.register_optimizer_step_post_hook`` and a
   ``torch.profiler.schedule``; while it records, every probed call is wrapped
   in a ``record_function`` range named after its call site, so the aten ops,
   CUDA runtime calls and memcpys inside it are charged to that line.
3. On CUDA, ``torch.cuda.set_sync_debug_mode("warn")``: each synchronising
   operation warns from inside the op, where the Python stack names its line
   (syncdebug.py).

Memory per step (stepmemory.py) and page faults (allocator.py) are sampled at each step.
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import Any

_t_import = time.perf_counter()
import torch  # noqa: E402  (this module is imported only in the profiled child)

#: ``import torch`` before the script started: a one-time cost the script's own
#: ``import torch`` would have paid (it is then a cache hit). The bootstrap imports it
#: first, under a cProfile of its own (ahead.py): then that import's time.
TORCH_IMPORT_S = time.perf_counter() - _t_import

from torchlint.profiler.ahead import AHEAD, profile_import  # noqa: E402

if "torch" in AHEAD:
    TORCH_IMPORT_S = AHEAD["torch"].seconds

from torchlint.profiler.allocator import FaultWatch  # noqa: E402
from torchlint.profiler.probes import RECORDER, install_probes, user_site  # noqa: E402
from torchlint.profiler.runend import RunEnd  # noqa: E402
from torchlint.profiler.stepmemory import StepMemory  # noqa: E402
from torchlint.profiler.syncdebug import SyncDebug  # noqa: E402
from torchlint.profiler.tracefile import trace_name  # noqa: E402
from torchlint.profiler.kineto import add_rank_metadata, kineto_quiet, step_quietly  # noqa: E402
from torchlint.profiler.tooltime import TOOL, as_probe, code_key, hide_from_dynamo, stack_keys  # noqa: E402

ROLLING_BUDGET = 0.1  # --repeat 0: torchlint's own work at most 10 % of the script's time


_MAX_STEP_TIMES = 10_000


class MaxStepsReached(BaseException):
    """Raised from the optimizer step hook to stop the script after ``--max-steps``.

    A ``BaseException`` so that the script's ``except Exception`` blocks let it through.
    """


def _dynamo_imported_here(init: Any, frame: Any) -> None:
    """The first optimizer's construction is where the script would have imported
    torch._dynamo (torchlint did, ahead): through torch's ``_disable_dynamo`` wrapper
    called by ``Optimizer.__init__``. profile.prof shows the import there (ahead.py)."""
    ahead = AHEAD.get("torch._dynamo")
    if ahead is None or ahead.path:
        return
    wrapper = _disable_dynamo_wrapper()
    ahead.path = ([wrapper] if wrapper else []) + [code_key(init.__code__)] + stack_keys(frame)


def _disable_dynamo_wrapper() -> tuple | None:
    """pstats' key of ``torch._compile._disable_dynamo``'s wrapper, which imports torch._dynamo."""
    try:
        from torch._compile import _disable_dynamo

        codes = [c for c in _disable_dynamo.__code__.co_consts if getattr(c, "co_name", None) == "inner"]
    except Exception:  # a torch without it: the import goes under Optimizer.__init__
        return None
    return code_key(codes[0]) if codes else None


# --------------------------------------------------------------------------
# steps, the torch.profiler window, CUDA sync debug
# --------------------------------------------------------------------------


class TorchRun(RunEnd):
    """Probes, step detection and the torch.profiler window for one child run."""

    def __init__(self, options: dict[str, Any], run_dir: Path, t0_ref: list[float]) -> None:
        self.options = options
        self.run_dir = run_dir
        self.rec = RECORDER
        self.t0_ref = t0_ref  # [perf_counter at script start], filled in by the bootstrap
        self.pid = os.getpid()  # a process the script forks steps no window and exports no trace
        self.steps = 0
        self.step_times: list[float] = []
        self.memory = StepMemory()  # per step: CUDA allocated bytes, else resident bytes
        self.last_step_at: float | None = None
        self.first_step_at: float | None = None
        self.primary: Any = None
        self.optimizers: set[str] = set()
        self.max_steps = options.get("max_steps")
        self.prof: Any = None
        self.prof_error: str | None = None
        self.cycles: list[dict[str, Any]] = []
        self.window_steps: list[int] = []
        self.cuda = False
        self.sync_debug = SyncDebug()
        self.warnings: list[str] = []
        self._ready_seen = 0
        self._window_done = False
        self.rolling = False
        self.rolling_budget = float(options.get("rolling_budget", ROLLING_BUDGET))
        self._tool_at_step = 0.0

        try:  # importing this lazily mid-run can break event names (profiling-facts.md)
            importlib.import_module("torch.profiler._cupti_monitor")
        except Exception:
            pass
        # The first optimizer construction imports torch._dynamo (torch.optim wraps its
        # methods in _disable_dynamo). Done here, out of the measured script, and
        # reported as the one-time cost it is, at that construction's line.
        self.dynamo_import_s = 0.0
        if "torch._dynamo" not in sys.modules:  # profiled for profile.prof (ahead.py)
            self.dynamo_import_s = profile_import("torch._dynamo").seconds
        from torchlint.profiler.compilewatch import WATCH

        self.compile = WATCH  # graph breaks, compilations; torchlint's frames hidden from dynamo
        self.compile.install()
        self.first_optimizer: tuple[Any, ...] | None = None
        self.optimizer_built = False
        self._watch_first_optimizer()
        from torchlint.profiler.evalwindow import EvalWindow

        self.eval_window = EvalWindow(self)

        self.probed = install_probes()
        from torch.optim.optimizer import register_optimizer_step_post_hook

        self._hook = register_optimizer_step_post_hook(hide_from_dynamo(self._on_step))
        from torchlint.profiler.modules import ModuleTimer

        self.modules = ModuleTimer()  # forward time per nn.Module, in the windows only
        self.modules.compiled = self.compile.compiled
        self.compile.on_first_compile.append(self.modules.block)
        from torchlint.profiler.linetrace import LineRanges

        self.lines = LineRanges(self.rec.labels)  # the user's line around each op, in the windows only
        self.faults = FaultWatch()  # page faults in the steady state (TLR09)

    def _watch_first_optimizer(self) -> None:
        """Note where the first optimizer is built, then step out of the way."""
        cls = torch.optim.Optimizer
        orig = cls.__init__
        run = self

        @functools.wraps(orig)
        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            cls.__init__ = orig  # once is enough
            run.optimizer_built = True
            if run.first_optimizer is None and threading.get_ident() == run.rec.main_ident:
                run.first_optimizer = user_site(sys._getframe(1))
                _dynamo_imported_here(orig, sys._getframe(1))
            orig(self, *args, **kwargs)

        cls.__init__ = as_probe(__init__, "Optimizer.__init__")  # profile.prof shows the constructor

    def one_time_costs(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = [
            {"what": "import torch", "seconds": TORCH_IMPORT_S, "path": None, "line": None,
             "cause": "the script's first `import torch` (done by torchlint before the script, so the script's own was free)"}
        ]
        if self.dynamo_import_s > 0 and self.optimizer_built:
            # only a script that built an optimizer would have paid it (one that failed
            # or stopped before does not)
            site = self.first_optimizer
            out.append({
                "what": "import torch._dynamo",
                "seconds": self.dynamo_import_s,
                "path": site[0] if site else None,
                "line": site[1] if site else None,
                "cause": "the first optimizer construction imports torch._dynamo (torch.optim runs its methods "
                "under _disable_dynamo); done by torchlint before the script",
            })
        return out

    # -- steps ---------------------------------------------------------------

    def _on_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if torch.compiler.is_compiling() or threading.get_ident() != self.rec.main_ident or os.getpid() != self.pid:
            return
        t_hook = TOOL.begin()
        try:
            self._step(optimizer)
        finally:  # all of the hook is torchlint's: profile.prof takes it out of its callers
            TOOL.end(t_hook, sys._getframe())

    def _step(self, optimizer: Any) -> None:
        self.optimizers.add(type(optimizer).__name__)
        if self.eval_window.recording:
            self.eval_window.stop("training resumed")
        primary = self.primary() if self.primary is not None else None
        if primary is None:
            import weakref

            try:
                self.primary = weakref.ref(optimizer)
            except TypeError:
                self.primary = lambda o=optimizer: o
        elif primary is not optimizer:
            return  # a second optimizer in the same iteration (GANs): one step per iteration
        now = time.perf_counter()
        if self.last_step_at is not None and len(self.step_times) < _MAX_STEP_TIMES:
            # torchlint's own work in the last hook (trace export) is not the step's
            self.step_times.append(max(now - self.last_step_at - (self.rec.tool_s - self._tool_at_step), 0.0))
        self._tool_at_step = self.rec.tool_s
        if self.first_step_at is None:
            self.first_step_at = now
            self.rec.stepping = True  # the sampler keeps the steps' time apart from the start-up's
        self.last_step_at = now
        self.steps += 1
        self.faults.on_step(self.steps, self.rec.worker_batch_bytes)
        rec = self.rec
        rec.busy = True
        t_tool = time.perf_counter()
        self.faults.tool_begin()
        self.memory.on_step()
        self.lines.stop()  # its ranges end before a window can: _update_phase opens them again
        try:
            if self.steps == 1:
                self._start_profiler()
            elif self.prof is not None and self.rolling and self._window_done:
                if rec.tool_s <= self.rolling_budget * (now - self.t0_ref[0]):
                    self._window_done = False
                    self.prof.stop()  # idle since its window: nothing to export
                    self._start_profiler()
            elif self.prof is not None:
                step_quietly(self.prof)
                self._update_phase()
        except Exception as exc:  # the profiler must never break the user's training
            self.prof_error = f"{type(exc).__name__}: {exc}"
            self.prof = None
            rec.labels_on = False
        finally:
            rec.busy = False
            rec.tool_s += time.perf_counter() - t_tool
            self.faults.tool_end()
        if self.max_steps and self.steps >= self.max_steps:
            raise MaxStepsReached(self.steps)

    def _start_profiler(self) -> None:
        self.cuda = self.memory.cuda = bool(torch.cuda.is_available() and torch.cuda.is_initialized())
        if self.cuda and not self.sync_debug.enabled:
            self.sync_debug.enable(self.warnings)
        if not self.options.get("torch_profiler", True):
            return
        from torch.profiler import ProfilerActivity, profile, schedule

        activities = [ProfilerActivity.CPU]
        if self.cuda:
            activities.append(ProfilerActivity.CUDA)
        self.activities = [a.name for a in activities]
        sched = self.options.get("schedule") or {}
        # --repeat 0: one window at a time, the next one only while torchlint's own work
        # (recording, exporting) stays under ROLLING_BUDGET of the script's time so far:
        # a long run with a long trace (an RNN) keeps its overhead bounded.
        self.rolling = int(sched.get("repeat", 1)) == 0
        # The trace names each iteration ProfilerStep#<n>: n is made the iteration's own
        # number (the one starting now is steps + 1), as the report counts them, and the
        # schedule is shifted to match.
        first = self.steps + 1
        base = schedule(
            wait=int(sched.get("wait", 1)),
            warmup=int(sched.get("warmup", 1)),
            active=int(sched.get("active", 5)),
            repeat=1 if self.rolling else int(sched.get("repeat", 1)),
        )
        with warnings.catch_warnings(), kineto_quiet():
            warnings.simplefilter("ignore")
            self.prof = profile(
                activities=activities,
                schedule=lambda n: base(max(n - first, 0)),
                on_trace_ready=self._on_trace_ready,
                record_shapes=bool(self.options.get("record_shapes")),
                profile_memory=bool(self.options.get("profile_memory")),
                with_stack=False,  # no Python tracer: cProfile keeps the 3.11 profile hook
            )
            add_rank_metadata(self.prof)
            self.prof.step_num = first
            self.prof.start()
        self._update_phase()

    def _update_phase(self) -> None:
        from torch.profiler import ProfilerAction

        action = getattr(self.prof, "current_action", None)
        recording = action in (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)
        self.rec.labels_on = recording
        if recording:
            self.modules.start()
            self.lines.start(sys._getframe())
        else:
            self.modules.stop()
            self.lines.stop()
        if recording:
            self.window_steps.append(self.steps + 1)  # the iteration that starts now

    # -- the trace window ------------------------------------------------------

    def _on_trace_ready(self, prof: Any) -> None:
        rec = self.rec
        was_busy = rec.busy
        rec.busy = True
        rec.labels_on = False
        self.modules.stop()
        self.lines.stop()
        t_tool = time.perf_counter()
        self._ready_seen += 1
        self._window_done = True
        n = self._ready_seen
        name = trace_name(f"window-{n}")
        cycle: dict[str, Any] = {
            "cycle": n,
            "steps": list(self.window_steps),
            "trace": None,
        }
        self.window_steps = []
        try:
            (self.run_dir / name).parent.mkdir(parents=True, exist_ok=True)
            prof.export_chrome_trace(str(self.run_dir / name))
            cycle["trace"] = name
        except Exception as exc:
            cycle["trace_error"] = f"{type(exc).__name__}: {exc}"
        # No prof.events() here: building torch's event tree costs seconds on a long
        # window (2.2 s for a 40k-event GRU window). The parent reads the trace file
        # instead (tracefile.py), off the script's critical path.
        cycle["tool_s"] = time.perf_counter() - t_tool
        self.cycles.append(cycle)
        rec.busy = was_busy
        if not was_busy:
            rec.tool_s += time.perf_counter() - t_tool

    # -- end of run ----------------------------------------------------------

    def script_ended(self) -> None:
        """The script's last line ran: the figures that run "to the end of the script" stop here,
        before torchlint writes profile.prof (grafting the imports into it faulted ~1,500 pages
        that TLR09 counted as the script's churn)."""
        self.faults.stop(self.rec.worker_batch_bytes)
