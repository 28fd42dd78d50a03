"""Parent side of the window server (:mod:`torchlint.profiler.measure`).

One warm child interpreter per experiment: it pays ``import torch`` once and
forks a fresh copy of itself for every window. Requests and answers are JSON
and protocol lines over pipes; a window's own output goes to a log file.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

from torchlint.profiler.run import _ROOT

_BOOT = "import sys; sys.path.append({root!r}); from torchlint.profiler.measure import serve; serve()"
PROTOCOL = "TLX"


class ServerError(Exception):
    """The window server could not start or stopped answering."""


class WindowServer:
    def __init__(self, work_dir: Path, *, start_timeout: float = 120.0) -> None:
        self.work_dir = work_dir
        self.log = work_dir / "windows.log"
        self._n = 0
        self.window_pid: int | None = None
        self._lines: queue.Queue[str | None] = queue.Queue()
        err = open(self.log, "ab")
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _BOOT.format(root=_ROOT)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                start_new_session=True,  # Ctrl-C is the parent's to handle
            )
        finally:
            err.close()
        threading.Thread(target=self._read, args=(self.proc.stdout,), daemon=True).start()
        try:
            self._expect("ready", start_timeout)
        except BaseException:  # stopped (Ctrl-C, SIGTERM) while it imports torch: it ends too
            self.close(force=True)
            raise

    def _read(self, stream: IO[str] | None) -> None:
        assert stream is not None
        for line in stream:
            if line.startswith(PROTOCOL + " started "):
                self.window_pid = int(line.split()[-1])
            elif line.startswith(PROTOCOL + " "):
                self._lines.put(line[len(PROTOCOL) + 1 :].strip())
        self._lines.put(None)

    def _expect(self, word: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._lines.get(timeout=max(deadline - time.monotonic(), 0.01))
            except queue.Empty:
                self.close()
                raise ServerError(f"the window server did not answer within {timeout:.0f} s") from None
            if line is None:
                raise ServerError(f"the window server exited (status {self.proc.wait()}); see {self.log}")
            if line.startswith(word) or line.startswith("timeout"):
                return line

    def window(
        self,
        script: str,
        args: list[str],
        cwd: str,
        *,
        max_steps: int | None,
        switches: list[dict[str, Any]] | None = None,
        overrides: dict[str, str] | None = None,
        timeout_s: float = 600.0,
    ) -> dict[str, Any]:
        """Run one window; returns the child's result, with ``timeout`` or ``crashed`` set
        when it has none."""
        self._n += 1
        result = self.work_dir / f"window-{self._n}.json"
        req = {
            "id": self._n,
            "script": script,
            "args": args,
            "cwd": cwd,
            "max_steps": max_steps,
            "switches": switches or [],
            "overrides": overrides or {},
            "result": str(result),
            "log": str(self.log),
            "timeout_s": timeout_s,
        }
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps(req) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise ServerError(f"the window server is gone: {exc}") from exc
        answer = self._expect("done", timeout_s + 30)
        if answer.startswith("timeout"):
            return {"timeout": True, "error": f"the window ran longer than {timeout_s:.0f} s"}
        try:
            data = json.loads(result.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {"crashed": True, "error": f"the window left no result; see {self.log}"}
        finally:
            try:
                os.unlink(result)
            except OSError:
                pass
        return data

    def close(self, *, force: bool = False) -> None:
        """Stop the server; ``force`` (an interrupted experiment) also kills the window
        in progress and its DataLoader workers (its own process group)."""
        if force:
            for group in (self.window_pid, self.proc.pid):
                if group is not None:
                    try:
                        os.killpg(group, signal.SIGKILL)
                    except OSError:
                        pass
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write("quit\n")
                self.proc.stdin.close()
                self.proc.wait(timeout=10)
            except Exception:
                self.proc.kill()
                self.proc.wait()
