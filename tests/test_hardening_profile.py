"""`torchlint profile`: every ending writes a report, and no child outlives its parent.

Real runs of fixtures/scripts/stops_early.py (a CPU training loop that would run for
a minute), stopped by the signals CI and shells send: SIGTERM to the process group or
to the parent alone, SIGKILL to the parent, SIGINT to a parent that was started with
SIGINT ignored. Plus the snakeviz server (the run directory, reused or shared --out:
tests/test_hardening_run_dir.py).
"""

from __future__ import annotations

import cProfile
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import ahead, child_env
from torchlint.profiler import snakeviz
from torchlint.profiler.run import CLAIM

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "fixtures" / "scripts" / "stops_early.py"
LONG = ["stops_early.py", "--mode", "none", "--steps", "1000", "--step-sleep", "0.05"]


_env = child_env


def _start(cwd: Path, *args: str, ignore_sigint: bool = False) -> subprocess.Popen[str]:
    """`torchlint profile ARGS` in its own process group, once the script is at step 3."""
    shutil.copy(SCRIPT, cwd / SCRIPT.name)

    def setup() -> None:
        if ignore_sigint:  # as a `&` job of a non-interactive shell starts it
            signal.signal(signal.SIGINT, signal.SIG_IGN)

    proc = subprocess.Popen(
        [sys.executable, "-m", "torchlint", "profile", "--no-browser", "--out", "run", *args, *LONG],
        cwd=cwd, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True, preexec_fn=setup if ignore_sigint else None,  # (runs start from threads: no code between fork and exec unless needed)
    )
    seen, deadline = "", time.monotonic() + 120
    while "step 3 " not in seen and time.monotonic() < deadline:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        if not line:
            break
        seen += line
    assert "step 3 " in seen, seen + proc.stderr.read()  # type: ignore[union-attr]
    return proc


def _group_ends(pgid: int, timeout: float = 60) -> bool:
    """Whether every process of the group (the parent and the training child) is gone."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


def _report(cwd: Path) -> dict:
    return json.loads((cwd / "run" / "report.json").read_text())


# name -> (signal, sent to the whole process group, parent started with SIGINT ignored)
STOPS = {
    "sigterm-process-group": (signal.SIGTERM, True, False),
    "sigterm-parent-alone": (signal.SIGTERM, False, False),
    "sigkill-parent": (signal.SIGKILL, False, False),  # no handler can run: the child must notice alone
    "ctrl-c-sigint-ignored": (signal.SIGINT, True, True),  # Ctrl-C from a terminal: the whole group
    "sighup-process-group": (signal.SIGHUP, True, False),  # a closed terminal
}


def _stop_at_step_3(cwd: Path, how: int, to_group: bool, ignore_sigint: bool) -> dict:
    proc = _start(cwd, ignore_sigint=ignore_sigint)
    (os.killpg if to_group else os.kill)(proc.pid, how)
    out, err = proc.communicate(timeout=60 if how == signal.SIGKILL else 120)
    # a killed parent's child notices alone, at its next check
    ended = _group_ends(proc.pid, timeout=60 if how == signal.SIGKILL else 10)
    return {"cwd": cwd, "returncode": proc.returncode, "out": out, "err": err, "ended": ended}


@ahead(alone=True)  # two runs at once
def stopped(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """Each stop of STOPS sent to its own run at step 3, two runs at a time (CI has two cores;
    five at once failed once there: a SIGTERM'd run ended with a MemoryError while five torch
    runs shared them): name -> what happened."""
    pytest.importorskip("torch")
    cwds = {name: tmp_path_factory.mktemp(name) for name in STOPS}
    with ThreadPoolExecutor(max_workers=2) as pool:
        done = pool.map(lambda name: _stop_at_step_3(cwds[name], *STOPS[name]), STOPS)
        return dict(zip(STOPS, done))


@pytest.mark.parametrize("name", ["sigterm-process-group", "sigterm-parent-alone"])
def test_sigterm_stops_the_child_and_reports_what_was_collected(stopped: dict[str, dict], name: str) -> None:
    run = stopped[name]
    assert run["returncode"] == 128 + signal.SIGTERM, run["err"]
    assert run["ended"], "a child outlived the run"
    report = _report(run["cwd"])
    assert report["run"]["stop_reason"] == "terminated"
    assert report["run"]["steps"] >= 3
    assert "step 1000 " not in run["out"]
    assert (run["cwd"] / "run" / "profile.prof").is_file() and "exit status 143" in run["out"]
    assert not (run["cwd"] / "run" / CLAIM).exists()  # the run released its directory


def test_a_killed_parent_leaves_no_child_training(stopped: dict[str, dict]) -> None:
    run = stopped["sigkill-parent"]
    assert run["ended"], "the child kept training after its parent died"
    session = json.loads((run["cwd"] / "run" / "session.json").read_text())
    assert session["meta"]["stop_reason"] == "terminated"  # it unwound and wrote what it had
    assert session["steps"]["count"] >= 3


def test_a_parent_started_with_sigint_ignored_still_stops_on_ctrl_c(stopped: dict[str, dict]) -> None:
    """Ctrl-C from a terminal: SIGINT to the whole group, the child stops, torchlint waits
    for it and reports. The parent here was started with SIGINT ignored, as a `&` job of a
    script starts it; the parent's forwarding and the child's KeyboardInterrupt are
    installed whatever the parent inherited (profiler/run.py, profiler/bootstrap.py), so
    this run is also test_profile_run's plain Ctrl-C, which had a torch child of its own."""
    run = stopped["ctrl-c-sigint-ignored"]
    assert run["returncode"] == 130, run["err"]
    assert "KeyboardInterrupt" in run["err"]  # the script itself was interrupted
    assert "exit status 130 (interrupted)" in run["out"]
    report = _report(run["cwd"])
    assert report["run"]["stop_reason"] == "interrupted" and report["run"]["steps"] >= 3
    # the window (steps 3-7) was cut after step 3: partial, still reported
    assert report["coverage"]["torch_profiler"]["ran"]
    assert run["ended"]


