"""`torchlint profile` end to end on real CPU training scripts (fixtures/scripts/).

torch start-up costs seconds here, so each profiled run is made once per
session and shared by the tests that read it. No test asserts on timings;
costs are only compared with each other or with zero.
"""

from __future__ import annotations

import json
import pstats
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import MLP_STEPS, ahead, child_env, run_cli

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "fixtures" / "scripts"
STEPS = MLP_STEPS  # conftest.mlp_run's


@dataclass
class Run:
    rc: int
    stdout: str
    stderr: str
    cwd: Path
    run_dir: Path | None

    @property
    def report(self) -> dict:
        assert self.run_dir is not None
        return json.loads((self.run_dir / "report.json").read_text())


_env = child_env


def profile(cwd: Path, *args: str, timeout: float = 180, profile_imports: bool = False,
            env: dict[str, str] | None = None) -> Run:
    """Run `torchlint profile ARGS` in ``cwd`` as a user would (``profile_imports``: child_env's;
    ``env``: variables set besides)."""
    proc = subprocess.run(
        [sys.executable, "-m", "torchlint", "profile", *args],
        cwd=cwd,
        env={**_env(profile_imports), **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    run_dirs = sorted((cwd / "torchlint-profile").glob("*")) if (cwd / "torchlint-profile").is_dir() else []
    out = None
    if "--out" in args:
        out = cwd / args[args.index("--out") + 1]
    elif run_dirs:
        out = run_dirs[-1]
    return Run(proc.returncode, proc.stdout, proc.stderr, cwd, out)


def profile_together(*runs: tuple[Path, tuple[str, ...]], timeout: float = 180) -> list[Run]:
    """Several independent `profile` runs, two at once, as ``profile(cwd, *args)`` each: torch's
    start-up in each child is one core's work, and CI has two (five at once on a loaded machine
    ran each past its timeout)."""
    with ThreadPoolExecutor(max_workers=min(len(runs), 2)) as pool:
        return list(pool.map(lambda run: profile(run[0], *run[1], timeout=timeout), runs))


def _copy(tmp: Path, name: str) -> Path:
    tmp.mkdir(parents=True, exist_ok=True)
    shutil.copy(SCRIPTS / name, tmp / name)
    return tmp


def _line(name: str, needle: str) -> int:
    lines = (SCRIPTS / name).read_text().splitlines()
    return next(i for i, t in enumerate(lines, 1) if needle in t)


@ahead(scope="session", alone=True)  # two runs at once
def early_runs(tmp_path_factory) -> dict[str, Run]:
    """The ways a script ends, each its own run, made two at a time: two stop modes of
    stops_early.py, a script given torchlint's own option names, and --max-steps. (A
    KeyboardInterrupt in the script is test_hardening_profile's ctrl-c run: a real SIGINT,
    to the whole group.)"""
    pytest.importorskip("torch")
    modes = ("raise", "exit")
    echo = tmp_path_factory.mktemp("args")
    (echo / "echo_args.py").write_text("import sys\nimport torch\nprint('ARGS', sys.argv)\nprint('MAIN', __name__)\n")
    runs = profile_together(
        *((_copy(tmp_path_factory.mktemp(mode), "stops_early.py"), ("--no-browser", "--active", "2", "stops_early.py", "--mode", mode, "--at", "4"))
          for mode in modes),
        (echo, ("--no-browser", "echo_args.py", "--steps", "3", "-h", "--no-browser")),
        (_copy(tmp_path_factory.mktemp("max-steps"), "mlp_slow_loader.py"),
         ("--no-browser", "--max-steps", "2", "mlp_slow_loader.py", "--steps", "50", "--sleep-ms", "0")),
    )
    return dict(zip((*modes, "args", "max-steps"), runs))


@ahead(scope="session")
def blocks_run(tmp_path_factory) -> Run:
    """24 blocks each reading `.item()` in forward, one logged `loss.item()` a step."""
    pytest.importorskip("torch")
    cwd = _copy(tmp_path_factory.mktemp("blocks"), "block_syncs.py")
    return profile(cwd, "--no-browser", "--out", "run", "--active", "2", "block_syncs.py", "--steps", str(BLOCK_STEPS))


BLOCK_STEPS = 12


# -- the main run ---------------------------------------------------------------


def test_json_mode_stdout_is_only_the_report(mlp_run):
    assert mlp_run.rc == 0, mlp_run.stderr
    report = json.loads(mlp_run.stdout)
    assert report == mlp_run.report
    assert f"trained {STEPS} steps" not in mlp_run.stdout
    assert f"trained {STEPS} steps" in mlp_run.stderr
    assert f"trained {STEPS} steps" in (mlp_run.run_dir / "script-output.log").read_text()


def test_item_line_has_one_call_per_step(mlp_run):
    report = mlp_run.report
    line = _line("mlp_slow_loader.py", "loss.item()")
    (tl101,) = [f for f in report["findings"] if f["code"] == "TL101" and f["line"] == line]
    assert tl101["observed"]["basis"] == tl101["basis"] == "probe"
    assert tl101["calls"] == STEPS == report["run"]["steps"]
    assert tl101["total_s"] > 0 and tl101["share"] > 0
    assert {e["op"] for e in tl101["evidence"]} == {"Tensor.item"}
    # torch.profiler's ops inside those calls, for the window's steps
    assert {"aten::item", "aten::_local_scalar_dense"} <= {e["op"] for e in tl101["window"]}
    assert tl101["function"]["name"] == "main"


def test_dataloader_without_workers_ranks_above_item_with_fetch_time(mlp_run):
    report = mlp_run.report
    ctor = _line("mlp_slow_loader.py", "DataLoader(ds")
    loop = _line("mlp_slow_loader.py", "in enumerate(loader)")
    item = _line("mlp_slow_loader.py", "loss.item()")
    by_key = {(f["code"], f["line"]): f for f in report["findings"]}
    assert ("TL201", ctor) in by_key, "needs the static TL201 rule (dataloader-no-workers)"
    tl201, tl101 = by_key[("TL201", ctor)], by_key[("TL101", item)]
    assert tl201["rank"] < tl101["rank"]
    fetches = [e for e in tl201["evidence"] if e["op"] == "DataLoader.__next__"]
    assert fetches and all(e["via"] == "related" and e["line"] == loop for e in fetches)
    assert sum(e["calls"] for e in fetches) >= STEPS
    assert tl201["cost_s"] > tl101["cost_s"] > 0


def test_runtime_dataloader_wait_finding(mlp_run):
    (r,) = [f for f in mlp_run.report["runtime_findings"] if f["code"] == "TLR01"]
    assert r["line"] == _line("mlp_slow_loader.py", "in enumerate(loader)")
    assert 0 < mlp_run.report["dataloader"]["wait_share"] <= 1


def test_coverage_says_what_each_profiler_saw(mlp_run):
    cov = mlp_run.report["coverage"]
    assert cov["cprofile"]["span"] == "script"
    assert cov["sampler"]["span"] == "script" and cov["sampler"]["samples"] > 0
    # canary for torch internals the probes rely on (the batch iterator class is private)
    assert {"Tensor.item", "DataLoader.__next__", "DataLoader.__iter__"} <= set(cov["probes"]["ops"])
    tp = cov["torch_profiler"]
    assert tp["ran"] and tp["active_steps"] == 3 and tp["windows"][0]["steps"] == [3, 5]
    assert tp["with_stack"] is False


def test_prof_loads_with_pstats(mlp_run):
    stats = pstats.Stats(str(mlp_run.run_dir / "profile.prof"))
    funcs = {(Path(f).name, name) for f, _line, name in stats.stats}  # type: ignore[attr-defined]
    assert ("mlp_slow_loader.py", "main") in funcs
    assert ("mlp_slow_loader.py", "__getitem__") in funcs


def test_trace_is_valid_json_with_events(mlp_run):
    (trace,) = mlp_run.report["artifacts"]["traces"]
    data = json.loads((mlp_run.run_dir / trace).read_text())
    events = data["traceEvents"]
    assert any(e.get("name", "").startswith("aten::") for e in events)
    # the call-site ranges name the user's lines
    assert any(e.get("name", "").startswith("torchlint mlp_slow_loader.py:") for e in events)


def test_run_directory_holds_every_artifact(mlp_run):
    names = {p.name for p in mlp_run.run_dir.iterdir()}
    assert {"profile.prof", "traces", "report.json", "report.txt", "session.json"} <= names
    assert {"samples.speedscope.json", "samples.collapsed.txt"} <= names
    # torch's tensorboard_trace_handler layout: traces/<window>/<worker>.<time_ms>.pt.trace.json
    (trace,) = mlp_run.report["artifacts"]["traces"]
    assert trace.startswith("traces/window-1/") and trace.endswith(".pt.trace.json")
    text = (mlp_run.run_dir / "report.txt").read_text()
    assert "Findings ranked by what fixing them saves" in text and "What each profiler covered" in text


def test_headless_prints_the_snakeviz_command(mlp_run):
    sv = mlp_run.report["snakeviz"]
    assert not sv["launched"]
    assert "-H 127.0.0.1" in sv["command"] and str((mlp_run.run_dir / "profile.prof").resolve()) in sv["command"]


# -- ways a script ends ----------------------------------------------------------


def test_script_that_raises(early_runs):
    run = early_runs["raise"]
    assert run.rc == 1
    assert "RuntimeError: diverged at step 4" in run.stderr
    assert "bootstrap" not in run.stderr.split("Traceback")[-1]  # torchlint's frames are not shown
    report = run.report
    assert report["run"]["stop_reason"] == "exception" and report["run"]["exit_status"] == 1
    assert report["run"]["steps"] == 4
    assert "diverged" in report["run"]["traceback"]
    (tl101,) = [f for f in report["findings"] if f["code"] == "TL101"]
    assert tl101["calls"] == 4  # the profile collected so far
    assert "exit status 1 (exception)" in run.stdout
    assert run.run_dir.name.startswith("stops_early-")  # the default run directory


def test_script_that_calls_sys_exit(early_runs):
    run = early_runs["exit"]
    assert run.rc == 3
    assert run.report["run"]["stop_reason"] == "sys.exit"
    assert (run.run_dir / "profile.prof").is_file()


def test_max_steps_stops_cleanly(early_runs):
    run = early_runs["max-steps"]
    assert run.rc == 0, run.stderr
    assert "trained 50 steps" not in run.stdout  # the script did not finish its loop
    report = run.report
    assert report["run"]["steps"] == 2 and report["run"]["stop_reason"] == "max-steps"
    assert "did not run" in run.stdout  # too few steps for the window, and the report says so


# -- bad input (no torch needed) ------------------------------------------------


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("missing.py", None, "no such file"),
        ("data.bin", b"\x00\x01\x02\xff", "not a Python script"),
        ("broken.py", b"def f(:\n", "not a Python script"),
    ],
)
def test_bad_script_exits_2(tmp_path, name, content, message):
    if content is not None:
        (tmp_path / name).write_bytes(content)
    rc, _out, err = run_cli(tmp_path, "profile", "--no-browser", name)  # refused before any child starts: in this process
    assert rc == 2
    assert message in err
    assert not (tmp_path / "torchlint-profile").exists()


