"""The user's source line around every torch op of a torch.profiler window.

torch's public API does not say which line launched an op: ``FunctionEvent.stack``
needs the profiler's Python tracer, which takes the profiling hook cProfile holds
(torchprof.py), and gives the enclosing function's ``def`` line anyway. The *trace*
hook (``sys.settrace``) is a different one, free unless a debugger or coverage runs.
While a window records, a trace function marks each line of the user's code it runs
with a ``record_function`` range, ``torchlint line <file>:<line>``: every op launched
while the line runs, from torch's Python code as well, lies inside the range of the
innermost user line, and tracefile.py charges it there. Backward ops are not charged
by nesting (they run under ``loss.backward()``): each autograd node carries the
sequence number of the forward op that created it, and tracefile.py charges it to
that op's line.

Cost, only while a window records: a call to the trace function for each Python
function called (frames outside the user's files get no line events), and for each
line of the user's code run, one range closed and one opened (about 7 µs here).
Imported only in the profiled child.
"""

from __future__ import annotations

import os
import sys
from types import FrameType
from typing import Any

from torchlint.profiler.usercode import is_user_file

LINE_PREFIX = "torchlint line "


class LineRanges:
    """Opens and closes the line ranges; one instance for the child's main thread."""

    def __init__(self, labels: dict[str, tuple[str, int, str, str]]) -> None:
        from torch.autograd.profiler import record_function

        self._record_function = record_function
        self.labels = labels  # shared with the probes' ranges: name -> (file, line, function, "line")
        self._names: dict[tuple[Any, int], str] = {}
        self._user: dict[Any, bool] = {}
        self._open: list[tuple[FrameType, Any]] = []  # (frame, its current range), innermost last
        self.active = False
        self.refused: str | None = None  # why lines are not recorded (a trace function of the script's)
        self.lines_seen = 0

    # -- the trace function -----------------------------------------------------

    def _is_user(self, code: Any) -> bool:
        user = self._user.get(code)
        if user is None:
            user = self._user[code] = is_user_file(code.co_filename)
        return user

    def _global(self, frame: FrameType, event: str, arg: Any) -> Any:
        if event == "call" and self._is_user(frame.f_code):
            return self._local
        return None

    def _local(self, frame: FrameType, event: str, arg: Any) -> Any:
        if event == "line":
            self._close_to(frame)
            self._enter(frame)
        elif event == "return":
            self._close_to(frame)
        return self._local

    # -- the ranges -------------------------------------------------------------

    def _name(self, frame: FrameType) -> str:
        code, line = frame.f_code, frame.f_lineno
        name = self._names.get((code, line))
        if name is None:
            path = code.co_filename
            name = f"{LINE_PREFIX}{os.path.basename(path)}:{line}"
            if name in self.labels and self.labels[name][0] != path:  # same basename elsewhere
                name = f"{LINE_PREFIX}{path}:{line}"
            self.labels[name] = (path, line, code.co_name, "line")
            self._names[(code, line)] = name
        return name

    def _enter(self, frame: FrameType) -> None:
        try:
            rf = self._record_function(self._name(frame))
            rf.__enter__()
        except Exception:  # never break the script for a range
            return
        self._open.append((frame, rf))
        self.lines_seen += 1

    def _close_to(self, frame: FrameType) -> None:
        """Close ``frame``'s current range, and any opened inside it that is still open
        (a callee that left without a return event)."""
        open_ = self._open
        if open_ and open_[-1][0] is frame:
            _exit(open_.pop()[1])
            return
        if not any(f is frame for f, _ in open_):
            return
        while open_:
            f, rf = open_.pop()
            _exit(rf)
            if f is frame:
                break

    def start(self, frame: FrameType | None) -> None:
        """Begin marking lines: the user's frames already running (``frame`` and above,
        outermost first) get their current line's range and line events from now on."""
        if self.active:
            return
        if sys.gettrace() is not None:
            self.refused = "a trace function of the script's (a debugger, coverage) was active"
            return
        stack = []
        f = frame
        while f is not None:
            if self._is_user(f.f_code):
                stack.append(f)
            f = f.f_back
        for f in reversed(stack):
            f.f_trace = self._local
            self._enter(f)
        sys.settrace(self._global)
        self.active = True

    def stop(self) -> None:
        """Stop marking lines; every open range is closed, innermost first."""
        if not self.active:
            return
        if sys.gettrace() == self._global:  # a trace function the script set since stays (bound methods: ==)
            sys.settrace(None)
        self.active = False
        while self._open:
            f, rf = self._open.pop()
            _exit(rf)
            f.f_trace = None


def _exit(rf: Any) -> None:
    try:
        rf.__exit__(None, None, None)
    except Exception:
        pass
