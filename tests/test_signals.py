"""One way to stop every long-running command (torchlint/stopping.py): Ctrl-C, SIGTERM and
SIGHUP end `check` (pooled or not), `check --watch` (running or idle) and the server within
a second or two, with 128 + the signal's number, no traceback and no worker left; and a
watch wakes for what a run reads (a file, a config file, a new file), not for a swap file,
clearing the screen between runs on a terminal unless `--no-clear`.

(`profile --experiment` stopped by each signal: tests/test_hardening_profile.py.)"""

from __future__ import annotations

import os
import pty
import queue
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import FIXTURES

pytestmark = pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads processes from /proc")

ROOT = Path(__file__).resolve().parent.parent
TL110 = "import torch\nx = torch.zeros(3).cuda()\n"


def _env(**extra: str) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(ROOT), **extra)


def _children(pid: int) -> list[int]:
    """The live child processes of ``pid``."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            state, parent = (entry / "stat").read_text().rsplit(")", 1)[1].split()[:2]
        except (OSError, ValueError):
            continue
        if int(parent) == pid and state != "Z":
            found.append(int(entry.name))
    return found


def _gone(pids: list[int], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(Path(f"/proc/{pid}").exists() and "Z" not in Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] for pid in pids):
            return True
        time.sleep(0.05)
    return False


def _start(cwd: Path, *args: str, env: dict[str, str] | None = None, **popen) -> subprocess.Popen[str]:  # type: ignore[no-untyped-def]
    """torchlint in its own process group (a terminal's Ctrl-C reaches the whole group)."""
    popen.setdefault("stdout", subprocess.DEVNULL)
    popen.setdefault("stderr", open(cwd.parent / f"{cwd.name}.stderr", "w"))  # not a pipe: a worker holding it would block a reader
    return subprocess.Popen([sys.executable, "-m", "torchlint", *args], cwd=cwd, env=env or _env(), text=True, start_new_session=True, **popen)


def _stop(proc: subprocess.Popen[str], how: int) -> tuple[int, float]:
    """Send ``how`` as a user would (Ctrl-C: to the group), and the exit status and how long it took."""
    started = time.monotonic()
    (os.killpg if how == signal.SIGINT else os.kill)(proc.pid, how)
    try:
        status = proc.wait(timeout=20)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return status, time.monotonic() - started


def _project(tmp_path: Path, files: int) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    for i in range(files):
        shutil.copy(FIXTURES / "scripts" / "cifar_train.py", project / f"train_{i}.py")
    return project


def _two_workers(proc: subprocess.Popen[str], timeout: float = 60) -> list[int]:
    deadline = time.monotonic() + timeout
    while len(_children(proc.pid)) < 2 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    workers = _children(proc.pid)
    if len(workers) < 2:
        proc.kill()
        pytest.skip("the pool never started two workers here")
    return workers


def _stderr(cwd: Path) -> str:
    return (cwd.parent / f"{cwd.name}.stderr").read_text()


@pytest.mark.parametrize(("watching", "how"), [(False, signal.SIGINT), (False, signal.SIGTERM), (False, signal.SIGHUP), (True, signal.SIGTERM), (True, signal.SIGHUP)],
                         ids=["check-ctrl-c", "check-sigterm", "check-sighup", "watch-sigterm", "watch-sighup"])
def test_a_stop_ends_a_pooled_run_at_once(tmp_path: Path, how: int, watching: bool) -> None:
    """Ctrl-C on `check -j2` took 12-31 s and exited 1; SIGTERM and SIGHUP in a pooled
    `--watch` run were swallowed and the watch went on."""
    project = _project(tmp_path, 400)
    proc = _start(project, "check", "-j2", "--no-cache", "-q", *(["--watch"] if watching else []), ".")
    workers = _two_workers(proc)
    status, took = _stop(proc, how)
    assert status == 128 + how, _stderr(project)
    assert took < 5, f"it took {took:.1f} s to stop"
    assert "Traceback" not in _stderr(project)
    assert _gone(workers, timeout=2), "a worker outlived its run"


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGHUP], ids=["ctrl-c", "sighup"])
def test_a_stop_ends_an_idle_watch(tmp_path: Path, how: int) -> None:
    project = _project(tmp_path, 1)
    err = project.parent / "watch.err"
    proc = _start(project, "check", "--watch", ".", stderr=open(err, "w"))
    deadline = time.monotonic() + 60
    while "watching for changes" not in err.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "watching for changes" in err.read_text()
    status, took = _stop(proc, how)
    assert status == 128 + how and took < 5 and "Traceback" not in err.read_text()