def test_script_arguments_are_passed_through(early_runs):
    run = early_runs["args"]
    assert run.rc == 0, run.stderr
    assert "ARGS ['echo_args.py', '--steps', '3', '-h', '--no-browser']" in run.stdout
    assert "MAIN __main__" in run.stdout
    # torchlint's own --no-browser after the script, in a run that succeeded: no hint (it is
    # for a run that failed, test_experiment_truth's)
    assert "came after the script" not in run.stdout
    # a script that never builds an optimizer would not have imported torch._dynamo
    causes = [h.get("cause") or "" for h in run.report["hotspots"]]
    assert any("import torch" in c for c in causes) and not any("torch._dynamo" in c for c in causes)


def test_pure_python_run_without_torch_instruments(tmp_path, monkeypatch):
    """cProfile and the line sampler alone (as when torch is not installed): fast, no torch."""
    from torchlint.cli.profile import report_run
    from torchlint.profiler.run import RunOptions, make_run_dir, run_child

    script = tmp_path / "busy.py"
    script.write_text(
        "import time\n"
        "def spin(seconds):\n"
        "    end = time.perf_counter() + seconds\n"
        "    while time.perf_counter() < end:\n"
        "        pass\n"
        "spin(0.3)\n"
    )
    monkeypatch.chdir(tmp_path)
    run_dir = make_run_dir(Path("busy.py"))
    status = run_child("busy.py", [], run_dir, RunOptions(extra={"torch": False}))
    assert status == 0
    report, text = report_run(run_dir, status=status)
    assert report["coverage"]["torch_profiler"]["not_run_reason"] == "torch instruments disabled"
    assert report["run"]["steps"] == 0 and report["run"]["torch"] is None
    lines = {h["line"] for h in report["hotspots"]}
    assert lines & {3, 4}  # the busy loop, found by the line sampler
    stats = pstats.Stats(str(run_dir / "profile.prof"))
    assert any(name == "spin" for _f, _l, name in stats.stats)  # type: ignore[attr-defined]
    assert "did not run: torch instruments disabled" in text


