"""Does `torchlint profile` rank findings by what fixing them saves? (issue #8)

Not a test: everything is measured side by side in one invocation and printed.
For each training script in fixtures/scripts/savings/ (``NAME.py``) and its hand
fixes (``NAME.fix_CODE[-tag].py``, one anti-pattern fixed each; every script has a
``.fix_TLR09.py``, glibc's ``mallopt`` before its code, whether or not torchlint
flags the churn there: a fix it misses shows as "not a finding"):

1. **True saving** of each fix: every arm runs once untimed (the first run of a
   script after another ran ~10 % slower here, cold caches, and it would always
   fall on the original), then the original and every fix run in turn, forward
   then backward order (O F1 F2, F2 F1 O, ...), ``--repeats`` times, each a fresh
   ``python`` process with ``OMP_NUM_THREADS=1``. The figure is the script's own
   time (torch and ``torch._dynamo`` imported first, outside the timing, the same
   in every arm): the Hodges-Lehmann shift between the runs of the original and of
   the fix (the median of all their differences; the same statistic the experiment
   uses for whole-run windows), with a bootstrap 95 % interval over the runs
   (``torchlint.experiment.stats``), so the noise is reported.
   The same comparison again in *warm forks* (``--fork-repeats`` runs an arm,
   default 20): each run a fork of one interpreter that imported torch once (the
   experiment's window server, running the hand-fixed script files as they are).
   Fresh processes differ run to run by several % here (memory layout: how much
   memory glibc's malloc gives back and faults in again, TLR09); this truth tells
   an experiment that is wrong from a truth that is noisy. Both are printed, and the targets are checked against both.
2. **torchlint's figures**: ``torchlint profile --experiment --output-format json``
   on the original; per finding the observed time, the expected saving, the
   measured saving and the report's rank. A fix is matched to the finding of its
   rule on the lines the fix changed (found with difflib, nothing hard-coded).
3. **Overhead**: ``torchlint profile`` (no --experiment) against ``python NAME.py``,
   whole-process wall time, interleaved, medians.

Then the targets: measured within +-30 % (or +-20 ms) of true; no finding with a
true saving <= 0 ranked above one with a real saving; Spearman rank correlation of
torchlint's order with the true savings >= 0.9; overhead <= 1.3x.

    python benchmarks/savings.py [--quick] [--repeats 10] [--budget 150] [--only NAME]
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from savings_targets import print_script, print_targets, ranking_rule_violations  # noqa: E402
from torchlint.experiment.stats import compare  # noqa: E402

SCRIPTS = ROOT / "fixtures" / "scripts" / "savings"
# The script's own time: wall, and CPU (this process and its DataLoader workers), a
# cross-check that other processes on a shared machine inflate far less than wall time.
TIMER = (
    "import os, resource, runpy, sys, time; import torch; import torch._dynamo\n"
    "path = sys.argv[1]; sys.argv = sys.argv[1:]; sys.path[0] = os.path.dirname(os.path.abspath(path))\n"
    "def cpu():\n"
    "    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)\n"
    "    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime\n"
    "t, c = time.perf_counter(), cpu(); runpy.run_path(path, run_name='__main__')\n"
    "open(os.environ['TL_BENCH_OUT'], 'w').write(repr((time.perf_counter() - t, cpu() - c)))\n"
)


def _env() -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    env.pop("DISPLAY", None)
    env.pop("WAYLAND_DISPLAY", None)
    return env


def _script_time(path: Path, cwd: Path) -> tuple[float, float]:
    out = cwd / ".bench-time"
    proc = subprocess.run([sys.executable, "-c", TIMER, path.name], cwd=cwd, env={**_env(), "TL_BENCH_OUT": str(out)},
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{path.name} failed:\n{proc.stderr[-2000:]}")
    wall, cpu = eval(out.read_text())  # a tuple of two floats we wrote ourselves
    return float(wall), float(cpu)


def _wall(cmd: list[str], cwd: Path) -> float:
    t = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{proc.stderr[-2000:]}")
    return time.perf_counter() - t


def changed_lines(original: Path, fixed: Path) -> set[int]:
    """Line numbers of ``original`` that the fix replaced (or inserted next to)."""
    a, b = original.read_text().splitlines(), fixed.read_text().splitlines()
    lines: set[int] = set()
    for tag, i1, i2, _j1, _j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if tag != "equal":
            lines.update(range(i1 + 1, max(i2, i1 + 1) + 1))
    return lines


def true_savings(name: str, fixes: list[Path], work: Path, repeats: int) -> dict[str, dict]:
    arms = [work / f"{name}.py", *fixes]
    times: dict[str, list[tuple[float, float]]] = {p.name: [] for p in arms}
    for p in arms:  # warm-up, untimed
        _script_time(p, work)
    for r in range(repeats):
        for p in arms if r % 2 == 0 else reversed(arms):
            times[p.name].append(_script_time(p, work))
    base = times[arms[0].name]
    out = {}
    for p in fixes:
        c = compare([[w] for w, _ in base], [[w] for w, _ in times[p.name]], iterations=2000)
        cpu = compare([[u] for _, u in base], [[u] for _, u in times[p.name]], iterations=2000)
        out[p.name] = {"true": c.per_step, "low": c.ci_low, "high": c.ci_high, "verdict": c.verdict,
                       "original_s": c.original_median, "fixed_s": c.variant_median, "runs": repeats,
                       "true_cpu": cpu.per_step, "cpu_low": cpu.ci_low, "cpu_high": cpu.ci_high}
    return out


def fork_truth(name: str, fixes: list[Path], work: Path, repeats: int) -> dict[str, dict]:
    """True savings from warm forks: the hand-fixed scripts run as they are by the
    window server, ABBA over the arms, after one untimed run of each."""
    from torchlint.experiment.server import WindowServer

    arms = [work / f"{name}.py", *fixes]
    times: dict[str, list[float]] = {p.name: [] for p in arms}
    logs = work / f"fork-{name}"
    logs.mkdir(exist_ok=True)
    server = WindowServer(logs)
    try:
        for r in range(repeats + 1):
            for p in arms if r % 2 == 0 else reversed(arms):
                out = server.window(p.name, [], str(work), max_steps=None, timeout_s=600)
                if out.get("status", 1) != 0 or out.get("timeout") or out.get("crashed"):
                    raise SystemExit(f"{p.name} failed in a warm fork: {out.get('error')}; see {logs}")
                if r:  # r == 0: warm-up
                    times[p.name].append(out["wall_s"])
    finally:
        server.close()
    base = [[t] for t in times[arms[0].name]]
    out = {}
    for p in fixes:
        c = compare(base, [[t] for t in times[p.name]])
        out[p.name] = {"fork": c.per_step, "fork_low": c.ci_low, "fork_high": c.ci_high, "fork_verdict": c.verdict,
                       "fork_runs": repeats}
    return out


def profile_experiment(name: str, work: Path, budget: float) -> tuple[dict, dict, float]:
    run = f"run-{name}"
    t = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "torchlint", "profile", "--no-browser", "--output-format", "json",
         "--experiment", "--budget", str(budget), "--out", run, f"{name}.py"],
        cwd=work, env=_env(), capture_output=True, text=True)
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise SystemExit(f"torchlint profile --experiment {name}.py failed:\n{proc.stderr[-3000:]}")
    exp_file = work / run / "experiment.json"
    return json.loads(proc.stdout), (json.loads(exp_file.read_text()) if exp_file.is_file() else {}), wall


def _figure(entry: dict | None, key: str = "total") -> float | None:
    """A time figure; one in another unit (TL302: bytes) is not a saving in seconds."""
    if not entry or entry.get("unit", "s") != "s":
        return None
    return entry.get(key)


def _run_interval(m: dict | None) -> tuple[float | None, float | None] | None:
    """The measurement's 95 % interval in the unit of its figure (the whole run): the
    experiment gives it per step, so it is scaled by the steps its total counts."""
    if not m or m.get("ci_low") is None or not m.get("per_step") or m.get("total") is None:
        return None
    scale = m["total"] / m["per_step"]
    return m["ci_low"] * scale, m["ci_high"] * scale


def findings_of(report: dict, experiment: dict) -> list[dict]:
    """Per finding: code, line, rank and the three figures (whatever the report carries)."""
    measured = {(m["code"], m["line"]): m for m in experiment.get("measurements", [])}
    rows = []
    for f in report.get("findings", []) + report.get("runtime_findings", []):
        loc = f.get("location") or f
        code, line = f.get("code") or loc.get("code"), loc.get("line")
        obs = f.get("observed")
        observed = obs.get("seconds") if isinstance(obs, dict) else f.get("cost_s")
        m = f.get("measured") or measured.get((code, line))
        exp = f.get("expected")
        rows.append({"code": code, "line": line, "rank": f.get("rank"), "ranked_by": f.get("ranked_by"), "observed": observed,
                     "expected": _figure(exp) if exp and not exp.get("not_applicable") else None,
                     "expected_note": (exp or {}).get("not_applicable"),
                     "measured": _figure(m) if m and m.get("verdict") != "skipped" else None,
                     "measured_verdict": m.get("verdict") if m else None,
                     "measured_ci": _run_interval(m),
                     "why": (m or {}).get("why", "")})
    return rows


def match_rows(name: str, work: Path, report: dict, experiment: dict, truth: dict[str, dict]) -> list[dict]:
    """One row per hand fix: the finding of its rule on the lines it changed, with both sides' figures."""
    rows = findings_of(report, experiment)
    out = []
    for fix in sorted(work.glob(f"{name}.fix_*.py")):
        code = fix.name.split(".fix_")[1].split("-")[0].removesuffix(".py")
        lines = changed_lines(work / f"{name}.py", fix)
        match = [r for r in rows if r["code"] == code and r["line"] in lines]
        row = dict(match[0]) if match else {"code": code, "line": min(lines), "rank": None, "observed": None,
                                            "expected": None, "measured": None, "measured_verdict": "not a finding"}
        row.update(truth[fix.name], fix=fix.name, script=name)
        out.append(row)
    return out


