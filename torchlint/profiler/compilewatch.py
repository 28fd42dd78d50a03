"""torch.compile in the profiled child: graph breaks, compilations, and torchlint kept out of them.

The one module that reads torch._dynamo's and torch._logging's facilities (TLR14, TLR15;
docs/profiling.md, "torch.compile"). Each source below is checked by
tests/test_compile_watch.py, so that a torch that renames or drops one fails there,
loudly, and not as an empty report:

- **graph breaks**: the ``graph_breaks`` artifact logger (what ``TORCH_LOGS=graph_breaks``
  prints). Dynamo logs every graph break it meets while it compiles a frame, as
  ``Graph break in user code at FILE:LINE`` + ``Graph Break Reason: ...`` + the user
  code traceback (a repeat of the same break and place is logged without the traceback).
  A :class:`logging.Handler` is attached to it at DEBUG, with propagation off unless the
  user asked for these logs themselves, so nothing more is printed.
- **compilations**: ``torch._dynamo.utils.get_compilation_metrics()``, one record per frame
  compiled (and one per backward graph): the frame's code, the guard that failed
  (``recompile_reason``) for a recompilation, the time spent (dynamo's whole frame, the
  backend's share, inductor's), the stack at the compile (the user line that called the
  compiled function), and a failure such as the recompile limit. Its deque keeps 64
  records by default: the limit is raised at the start.
- **the instruments stay invisible to dynamo**: every wrapper torchlint installs (call
  probes, pattern probes, hooks) checks ``torch.compiler.is_compiling()`` first, so that
  dynamo traces straight through it to the wrapped torch function, and its code object is
  marked for dynamo's frame evaluation as one to run, not compile
  (``torch._dynamo.eval_frame.skip_code``: a frame strategy only; inlining still traces
  through, unlike ``torch._dynamo.skip``/``disable``, which would put a graph break at every
  probed call). Without that, a probe run from eager code between two graphs was itself
  compiled, and added its own graph break and compile to the user's.
- **global module hooks are not installed once the script compiles** (modules.py): dynamo
  traces them into the compiled module's graph (torch warns that they fire twice) and, on
  torch 2.13, a recompilation under them failed with "already tracked for mutation".

Imported only in the profiled child, after torch._dynamo (torchprof.py).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable
from typing import Any

import torch

from torchlint.profiler import tooltime
from torchlint.profiler.usercode import is_user_file

#: ``TORCHLINT_COMPILE_WATCH=0``: no graph breaks or compilations collected (torchlint's frames are
#: still hidden from dynamo): the overhead benchmark's run without the collection
OFF_SWITCH = "TORCHLINT_COMPILE_WATCH"
#: Compilation records kept (the deque's default is 64: a long run recompiling would lose them).
METRICS_LIMIT = 100_000
#: Distinct graph breaks kept (by reason and place); more are counted, not kept.
MAX_BREAKS = 500
MAX_COMPILES = 5000
MAX_TEXT = 2000

_AT = re.compile(r"Graph break (?:\(user stack suppressed due to duplicate graph break\) )?in user code at (?P<file>.+?):(?P<line>\d+)\s*$", re.M)
_REASON = "Graph Break Reason:"
_TRACEBACK = "User code traceback:"
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>.+)$', re.M)
#: ``stack_trace`` of a compilation record: one string per frame, outermost first
_STACK_ENTRY = re.compile(r"Line: (?P<line>\d+), Name: (?P<func>.*), Filename: (?P<file>.+)$")


def skip_frames(code: Any) -> None:
    """Mark one of torchlint's code objects as a frame dynamo runs and never compiles."""
    from torch._dynamo.eval_frame import skip_code

    skip_code(code)


def graph_break_loggers() -> list[logging.Logger]:
    """The ``graph_breaks`` artifact loggers torch registered (dynamo's symbolic_convert)."""
    from torch._logging import _internal

    names = [q for q in _internal.log_registry.get_artifact_log_qnames() if q.endswith(".__graph_breaks")]
    return [logging.getLogger(q) for q in sorted(names)]


def _compile_id() -> str | None:
    try:
        cid = torch._guards.CompileContext.current_compile_id()
    except Exception:
        return None
    return str(cid) if cid is not None else None


