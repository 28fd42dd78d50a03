"""A wall-clock line sampler for the main thread (no torch, no tracing hook).

cProfile is function-level and lumps a script's top-level code into one
``<module>`` entry; the sampler gives every user line its share of wall time.
It reads ``sys._current_frames()`` from a daemon thread every ``interval``
seconds and weights each sample by the time since the previous one, so a
late sample still accounts for the time it stood for. It uses no profiling
hook, so it cannot conflict with cProfile.
"""

from __future__ import annotations

import dis
import os
import sys
import threading
import time
from bisect import bisect_left
from typing import Any

from torchlint.profiler.session import Hotspot
from torchlint.profiler.usercode import is_user_file

#: Distinct stacks kept (stack -> seconds); later new stacks are folded into OTHER.
MAX_STACKS = 20_000
#: A run of library frames is one frame: torch's own, or any other library's.
TORCH_GROUP, LIB_GROUP = ("[torch]", 0, ""), ("[lib]", 0, "")
OTHER = (("[other stacks]", 0, ""),)
_TORCHLINT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_TORCH_PART = os.sep + "torch" + os.sep


def library_group(filename: str) -> tuple[str, int, str] | None:
    """The collapsed frame a library file belongs to; None for torchlint's own frames
    (the bootstrap and the step hook are not the script's)."""
    if filename.startswith(_TORCHLINT_DIR):
        # a probe wrapper stands for the torch call it wraps
        return TORCH_GROUP if filename.endswith("probes.py") else None
    return TORCH_GROUP if _TORCH_PART in filename else LIB_GROUP


#: Instructions after which CPython 3.11 checks its "eval breaker", the only places
#: where the main thread hands the GIL to this thread.
_CHECKS = frozenset({"RESUME", "JUMP_BACKWARD", "CALL", "CALL_FUNCTION_EX"})
#: Instructions that cannot run for long while holding the GIL.
_LIGHT = frozenset({
    "CACHE", "NOP", "RESUME", "PRECALL", "PUSH_NULL", "KW_NAMES", "LOAD_CONST", "LOAD_FAST",
    "LOAD_GLOBAL", "LOAD_NAME", "LOAD_DEREF", "LOAD_CLOSURE", "LOAD_METHOD", "LOAD_ATTR",
    "COPY", "SWAP", "MAKE_FUNCTION", "MAKE_CELL", "COPY_FREE_VARS", "EXTENDED_ARG",
    "JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT", "RETURN_VALUE", "POP_TOP",
    "STORE_FAST", "STORE_NAME", "STORE_GLOBAL", "STORE_DEREF", "POP_JUMP_FORWARD_IF_FALSE",
    "POP_JUMP_FORWARD_IF_TRUE", "POP_JUMP_BACKWARD_IF_FALSE", "POP_JUMP_BACKWARD_IF_TRUE",
    "POP_JUMP_FORWARD_IF_NONE", "POP_JUMP_FORWARD_IF_NOT_NONE", "BEFORE_WITH",
})
_code_table: dict[Any, tuple[list[int], list[int | None], list[str]]] = {}


def _instructions(code: Any) -> tuple[list[int], list[int | None], list[str]]:
    table = _code_table.get(code)
    if table is None:
        offsets, lines, names = [], [], []
        for ins in dis.get_instructions(code):
            offsets.append(ins.offset)
            lines.append(ins.positions.lineno if ins.positions else None)
            names.append(ins.opname)
        table = _code_table[code] = (offsets, lines, names)
    return table


def stalled_line(frame: Any) -> tuple[Any, int] | None:
    """Where the main thread most likely was while it held the GIL past a sample.

    The sampler can only look when the main thread hands over the GIL, at its next
    eval-breaker check. After a long instruction that keeps the GIL (``big * 4``,
    a C call that does not release it), that check is often on the *next* line:
    the stall would be charged there. Walk back from the check point to the last
    instruction that could have held the GIL that long, since the previous check
    point. A frame just entered (at RESUME) was called by the one below it, where
    the stall happened before the call. Returns (frame, line) or None to keep the
    sampled position.
    """
    offsets, lines, names = _instructions(frame.f_code)
    i = bisect_left(offsets, frame.f_lasti)
    if i >= len(offsets) or offsets[i] != frame.f_lasti:
        return None
    op = names[i]
    if op == "RESUME":
        caller = frame.f_back
        if caller is None:
            return None
        offsets, lines, names = _instructions(caller.f_code)
        i = bisect_left(offsets, caller.f_lasti)
        if i >= len(offsets) or offsets[i] != caller.f_lasti:
            return None
        frame, op = caller, "CALL in progress"
    if op not in _CHECKS and op != "CALL in progress":
        return None
    j = i - 1
    while j >= 0 and names[j] not in _CHECKS:
        if names[j] not in _LIGHT and lines[j] is not None:
            return frame, lines[j]
        j -= 1
    if op in ("CALL", "CALL_FUNCTION_EX") and lines[i] is not None:
        return frame, lines[i]  # the call itself held the GIL (``sorted(big)``)
    return None