def _initialized_server(cwd: Path) -> subprocess.Popen[bytes]:
    """A server that answered `initialize` and now waits, idle, on its stdin."""
    proc = subprocess.Popen([sys.executable, "-m", "torchlint", "server"], cwd=cwd, env=_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    body = b'{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"processId": null, "rootUri": null, "capabilities": {}}}'
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
    proc.stdin.flush()
    ready, _, _ = select.select([proc.stdout], [], [], 60)
    assert ready and proc.stdout.readline().startswith(b"Content-Length")
    return proc


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_stop_ends_an_idle_server(tmp_path: Path, how: int) -> None:
    """pygls waits on a thread blocked in stdin's read: SIGINT was ignored."""
    pytest.importorskip("pygls")
    proc = _initialized_server(tmp_path)
    started = time.monotonic()
    proc.send_signal(how)
    try:
        status = proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    assert status == 128 + how and time.monotonic() - started < 5
    assert b"Traceback" not in proc.stderr.read()  # type: ignore[union-attr]


class Watch:
    """`check --watch` on ``project``, its stdout and stderr read line by line."""

    def __init__(self, project: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.proc = _start(project, "check", "--watch", "--min-impact", "low", "--output-format", "concise", *args, ".",
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=lambda: [self.lines.put(line) for line in self.proc.stdout], daemon=True).start()  # type: ignore[union-attr]

    def wait_for(self, text: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not any(text in line for line in self.seen):
            try:
                self.seen.append(self.lines.get(timeout=max(deadline - time.monotonic(), 0)))
            except queue.Empty:
                raise AssertionError(f"{text!r} did not come within {timeout} s; saw {self.seen}") from None

    def quiet_for(self, seconds: float) -> bool:
        try:
            self.seen.append(self.lines.get(timeout=seconds))
        except queue.Empty:
            return True
        return False

    def next_run(self, change, text: str, timeout: float = 15) -> None:  # type: ignore[no-untyped-def]
        self.seen.clear()
        change()
        self.wait_for(text, timeout)
        self.wait_for("watching for changes", timeout)

    def close(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


@pytest.mark.parametrize("mode", ["events", "polling"])
def test_a_watch_runs_again_for_what_a_run_reads(tmp_path: Path, mode: str) -> None:
    """A file edited, a file added (also in a new folder), a config file changed: each runs
    the check again within a bounded time; an editor's swap file beside them does not."""
    project = tmp_path / "project"
    (project / "pkg").mkdir(parents=True)
    (project / "pkg" / "a.py").write_text(TL110)
    watch = Watch(project, env=_env(**({"TORCHLINT_WATCH_POLL": "1"} if mode == "polling" else {})))
    try:
        watch.wait_for("pkg/a.py:2:5: TL110", 60)
        watch.wait_for("watching for changes", 60)
        if mode == "polling":  # let the poll back off: a change must still be seen within its longest pause
            time.sleep(2)
        watch.next_run(lambda: (project / "pkg" / "a.py").write_text('import torch\nx = torch.zeros(3, device="cuda")\n'), "No problems found")
        watch.next_run(lambda: (project / "pkg" / "b.py").write_text(TL110), "pkg/b.py:2:5: TL110")
        (project / "data").mkdir()  # a folder with no source file yet: nothing to run again for...
        assert watch.quiet_for(1.0), f"an empty folder ran the check again: {watch.seen}"
        watch.next_run(lambda: (project / "data" / "c.py").write_text(TL110), "data/c.py:2:5: TL110")  # ...until one comes
        watch.next_run(lambda: (project / "torchlint.toml").write_text('ignore = ["TL110"]\n'), "No problems found")
        watch.seen.clear()
        (project / "pkg" / ".b.py.swp").write_text("swap")
        assert watch.quiet_for(1.5), f"a swap file ran the check again: {watch.seen}"
    finally:
        watch.close()


@pytest.mark.parametrize("clear", [True, False], ids=["clear", "no-clear"])
def test_a_watch_on_a_terminal_clears_the_screen_between_runs(tmp_path: Path, clear: bool) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "a.py").write_text(TL110)
    leader, terminal = pty.openpty()
    proc = _start(project, "check", "--watch", "--min-impact", "low", *([] if clear else ["--no-clear"]), ".", stdout=terminal, stderr=terminal)
    os.close(terminal)
    shown = b""

    def read_until(text: bytes, start: int = 0, timeout: float = 60) -> None:
        nonlocal shown
        deadline = time.monotonic() + timeout
        while text not in shown[start:]:
            ready, _, _ = select.select([leader], [], [], max(deadline - time.monotonic(), 0))
            assert ready, f"{text!r} never came: {shown[-400:]!r}"
            shown += os.read(leader, 65536)

    try:
        read_until(b"watching for changes")
        before = len(shown)
        (project / "a.py").write_text(TL110 + "y = 1\n")
        read_until(b"checking again", before)
        assert (b"\x1b[2J" in shown[before:]) is clear
        assert b"\x1b[2J" not in shown[:before]  # the first run's output is not cleared away
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        os.close(leader)


def test_stop_signals_in_the_process_raise_as_ctrl_c_and_respect_nohup() -> None:
    from torchlint.stopping import Stopped, status_of, stop_signals_raise

    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as `nohup` starts a command
    try:
        with stop_signals_raise():
            with pytest.raises(KeyboardInterrupt) as stop:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(1)
            assert isinstance(stop.value, Stopped) and status_of(stop.value) == 143
            os.kill(os.getpid(), signal.SIGHUP)  # still ignored
            time.sleep(0.05)
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
        assert status_of(KeyboardInterrupt()) == 130
    finally:
        signal.signal(signal.SIGHUP, previous)


def test_the_experiment_stops_on_any_signal_but_the_report_only_on_the_third() -> None:
    from torchlint.profiler.run import StopRequested, StopSignals

    with StopSignals() as stops:
        with pytest.raises(StopRequested) as stop:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)
        assert stop.value.signum == signal.SIGINT and stop.value.reason == "interrupted (Ctrl-C)"
        stops.defer()  # the report: a second and a third signal...
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)
        with pytest.raises(StopRequested):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)
    assert stops.signum == signal.SIGINT  # the exit status is the first signal's
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


_SHUTDOWN = """
import os, sys, threading
from torchlint.stopping import quiet_shutdown
r, w = os.pipe()
os.close(w)
threading._register_atexit(lambda: {action})  # as concurrent.futures wakes its manager threads at exit
if {quiet}:
    quiet_shutdown()
sys.exit(143)
"""


@pytest.mark.parametrize(("action", "quiet", "shown"), [
    ("os.write(w, b'x')", False, True),  # what a stopped pool's closed wakeup pipe printed now and then (CPython 3.11)
    ("os.write(w, b'x')", True, False),  # after a stop: dropped
    ("int('x')", True, True),  # any other error at exit is still shown
])
def test_the_interpreters_exit_after_a_stop_prints_no_closed_pipe_traceback(action: str, quiet: bool, shown: bool) -> None:
    done = subprocess.run([sys.executable, "-c", _SHUTDOWN.format(action=action, quiet=quiet)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 143
    assert ("Traceback" in done.stderr) is shown, done.stderr
