"""The GPU kit (benchmarks/gpu_check.py) without a GPU: its plumbing, so it does not rot
between the sessions that find one.

- ``--dry-run`` end to end: the wheel folder, the gpu-marked tests collected, the profile
  commands checked against ``torchlint profile --help``, each hand fix on the lines of a
  finding of its rule, the output layout the device tool brings back, the summary;
- the micro-benchmarks' code at tiny sizes on the CPU (no figure: their arithmetic runs);
- what a real run's summary shows, rendered from a report.json the CUDA models produced
  from plain data, and a deadline that stops a command and the steps after it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu_steps  # noqa: E402
from gpu_profile import digest_run  # noqa: E402
from gpu_summary import render_summary  # noqa: E402

WHEEL = "libcst-1.9.0-cp312-cp312-manylinux_2_28_x86_64.whl"


def dry_run(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, Path]:
    out = tmp_path / "out"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("OUT", None)
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--dry-run", "--out", str(out),
                           "--work", str(tmp_path / "work"), *args],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    return proc, out


def test_the_dry_run_checks_every_steps_plumbing_and_leaves_what_the_device_tool_brings_back(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / WHEEL).write_bytes(b"")
    proc, out = dry_run(tmp_path, "--wheels", str(wheels), "--no-smoke")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    files = sorted(p.relative_to(out) for p in out.rglob("*") if p.is_file())
    assert {"summary.md", "gpu_check.json", "log.txt"} <= {str(p) for p in files}
    assert len(files) <= 8 and all(re.fullmatch(r"[A-Za-z0-9._-]+", p.name) for p in files)  # the tool's limits
    data = json.loads((out / "gpu_check.json").read_text())
    verdicts = {name: step["verdict"] for name, step in data["steps"].items()}
    assert verdicts == {"setup": "DRY", "pytest": "DRY", "profile": "DRY", "micro": "DRY", "savings": "DRY",
                        "nproc2": "SKIPPED"}, data["steps"]
    collected = data["steps"]["pytest"]["collected"]
    assert any("test_gpu_run.py" in t for t in collected) and any("test_gpu_remedies" in t for t in collected)
    assert all(r["script_exists"] for r in data["steps"]["profile"]["runs"].values())
    fixes = {r["fix"]: r for r in data["steps"]["savings"]["rows"]}
    assert fixes["gpu_busy.fix_TL101.py"]["static"] is True and fixes["gpu_busy.fix_TLR08.py"]["static"] == "runtime"
    summary = (out / "summary.md").read_text()
    assert summary.startswith("# torchlint GPU check (dry run") and "| savings | DRY |" in summary
    assert "--experiment --budget" in summary and "gpu_busy.fix_TLR08.py" in summary


def test_missing_wheels_are_said_with_the_command_that_fetches_them(tmp_path):
    proc, out = dry_run(tmp_path, "--wheels", str(tmp_path / "none"), "--only", "profile", "--no-smoke")
    data = json.loads((out / "gpu_check.json").read_text())
    assert proc.returncode == 1
    assert data["steps"]["setup"]["verdict"] == "FAIL" and "gpu_wheels.sh" in data["steps"]["setup"]["why"]
    assert data["steps"]["micro"]["verdict"] == "not run"


def test_the_micro_benchmarks_code_runs_at_tiny_sizes(tmp_path):
    pytest.importorskip("torch")
    import gpu_micro

    assert gpu_micro.main(["--smoke", "--json", str(tmp_path / "m.json")]) == 0
    data = json.loads((tmp_path / "m.json").read_text())
    assert data["smoke"] and not data["errors"]
    keys = {r["key"] for r in data["results"]}
    for code in ("TL101", "TL102", "TL103", "TL110", "TL111", "TL112", "TL201", "TL202", "TL401", "TL402-conv",
                 "TL402-linear", "TLR02", "TLR03", "TLR07", "TLR08"):
        assert code in keys
    tl202 = next(r for r in data["results"] if r["key"] == "TL202")
    assert [f["arm"] for f in tl202["fixes"]] == ["pin_memory=True", "pin_memory=True + non_blocking"]
    assert all("ci_low" in f and f["ci_low"] <= f["ci_high"] for r in data["results"] for f in r["fixes"])


def _report(tmp_path: Path) -> Path:
    """A report.json made by the real report code from a CUDA session given as plain data."""
    from test_gpu_models import AMPERE, _matmul, session, step_events, tl101, window_of

    from torchlint.estimate import analyse
    from torchlint.report import profile_json

    script = tmp_path / "train.py"
    script.write_text("import torch\n" + "x = 1\n" * 7 + "total += loss.item()\n")
    events = step_events(0, wait=4300, gap=120, gemm=4300) + step_events(10_000, wait=4300, gap=120, gemm=4300)
    s = session(str(script), window_of(tmp_path, events, str(script)),
                patterns={"matmuls": [_matmul(str(script), 5, [2048, 2048, 2048], 800)], "tf32": AMPERE})
    data = profile_json.build(analyse([tl101()], s), s, run_dir=str(tmp_path), static={}, artifacts={}, snakeviz={})
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "report.json").write_text(profile_json.render(data))
    return run_dir


def test_a_real_runs_digest_and_summary(tmp_path):
    run_dir = _report(tmp_path)
    entry = digest_run(run_dir, {"rc": 0, "wall_s": 3.0, "timed_out": False, "output": ""})
    assert entry["verdict"] == "PASS" and entry["steps"] == 100
    assert [(r["rank"], r["code"]) for r in entry["ranked"]] == [(1, "TLR08"), (2, "TL101")]
    assert entry["ranked"][1]["expected_per_step"] == pytest.approx(120e-6)
    assert entry["sync_gaps"][0]["path"] == "train.py" and entry["matmul_device_s"] > 0
    results = {"dry_run": False, "started": "now", "facts": {"devices": [{"name": "GPU", "capability": "9.0",
               "memory_gib": 139.8}], "torch": "2.11.0", "driver": "580"},
               "steps": {"profile": {"verdict": "PASS", "why": "1 run", "wall_s": 9.0, "runs": {"gpu_busy": entry}},
                         "micro": {"verdict": "PASS", "why": "1", "results": [{
                             "key": "TL101", "anti_pattern": "item", "anti_s": 0.009, "fixes": [
                                 {"arm": "read once", "fix_s": 0.00888, "saving_s": 0.00012, "ci_low": 0.0001,
                                  "ci_high": 0.00014, "share": 0.0133, "verdict": "saving"}]}]}}}
    text = render_summary(results)
    assert "GPU (cc 9.0, 139.8 GiB)" in text and "| 1 | TLR08:5 |" in text and "| 2 | TL101:9 | 1 | 430.0 ms | 0.120 ms |" in text
    assert "| 1 | TLR08:5 | - |" in text  # a runtime finding has no reads per step
    assert "| TL101 | item | read once | 9.000 ms | 8.880 ms | +0.120 ms [+0.100 ms, +0.140 ms] | 1% | saving |" in text
    assert "Tensor.item: 2 syncs" in text


def test_the_deadline_stops_a_command_and_the_steps_after_it(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    kit = gpu_steps.Kit(out=out, work=tmp_path, dry=True, deadline_s=gpu_steps.RESERVE_S + 3, wheels=tmp_path)
    t0 = time.perf_counter()
    res = kit.run([sys.executable, "-c", "import subprocess, sys, time; "
                   "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); time.sleep(60)"], timeout=60)
    assert res["timed_out"] and time.perf_counter() - t0 < 20
    kit.run_step("later", lambda k: {"verdict": "PASS"})
    assert kit.results["steps"]["later"] == {"verdict": "not run", "why": "the kit's deadline was reached"}
    assert "TIMEOUT" in (out / "log.txt").read_text()


def test_a_truth_too_coarse_to_see_a_saving_neither_confirms_nor_contradicts_it():
    """The first H200 run of the kit: a 0.48 ms-a-step saving (29 ms over the run) against a
    whole-run truth of 52 ms [-310 ms, +219 ms]: the truth cannot see it, so it is no FAIL."""
    from gpu_truth import _agreement, savings_verdict

    coarse = {"verdict": "no measurable change", "low": -0.310, "high": 0.219, "true": 0.052}
    clear = {"verdict": "saving", "low": 0.121, "high": 0.379, "true": 0.252}
    assert _agreement("saving", 0.0288, coarse) == "coarse"
    assert _agreement("saving", 0.5, coarse) is False  # outside the truth's interval: a contradiction
    assert _agreement("saving", 0.30, clear) is True
    assert _agreement("slower", -0.05, clear) is False

    def row(agree):
        return {"measured_verdict": "saving", "truth": coarse, "agree": agree}

    assert savings_verdict([row("coarse")], {})["verdict"] == "SKIPPED"
    assert savings_verdict([row("coarse"), row(True)], {})["verdict"] == "PASS"
    assert savings_verdict([row(True), row(False)], {})["verdict"] == "FAIL"
    assert "1 the truth was too coarse" in savings_verdict([row("coarse"), row(True)], {})["why"]
