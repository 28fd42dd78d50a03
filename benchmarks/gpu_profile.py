"""The GPU check's step 2: ``torchlint profile`` on the GPU fixtures, and what the summary
keeps of each run (its report.json and experiment.json, digested).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

from gpu_steps import BLOCK_FIXTURE, GPU_SCRIPTS, SMALL_FIXTURE, Kit

#: (run name, script, script args, --experiment budget or None: then a plain run is timed beside
#: it, for the overhead). gpu_loader without --experiment is tests/test_gpu_run.py's.
PROFILE_RUNS: list[tuple[str, str, list[str], float | None]] = [
    ("gpu_syncs", "gpu_syncs.py", ["--steps", "30"], None),
    ("gpu_busy", "gpu_busy.py", [], None),
    ("block_syncs", "block_syncs.py", ["--steps", "30"], None),  # issue 32: 24 reads a step rank above 1
    ("gpu_busy-experiment", "gpu_busy.py", [], 50.0),
    ("gpu_loader-experiment", "gpu_loader.py", [], 75.0),
]
PROFILE_OPTIONS = ("--experiment", "--budget", "--output-format", "--no-browser", "--out", "--nproc-per-node")


def scripts_dir(kit: Kit) -> Path:
    """The GPU scripts, their hand fixes and the small fixture, copied into one work folder."""
    where = kit.work / "scripts"
    if not where.is_dir():
        where.mkdir(parents=True)
        for p in [*GPU_SCRIPTS.glob("*.py"), SMALL_FIXTURE, BLOCK_FIXTURE]:
            shutil.copy(p, where / p.name)
    return where


def profile_cmd(kit: Kit, name: str, script: str, args: list[str], budget: float | None) -> list[str]:
    cmd = [sys.executable, "-m", "torchlint", "profile", "--no-browser", "--output-format", "json",
           "--out", str(kit.work / "runs" / name)]
    if budget is not None:
        cmd += ["--experiment", "--budget", f"{budget:g}"]
    return [*cmd, script, *args]


def profile_runs(kit: Kit) -> dict[str, Any]:
    where = scripts_dir(kit)
    (kit.work / "runs").mkdir(exist_ok=True)
    runs: dict[str, Any] = {}
    if kit.dry:
        res = kit.python("-m", "torchlint", "profile", "--help", timeout=60)
        missing = [o for o in PROFILE_OPTIONS if o not in res["output"]]
        for name, script, args, budget in PROFILE_RUNS:
            runs[name] = {"command": " ".join(profile_cmd(kit, name, script, args, budget)[1:]),
                          "script_exists": (where / script).is_file()}
        ok = res["rc"] == 0 and not missing and all(r["script_exists"] for r in runs.values())
        return {"verdict": "DRY" if ok else "FAIL", "runs": runs,
                "why": "commands checked against `torchlint profile --help`" if ok else
                f"profile --help: exit {res['rc']}, options missing {missing}; scripts {runs}"}
    for name, script, args, budget in PROFILE_RUNS:
        if kit.remaining() < (budget or 0) + 40:
            runs[name] = {"verdict": "not run", "why": "the kit's deadline"}
            continue
        entry: dict[str, Any] = {}
        if budget is None:  # one plain run beside it: the overhead, roughly (one pair)
            plain = kit.python(str(where / script), *args, timeout=90, cwd=where)
            entry["plain_wall_s"] = plain["wall_s"] if plain["rc"] == 0 else None
        res = kit.run(profile_cmd(kit, name, script, args, budget), timeout=(budget or 0) + 120, cwd=where)
        entry.update(digest_run(kit.work / "runs" / name, res))
        if entry.get("plain_wall_s"):
            entry["overhead"] = res["wall_s"] / entry["plain_wall_s"]
        runs[name] = entry
        kit.pack_runs()
        kit.progress("profile", {"runs": runs})
    bad = [n for n, r in runs.items() if r.get("verdict") == "FAIL"]
    return {"verdict": "FAIL" if bad else "PASS", "runs": runs,
            "why": f"failed: {', '.join(bad)}" if bad else f"{sum(1 for r in runs.values() if r.get('verdict') == 'PASS')} runs reported"}


def digest_run(run_dir: Path, res: dict[str, Any]) -> dict[str, Any]:
    """What the summary shows of one profile run, from its report.json and experiment.json."""
    entry: dict[str, Any] = {"exit": res["rc"], "wall_s": res["wall_s"], "timed_out": res["timed_out"]}
    report_file = run_dir / "report.json"
    if not report_file.is_file():
        entry.update(verdict="FAIL", why=f"no report.json (exit {res['rc']}): {res['output'][-600:]}")
        return entry
    report = json.loads(report_file.read_text(encoding="utf-8"))
    run, window = report.get("run") or {}, report.get("torch_window") or {}
    steps = int(run.get("steps") or 0)
    active = int(window.get("active_steps") or 0)
    ranked = sorted((f for f in report.get("findings", []) + report.get("runtime_findings", []) if f.get("rank")),
                    key=lambda f: f["rank"])
    entry.update(
        device=run.get("device"), torch=run.get("torch"), steps=steps, step_median_s=run.get("step_median_s"),
        script_s=run.get("script_s"), gpu_idle_share=window.get("gpu_idle_share"),
        window_syncs_per_step=(window.get("syncs") or 0) / active if active else None,
        sync_gaps=window.get("sync_gaps"), matmul_device_s=window.get("matmul_device_s"),
        ranked=[_finding_row(f) for f in ranked],
        unranked=[_finding_row(f) for f in report.get("findings", []) + report.get("runtime_findings", [])
                  if not f.get("rank") and (f.get("observed") or f.get("expected"))][:12],
        runtime=[{"code": f.get("code"), "line": f.get("line"), "message": f.get("message")}
                 for f in report.get("runtime_findings", [])],
        runtime_skipped=report.get("runtime_skipped"), warnings=run.get("warnings"),
    )
    exp_file = run_dir / "experiment.json"
    if exp_file.is_file():
        exp = json.loads(exp_file.read_text(encoding="utf-8"))
        entry["experiment"] = {"budget_s": exp.get("budget_s"), "spent_s": exp.get("spent_s"),
                               "measurements": [_measurement_row(m) for m in exp.get("measurements", [])],
                               "skipped": exp.get("skipped", [])}
    ok = res["rc"] == 0 and steps > 0 and str(run.get("device") or "").startswith("cuda")
    entry.update(verdict="PASS" if ok else "FAIL",
                 why="" if ok else f"exit {res['rc']}, {steps} steps, device {run.get('device')}")
    return entry


def _finding_row(f: dict[str, Any]) -> dict[str, Any]:
    exp, meas, obs = f.get("expected") or {}, f.get("measured") or {}, f.get("observed") or {}
    return {"rank": f.get("rank"), "code": f.get("code"), "line": f.get("line"), "syncs": f.get("syncs"),
            "reads_per_step": f.get("reads_per_step"),
            "observed_s": obs.get("seconds"), "expected_per_step": exp.get("per_step"), "expected_total": exp.get("total"),
            "expected_model": exp.get("model"), "not_applicable": exp.get("not_applicable"),
            "measured": _measurement_row(meas) if meas else None}


def _measurement_row(m: dict[str, Any]) -> dict[str, Any]:
    return {k: m.get(k) for k in ("code", "line", "variant", "verdict", "per_step", "ci_low", "ci_high", "total", "why",
                                  "p_corrected")}