class LineSampler:
    def __init__(self, recorder: Any | None = None, interval: float = 0.005) -> None:
        self.interval = interval
        self.recorder = recorder  # torchprof.Recorder, for its busy/in_fetch flags
        self.samples = 0
        self.sampled_s = 0.0
        self.tool_s = 0.0
        self.moved = 0  # late samples charged to the line that held the GIL
        # (file, line, function) -> [self_s, total_s, samples, dataloader_s, step_self_s]
        self.lines: dict[tuple[str, int, str], list[float]] = {}
        # outermost-first stacks of user frames (file, line, function), each run of
        # library frames collapsed into one TORCH_GROUP/LIB_GROUP frame -> seconds
        self.stacks: dict[tuple[tuple[str, int, str], ...], float] = {}
        self._group: dict[str, tuple[str, int, str] | None] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._target = threading.main_thread().ident
        self._user: dict[str, bool] = {}

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="torchlint-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)

    def _run(self) -> None:
        last = time.perf_counter()
        # Waiting longer than this for the GIL means the main thread held it through
        # an instruction with no eval-breaker check (see stalled_line).
        late_after = 2 * sys.getswitchinterval()
        while True:
            if self._stop.wait(self.interval):
                break
            now = time.perf_counter()
            dt = now - last
            try:
                self._sample(dt, dt - self.interval > late_after)
                # The main thread can also take the GIL back mid-sample and hold it
                # through a stall. It is then frozen where it handed the GIL over until
                # this thread lets go, so look again at once: that is the stall's line.
                after = time.perf_counter()
                if after - now > late_after:
                    self._sample(after - now, True)
                    now = after
            except Exception:  # a sampler must never take the run down
                pass
            last = now

    def _sample(self, dt: float, late: bool = False) -> None:
        frame = sys._current_frames().get(self._target)
        if frame is None:
            return
        rec = self.recorder
        if rec is not None and rec.busy:
            self.tool_s += dt
            return
        in_fetch = rec is not None and rec.in_fetch > 0
        stepping = rec is not None and rec.stepping
        seen: set[tuple[str, int, str]] = set()
        innermost = True
        user_cache = self._user
        group_cache = self._group
        chain: list[tuple[str, int, str]] = []  # innermost first
        depth = 0
        if late:
            try:
                moved = stalled_line(frame)
            except Exception:  # reading bytecode must not cost the sample itself
                moved = None
            if moved is not None:
                mframe, mline = moved
                filename = mframe.f_code.co_filename
                user = user_cache.get(filename)
                if user is None:
                    user = user_cache[filename] = is_user_file(filename)
                if user:  # charge the stall to that line; the stack above it as usual
                    key = (filename, mline, mframe.f_code.co_name)
                    row = self.lines.setdefault(key, [0.0, 0.0, 0, 0.0, 0.0])
                    row[0] += dt
                    row[1] += dt
                    row[2] += 1
                    if stepping:
                        row[4] += dt
                    if in_fetch:
                        row[3] += dt
                    seen.add(key)
                    chain.append(key)
                    innermost = False
                    self.moved += 1
                    frame = mframe.f_back  # the frames above it had not started yet
        while frame is not None and depth < 256:
            code = frame.f_code
            filename = code.co_filename
            user = user_cache.get(filename)
            if user is None:
                user = user_cache[filename] = is_user_file(filename)
            if user:
                key = (filename, frame.f_lineno, code.co_name)
                row = self.lines.get(key)
                if row is None:
                    row = self.lines[key] = [0.0, 0.0, 0, 0.0, 0.0]
                if innermost:
                    row[0] += dt
                    row[2] += 1
                    if stepping:
                        row[4] += dt
                    innermost = False
                if key not in seen:
                    row[1] += dt
                    if in_fetch:
                        row[3] += dt
                    seen.add(key)
                chain.append(key)
            else:
                if filename in group_cache:
                    group = group_cache[filename]
                else:
                    group = group_cache[filename] = library_group(filename)
                if group is not None and (not chain or chain[-1] is not group):
                    chain.append(group)
            frame = frame.f_back
            depth += 1
        self._add_stack(chain, dt)
        self.samples += 1
        self.sampled_s += dt

    def _add_stack(self, chain: list[tuple[str, int, str]], dt: float) -> None:
        """Count ``dt`` for the sampled stack; the library frames that called the
        script (the interpreter, torchlint's bootstrap) are dropped."""
        while len(chain) > 1 and (chain[-1] is TORCH_GROUP or chain[-1] is LIB_GROUP):
            chain.pop()
        if not chain:
            return
        stack = tuple(reversed(chain))
        stacks = self.stacks
        if stack in stacks:
            stacks[stack] += dt
        elif len(stacks) < MAX_STACKS:
            stacks[stack] = dt
        else:
            stacks[OTHER] = stacks.get(OTHER, 0.0) + dt

    def hotspots(self) -> list[Hotspot]:
        return [
            Hotspot(
                source="sampler",
                path=path,
                line=line,
                granularity="line",
                function=func,
                op=None,
                self_s=row[0],
                total_s=row[1],
                calls=0,
                samples=int(row[2]),
                dataloader_s=row[3],
                step_self_s=row[4],
            )
            for (path, line, func), row in self.lines.items()
        ]
