"""`torchlint profile`'s run directory: a reused or shared `--out` is refused or overwritten,
`--overwrite` deletes only what torchlint wrote and recorded (never a directory it did not
make, a symlinked name's target, or a user's copy of a rank), and a process the profiled
script forks never writes the run files nor outlives the run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT, ahead, child_env, run_cli
from torchlint.profiler.run import CLAIM, RUN_MARKER, RunDirError, make_run_dir, release_run_dir


# -- the run directory ---------------------------------------------------------------


def test_a_reused_out_directory_is_refused_or_overwritten(tmp_path: Path) -> None:
    out = tmp_path / "run"
    first = make_run_dir(Path("train.py"), out)
    (first / "report.json").write_text('{"run": "the earlier one"}')
    (first / "session.json").write_text("{}")
    (first / "traces" / "window-1").mkdir(parents=True)
    (first / "notes.txt").write_text("the user's own, written into the run directory")
    release_run_dir(first)
    with pytest.raises(RunDirError, match="not empty"):
        make_run_dir(Path("train.py"), out)
    again = make_run_dir(Path("train.py"), out, overwrite=True)
    assert again == first.resolve()
    assert sorted(p.name for p in again.iterdir()) == sorted([CLAIM, RUN_MARKER, "notes.txt"])
    release_run_dir(again)


def test_overwrite_never_empties_a_directory_torchlint_did_not_make(tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    for name in ("notes.txt", "session.json", "profile.prof", "launch.json"):
        (mine / name).write_text("the user's")
    with pytest.raises(RunDirError, match="not made by torchlint"):
        make_run_dir(Path("train.py"), mine, overwrite=True)
    assert sorted(p.name for p in mine.iterdir()) == ["launch.json", "notes.txt", "profile.prof", "session.json"]


def test_overwrite_out_dot_in_a_project_deletes_nothing(tmp_path: Path) -> None:
    """The reported data loss: `profile --overwrite --out .` in a project whose files
    happen to include a session.json emptied the project, .git and the script included."""
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    (project / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (project / "src").mkdir()
    (project / "src" / "model.py").write_text("import torch\n")
    (project / "train.py").write_text("print('train')\n")
    (project / "session.json").write_text("{}")
    (project / "profile.prof").write_text("")
    before = sorted(str(p.relative_to(project)) for p in project.rglob("*"))
    # refused before any child starts: in this process (a traceback would raise here)
    rc, _out, err = run_cli(project, "profile", "--no-browser", "--overwrite", "--out", ".", "train.py")
    assert rc == 2, err
    assert "not made by torchlint" in err and "Traceback" not in err
    assert sorted(str(p.relative_to(project)) for p in project.rglob("*")) == before


def test_overwrite_leaves_symlinked_artifact_names_alone(tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "keep.txt").write_text("outside the run directory")
    out = make_run_dir(Path("train.py"), tmp_path / "run")
    (out / "traces").symlink_to(outside, target_is_directory=True)
    release_run_dir(out)
    make_run_dir(Path("train.py"), out, overwrite=True)
    assert (outside / "keep.txt").exists()


def test_two_runs_never_share_a_directory(tmp_path: Path) -> None:
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        out = tmp_path / "run"
        out.mkdir()
        (out / CLAIM).write_text(str(other.pid))  # a live run is writing here
        for overwrite in (False, True):
            with pytest.raises(RunDirError, match="another torchlint run"):
                make_run_dir(Path("train.py"), out, overwrite=overwrite)
    finally:
        other.kill()
        other.wait()
    # a claim left by a killed run does not block the next one
    assert make_run_dir(Path("train.py"), out, overwrite=True) == out.resolve()
    # default directories are unique per run, even within one second
    a, b = make_run_dir(Path("t.py"), root=tmp_path), make_run_dir(Path("t.py"), root=tmp_path)
    assert a != b and a.parent == b.parent


def test_the_cli_refuses_a_non_empty_out(tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "report.json").write_text("{}")
    (tmp_path / "s.py").write_text("open('ran', 'w').close()\n")
    rc, out, err = run_cli(tmp_path, "profile", "--no-browser", "--out", "run", "s.py")  # refused before any child starts
    assert rc == 2 and "is not empty" in err and "--overwrite" in err
    assert not (tmp_path / "ran").exists()  # nothing ran
    assert [p.name for p in (tmp_path / "run").iterdir()] == ["report.json"]


# -- profile --overwrite deletes only what torchlint wrote and recorded -------------------

DECOYS = ("rank0-before-fix/", "rank1.keep/", "rank/", "rank2", "rank3x/", "ranks/", "session.json.bak", "traces-old/", "notes.txt")


def _make(folder: Path, names: tuple[str, ...], text: str) -> None:
    for name in names:
        if name.endswith("/"):
            (folder / name).mkdir()
            (folder / name / "kept.txt").write_text(text)
        else:
            (folder / name).write_text(text)


def _as_a_run_leaves_it(run_dir: Path) -> None:
    _make(run_dir, ("session.json", "profile.prof", "report.txt", "launch.json", "traces/", "rank0/", "rank12/"), "the run's")


def test_overwrite_deletes_only_what_the_last_run_recorded(tmp_path: Path) -> None:
    out = make_run_dir(Path("train.py"), tmp_path / "run")
    _as_a_run_leaves_it(out)
    release_run_dir(out)
    marker = (out / RUN_MARKER).read_text()
    assert "wrote: rank0\n" in marker and "wrote: rank12\n" in marker and "wrote: session.json\n" in marker
    # The user keeps a copy of a rank, and adds folders named as a run's (never written by it).
    _make(out, (*DECOYS, "experiment/", "report.html"), "the user's")
    again = make_run_dir(Path("train.py"), out, overwrite=True)
    left = sorted(p.name + ("/" if p.is_dir() else "") for p in again.iterdir())
    assert left == sorted([CLAIM, RUN_MARKER, *DECOYS, "experiment/", "report.html"])
    assert all((again / name.rstrip("/") / "kept.txt").read_text() == "the user's" for name in DECOYS if name.endswith("/"))
    assert "wrote:" not in (again / RUN_MARKER).read_text()  # the new run records its own
    release_run_dir(again)


def test_overwrite_after_a_killed_run_goes_by_exact_names(tmp_path: Path) -> None:
    """A run killed before it ended recorded nothing: its files go by their exact names."""
    out = make_run_dir(Path("train.py"), tmp_path / "run")
    _as_a_run_leaves_it(out)
    (out / CLAIM).write_text("999999999")  # the pid of a run that no longer runs
    _make(out, DECOYS, "the user's")
    again = make_run_dir(Path("train.py"), out, overwrite=True)
    left = sorted(p.name + ("/" if p.is_dir() else "") for p in again.iterdir())
    assert left == sorted([CLAIM, RUN_MARKER, *DECOYS])


def test_only_rank_directories_are_signalled_or_cleaned(tmp_path: Path) -> None:
    """A copy of a rank's directory (its pid file too) is the user's: never a pid to signal."""
    from torchlint.cli.profile_ranks import is_rank_run
    from torchlint.profiler.distributed import rank_pids
    from torchlint.profiler.rankchild import PID_FILE
    from torchlint.profiler.run import rank_dirs

    (tmp_path / "rank3").mkdir()
    (tmp_path / "rank3" / PID_FILE).write_text("4242")
    for decoy in ("rank0-before-fix", "rank1.keep", "rank02x"):
        (tmp_path / decoy).mkdir()
        (tmp_path / decoy / PID_FILE).write_text("1")
    assert rank_dirs(tmp_path) == {3: tmp_path / "rank3"}
    assert rank_pids(tmp_path) == [4242]
    (tmp_path / "rank3" / PID_FILE).unlink()
    (tmp_path / "rank3").rmdir()
    assert not is_rank_run(tmp_path)


# -- a process the profiled script forks never writes the run files nor outlives the run ---


def _state(run_dir: Path) -> dict[str, tuple[int, bytes]]:
    return {str(p.relative_to(run_dir)): (p.stat().st_mtime_ns, p.read_bytes()) for p in sorted(run_dir.rglob("*")) if p.is_file()}


def _ended(pid: int) -> bool:
    """Gone, or a zombie no one reaps (the container's init may not): it runs no more."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return True
    return fields[0] in ("Z", "X")


def _wait_for(condition, timeout: float) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


@ahead()
def forking_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, Path, dict[str, tuple[int, bytes]]]:
    """`profile` of forks_children.py: (its exit status, its cwd, the run directory's files
    as its parent left them)."""
    tmp_path = tmp_path_factory.mktemp("forks")
    script = ROOT / "fixtures" / "scripts" / "forks_children.py"
    shutil.copy(script, tmp_path / script.name)
    work = tmp_path / "work"
    work.mkdir()
    run_dir = tmp_path / "run"
    env = {**child_env(), "OMP_NUM_THREADS": "1"}  # no OpenMP pool to inherit in the forks
    # Files, not pipes: the late children hold torchlint's stdout; waiting for the pipe's
    # end would wait for them too.
    with open(tmp_path / "out.txt", "w") as out, open(tmp_path / "err.txt", "w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "torchlint", "profile", "--no-browser", "--out", "run", "--wait", "0", "--warmup", "0", "--active", "1",
             script.name, str(run_dir), str(work)],
            cwd=tmp_path, env=env, stdout=out, stderr=err, start_new_session=True,
        )
        try:
            code = proc.wait(timeout=300)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, 9)
    return code, tmp_path, _state(tmp_path / "run")


