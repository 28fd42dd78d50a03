"""Parent side of a profiled run: check the script, make the run directory,
start the child interpreter, pass its output through, and return its status.

The child is the same interpreter (``sys.executable``) running
:mod:`torchlint.profiler.bootstrap`; it isolates the user's ``sys.exit``,
crashes and CUDA context from torchlint, and the parent only reads the files
it leaves in the run directory.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

OUTPUT_LOG = "script-output.log"
# The torchlint checkout (or site-packages) directory, so the child can import us
# even when torchlint runs from a source tree that is not installed.
_ROOT = str(Path(__file__).resolve().parents[2])
_BOOT = (
    "import sys; sys.path.append({root!r}); "
    "from torchlint.profiler.bootstrap import main; main()"
)


class ScriptError(Exception):
    """The script cannot be profiled (missing, not a file, not Python)."""


@dataclass
class RunOptions:
    wait: int = 1
    warmup: int = 1
    active: int = 5
    repeat: int = 1
    max_steps: int | None = None
    record_shapes: bool = False
    profile_memory: bool = False
    torch_profiler: bool = True
    sample_interval: float = 0.005
    extra: dict[str, Any] = field(default_factory=dict)

    def child_options(self, run_dir: Path) -> dict[str, Any]:
        return {
            "run_dir": str(run_dir),
            "schedule": {"wait": self.wait, "warmup": self.warmup, "active": self.active, "repeat": self.repeat},
            "max_steps": self.max_steps,
            "record_shapes": self.record_shapes,
            "profile_memory": self.profile_memory,
            "torch_profiler": self.torch_profiler,
            "sample_interval": self.sample_interval,
            **self.extra,
        }


def check_script(script: str) -> Path:
    """The script as a path, or :class:`ScriptError` saying why it cannot run."""
    path = Path(script)
    if not path.exists():
        raise ScriptError(f"{script}: no such file")
    if not path.is_file():
        raise ScriptError(f"{script}: not a file")
    try:
        source = path.read_bytes()
    except OSError as exc:
        raise ScriptError(f"{script}: cannot read it: {exc.strerror}") from exc
    try:
        compile(source, str(path), "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as exc:
        if isinstance(exc, SyntaxError) and exc.lineno is not None:
            detail = f"line {exc.lineno}: {exc.msg}"
        else:
            detail = exc.msg if isinstance(exc, SyntaxError) else str(exc)
        raise ScriptError(f"{script}: not a Python script ({detail})") from exc
    return path


def make_run_dir(script: Path, out: Path | None = None, root: Path | None = None) -> Path:
    """``out`` if given, else ``torchlint-profile/<script>-<time>/`` (unique)."""
    if out is not None:
        out = out.resolve()
        out.mkdir(parents=True, exist_ok=True)
        return out
    base = (root or Path.cwd()) / "torchlint-profile"
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    name = f"{script.stem}-{stamp}"
    candidate = base / name
    n = 1
    while True:
        try:
            candidate.mkdir(parents=True, exist_ok=False)
            return candidate
        except FileExistsError:
            n += 1
            candidate = base / f"{name}-{n}"


def child_command(script: str, args: list[str], options: dict[str, Any]) -> list[str]:
    return [sys.executable, "-c", _BOOT.format(root=_ROOT), json.dumps(options), script, *args]


def _pump(src: IO[bytes], sinks: list[IO[bytes]]) -> None:
    while True:
        chunk = src.read1(65536) if hasattr(src, "read1") else src.read(65536)
        if not chunk:
            break
        for sink in sinks:
            try:
                sink.write(chunk)
                sink.flush()
            except Exception:
                pass


def run_child(
    script: str,
    args: list[str],
    run_dir: Path,
    options: RunOptions,
    *,
    stdout_to_stderr: bool = False,
) -> int:
    """Run the script in a child interpreter; returns its exit status.

    With ``stdout_to_stderr`` the script's stdout and stderr both go to our
    stderr and to ``OUTPUT_LOG`` in the run directory, so that our stdout can
    carry nothing but the JSON report. Otherwise the child shares our
    terminal. Ctrl-C reaches the child (same process group); the parent keeps
    waiting so that the child can write its profile (see on_sigint).
    """
    cmd = child_command(script, args, options.child_options(run_dir))
    env = dict(os.environ)
    if stdout_to_stderr:  # keep the script's prints in order with its warnings
        env.setdefault("PYTHONUNBUFFERED", "1")
    log: IO[bytes] | None = None
    threads: list[threading.Thread] = []
    if stdout_to_stderr:
        log = open(run_dir / OUTPUT_LOG, "wb")
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        err = sys.stderr.buffer if hasattr(sys.stderr, "buffer") else None
        sinks = [s for s in (err, log) if s is not None]
        for src in (proc.stdout, proc.stderr):
            t = threading.Thread(target=_pump, args=(src, sinks), daemon=True)
            t.start()
            threads.append(t)
    else:
        proc = subprocess.Popen(cmd, env=env)

    interrupts = 0
    previous = None
    if threading.current_thread() is threading.main_thread():

        def on_sigint(signum: int, frame: Any) -> None:
            nonlocal interrupts
            interrupts += 1
            # The first Ctrl-C from a terminal reaches the child too (same process
            # group): let it unwind and write its profile. A second one is
            # forwarded (for a SIGINT sent to us alone); a third kills it.
            if proc.poll() is None and interrupts >= 2:
                try:
                    proc.kill() if interrupts >= 3 else proc.send_signal(signal.SIGINT)
                except ProcessLookupError:
                    pass

        previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        while True:
            try:
                status = proc.wait()
                break
            except KeyboardInterrupt:  # pragma: no cover - handler installed above
                continue
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
        for t in threads:
            t.join(timeout=5)
        if log is not None:
            log.close()
    if status < 0:  # killed by a signal: report it the way a shell would
        status = 128 - status
    return status
