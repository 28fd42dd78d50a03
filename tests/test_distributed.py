"""`torchlint profile --nproc-per-node`: torchrun ranks on the CPU (gloo), one merged report.

Two runs, shared by every test here (each spawns torch processes on a 2-core machine):

- one node, 2 ranks, no DistributedSampler (TL602), rank 1 a straggler that then
  crashes at step 7;
- two nodes simulated on this machine (two `torchlint profile` processes, one rank each,
  a c10d rendezvous on 127.0.0.1), with a DistributedSampler, rank 1 hanging at step 2
  and every node stopped by --timeout.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import FIXTURES, ahead, child_env, run_cli

pytestmark = pytest.mark.slow
SCRIPTS = FIXTURES / "scripts"
SLEEP_LINE = 48  # ddp_train.py: `time.sleep(args.slow_s)`, the straggler's own work
HANG_LINE = 46  # ddp_train.py: `time.sleep(3600)`
NODE_TIMEOUT = 25


def _command(out: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "torchlint", "profile", "--no-browser", "--output-format", "json", "--out", str(out), *args]


def _copy_scripts(tmp: Path) -> Path:
    for name in ("ddp_train.py", "ddp_no_sampler.py"):
        shutil.copy(SCRIPTS / name, tmp / name)
    return tmp


@ahead(alone=True)  # two ranks
def one_node(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    cwd = _copy_scripts(tmp_path_factory.mktemp("one-node"))
    args = ["--nproc-per-node", "2", "ddp_no_sampler.py", "--slow-rank", "1", "--slow-s", "0.08", "--crash-rank", "1", "--fault-step", "7"]
    proc = subprocess.run(_command(cwd / "run", *args), cwd=cwd, env=child_env(), capture_output=True, text=True, timeout=240)
    return {"proc": proc, "dir": cwd / "run", "report": json.loads(proc.stdout), "cwd": cwd}


@ahead(alone=True)  # two nodes
def two_nodes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    cwd = _copy_scripts(tmp_path_factory.mktemp("two-nodes"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for node in (0, 1):
        args = [
            "--timeout", str(NODE_TIMEOUT), "--nproc-per-node", "1", "--nnodes", "2", "--node-rank", str(node),
            "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "two-nodes",
            "ddp_train.py", "--hang-rank", "1", "--fault-step", "2",
        ]
        procs.append(subprocess.Popen(_command(cwd / f"node{node}", *args), cwd=cwd, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    results = [p.communicate(timeout=240) for p in procs]
    return {"procs": procs, "outputs": results, "cwd": cwd}


def _runtime(report: dict[str, Any], code: str) -> dict[str, Any] | None:
    return next((f for f in report["runtime_findings"] if f["code"] == code), None)


def test_each_rank_writes_its_own_directory(one_node: dict[str, Any]) -> None:
    run = one_node["dir"]
    for rank in (0, 1):
        d = run / f"rank{rank}"
        assert (d / "session.json").is_file() and (d / "profile.prof").is_file()
        assert not (d / ".torchlint-rank").exists()  # the pid file goes with the rank
        session = json.loads((d / "session.json").read_text())
        assert session["meta"]["distributed"]["rank"] == rank
        assert session["meta"]["distributed"]["world_size"] == 2
    assert "rank 1 failed at step 7" in (run / "rank1" / "script-output.log").read_text()
    assert "rank 1 failed" not in (run / "rank0" / "script-output.log").read_text()
    assert (run / "report.json").is_file() and (run / "report.txt").is_file()


def test_a_crashing_rank_is_named_with_its_traceback(one_node: dict[str, Any]) -> None:
    proc, report = one_node["proc"], one_node["report"]
    assert proc.returncode == 1, proc.stderr[-3000:]
    dist = report["distributed"]
    assert dist["failed_ranks"][0] == 1
    rows = {r["rank"]: r for r in dist["ranks"]}
    assert "RuntimeError: rank 1 failed at step 7" in rows[1]["traceback"]
    assert rows[0]["steps"] >= 6 and rows[1]["steps"] == 6  # rank 0's profile is still there
    text = (one_node["dir"] / "report.txt").read_text()
    assert "rank 1 failed first (exception, exit status 1)" in text
    page = (one_node["dir"] / "report.html").read_text()
    assert "Ranks side by side" in page and "rank 1 (failed)" in page and "rank 1 failed at step 7" in page
    assert "Traceback" not in proc.stderr.split("torchlint: torchrun:")[-1]  # not torchrun's own


def test_merged_report_has_per_rank_figures_and_spread(one_node: dict[str, Any]) -> None:
    dist = one_node["report"]["distributed"]
    assert dist["profiled_ranks"] == [0, 1] and dist["world_size"] == 2
    for row in dist["ranks"]:
        assert row["step_median_s"] > 0 and row["collectives_per_step_s"] is not None
        assert row["dataloader_wait_share"] is not None
    both = [f for f in dist["findings"] if set(f["ranks"]) == {"0", "1"}]
    assert both, dist["findings"]
    for f in both:
        costs = [v["observed_s"] for v in f["ranks"].values()]
        assert f["spread_s"] == pytest.approx(max(costs) - min(costs))
    text = (one_node["dir"] / "report.txt").read_text()
    assert "Ranks (2 profiled of 2; rank 0 in detail below)" in text


def test_straggler_and_time_in_collectives(one_node: dict[str, Any]) -> None:
    report = one_node["report"]
    rows = {r["rank"]: r for r in report["distributed"]["ranks"]}
    # rank 1 sleeps 80 ms a step; rank 0 waits for it inside DDP's all-reduce
    assert rows[0]["collectives_per_step_s"] > rows[1]["collectives_per_step_s"] + 0.02
    assert rows[1]["work_per_step_s"] > rows[0]["work_per_step_s"] + 0.02
    wait = _runtime(report, "TLR10")
    assert wait is not None and wait["message"].startswith("Rank 0 had a collective in flight")
    straggler = _runtime(report, "TLR11")
    assert straggler is not None and straggler["message"].startswith("Rank 1 is a straggler")
    # its line is the sleep: the time after the first step counts, so a rank that reached the
    # rendezvous or DDP's broadcast long before the other (a loaded machine) no longer wins it
    assert (straggler["path"].endswith("ddp_train.py"), straggler["line"]) == (True, SLEEP_LINE), straggler["message"]


def test_ranks_seeing_the_same_samples_confirm_tl602(one_node: dict[str, Any]) -> None:
    same = _runtime(one_node["report"], "TLR13")
    assert same is not None
    assert "all 256 samples" in same["message"] and "first batches were identical" in same["message"]
    assert "confirms TL602 at ddp_no_sampler.py:14" in same["message"]


def test_report_rebuilt_for_another_rank(one_node: dict[str, Any]) -> None:
    # a report rebuilt from the run directory runs nothing: in this process
    rc, out, err = run_cli(one_node["cwd"], "profile", "--no-browser", "--output-format", "json", "--report", str(one_node["dir"]), "--rank", "1")
    assert rc == 0, err
    report = json.loads(out)
    assert report["distributed"]["detail_rank"] == 1
    assert "rank1/profile.prof" in report["snakeviz"]["command"]


def test_two_nodes_hang_stopped_by_timeout(two_nodes: dict[str, Any]) -> None:
    cwd = two_nodes["cwd"]
    for proc, (out, err) in zip(two_nodes["procs"], two_nodes["outputs"]):
        assert proc.returncode == 124, err[-3000:]
        report = json.loads(out)
        assert report["run"]["stop_reason"] == "timeout"
    dirs = {node: sorted(p.name for p in (cwd / f"node{node}").glob("rank*")) for node in (0, 1)}
    assert sorted(dirs[0] + dirs[1]) == ["rank0", "rank1"], dirs  # one rank per node
    merged = cwd / "merged"
    merged.mkdir()
    for node in (0, 1):
        for rank_dir in (cwd / f"node{node}").glob("rank*"):
            shutil.copytree(rank_dir, merged / rank_dir.name)
    shutil.copy(cwd / "node0" / "launch.json", merged / "launch.json")
    rc, out, err = run_cli(cwd, "profile", "--no-browser", "--output-format", "json", "--report", str(merged))
    assert rc == 0, err
    report = json.loads(out)
    rows = {r["rank"]: r for r in report["distributed"]["ranks"]}
    assert {r["node_rank"] for r in rows.values()} == {0, 1}
    assert all(r["stop_reason"] == "terminated" for r in rows.values())
    assert rows[1]["stopped_at"].endswith(f"ddp_train.py:{HANG_LINE} in train")
    # with a DistributedSampler each rank reads its half: no TLR13
    assert rows[0]["loaders"][0]["sampler"] == "DistributedSampler"
    assert rows[0]["loaders"][0]["samples_per_epoch"] == 128
    assert _runtime(report, "TLR13") is None
    text = (merged / "report.txt").read_text()
    assert f"the run was stopped: timeout after {NODE_TIMEOUT} s (--timeout)" in text


def test_misused_rank_options_are_usage_errors(tmp_path: Path) -> None:
    cwd = _copy_scripts(tmp_path)
    for args in (["--timeout", "5", "ddp_train.py"], ["--rank", "1", "ddp_train.py"], ["--nproc-per-node", "2", "--experiment", "ddp_train.py"], ["--nproc-per-node", "2", "--ranks", "x", "ddp_train.py"]):
        rc, _, err = run_cli(cwd, "profile", *args)  # refused before any process starts (an exception would raise here)
        assert rc == 2 and "torchlint: error:" in err and "Traceback" not in err