# -- how often the host waits (issue 32) ------------------------------------------------


@pytest.mark.slow
def test_reads_per_step_are_counted_and_rank_the_repeated_read_first(blocks_run):
    assert blocks_run.rc == 0, blocks_run.stderr
    report = blocks_run.report
    assert report["run"]["steps"] == BLOCK_STEPS
    block = _line("block_syncs.py", "h.abs().mean().item()")
    logged = _line("block_syncs.py", "losses.append(loss.item())")
    assert logged < block  # source order alone would rank the logged read first
    by_line = {f["line"]: f for f in report["findings"] if f["code"] == "TL101"}
    assert by_line[block]["reads_per_step"] == pytest.approx(24.0)
    assert by_line[logged]["reads_per_step"] == pytest.approx(1.0)
    assert by_line[block]["rank"] < by_line[logged]["rank"]
    # on the CPU the count is exact and the cost an estimate, and the report says so
    expected = by_line[block]["expected"]
    assert expected["bound"] is False and "counted exactly" in expected["model"] and "estimate" in expected["model"]
    assert expected["per_step"] == pytest.approx(24 * by_line[logged]["expected"]["per_step"])
    text = (blocks_run.run_dir / "report.txt").read_text()
    assert "host waits: 24 reads per step" in text and "host waits: 1 read per step" in text
    assert "host waits: 24 reads per step" in (blocks_run.run_dir / "report.html").read_text()
