"""Autograd's anomaly detection at run time: TLR17 from a real profiled run of
fixtures/scripts/anomaly_train.py (the line TL306 flags statically), the decision on
recorded sessions, and the experiment's switch that keeps the mode off."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FIXTURES, ahead, child_env
from torchlint.config import from_table
from torchlint.correlate.patterns import anomaly_findings
from torchlint.engine import lint_source
from torchlint.experiment.plan import candidates_for
from torchlint.findings import Finding, Location
from torchlint.profiler.session import ProfileSession

SCRIPT = FIXTURES / "scripts" / "anomaly_train.py"
STEPS, ANOMALY_STEPS = 8, 3


def _line(needle: str) -> int:
    return next(i for i, t in enumerate(SCRIPT.read_text().splitlines(), 1) if needle in t)


def test_the_static_rule_flags_the_line_the_run_reports():
    text = SCRIPT.read_text()
    findings = lint_source(text, str(SCRIPT), from_table({"select": ["TL306"]}, FIXTURES))
    assert [(f.code, f.line) for f in findings] == [("TL306", _line("set_detect_anomaly(True)"))]


@ahead()
def anomaly_run(tmp_path_factory: pytest.TempPathFactory) -> subprocess.CompletedProcess[str]:
    pytest.importorskip("torch")
    cwd = tmp_path_factory.mktemp("anomaly")
    shutil.copy(SCRIPT, cwd / SCRIPT.name)
    return subprocess.run(
        [sys.executable, "-m", "torchlint", "profile", "--no-browser", "--output-format", "json", "--out", "run",
         "--wait", "0", "--warmup", "1", "--active", "2", SCRIPT.name, "--steps", str(STEPS),
         "--anomaly-steps", str(ANOMALY_STEPS)],
        cwd=cwd, env=child_env(), capture_output=True, text=True, timeout=300,
    )


def test_profiled_run_counts_backward_passes_with_anomaly_on(anomaly_run):
    proc = anomaly_run
    assert proc.returncode == 0, proc.stderr
    found = [f for f in json.loads(proc.stdout)["runtime_findings"] if f["code"] == "TLR17"]
    assert len(found) == 1
    (f,) = found
    assert f["line"] == _line("set_detect_anomaly(True)")
    # the setting line ran once; the off-switch (`set_detect_anomaly(False)`) is not a site
    assert f"on for {ANOMALY_STEPS} of {STEPS} backward passes (turned on at this line)" in f["message"]


def _session(tmp_path: Path, anomaly: dict) -> ProfileSession:
    script = tmp_path / "train.py"
    script.write_text("\n".join(f"x{i} = {i}" for i in range(30)) + "\n")
    meta = {"cwd": str(tmp_path), "script": str(script), "script_wall_s": 1.0, "patterns": {"anomaly": anomaly}}
    return ProfileSession(meta=meta, steps={"count": 10})


def _make(code, message, path, line, hint):  # type: ignore[no-untyped-def]
    return Finding(code=code, name="anomaly-mode-enabled", message=message, location=Location(path, line, 1), fix_hint=hint or "")


def test_no_finding_when_no_backward_ran_with_it_on(tmp_path):
    s = _session(tmp_path, {"backwards": 10, "on": 0, "sites": []})
    assert anomaly_findings(s, _make) == []


def test_the_busiest_site_is_where_it_points(tmp_path):
    path = str(tmp_path / "train.py")
    s = _session(tmp_path, {"backwards": 10, "on": 10, "sites": [
        {"path": path, "line": 5, "function": "a", "calls": 1}, {"path": path, "line": 12, "function": "step", "calls": 10}]})
    (c,) = anomaly_findings(s, _make)
    assert c.finding.line == 12 and "on for 10 of 10 backward passes (turned on at this line, 10 times)" in c.finding.message
    assert c.calls == 10


def test_turned_on_outside_user_code_points_at_the_script(tmp_path):
    s = _session(tmp_path, {"backwards": 4, "on": 4, "sites": []})
    (c,) = anomaly_findings(s, _make)
    assert c.finding.line == 1 and "outside the user's code" in c.finding.message


def test_the_experiment_switch_keeps_anomaly_mode_off(monkeypatch):
    torch = pytest.importorskip("torch")
    from torchlint.profiler.switches import apply, counts

    monkeypatch.setattr(torch, "set_anomaly_enabled", torch.set_anomaly_enabled)  # restored after the test
    applied = apply([{"target": "anomaly"}])
    torch.autograd.set_detect_anomaly(True)
    with torch.autograd.detect_anomaly():
        assert not torch.is_anomaly_enabled()
    assert not torch.is_anomaly_enabled()
    assert counts(applied) == [{"target": "anomaly", "calls": 2}]


@pytest.mark.parametrize("code", ["TL306", "TLR17"])
def test_plan_switches_anomaly_off_for_both_codes(code):
    finding = Finding(code=code, name="x", message="m", location=Location("/abs/train.py", 3, 1))
    (candidate,) = candidates_for(finding, cuda=False, cores=2)
    assert candidate.kind == "runtime" and candidate.switches == [{"target": "anomaly"}]
