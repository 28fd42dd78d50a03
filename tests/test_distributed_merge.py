"""The multi-rank pieces without torch: the merge and its findings on synthetic ranks, the
launcher's stop (a fake launcher and fake ranks), and cprof's subtraction on a cyclic graph."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from torchlint.correlate.model import Correlated, Correlation, UnexplainedHotspot
from torchlint.correlate.ranks import (
    RankFigures,
    _innermost_user_frame,
    comm_in_traces,
    failed_ranks,
    finding_spread,
    multi_rank_findings,
)
from torchlint.findings import Finding, Location
from torchlint.profiler import distributed
from torchlint.profiler.session import ProfileSession


def _fig(rank: int, **kw: object) -> RankFigures:
    base: dict[str, object] = {"rank": rank, "directory": f"rank{rank}", "exit_status": 0, "stop_reason": "completed", "steps": 8}
    base.update(kw)
    return RankFigures(**base)  # type: ignore[arg-type]


def _corr(*found: tuple[str, int, float]) -> Correlation:
    items = []
    for code, line, cost in found:
        c = Correlated(finding=Finding(code=code, name="n", message="m", location=Location("train.py", line, 1)))
        c.observed_s = cost
        items.append(c)
    return Correlation(findings=items, hotspots=[], runtime=[], run_s=1.0, cwd="/w")


def test_time_in_collectives_counts_overlapping_ranges_once(tmp_path: Path) -> None:
    events = [
        {"ph": "X", "name": "ProfilerStep#4", "ts": 0, "dur": 1_000_000},
        {"ph": "X", "name": "gloo:all_reduce", "ts": 100_000, "dur": 200_000},
        {"ph": "X", "name": "gloo:all_reduce", "ts": 250_000, "dur": 100_000},  # overlaps the first
        {"ph": "X", "name": "ncclDevKernel_AllReduce_Sum_f32", "ts": 600_000, "dur": 50_000},
        {"ph": "X", "name": "aten::addmm", "ts": 700_000, "dur": 100_000},
        {"ph": "i", "name": "gloo:all_reduce", "ts": 900_000},
    ]
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"traceEvents": events}))
    comm, window = comm_in_traces([trace, tmp_path / "missing.json"])
    assert comm == pytest.approx(0.30)  # 100-350 ms and 600-650 ms
    assert window == pytest.approx(1.0)


def test_where_a_stopped_rank_was_is_its_innermost_user_frame(tmp_path: Path) -> None:
    user = tmp_path / "train.py"
    tb = (
        "Traceback (most recent call last):\n"
        f'  File "{user}", line 12, in <module>\n    main()\n'
        f'  File "{user}", line 46, in train\n    time.sleep(3600)\n'
        f'  File "{os.path.dirname(distributed.__file__)}/bootstrap.py", line 74, in _on_sigterm\n    raise Terminated()\n'
        "Terminated\n"
    )
    assert _innermost_user_frame(tb) == f"{user}:46 in train"
    assert _innermost_user_frame(None) is None


def test_straggler_is_the_rank_with_the_most_own_work() -> None:
    # DDP: both ranks step at 60 ms; rank 0 waits 55 ms of it in collectives, rank 1 5 ms
    figs = [
        _fig(0, step_median_s=0.060, comm_s=0.275, window_s=0.3, window_steps=5),
        _fig(1, step_median_s=0.060, comm_s=0.025, window_s=0.3, window_steps=5),
    ]
    found = {c.finding.code: c for c in multi_rank_findings(figs, {}, {}, "/w", "/w/train.py")}
    assert set(found) == {"TLR10", "TLR11"}
    assert found["TLR11"].finding.message.startswith("Rank 1 is a straggler: 55.0 ms")
    assert found["TLR10"].finding.message.startswith("Rank 0 had a collective in flight for 92%")
    even = [_fig(r, step_median_s=0.060, comm_s=0.02, window_s=0.3, window_steps=5) for r in (0, 1)]
    assert multi_rank_findings(even, {}, {}, "/w", "/w/train.py") == []


def _hot(line: int, self_s: float, step_s: float | None = None) -> UnexplainedHotspot:
    return UnexplainedHotspot(path="/w/train.py", line=line, function="train", self_s=self_s, total_s=self_s, share=None, samples=1, dataloader_s=0.0, step_s=step_s)


def test_straggler_points_at_what_it_does_beyond_the_others() -> None:
    figs = [
        _fig(0, step_median_s=0.060, comm_s=0.275, window_s=0.3, window_steps=5),
        _fig(1, step_median_s=0.060, comm_s=0.025, window_s=0.3, window_steps=5),
    ]
    # the rendezvous (line 29) is long on both ranks; only rank 1 sleeps (line 48)
    corr = {
        0: Correlation(findings=[], hotspots=[_hot(29, 0.9)], runtime=[], run_s=1.0, cwd="/w"),
        1: Correlation(findings=[], hotspots=[_hot(29, 0.8), _hot(48, 0.4)], runtime=[], run_s=1.0, cwd="/w"),
    }
    (straggler,) = [c for c in multi_rank_findings(figs, {}, corr, "/w", "/w/train.py") if c.finding.code == "TLR11"]
    assert straggler.finding.location.line == 48
    assert "train.py:48 (+400.0 ms)" in straggler.finding.message


def test_straggler_line_is_its_excess_in_the_steps_not_a_one_time_wait() -> None:
    """Rank 1 reached the rendezvous (line 29) 1.2 s before rank 0 and waited there once:
    more than its 5 steps of sleep (line 48) add up to. That wait was before the first
    step; only the time in the steps explains a per-step excess."""
    figs = [
        _fig(0, step_median_s=0.060, comm_s=0.275, window_s=0.3, window_steps=5),
        _fig(1, step_median_s=0.060, comm_s=0.025, window_s=0.3, window_steps=5),
    ]
    corr = {
        0: Correlation(findings=[], hotspots=[_hot(29, 0.1, 0.0), _hot(48, 0.0, 0.0)], runtime=[], run_s=1.0, cwd="/w"),
        1: Correlation(findings=[], hotspots=[_hot(29, 1.3, 0.0), _hot(48, 0.48, 0.4)], runtime=[], run_s=2.0, cwd="/w"),
    }
    (straggler,) = [c for c in multi_rank_findings(figs, {}, corr, "/w", "/w/train.py") if c.finding.code == "TLR11"]
    assert straggler.finding.location.line == 48
    assert "train.py:48 (+400.0 ms)" in straggler.finding.message
    # a session from before the steps' time was kept apart: the whole run's time, as before
    old = {r: Correlation(findings=[], hotspots=[_hot(h.line, h.self_s) for h in c.hotspots], runtime=[], run_s=c.run_s, cwd="/w") for r, c in corr.items()}
    (straggler,) = [c for c in multi_rank_findings(figs, {}, old, "/w", "/w/train.py") if c.finding.code == "TLR11"]
    assert straggler.finding.location.line == 29


def test_per_step_findings_need_three_steps_on_every_rank() -> None:
    figs = [
        _fig(0, step_median_s=0.060, comm_s=0.275, window_s=0.3, window_steps=5),
        _fig(1, steps=1, step_median_s=0.060, comm_s=0.025, window_s=0.3, window_steps=5),
    ]
    assert multi_rank_findings(figs, {}, {}, "/w", "/w/train.py") == []


def _loader(sampler: str, per_epoch: int, digest: str) -> dict[str, object]:
    return {"path": "/w/train.py", "line": 40, "sampler": sampler, "samples_per_epoch": per_epoch, "dataset_len": 256, "first_batches_digest": digest}


def test_same_samples_on_every_rank_and_not_with_a_distributed_sampler() -> None:
    same = [_fig(r, steps=1, loaders=[_loader("RandomSampler", 256, "ab")]) for r in (0, 1)]
    static = {0: _corr(("TL602", 14, 0.0))}
    (finding,) = multi_rank_findings(same, {}, static, "/w", "/w/train.py")
    assert finding.finding.code == "TLR13" and finding.finding.location.line == 40
    assert "first batches were identical" in finding.finding.message
    assert "confirms TL602 at train.py:14" in finding.finding.message
    shuffled = [_fig(r, loaders=[_loader("RandomSampler", 256, f"d{r}")]) for r in (0, 1)]
    (finding,) = multi_rank_findings(shuffled, {}, {}, "/w", "/w/train.py")
    assert "identical" not in finding.finding.message
    sharded = [_fig(r, loaders=[_loader("DistributedSampler", 128, f"d{r}")]) for r in (0, 1)]
    assert multi_rank_findings(sharded, {}, {}, "/w", "/w/train.py") == []


def test_dataloader_wait_apart_across_ranks() -> None:
    figs = [_fig(0, wait_share=0.02, step_median_s=0.05), _fig(1, wait_share=0.30, step_median_s=0.05)]
    sessions = {r: ProfileSession(dataloader={"loaders": [{"path": "/w/train.py", "line": 40}]}) for r in (0, 1)}
    (finding,) = [c for c in multi_rank_findings(figs, sessions, {}, "/w", "/w/train.py") if c.finding.code == "TLR12"]
    assert "rank 0 2%, rank 1 30%" in finding.finding.message and finding.finding.location.line == 40


def test_finding_cost_per_rank_and_spread() -> None:
    rows = finding_spread({0: _corr(("TL101", 5, 0.010)), 1: _corr(("TL101", 5, 0.040), ("TL201", 9, 0.002))})
    by_code = {r["code"]: r for r in rows}
    assert by_code["TL101"]["ranks"]["0"]["observed_s"] == 0.010
    assert by_code["TL101"]["spread_s"] == pytest.approx(0.030) and by_code["TL101"]["max_rank"] == "1"
    assert by_code["TL201"]["spread_s"] == 0.0 and set(by_code["TL201"]["ranks"]) == {"1"}
    assert rows[0]["code"] == "TL101"  # the costliest first


def test_first_failure_comes_first() -> None:
    figs = [
        _fig(0, exit_status=1, stop_reason="exception", ended_at=105.0),
        _fig(1, exit_status=1, stop_reason="exception", ended_at=100.0),
        _fig(2, exit_status=143, stop_reason="terminated", ended_at=106.0),
    ]
    assert [f.rank for f in failed_ranks(figs)] == [1, 0]


_FAKE_RANK = """\
import os, signal, sys, time
from pathlib import Path
d = Path(sys.argv[1]) / ("rank" + sys.argv[2]); d.mkdir(parents=True, exist_ok=True)
ignore = sys.argv[3] == "ignore"
def on_term(signum, frame):
    (d / "got-sigterm").write_text("1")
    if not ignore:
        sys.exit(143)
