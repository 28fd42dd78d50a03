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

from torchlint.experiment.stats import compare  # noqa: E402
from torchlint.savings import SAVING  # noqa: E402

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
        _print_script(name, srows, res)
    _print_targets(rows, data["scripts"])


def spearman(xs: list[float], ys: list[float]) -> float | None:
    def ranks(v: list[float]) -> list[float]:
        order = sorted(range(len(v)), key=lambda i: v[i])
        r = [0.0] * len(v)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and v[order[j + 1]] == v[order[i]]:
                j += 1
            for k in range(i, j + 1):
                r[order[k]] = (i + j) / 2 + 1
            i = j + 1
        return r
    if len(xs) < 3:
        return None
    rx, ry = ranks(xs), ranks(ys)
    mx, my = statistics.fmean(rx), statistics.fmean(ry)
    num = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    den = (sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry)) ** 0.5
    return num / den if den else None


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1e3:+.0f} ms"


def score(row: dict) -> float:
    """torchlint's ranking figure (what rank_key uses): the measured saving where the
    measurement decided the rank, else the expected saving."""
    decided = row.get("ranked_by") == "measured" or (row.get("ranked_by") is None and row.get("measured") is not None)
    if decided and row.get("measured") is not None:
        return row["measured"] if row["measured_verdict"] == SAVING else min(row["measured"], 0.0)
    return row["expected"] if row.get("expected") is not None else float("-inf")


def ranking_rule_violations(report: dict) -> list[str]:
    """The ranking rule of issue 28, checked on a report: a finding expected to save
    nothing never ranks above one expected to save something, and a measurement ranks a
    finding only when it decides (a resolved saving, or an interval that excludes the
    expected saving)."""
    ranked = [f for f in report.get("findings", []) + report.get("runtime_findings", []) if f.get("rank") is not None]
    out = []

    def expected(f: dict) -> float | None:
        e = f.get("expected") or {}
        return None if e.get("not_applicable") or e.get("unit", "s") != "s" else e.get("total")

    for a in ranked:
        for b in ranked:
            if a["rank"] < b["rank"] and expected(a) == 0 and (expected(b) or 0) > 0:
                out.append(f"{a['code']}:{a['line']} (expected 0) ranked above {b['code']}:{b['line']} "
                           f"(expected {_ms(expected(b))})")
    for f in ranked:
        m, e = f.get("measured") or {}, expected(f)
        if f.get("ranked_by") == "measured" and m.get("verdict") == "no measurable change" and e and e > 0:
            scale = (m["total"] / m["per_step"]) if m.get("per_step") and m.get("total") is not None else 1.0
            if m.get("ci_low") is not None and m["ci_low"] * scale <= e <= m["ci_high"] * scale:
                out.append(f"{f['code']}:{f['line']} ranked by an inconclusive measurement")
    return out


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
        _print_script(name, [r for r in all_rows if r["script"] == name], results[name])
    _print_targets(all_rows, results)
    if opts.json:
        opts.json.write_text(json.dumps({"work": str(work), "rows": all_rows, "scripts": results}, indent=2, default=str))


def _print_script(name: str, rows: list[dict], res: dict) -> None:
    print(f"== {name}.py  (plain {res['plain_s']:.2f} s, profile {res['profile_s']:.2f} s = {res['overhead']:.2f}x; "
          f"experiment took {res['experiment_wall_s']:.0f} s incl. the profiled run, spent {res['experiment_spent_s'] or 0:.0f} s)")
    print(f"  {'finding':<12} {'fix':<28} {'observed':>10} {'expected':>10} {'measured':>10} {'verdict':<21} "
          f"{'true (95% CI)':>26} {'true, warm forks (95% CI)':>26} {'rank tl':>7} {'rank true':>9}")
    true_order = sorted(rows, key=lambda r: -r["true"])
    for r in rows:
        ci = f"{_ms(r['true'])} [{r['low'] * 1e3:+.0f},{r['high'] * 1e3:+.0f}]"
        fork = f"{_ms(r['fork'])} [{r['fork_low'] * 1e3:+.0f},{r['fork_high'] * 1e3:+.0f}]" if "fork" in r else "-"
        print(f"  {r['code'] + ':' + str(r['line']):<12} {r['fix']:<28} {_ms(r['observed']):>10} {_ms(r['expected']):>10} "
              f"{_ms(r['measured']):>10} {str(r['measured_verdict']):<21} {ci:>26} {fork:>26} {str(r['rank'] or '-'):>7} "
              f"{true_order.index(r) + 1:>9}")
    violations = res.get("ranking_rule")
    if violations is not None:
        print("  ranking rule (zero expected never above nonzero; only deciding measurements rank): "
              + ("OK" if not violations else f"{len(violations)} violation(s): " + "; ".join(violations)))
    print()


