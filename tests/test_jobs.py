"""--jobs: a process pool gives the same output as one process, and falls back to one."""

from __future__ import annotations

import concurrent.futures
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import FIXTURES
from torchlint.cli import main
from torchlint.config import Config
from torchlint.engine import lint_paths, pool
from torchlint.engine.discover import discover


def run(*args: str, cwd: Path) -> tuple[int, str, str]:
    old = Path.cwd()
    os.chdir(cwd)
    try:
        result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    finally:
        os.chdir(old)
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def steps_project(tmp_path: Path) -> Path:
    """The 12-file project whose findings need the cross-file join (outside the repo,
    whose config excludes fixtures/)."""
    return Path(shutil.copytree(FIXTURES / "projects" / "steps", tmp_path / "steps"))


def test_jobs_1_and_2_give_byte_identical_json_cold_and_warm(steps_project: Path, tmp_path: Path) -> None:
    outputs = {}
    for jobs in ("1", "2"):
        outputs["cold", jobs] = run("check", "--no-cache", "--output-format", "json", "--jobs", jobs, ".", cwd=steps_project)
    cache = str(tmp_path / "cache")
    run("check", "--cache-dir", cache, "--output-format", "json", "--jobs", "2", ".", cwd=steps_project)
    for jobs in ("1", "2"):
        outputs["warm", jobs] = run("check", "--cache-dir", cache, "--output-format", "json", "--jobs", jobs, ".", cwd=steps_project)
    reference = outputs["cold", "1"]
    assert reference[0] == 1 and reference[1].count('"code"') >= 5  # cross-file findings made it
    assert "in `" in reference[1]  # a settled per-step message ("in `accuracy()` ...")
    for key, output in outputs.items():
        assert output == reference, key


def test_the_pool_really_runs_in_other_processes(steps_project: Path) -> None:
    files = list(discover([steps_project], Config(root=steps_project)))
    assert len(files) >= pool.MIN_POOL_FILES
    seen_pids = []
    in_pool = pool._in_pool(files, Config(root=steps_project), 2, lambda n: seen_pids.append(n))
    assert in_pool is not None and len(in_pool) == len(files)
    assert sum(seen_pids) == len(files)  # progress counts every file once
    in_process = pool._in_process(files, Config(root=steps_project), False, None)
    assert [r.findings for r in in_pool] == [r.findings for r in in_process]
    assert [r.summary for r in in_pool] == [r.summary for r in in_process]


def test_falls_back_to_one_process_when_no_pool_can_start(steps_project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    expected = lint_paths([steps_project], Config(root=steps_project), jobs=1)

    def no_processes(*args: object, **kwargs: object) -> None:
        raise OSError("no semaphores in this sandbox")

    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", no_processes)
    fallback = lint_paths([steps_project], Config(root=steps_project), jobs=4)
    assert fallback.findings == expected.findings and fallback.errors == []


def test_a_small_run_never_starts_a_pool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "a.py").write_text("import torch\nfor x in loader:\n    print(model(x).item())\n")
    (tmp_path / "b.py").write_text("import torch\n")

    def must_not_start(*args: object, **kwargs: object) -> None:
        raise AssertionError("a pool for two files")

    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", must_not_start)
    result = lint_paths([tmp_path], Config(root=tmp_path), jobs=8)
    assert [f.code for f in result.findings] == ["TL101"]


def test_default_jobs_is_the_cores_this_process_may_use() -> None:
    expected = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert pool.default_jobs() == expected


_REAL_CHECK_CHUNK = pool._check_chunk


def _die_on_engine_py(chunk: list, slots: tuple) -> list:  # type: ignore[type-arg]
    """A worker killed mid-file (out of memory, a segfault) whenever it gets engine.py."""
    if any(file.path.name == "engine.py" for file in chunk):
        os._exit(3)
    return _REAL_CHECK_CHUNK(chunk, slots)


def test_a_worker_that_dies_loses_only_its_file(steps_project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = list(discover([steps_project], Config(root=steps_project)))
    monkeypatch.setattr(pool, "_check_chunk", _die_on_engine_py)  # workers are forked: they see it
    checked = pool._in_pool(files, Config(root=steps_project), 2, None)
    assert checked is not None and len(checked) == len(files)
    lost = [e for r in checked for e in r.errors]
    assert [Path(e.path).name for e in lost] == ["engine.py"]  # its batch mates were checked again
    assert "stopped before it finished" in lost[0].error
    expected = pool._in_process(files, Config(root=steps_project), False, None)
    assert [r.findings for r in checked if r.path.name != "engine.py"] == [r.findings for r in expected if r.path.name != "engine.py"]


def _state(pid: int) -> tuple[str, int] | None:
    """(state, parent pid) of a process from /proc; None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[0], int(fields[1])


def _alive(pid: int) -> bool:
    state = _state(pid)
    return state is not None and state[0] != "Z"


def _children(pid: int) -> list[int]:
    """The live child processes of ``pid``."""
    pids = [int(entry.name) for entry in Path("/proc").iterdir() if entry.name.isdigit()]
    return [child for child in pids if (_state(child) or ("Z", 0))[1] == pid and _alive(child)]


def _busy_pool(tmp_path: Path) -> tuple[subprocess.Popen[bytes], list[int]]:
    """`check --jobs 2` over enough files to be mid-run, and its two workers."""
    for i in range(800):
        shutil.copy(FIXTURES / "scripts" / "cifar_train.py", tmp_path / f"train_{i}.py")
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent))
    with open(tmp_path.parent / f"{tmp_path.name}.stderr", "wb") as err:  # not a pipe: a worker holding it open would block its reader
        proc = subprocess.Popen(
            [sys.executable, "-m", "torchlint", "check", "--jobs", "2", "--no-cache", "-q", "."],
            cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=err,
        )
    deadline = time.monotonic() + 60
    while len(_children(proc.pid)) < 2 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    workers = _children(proc.pid)
    if len(workers) < 2:
        proc.kill()
        pytest.skip("the pool never started two workers here")
    return proc, workers


def _all_end(pids: list[int], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while any(_alive(pid) for pid in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads processes from /proc")
@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_a_stopped_run_leaves_no_worker_behind(tmp_path: Path, how: int) -> None:
    """SIGTERM stops the workers and exits 143; after a SIGKILL (no handler can run) they
    notice their parent is gone. Both left the workers waiting on the queue forever."""
    proc, workers = _busy_pool(tmp_path)
    proc.send_signal(how)
    status = proc.wait(timeout=30)
    assert status == (128 + signal.SIGTERM if how == signal.SIGTERM else -signal.SIGKILL)
    assert b"Traceback" not in (tmp_path.parent / f"{tmp_path.name}.stderr").read_bytes()
    try:
        assert _all_end(workers, timeout=10), "a worker outlived its run"
    finally:
        for pid in workers:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