def parse_graph_break(message: str) -> dict[str, Any] | None:
    """``{file, line, reason, frames}`` of one ``graph_breaks`` log message, or None."""
    at = _AT.search(message)
    if at is None:
        return None
    rest = message[at.end():]
    reason, _, traceback = rest.partition(_TRACEBACK)
    reason = reason.strip()
    if reason.startswith(_REASON):
        reason = reason[len(_REASON):].strip()
    frames = [[m.group("file"), int(m.group("line")), m.group("func").strip()] for m in _FRAME.finditer(traceback)]
    return {"file": at.group("file"), "line": int(at.group("line")), "reason": reason[:MAX_TEXT], "frames": frames}


def innermost_user(frames: list[list[Any]], fallback: tuple[str, int]) -> tuple[str, int, str]:
    """The innermost frame in the user's own files (not torch's, not torchlint's)."""
    for file, line, func in reversed(frames):
        if is_user_file(file):
            return file, int(line), func
    return fallback[0], fallback[1], ""


class _BreakHandler(logging.Handler):
    def __init__(self, watch: CompileWatch) -> None:
        super().__init__(logging.DEBUG)
        self.watch = watch

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.watch.on_graph_break(record.getMessage())
        except Exception as exc:  # a message of another shape: noted, never raised into dynamo
            self.watch.errors.append(f"graph break record: {type(exc).__name__}: {exc}")


class CompileWatch:
    """Graph breaks as dynamo logs them, compilations from torch's records at the end."""

    def __init__(self) -> None:
        self.breaks: dict[tuple[str, str, int], dict[str, Any]] = {}
        self.dropped_breaks = 0
        self.errors: list[str] = []
        self.loggers: list[tuple[logging.Logger, int, bool]] = []  # (logger, its level, its propagate)
        self.handler = _BreakHandler(self)
        self.compiles_seen = 0
        self.on_first_compile: list[Callable[[], None]] = []
        self.disabled = False

    # -- set-up ----------------------------------------------------------------

    def install(self) -> None:
        tooltime.set_frame_skipper(skip_frames, self.errors)
        try:
            from torch._dynamo import callback_handler

            callback_handler.register_start_callback(self._compile_started)
        except Exception as exc:
            self.errors.append(f"no compile-start callback: {type(exc).__name__}: {exc}")
        if os.environ.get(OFF_SWITCH) == "0":  # benchmarks/profile_overhead.py: the run without the collection
            self.disabled = True
            return
        try:
            from torch._dynamo import utils

            utils.set_compilation_metrics_limit(max(METRICS_LIMIT, utils.DEFAULT_COMPILATION_METRICS_LIMIT))
        except Exception as exc:
            self.errors.append(f"compilation records keep torch's default limit: {type(exc).__name__}: {exc}")
        try:
            for log in graph_break_loggers():
                self.loggers.append((log, log.level, log.propagate))
                if not log.isEnabledFor(logging.DEBUG):  # the user did not ask for them: print nothing more
                    log.setLevel(logging.DEBUG)
                    log.propagate = False
                log.addHandler(self.handler)
            if not self.loggers:
                self.errors.append("no graph_breaks logger is registered in this torch: graph breaks are not recorded")
        except Exception as exc:
            self.errors.append(f"graph breaks are not recorded: {type(exc).__name__}: {exc}")

    def _compile_started(self, *args: Any) -> None:
        self.compiles_seen += 1
        if self.compiles_seen == 1:
            for fn in self.on_first_compile:
                try:
                    fn()
                except Exception as exc:
                    self.errors.append(f"at the first compile: {type(exc).__name__}: {exc}")

    def compiled(self) -> bool:
        """Whether dynamo has compiled a frame of this run (the callback, or its records)."""
        if self.compiles_seen:
            return True
        try:
            from torch._dynamo.utils import counters

            return bool(counters["frames"]["total"])
        except Exception:
            return False

    # -- graph breaks ----------------------------------------------------------------

    def on_graph_break(self, message: str) -> None:
        parsed = parse_graph_break(message)
        if parsed is None:
            self.errors.append(f"a graph_breaks record of an unknown shape: {message[:200]!r}")
            return
        at = (parsed["file"], parsed["line"])
        reason = parsed["reason"]
        frames = parsed["frames"]
        if not frames:  # a repeat: dynamo left its traceback out; the first one had it
            first = next((b for b in self.breaks.values() if b["reason"] == reason and (b["at"][0], b["at"][1]) == at), None)
            frames = first["frames"] if first else []
        user = innermost_user(frames, at)
        key = (reason, user[0], user[1])
        entry = self.breaks.get(key)
        if entry is None:
            if len(self.breaks) >= MAX_BREAKS:
                self.dropped_breaks += 1
                return
            entry = self.breaks[key] = {
                "reason": reason,
                "path": user[0],
                "line": user[1],
                "function": user[2],
                "at": [at[0], at[1]],
                "frames": frames[-12:],  # [file, line, function], outermost first
                "compiles": 0,
                "compile_ids": [],
            }
        entry["compiles"] += 1
        cid = _compile_id()
        if cid and cid not in entry["compile_ids"] and len(entry["compile_ids"]) < 50:
            entry["compile_ids"].append(cid)

    # -- end of run --------------------------------------------------------------------

    def finish(self) -> None:
        detached = [log.name for log, _, _ in self.loggers if self.handler not in log.handlers]
        if detached:  # torch._logging.set_logs() in the script resets torch's loggers
            self.errors.append("the script reset torch's logging (torch._logging.set_logs): graph breaks after that "
                               "were not recorded")
        for log, level, propagate in self.loggers:
            try:
                log.removeHandler(self.handler)
                log.setLevel(level)
                log.propagate = propagate
            except Exception:
                pass
        self.loggers = []
        try:
            from torch._dynamo import callback_handler

            callback_handler.remove_start_callback(self._compile_started)
        except Exception:  # not registered (a torch without it), or torch._dynamo.reset() cleared it
            pass

    def summary(self) -> dict[str, Any]:
        if self.disabled:
            return {"disabled": f"{OFF_SWITCH}=0"}
        records, error = compilation_records()
        if error:
            self.errors.append(error)
        return {
            "used": bool(records) or bool(self.breaks) or self.compiled(),
            "compiles": records[:MAX_COMPILES],
            "compiles_dropped": max(len(records) - MAX_COMPILES, 0),
            "graph_breaks": list(self.breaks.values()),
            "graph_breaks_dropped": self.dropped_breaks,
            "errors": self.errors[:20],
        }