def test_forked_children_never_write_the_run_files_nor_outlive_the_run(forking_run: tuple[int, Path, dict[str, tuple[int, bytes]]]) -> None:
    code, tmp_path, after_report = forking_run
    run_dir, work = tmp_path / "run", tmp_path / "work"
    stderr = (tmp_path / "err.txt").read_text()
    assert code == 0, stderr[-3000:]
    session = json.loads((run_dir / "session.json").read_text())
    assert session["meta"]["exit_status"] == 0 and session["meta"]["stop_reason"] == "completed"
    # The early children: each exits with its own status, writes nothing into the run
    # directory, and its unclosed file is flushed as Python's exit flushes it.
    statuses = json.loads((work / "statuses.json").read_text())
    assert {kind: s["status"] for kind, s in statuses.items()} == {"exit3": 3, "raise": 1, "message": 1}
    assert all(s["before"] == s["after"] for s in statuses.values()), statuses
    assert "ValueError: the child failed" in stderr and "the child's message" in stderr
    for kind in statuses:
        assert (work / f"child-{kind}.txt").read_text() == f"written by the {kind} child"
    # The late children end once the report is written, and change none of the run's files.
    pids = {kind: work / f"late-{kind}.pid" for kind in ("exit3", "falls-off")}
    assert _wait_for(lambda: all(p.exists() and p.read_text() for p in pids.values()), 60), "a late child never started"
    late = [int(p.read_text()) for p in pids.values()]
    assert _wait_for(lambda: all(_ended(pid) for pid in late), 60), "a forked child outlived the run"
    assert _state(run_dir) == after_report
