"""The GPU check's step 4: ``--experiment``'s savings on CUDA against the A/B truth.

For each script in fixtures/scripts/gpu/ (``NAME.py``) and its hand fixes
(``NAME.fix_CODE.py``, one anti-pattern fixed each), the truth is the original and the
fixes run as they are in warm forks of one window server (the experiment's own
machinery, :class:`torchlint.experiment.server.WindowServer`), one untimed round, then
rounds in alternating order; the figure is the Hodges-Lehmann shift of the whole-run
times with its exact 95 % interval (``torchlint.experiment.stats.compare``), as
benchmarks/savings.py does on the CPU. Each fix is matched to the finding of its rule
on the lines it changed in the ``NAME-experiment`` run of step 2, whose report carries
the expected saving, the measured one and the rank.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from savings import changed_lines, findings_of  # noqa: E402

from torchlint.experiment.stats import compare  # noqa: E402
from torchlint.savings import NO_CHANGE  # noqa: E402

ROUNDS = 4  # timed rounds after the warm-up: 4 runs an arm, the fewest that can exclude 0


def scripts(where: Path) -> dict[str, list[Path]]:
    """Each GPU savings script with its hand fixes."""
    return {p.stem: sorted(where.glob(f"{p.stem}.fix_*.py"))
            for p in sorted(where.glob("gpu_*.py")) if ".fix_" not in p.name and any(where.glob(f"{p.stem}.fix_*.py"))}


def fix_code(fix: Path) -> str:
    return fix.name.split(".fix_")[1].split("-")[0].removesuffix(".py")


def savings_rows(kit: Any, where: Path) -> dict[str, Any]:
    table = scripts(where)
    if not table:
        return {"verdict": "FAIL", "why": f"no GPU savings scripts with hand fixes in {where}"}
    if kit.dry:
        return _dry(kit, where, table)
    rows: list[dict[str, Any]] = []
    notes: dict[str, str] = {}
    for name, fixes in table.items():
        run_dir = kit.work / "runs" / f"{name}-experiment"
        if not (run_dir / "report.json").is_file():
            notes[name] = "no --experiment run of it (step 2 did not reach it)"
            continue
        report = json.loads((run_dir / "report.json").read_text(encoding="utf-8"))
        exp_file = run_dir / "experiment.json"
        experiment = json.loads(exp_file.read_text(encoding="utf-8")) if exp_file.is_file() else {}
        truth, why = fork_truth(kit, where, name, fixes)
        if why:
            notes[name] = why
        steps = int((report.get("run") or {}).get("steps") or 0)
        found = findings_of(report, experiment)
        for fix in fixes:
            rows.append(_row(name, fix, where, found, truth.get(fix.name), steps))
        kit.progress("savings", {"rows": rows, "notes": notes})
    return {"rows": rows, "notes": notes, **savings_verdict(rows, notes)}


def savings_verdict(rows: list[dict[str, Any]], notes: dict[str, str]) -> dict[str, str]:
    """PASS when no measured saving contradicts its truth and at least one is confirmed by it.

    A truth of "no measurable change" whose interval holds the measured figure is too coarse
    to judge (whole runs vary by more than a small per-step saving adds up to): it neither
    confirms nor contradicts, and the summary says so instead of calling it a disagreement.
    """
    judged = [r for r in rows if r.get("measured_verdict") not in (None, "skipped", "not a finding") and r.get("truth")]
    if not judged:
        return {"verdict": "SKIPPED",
                "why": "nothing measured to compare: " + "; ".join(f"{k}: {v}" for k, v in notes.items())}
    agree = [r for r in judged if r["agree"] is True]
    coarse = [r for r in judged if r["agree"] == "coarse"]
    contra = [r for r in judged if r["agree"] is False]
    why = (f"{len(agree)}/{len(judged)} measured savings agree with the A/B truth (same verdict), "
           f"{len(contra)} contradict it, {len(coarse)} the truth was too coarse to judge")
    verdict = "FAIL" if contra else ("PASS" if agree else "SKIPPED")
    return {"verdict": verdict, "why": why}


def fork_truth(kit: Any, where: Path, name: str, fixes: list[Path]) -> tuple[dict[str, dict[str, Any]], str | None]:
    """The whole-run time of the original and each fix, alternated in warm forks."""
    from torchlint.experiment.server import WindowServer

    arms = [where / f"{name}.py", *fixes]
    times: dict[str, list[float]] = {p.name: [] for p in arms}
    logs = kit.work / f"truth-{name}"
    logs.mkdir(exist_ok=True)
    why = None
    server = WindowServer(logs)
    try:
        for r in range(ROUNDS + 1):
            round_t = time.perf_counter()
            for p in arms if r % 2 == 0 else list(reversed(arms)):
                out = server.window(p.name, [], str(where), max_steps=None, timeout_s=max(kit.remaining(), 5.0))
                if out.get("status", 1) != 0 or out.get("timeout") or out.get("crashed"):
                    return {}, f"{p.name} failed in a warm fork: {out.get('error')} (see truth-{name}/windows.log)"
                if r:  # round 0 is the warm-up
                    times[p.name].append(out["wall_s"])
            kit.log(f"truth {name}: round {r} took {time.perf_counter() - round_t:.1f}s")
            if r < ROUNDS and kit.remaining() < 1.5 * (time.perf_counter() - round_t) + 10:
                why = f"stopped after {r} timed rounds: the kit's deadline"
                break
    finally:
        server.close()
    base = times[arms[0].name]
    out: dict[str, dict[str, Any]] = {}
    for p in fixes:
        if len(base) >= 2 and len(times[p.name]) >= 2:
            c = compare([[t] for t in base], [[t] for t in times[p.name]])
            out[p.name] = {"true": c.per_step, "low": c.ci_low, "high": c.ci_high, "verdict": c.verdict,
                           "runs": len(times[p.name]), "original_s": c.original_median, "fixed_s": c.variant_median}
    return out, why


def _row(name: str, fix: Path, where: Path, found: list[dict[str, Any]], truth: dict[str, Any] | None,
         steps: int) -> dict[str, Any]:
    code = fix_code(fix)
    lines = changed_lines(where / f"{name}.py", fix)
    match = [r for r in found if r["code"] == code and (r["line"] in lines or code.startswith("TLR"))]
    row: dict[str, Any] = dict(match[0]) if match else {"code": code, "line": min(lines) if lines else None,
                                                        "rank": None, "measured_verdict": "not a finding"}
    row.update(script=name, fix=fix.name, steps=steps, truth=truth)
    if truth and row.get("measured") is not None:
        close = abs(row["measured"] - truth["true"]) <= max(0.3 * abs(truth["true"]), 0.020)
        row.update(agree=_agreement(row["measured_verdict"], row["measured"], truth), within=close)
    else:
        row.update(agree=None, within=None)  # nothing measured (skipped, not a finding) or no truth
    return row


def _agreement(measured_verdict: str, measured: float, truth: dict[str, Any]) -> bool | str:
    """True: the same verdict; "coarse": the truth saw no change but its interval holds the figure."""
    if measured_verdict == truth["verdict"]:
        return True
    if truth["verdict"] == NO_CHANGE and truth["low"] <= measured <= truth["high"]:
        return "coarse"
    return False


def _dry(kit: Any, where: Path, table: dict[str, list[Path]]) -> dict[str, Any]:
    """The fixtures' plumbing: each hand fix changes lines where its rule is reported."""
    rows, problems = [], []
    for name, fixes in table.items():
        res = kit.python("-m", "torchlint", "check", "--min-impact", "low", "--output-format", "json", "--exit-zero", f"{name}.py",
                         timeout=120, cwd=where)
        try:
            static = json.loads(res["output"][res["output"].index("["):])
        except ValueError:
            static = []
            problems.append(f"{name}: torchlint check gave no JSON (exit {res['rc']})")
        for fix in fixes:
            code, lines = fix_code(fix), changed_lines(where / f"{name}.py", fix)
            hit = [f for f in static if f.get("code") == code and f.get("line") in lines]
            if code.startswith("TL") and not code.startswith("TLR") and not hit:
                problems.append(f"{fix.name}: no {code} finding on the lines it changes ({sorted(lines)})")
            rows.append({"script": name, "fix": fix.name, "code": code, "lines": sorted(lines),
                         "static": bool(hit) if not code.startswith("TLR") else "runtime"})
    return {"verdict": "FAIL" if problems else "DRY", "rows": rows, "problems": problems,
            "why": "; ".join(problems) if problems else
            f"{len(rows)} hand fixes, each on the lines of a finding of its rule (truth not run: no CUDA)"}