def _call_site(stack: list[str] | None, code_file: str | None, code_name: str | None) -> tuple[str, int, str] | None:
    """The innermost user frame of a compilation's stack that is not the compiled frame:
    the line that called the compiled function."""
    for entry in reversed(stack or []):
        m = _STACK_ENTRY.search(str(entry))
        if m is None:
            continue
        file = m.group("file").strip()
        if file == code_file and m.group("func").strip() == code_name:
            continue
        if is_user_file(file):
            return file, int(m.group("line")), m.group("func").strip()
    return None


def _seconds(us: Any) -> float:
    return float(us) / 1e6 if isinstance(us, (int, float)) else 0.0


def compilation_records() -> tuple[list[dict[str, Any]], str | None]:
    """torch's compilation records of this run as plain data, oldest first."""
    try:
        from torch._dynamo.utils import get_compilation_metrics

        metrics = get_compilation_metrics()
    except Exception as exc:
        return [], f"no compilation records: {type(exc).__name__}: {exc}"
    out = []
    for m in metrics:
        get = lambda name: getattr(m, name, None)  # noqa: E731  (fields differ between torch versions)
        forward = get("is_forward") is not False
        seconds = (_seconds(get("dynamo_cumulative_compile_time_us")) if forward
                   else _seconds(get("backward_cumulative_compile_time_us")))
        if not seconds:
            seconds = _seconds(get("duration_us")) or float(get("entire_frame_compile_time_s") or 0.0)
        site = _call_site(get("stack_trace"), get("co_filename"), get("co_name"))
        fail = get("fail_reason")
        out.append({
            "compile_id": get("compile_id"),
            "frame": get("co_name"),
            "path": get("co_filename"),
            "line": get("co_firstlineno"),
            "user_code": bool(get("co_filename")) and is_user_file(str(get("co_filename"))),
            "called_at": list(site) if site else None,
            "forward": forward,
            "recompile_reason": (str(get("recompile_reason"))[:MAX_TEXT] if get("recompile_reason") else None),
            "seconds": seconds,
            "backend_s": _seconds(get("aot_autograd_cumulative_compile_time_us")),
            "inductor_s": _seconds(get("inductor_cumulative_compile_time_us")),
            "logging_s": _seconds(get("structured_logging_overhead_us")),
            "graph_ops": get("graph_op_count"),
            "fail_type": get("fail_type"),
            "fail_reason": str(fail)[:MAX_TEXT] if fail else None,
            "started_at": get("start_time_us"),
        })
    return out, None


WATCH = CompileWatch()