# -- snakeviz -------------------------------------------------------------------------


needs_snakeviz = pytest.mark.skipif(snakeviz.executable() is None, reason="snakeviz is not installed")


@pytest.fixture
def prof(tmp_path: Path) -> Path:
    path = tmp_path / "profile.prof"
    profiler = cProfile.Profile()
    profiler.runcall(sum, range(1000))
    profiler.dump_stats(str(path))
    return path


@needs_snakeviz
def test_a_second_run_replaces_the_server_an_earlier_one_left(prof: Path, monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setattr(snakeviz, "state_file", lambda: tmp_path / "state.json")
    first = snakeviz.launch(prof, browser=False)
    second = None
    try:
        assert first.wait_ready(timeout=30)
        snakeviz._LAUNCHED.clear()  # as if the first had been started by another torchlint
        second = snakeviz.launch(prof, browser=False)
        assert first.process.wait(timeout=10) is not None  # replaced: stopped
        assert json.loads((tmp_path / "state.json").read_text())["pid"] == second.pid
        assert second.wait_ready(timeout=30)
    finally:
        first.stop()
        if second is not None:
            second.stop()


@needs_snakeviz
def test_ctrl_c_at_the_prompt_stops_the_server(prof: Path, tmp_path: Path) -> None:
    code = (
        "import sys; from pathlib import Path; from torchlint.profiler import snakeviz\n"
        f"snakeviz.state_file = lambda: Path({str(tmp_path / 'state.json')!r})\n"
        f"server = snakeviz.launch(Path({str(prof)!r}), browser=False)\n"
        "assert server.wait_ready(30)\n"
        "print(server.pid, flush=True)\n"
        "snakeviz.serve_until_interrupted(server.pid)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], env=_env(), stdout=subprocess.PIPE, text=True, start_new_session=True)
    pid = int(proc.stdout.readline())  # type: ignore[union-attr]
    assert proc.stdout.readline().startswith("snakeviz: serving")  # type: ignore[union-attr]
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: snakeviz is in its own session, so not reached
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "snakeviz: stopped" in out
    assert not Path(f"/proc/{pid}").exists() or b"snakeviz" not in Path(f"/proc/{pid}/cmdline").read_bytes()
    assert not (tmp_path / "state.json").exists()


def test_sighup_to_the_group_keeps_the_profile(stopped: dict[str, dict]) -> None:
    """A closed terminal sends SIGHUP to the group: the whole profile was lost."""
    run = stopped["sighup-process-group"]
    assert run["returncode"] == 128 + signal.SIGHUP, run["err"]
    assert run["ended"]
    report = _report(run["cwd"])
    assert report["run"]["stop_reason"] == "hangup" and report["run"]["steps"] >= 3
    assert (run["cwd"] / "run" / "profile.prof").is_file()


LINGERING = '''\
import threading, time
import torch

def keep_busy():
    while True:
        time.sleep(0.1)

threading.Thread(target=keep_busy).start()  # not a daemon: python waits for it at exit
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    opt.zero_grad()
    model(torch.ones(2, 4)).sum().backward()
    opt.step()
print("main done", flush=True)
'''


@ahead()
def lingering_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, subprocess.Popen[str], bool, Path]:
    """LINGERING under `profile`, sent one SIGTERM once its profile is written: (its first
    line, the process, whether its group ended, its cwd)."""
    pytest.importorskip("torch")
    tmp_path = tmp_path_factory.mktemp("lingering")
    (tmp_path / "lingering.py").write_text(LINGERING)
    proc = subprocess.Popen(
        [sys.executable, "-m", "torchlint", "profile", "--no-browser", "--out", "run", "lingering.py"],
        cwd=tmp_path, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )
    first = proc.stdout.readline()  # type: ignore[union-attr]
    deadline = time.monotonic() + 60
    while not (tmp_path / "run" / "session.json").exists() and time.monotonic() < deadline:
        time.sleep(0.05)  # the child has written its profile and now waits for the thread
    time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return first, proc, _group_ends(proc.pid, timeout=10), tmp_path


def test_one_sigterm_ends_a_script_that_waits_for_its_threads(lingering_run: tuple[str, subprocess.Popen[str], bool, Path]) -> None:
    """Plain python ends on one SIGTERM while it waits for a non-daemon thread; under
    `profile` it took three (the child ignored it once its profile was written)."""
    first, proc, ended, tmp_path = lingering_run
    assert "main done" in first
    assert proc.returncode == 128 + signal.SIGTERM
    assert ended
    assert _report(tmp_path)["run"]["steps"] == 3


def _processes_in(directory: Path) -> list[int]:
    """The live processes working in ``directory`` (torchlint, its window server and windows)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and Path(os.readlink(entry / "cwd")).is_relative_to(directory):
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
                if state != "Z":
                    found.append(int(entry.name))
        except OSError:
            continue
    return found


# SIGHUP is not among them: stopping.py raises the same Stopped for it as for SIGTERM, so the
# experiment's cleanup is the one the SIGTERM run tests, and SIGHUP's own status and stop
# reason are asserted on a profiled run (test_sighup_to_the_group_keeps_the_profile) and on
# the ranks (test_distributed_merge.py). A third run here cost two torch start-ups more.
EXPERIMENT_STOPS = {"ctrl-c": signal.SIGINT, "sigterm": signal.SIGTERM}


def _stop_in_the_experiment(cwd: Path, how: int) -> dict:
    """`profile --experiment`, stopped by ``how`` once a candidate's windows are starting:
    what it printed and left, and the processes still working in ``cwd`` 10 s later."""
    shutil.copy(SCRIPT, cwd / SCRIPT.name)
    proc = subprocess.Popen(
        [sys.executable, "-m", "torchlint", "profile", "--no-browser", "--experiment", "--budget", "120", "--out", "run",
         "stops_early.py", "--steps", "30", "--step-sleep", "0.02"],
        cwd=cwd, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )
    seen, deadline = "", time.monotonic() + 120
    while " at line " not in seen and time.monotonic() < deadline:  # a candidate's windows are starting
        line = proc.stderr.readline()  # type: ignore[union-attr]
        if not line:
            break
        seen += line
    out = err = ""
    try:
        if " at line " in seen:
            time.sleep(1.0)  # the window server is importing torch, or running a window
            (os.killpg if how == signal.SIGINT else os.kill)(proc.pid, how)  # Ctrl-C: the terminal's whole group
            out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    deadline = time.monotonic() + 10
    while _processes_in(cwd) and time.monotonic() < deadline:
        time.sleep(0.1)
    return {"seen": seen, "returncode": proc.returncode, "out": out, "err": err, "left": _processes_in(cwd)}


@ahead(alone=True)  # two runs at once
def experiment_stops(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, dict]]:
    """Each stop of EXPERIMENT_STOPS in its own run, the two at once (each is mostly torch
    start-ups in separate processes, and CI has two cores): name -> (cwd, what happened)."""
    pytest.importorskip("torch")
    if not Path("/proc").is_dir():
        pytest.skip("reads processes from /proc")
    cwds = {name: tmp_path_factory.mktemp(f"experiment-{name}") for name in EXPERIMENT_STOPS}
    with ThreadPoolExecutor(max_workers=len(EXPERIMENT_STOPS)) as pool:
        done = pool.map(lambda name: _stop_in_the_experiment(cwds[name], EXPERIMENT_STOPS[name]), EXPERIMENT_STOPS)
        return {name: (cwds[name], result) for name, result in zip(EXPERIMENT_STOPS, done)}


@pytest.mark.parametrize("name", list(EXPERIMENT_STOPS))
def test_a_stop_during_the_experiment_still_reports_the_run(experiment_stops: dict[str, tuple[Path, dict]], name: str) -> None:
    """The profiled run had completed: SIGTERM in the experiment left no report at all, and
    Ctrl-C there exited 0. Each stop ends the windows, reports the run, exits 128 + signo."""
    cwd, run = experiment_stops[name]
    assert " at line " in run["seen"], run["seen"]
    assert run["returncode"] == 128 + EXPERIMENT_STOPS[name], run["err"]
    assert "Traceback" not in run["err"] and "stopped by " in run["err"]
    report = _report(cwd)
    assert report["run"]["exit_status"] == 0 and "Run directory" in run["out"]
    assert (cwd / "run" / "experiment.json").is_file()  # what the experiment measured is kept
    assert not run["left"], "a window or the window server outlived the run"