# the two truths: (figure, interval low, interval high, verdict) keys of a row
TRUTHS = {"fresh processes": ("true", "low", "high", "verdict"),
          "warm forks": ("fork", "fork_low", "fork_high", "fork_verdict")}


def _print_targets(rows: list[dict], results: dict) -> None:
    for label, keys in TRUTHS.items():
        judged = [r for r in rows if keys[0] in r]
        if judged:
            _print_targets_against(judged, results, label, *keys)
    worst = max(results.values(), key=lambda v: v["overhead"]) if results else None
    print("  overhead of torchlint profile vs plain: " + ", ".join(f"{n} {v['overhead']:.2f}x" for n, v in results.items())
          + (f" (worst {worst['overhead']:.2f}x, target <= 1.3x)" if worst else ""))


def _print_targets_against(rows: list[dict], results: dict, label: str, t: str, lo: str, hi: str, vd: str) -> None:
    print(f"== targets, against the true saving from {label}")
    within = []
    for r in rows:
        if r.get("measured") is None:
            continue
        ok = abs(r["measured"] - r[t]) <= max(0.3 * abs(r[t]), 0.020)
        within.append(ok)
        print(f"  measured vs true  {r['code']}:{r['line']:<4} {r['script']:<15} measured {_ms(r['measured'])}, true {_ms(r[t])}: "
              f"{'OK' if ok else 'MISS'}")
    print(f"  measured within +-30 % or +-20 ms of true: {sum(within)}/{len(within)}")
    # The true saving is itself a measurement with noise: where its interval holds 0 the
    # +-30 % test compares two noise draws. These say what the data can support.
    measured = [r for r in rows if r.get("measured") is not None]
    inside = [r for r in measured if r[lo] <= r["measured"] <= r[hi]]
    print(f"  measured inside the true saving's 95 % interval: {len(inside)}/{len(measured)}")
    agree = [r for r in measured if r["measured_verdict"] == r[vd]]
    print(f"  same verdict (saving / no measurable change / slower) as the true A/B: {len(agree)}/{len(measured)}")
    inversions = []
    for name in results:
        srows = [r for r in rows if r["script"] == name and r["rank"] is not None]
        for a in srows:
            for b in srows:
                if a["rank"] < b["rank"] and a[vd] != SAVING and b[vd] == SAVING:
                    inversions.append(f"{name}: {a['code']}:{a['line']} (true {_ms(a[t])}) ranked above "
                                      f"{b['code']}:{b['line']} (true {_ms(b[t])})")
    print(f"  findings with no real saving ranked above one with a real saving: {len(inversions)}")
    for line in inversions:
        print(f"    {line}")
    for name in results:
        srows = [r for r in rows if r["script"] == name]
        # torchlint's order is the report's rank (unranked: after every ranked finding)
        rho = spearman([-(r["rank"] or 1e9) for r in srows], [r[t] for r in srows])
        why = "n/a (fewer than 3 fixes)" if len(srows) < 3 else "n/a (no spread)"
        print(f"  Spearman (torchlint's rank order vs true saving), {name}: {why if rho is None else f'{rho:.2f}'}")
    rho = spearman([score(r) for r in rows], [r[t] for r in rows])
    print(f"  Spearman, all {len(rows)} fixes pooled (torchlint's ranking figure: measured saving, else expected): "
          f"{'n/a' if rho is None else f'{rho:.2f}'} (target >= 0.9)")
    settled = [r[t] if r[vd] != "no measurable change" else 0.0 for r in rows]
    rho = spearman([score(r) for r in rows], settled)
    print(f"  Spearman, pooled, unresolved true savings counted as 0 (ties): {'n/a' if rho is None else f'{rho:.2f}'}")
    # Ranks among fixes whose true effects sit inside each other's noise are coin flips;
    # this one asks only whether the effects the A/B can tell from 0 are ranked right.
    resolved = [r for r in rows if r[vd] != "no measurable change"]
    rho = spearman([score(r) for r in resolved], [r[t] for r in resolved])
    print(f"  Spearman, pooled, only the {len(resolved)} fixes whose true saving is resolved: "
          f"{'n/a' if rho is None else f'{rho:.2f}'}")


if __name__ == "__main__":
    main()