signal.signal(signal.SIGTERM, on_term)
os.setsid()
(d / ".torchlint-rank").write_text(str(os.getpid()))
time.sleep(60)
"""


def _fake_launcher(run_dir: Path, mode: str) -> list[str]:
    """A launcher that starts two fake ranks (each its own session, as torchrun's) and waits."""
    code = (
        "import signal, subprocess, sys\n"
        "signal.signal(signal.SIGTERM, lambda *a: None)  # as torchrun: wait for the ranks\n"
        f"procs = [subprocess.Popen([sys.executable, '-c', {_FAKE_RANK!r}, {str(run_dir)!r}, str(r), {mode!r}]) for r in (0, 1)]\n"
        "sys.exit(max(p.wait() for p in procs))\n"
    )
    return [sys.executable, "-c", code]


def _wait_for_ranks(run_dir: Path) -> None:
    deadline = time.monotonic() + 30
    while len(list(run_dir.glob("rank*/.torchlint-rank"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)


@pytest.mark.parametrize(("how", "reason"), [(signal.SIGTERM, "terminated"), (signal.SIGHUP, "hangup")], ids=["sigterm", "sighup"])
def test_sigterm_stops_every_rank(tmp_path: Path, how: int, reason: str) -> None:
    def terminate_us() -> None:
        _wait_for_ranks(tmp_path)
        os.kill(os.getpid(), how)

    threading.Thread(target=terminate_us, daemon=True).start()
    result = distributed.run_ranks(_fake_launcher(tmp_path, "exit"), tmp_path, None)
    assert result.stopped == reason and not result.killed
    assert all((tmp_path / f"rank{r}" / "got-sigterm").is_file() for r in (0, 1))
    assert not list(tmp_path.glob("rank*/.torchlint-rank"))


def test_timeout_kills_ranks_that_ignore_sigterm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(distributed, "STOP_GRACE_S", 1.0)
    t0 = time.monotonic()
    result = distributed.run_ranks(_fake_launcher(tmp_path, "ignore"), tmp_path, timeout=2.0)
    assert result.stopped == "timeout" and result.killed
    assert time.monotonic() - t0 < 20
    assert all((tmp_path / f"rank{r}" / "got-sigterm").is_file() for r in (0, 1))


def test_launch_arguments() -> None:
    assert distributed.Launch(2).torchrun_args() == ["--nproc-per-node", "2", "--nnodes", "1", "--standalone"]
    multi = distributed.Launch(1, nnodes="2", node_rank=1, rdzv_backend="c10d", rdzv_endpoint="10.0.0.1:29400", rdzv_id="j")
    assert "--standalone" not in multi.torchrun_args()
    assert multi.torchrun_args()[4:] == ["--node-rank", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", "10.0.0.1:29400", "--rdzv-id", "j"]
    assert distributed.parse_ranks("3,0,3") == (0, 3)
    with pytest.raises(ValueError):
        distributed.parse_ranks("x")


def test_every_rank_runs_the_bootstrap_under_torchrun(tmp_path: Path) -> None:
    from torchlint.profiler.run import RunOptions

    launch = distributed.Launch(2, ranks=(0, 3))
    cmd = distributed.launcher_command(launch, "train.py", ["--lr", "3e-4"], RunOptions(max_steps=5), tmp_path)
    assert cmd[:2] == [sys.executable, "-c"] and "torch.distributed.run import main" in cmd[2]
    rest = cmd[3:]
    no_python = rest.index("--no-python")
    assert rest[:no_python] == launch.torchrun_args()
    assert rest[no_python + 1:no_python + 3] == [sys.executable, "-c"]  # what torchrun runs per rank
    options = json.loads(rest[no_python + 4])
    assert options["distributed"] and options["ranks"] == [0, 3] and options["parent_pid"] is None
    assert options["max_steps"] == 5 and options["run_dir"] == str(tmp_path)
    assert rest[no_python + 5:] == ["train.py", "--lr", "3e-4"]


def test_overwrite_empties_a_multi_rank_run_directory(tmp_path: Path) -> None:
    from torchlint.profiler.run import CLAIM, RUN_MARKER, RunDirError, make_run_dir, release_run_dir

    out = make_run_dir(tmp_path / "train.py", tmp_path / "run")  # as a multi-rank run leaves it
    (out / "rank0").mkdir(parents=True)
    (out / "rank0" / "session.json").write_text("{}")
    (out / "launch.json").write_text("{}")
    release_run_dir(out)
    with pytest.raises(RunDirError, match="not empty"):
        make_run_dir(tmp_path / "train.py", out)
    run_dir = make_run_dir(tmp_path / "train.py", out, overwrite=True)
    assert sorted(p.name for p in run_dir.iterdir()) == sorted([CLAIM, RUN_MARKER])
    release_run_dir(run_dir)

