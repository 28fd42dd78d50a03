"""snakeviz as an optional viewer subprocess, bound to 127.0.0.1. Never imported."""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

HOST = "127.0.0.1"
DEFAULT_PORT = 8080


def executable() -> list[str] | None:
    """How to start snakeviz with this interpreter's installation, or None."""
    local = Path(sys.executable).parent / "snakeviz"
    if local.is_file() and os.access(local, os.X_OK):
        return [str(local)]
    if importlib.util.find_spec("snakeviz") is not None:
        return [sys.executable, "-m", "snakeviz"]
    found = shutil.which("snakeviz")
    return [found] if found else None


def command(prof: Path, *, port: int = DEFAULT_PORT, server: bool = True) -> list[str]:
    """The snakeviz command line for ``prof`` (``-s``: serve only, open no browser)."""
    exe = executable() or ["snakeviz"]
    cmd = [*exe, "-H", HOST, "-p", str(port)]
    if server:
        cmd.append("-s")
    return [*cmd, str(Path(prof).resolve())]


def shell_command(cmd: list[str]) -> str:
    return " ".join(shlex.quote(c) for c in cmd)


def url_for(prof: Path, port: int) -> str:
    return f"http://{HOST}:{port}/snakeviz/{urllib.parse.quote(str(Path(prof).resolve()), safe='')}"


def headless_reason(env: dict[str, str] | None = None, platform: str | None = None) -> str | None:
    """Why no browser can be opened here (no display, SSH session, CI), or None."""
    env = dict(os.environ) if env is None else env
    platform = platform or sys.platform
    if env.get("CI"):
        return "CI"
    if env.get("SSH_CONNECTION") or env.get("SSH_TTY") or env.get("SSH_CLIENT"):
        return "SSH session"
    if platform.startswith("linux") or "bsd" in platform:
        if not (env.get("DISPLAY") or env.get("WAYLAND_DISPLAY")):
            return "no display"
    return None


def free_port(start: int = DEFAULT_PORT) -> int:
    """A free TCP port on 127.0.0.1 (``start`` if free, else one the OS picks)."""
    for candidate in (start, 0):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((HOST, candidate))
            except OSError:
                continue
            return int(s.getsockname()[1])
    raise OSError("no free port on 127.0.0.1")


@dataclass
class Server:
    """A running snakeviz subprocess."""

    process: subprocess.Popen[bytes]
    port: int
    prof: Path

    @property
    def url(self) -> str:
        return url_for(self.prof, self.port)

    @property
    def pid(self) -> int:
        return self.process.pid

    def wait_ready(self, timeout: float = 15.0) -> bool:
        """Poll until the page answers 200; False after ``timeout`` or if snakeviz exited."""
        # here, not at the top: every `profile` imports this module for the command it prints,
        # and urllib.request (http.client, email) is ~60 ms of CPU that only a launch needs
        import urllib.error
        import urllib.request

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(self.url, timeout=2) as r:
                    if r.status == 200:
                        return True
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.1)
        return False

    def stop(self, timeout: float = 5.0) -> None:
        _LAUNCHED.pop(self.process.pid, None)
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=timeout)


_LAUNCHED: dict[int, Server] = {}  # the servers this process started, by pid


def state_file() -> Path:
    """Where the server a ``profile`` run left serving is recorded (one per user)."""
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return Path(tempfile.gettempdir()) / f"torchlint-snakeviz-{uid}.json"


def _is_snakeviz(pid: int) -> bool:
    """Whether ``pid`` runs snakeviz (never signal a pid that was reused by something else)."""
    try:
        return b"snakeviz" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        try:
            os.kill(pid, 0)
        except OSError:
            return False
        return not sys.platform.startswith("linux")  # no /proc: trust the record


def stop_previous() -> int | None:
    """Stop the server an earlier ``profile`` run left serving; its pid, or None."""
    try:
        pid = int(json.loads(state_file().read_text())["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    state_file().unlink(missing_ok=True)
    if not _is_snakeviz(pid):
        return None
    _terminate(pid)
    return pid


def _terminate(pid: int, timeout: float = 5.0) -> None:
    server = _LAUNCHED.pop(pid, None)
    if server is not None:
        server.stop(timeout)
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and _is_snakeviz(pid):
        time.sleep(0.05)
    if _is_snakeviz(pid):
        os.kill(pid, signal.SIGKILL)


def serve_until_interrupted(pid: int, say: Callable[[str], None] = print) -> None:
    """Wait at a prompt while snakeviz serves; Ctrl-C (or SIGTERM) stops the server."""
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        say(f"snakeviz: serving (pid {pid}); press Ctrl-C to stop it")
        while _is_snakeviz(pid) and (pid not in _LAUNCHED or _LAUNCHED[pid].process.poll() is None):
            time.sleep(0.2)
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        _terminate(pid)
        try:
            if json.loads(state_file().read_text()).get("pid") == pid:
                state_file().unlink(missing_ok=True)
        except (OSError, ValueError, AttributeError):
            pass
        say("snakeviz: stopped")


def launch(prof: Path, *, port: int | None = None, browser: bool = True, log: Path | None = None) -> Server:
    """Start snakeviz on ``prof`` in its own session, replacing the one an earlier run
    left serving (recorded in :func:`state_file`). Raises OSError."""
    if executable() is None:
        raise OSError("snakeviz is not installed (pip install snakeviz)")
    stop_previous()
    port = port or free_port()
    cmd = command(prof, port=port, server=not browser)
    out = open(log, "ab") if log is not None else subprocess.DEVNULL
    try:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    finally:
        if log is not None:
            out.close()  # type: ignore[union-attr]
    server = Server(proc, port, Path(prof).resolve())
    _LAUNCHED[proc.pid] = server
    try:
        state_file().write_text(json.dumps({"pid": proc.pid, "port": port, "prof": str(server.prof)}))
    except OSError:  # the next run cannot replace it, but this one still serves
        pass
    return server