def render(results_json: Path) -> None:
    """Re-print the tables of a finished run (``--json``) from its run directories."""
    data = json.loads(results_json.read_text())
    work = Path(data["work"])
    rows = []
    for name, res in data["scripts"].items():
        report = json.loads((work / f"run-{name}" / "report.json").read_text())
        exp_file = work / f"run-{name}" / "experiment.json"
        experiment = json.loads(exp_file.read_text()) if exp_file.is_file() else {}
        keys = ("true", "low", "high", "verdict", "original_s", "fixed_s", "runs", "true_cpu", "cpu_low", "cpu_high",
                "fork", "fork_low", "fork_high", "fork_verdict", "fork_runs")
        truth = {r["fix"]: {k: r[k] for k in keys if k in r} for r in data["rows"] if r["script"] == name}
        srows = match_rows(name, work, report, experiment, truth)
        rows.extend(srows)
        print_script(name, srows, res)
    print_targets(rows, data["scripts"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smoke run: 2 repeats, small budget, one overhead pair")
    ap.add_argument("--repeats", type=int, default=10, help="fresh-process runs per arm for the true saving")
    ap.add_argument("--fork-repeats", type=int, default=20, help="warm-fork runs per arm for the second true saving")
    ap.add_argument("--budget", type=float, default=150.0, help="--budget of each torchlint experiment (s)")
    ap.add_argument("--only", action="append", help="script name(s) to run (default: all)")
    ap.add_argument("--json", type=Path, help="also write the results here")
    ap.add_argument("--render", type=Path, metavar="JSON", help="only re-print the tables of a finished run's --json")
    opts = ap.parse_args()
    if opts.render:
        return render(opts.render)
    repeats, budget, overhead_repeats = (2, 40.0, 1) if opts.quick else (opts.repeats, opts.budget, 3)
    fork_repeats = 4 if opts.quick else opts.fork_repeats
    names = sorted(p.stem for p in SCRIPTS.glob("*.py") if ".fix_" not in p.name)
    names = [n for n in names if not opts.only or n in opts.only]
    work = Path(tempfile.mkdtemp(prefix="torchlint-savings-"))
    for p in SCRIPTS.glob("*.py"):
        shutil.copy(p, work / p.name)
    print(f"benchmarks/savings.py: {len(names)} scripts, {repeats} A/B repeats, experiment budget {budget:.0f} s, "
          f"OMP_NUM_THREADS=1, {os.cpu_count()} cores, work dir {work}\n")
    results, all_rows = {}, []
    for name in names:
        fixes = sorted(work.glob(f"{name}.fix_*.py"))
        report, experiment, exp_wall = profile_experiment(name, work, budget)
        truth = true_savings(name, fixes, work, repeats)
        for fix, fork in fork_truth(name, fixes, work, fork_repeats).items():
            truth[fix].update(fork)
        all_rows.extend(match_rows(name, work, report, experiment, truth))
        plain, prof = [], []
        for _ in range(overhead_repeats):
            plain.append(_wall([sys.executable, f"{name}.py"], work))
            prof.append(_wall([sys.executable, "-m", "torchlint", "profile", "--no-browser", "--overwrite", "--out", f"ovh-{name}", f"{name}.py"], work))
        results[name] = {"overhead": statistics.median(prof) / statistics.median(plain), "plain_s": statistics.median(plain),
                         "profile_s": statistics.median(prof), "experiment_wall_s": exp_wall,
                         "experiment_spent_s": experiment.get("spent_s"), "skipped": experiment.get("skipped", [])}
        results[name]["ranking_rule"] = ranking_rule_violations(report)
        print_script(name, [r for r in all_rows if r["script"] == name], results[name])
    print_targets(all_rows, results)
    if opts.json:
        opts.json.write_text(json.dumps({"work": str(work), "rows": all_rows, "scripts": results}, indent=2, default=str))


if __name__ == "__main__":
    main()
