"""TLR16: DDP gradient accumulation without no_sync(), seen in the ranks' traces.

One `torchlint profile --nproc-per-node 2` run (gloo, CPU) of fixtures/scripts/ddp_accumulate.py:
two DDP models over 3 micro-batches a step, one all-reducing in every backward (reported at
its backward line), one under no_sync() until the last micro-batch (quiet).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from typing import Any

import pytest

from conftest import FIXTURES, ahead, child_env
from torchlint.correlate.ddpsync import accumulation_finding

pytestmark = pytest.mark.slow
SCRIPT = FIXTURES / "scripts" / "ddp_accumulate.py"
SOURCE = SCRIPT.read_text(encoding="utf-8").splitlines()
PLAIN_BACKWARD = next(n for n, t in enumerate(SOURCE, 1) if "loss.backward()  # TLR16" in t)
PLAIN_CALL = next(n for n, t in enumerate(SOURCE, 1) if "loss = loss_fn(plain(x), y)" in t)
QUIET_BACKWARD = next(n for n, t in enumerate(SOURCE, 1) if "quiet.backward()" in t)
QUIET_CALL = next(n for n, t in enumerate(SOURCE, 1) if "quiet = loss_fn(synced_once(x), y)" in t)


@ahead(alone=True)  # two ranks
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    cwd = tmp_path_factory.mktemp("ddp-accumulate")
    shutil.copy(SCRIPT, cwd / SCRIPT.name)
    proc = subprocess.run(
        [sys.executable, "-m", "torchlint", "profile", "--no-browser", "--output-format", "json", "--out", str(cwd / "run"),
         "--nproc-per-node", "2", "--wait", "0", "--warmup", "1", "--active", "3", SCRIPT.name, "--steps", "5"],
        cwd=cwd, env=child_env(), capture_output=True, text=True, timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def test_accumulation_without_no_sync_is_reported_at_its_backward_line(report: dict[str, Any]) -> None:
    found = [f for f in report["runtime_findings"] if f["code"] == "TLR16"]
    assert [(f["path"], f["line"]) for f in found] == [(SCRIPT.name, PLAIN_BACKWARD)]
    f = found[0]
    assert "in 3 backward passes per optimizer step" in f["message"]
    assert f"called at {SCRIPT.name}:{PLAIN_CALL}" in f["message"] and "no_sync()" in f["fix_hint"]
    assert f["expected"]["bound"] is True and f["expected"]["total"] > 0  # the extra rounds' time in flight
    assert "TLR16" in report["distributed"]["multi_rank_findings"]


def test_each_rank_counts_synchronised_passes_per_ddp_call_site(report: dict[str, Any]) -> None:
    for row in report["distributed"]["ranks"]:
        sites = row["ddp_sync"]["sites"]
        plain, quiet = sites[f"{SCRIPT.name}:{PLAIN_CALL}"], sites[f"{SCRIPT.name}:{QUIET_CALL}"]
        assert (plain["forwards_per_step"], plain["synced_per_step"]) == (3, 3)
        assert (quiet["forwards_per_step"], quiet["synced_per_step"]) == (3, 1)  # no_sync() until the last
        assert quiet["backward"] == f"{SCRIPT.name}:{QUIET_BACKWARD}"
        assert plain["comm_per_pass_s"] > 0


def test_one_synchronised_pass_a_step_is_quiet() -> None:
    one = {"sites": {"train.py:10": {"forwards_per_step": 4, "synced_per_step": 1, "steps": 3,
                                     "comm_per_pass_s": 0.002, "backward": "train.py:11"}}}
    assert accumulation_finding([(0, one, 10), (1, one, 10), (2, None, 0)], "/w", "/w/train.py", lambda p: p) == []
