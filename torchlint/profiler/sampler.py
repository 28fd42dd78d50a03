"""A wall-clock line sampler for the main thread (no torch, no tracing hook).

cProfile is function-level and lumps a script's top-level code into one
``<module>`` entry; the sampler gives every user line its share of wall time.
It reads ``sys._current_frames()`` from a daemon thread every ``interval``
seconds and weights each sample by the time since the previous one, so a
late sample still accounts for the time it stood for. It uses no profiling
hook, so it cannot conflict with cProfile.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

from torchlint.profiler.session import Hotspot
from torchlint.profiler.usercode import is_user_file


class LineSampler:
    def __init__(self, recorder: Any | None = None, interval: float = 0.005) -> None:
        self.interval = interval
        self.recorder = recorder  # torchprof.Recorder, for its busy/in_fetch flags
        self.samples = 0
        self.sampled_s = 0.0
        self.tool_s = 0.0
        # (file, line, function) -> [self_s, total_s, samples, dataloader_s]
        self.lines: dict[tuple[str, int, str], list[float]] = {}
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
        while not self._stop.wait(self.interval):
            now = time.perf_counter()
            dt = now - last
            last = now
            try:
                self._sample(dt)
            except Exception:  # a sampler must never take the run down
                pass

    def _sample(self, dt: float) -> None:
        frame = sys._current_frames().get(self._target)
        if frame is None:
            return
        rec = self.recorder
        if rec is not None and rec.busy:
            self.tool_s += dt
            return
        in_fetch = rec is not None and rec.in_fetch > 0
        seen: set[tuple[str, int, str]] = set()
        innermost = True
        user_cache = self._user
        depth = 0
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
                    row = self.lines[key] = [0.0, 0.0, 0, 0.0]
                if innermost:
                    row[0] += dt
                    row[2] += 1
                    innermost = False
                if key not in seen:
                    row[1] += dt
                    if in_fetch:
                        row[3] += dt
                    seen.add(key)
            frame = frame.f_back
            depth += 1
        self.samples += 1
        self.sampled_s += dt

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
            )
            for (path, line, func), row in self.lines.items()
        ]
