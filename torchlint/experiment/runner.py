"""``torchlint profile --experiment``: measure what switching each finding off saves.

For each candidate (:mod:`torchlint.experiment.plan`) the script is run in short
windows of ``K`` optimizer steps, original and variant alternated in ABBA order
(O V, V O, O V ...) so that drift and warm-up fall on both arms equally. The first
steps of every window are dropped (lazy initialisation, allocator and cache
warm-up); the rest are compared with :func:`torchlint.experiment.stats.compare`.
Everything stays within the budget; what did not fit, or cannot act on this
machine, is listed as skipped with the reason.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from torchlint.experiment import stats
from torchlint.experiment.plan import Candidate, plan
from torchlint.experiment.server import ServerError, WindowServer
from torchlint.findings import Finding
from torchlint.savings import ALPHA, NO_CHANGE, NOT_MEASURABLE, SAVING, SKIPPED, Measurement

EXPERIMENT_FILE = "experiment.json"
WARMUP_STEPS = 2  # per-window step durations dropped before comparing
MIN_PAIRS = 4  # 4 against 4 windows is the fewest a permutation test can call at 95 % (stats)
MAX_PAIRS = 16  # while the interval is wider than PRECISION and the candidate's share of the budget allows
PRECISION = 0.25, 0.01  # enough: a 95 % half-width within 25 % of the shift, or 1 % of the compared figure
WINDOW_TARGET_S = 0.5  # measured time per window: long enough for dozens of steps
MIN_MEASURED, MAX_MEASURED = 6, 40
SERVER_START_S = 4.0  # what starting the window server is assumed to cost (import torch)


def default_budget(script_wall_s: float) -> float:
    """A few times the profiled run: the run's time four times, at least 20 s."""
    return max(20.0, 4.0 * script_wall_s)


@dataclasses.dataclass(slots=True)
class Windowing:
    max_steps: int | None  # None: windows run the whole script
    warmup: int
    estimate_s: float  # expected cost of one window (its set-up + its steps)
    mode: str = "steps"  # "steps": per-step medians | "run": each window's whole-script time
    min_pairs: int = MIN_PAIRS


def windowing(steps: dict[str, Any], wall_s: float, *, candidates: int = 1, budget_s: float = 0.0) -> Windowing | str:
    """The window length from the profiled run's steps, or why there can be none.

    Each candidate gets the pairs its verdict needs once corrected for the others
    (``stats.pairs_to_separate``). When the budget affords that many whole runs for
    every candidate, each window is the whole run and the compared figure is the
    script's own time, so work outside the optimizer steps (an evaluation pass after
    training, per-epoch worker start-up) counts. Otherwise windows are K steps and the
    figure is the median step, which such work does not reach."""
    count = int(steps.get("count") or 0)
    durations = [d for d in (steps.get("durations_s") or []) if d > 0]
    if count < 4 or not durations:
        return f"the profiled run made {count} optimizer steps; an experiment needs at least 4"
    limit = steps.get("max_steps")  # the profiled run stopped there: so do its windows
    run_cost = wall_s + 0.3
    pairs = stats.pairs_to_separate(candidates, MIN_PAIRS, ALPHA)
    if SERVER_START_S + candidates * 2 * pairs * run_cost <= budget_s:
        return Windowing(int(limit) if limit else None, 0, run_cost, "run", pairs)
    step = statistics.median(durations)
    measured = min(max(math.ceil(WINDOW_TARGET_S / step), MIN_MEASURED), MAX_MEASURED)
    head = float(steps.get("first_step_at_s") or 0.0)
    k = WARMUP_STEPS + 1 + measured
    if k >= count:  # the run is short: a window is all of its steps
        return Windowing(int(limit) if limit else None, min(WARMUP_STEPS, (count - 1) // 3), run_cost, min_pairs=pairs)
    return Windowing(k, WARMUP_STEPS, head + k * step + 0.2, min_pairs=pairs)


#: findings about the whole process: every window runs them
PROCESS_WIDE = frozenset({"TLR09", "TL306", "TLR17"})  # a glibc setting, anomaly mode
#: findings at a definition (a layer, a backend flag) whose effect is wherever the model runs
EFFECT_ELSEWHERE = frozenset({"TL401", "TL402", "TL403", "TL404"})
LOAD_CHANGE = 1.0  # a load average that moved this much during a candidate's windows changed its noise


def where_it_runs(session: Any, finding: Finding) -> tuple[bool | None, str]:
    """Whether the finding's code runs in the optimizer steps, which step windows time by
    their median step: its lines, or the loops it is about (``related``), in most of the
    steps of the profiled run's training windows (linetrace.py records which lines each
    step ran). ``False`` with where it runs instead (the evaluation pass, work between
    some steps); ``None``: not known."""
    window = session.torch_window
    seen = window.get("lines_seen")
    if finding.code in PROCESS_WIDE or finding.code in EFFECT_ELSEWHERE or not seen:
        return None, ""
    steps = int(window.get("window_steps") or 0)
    train = {(session.resolve(str(r[0])), int(r[1])): int(r[2]) if len(r) > 2 else steps for r in seen}
    evaluation = {(session.resolve(str(r[0])), int(r[1])) for r in window.get("eval_lines_seen") or []}
    end = finding.location.end_line if finding.location.end_line is not None else finding.line
    places = [(finding.path, finding.line, max(end, finding.line))]
    places += [(session.resolve(r.path), r.line, r.line) for r in finding.related]
    lines = [(path, n) for path, lo, hi in places for n in range(lo, hi + 1)]
    most = max((train.get(key, 0) for key in lines), default=0)
    if steps and most * 2 > steps:
        return True, ""
    if most:
        return False, f"it ran in {most} of the {steps} profiled steps (work between steps, as an evaluation pass)"
    if any(key in evaluation for key in lines):
        return False, "it runs in the evaluation pass"
    ran = {(session.resolve(h.path), h.line) for h in session.hotspots if h.source in ("probe", "sampler")}
    if any(key in ran for key in lines):
        return False, "it ran outside the profiled steps"
    return None, ""


def _load() -> float | None:
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def _abs(finding: Finding, resolve: Callable[[str], str]) -> Finding:
    return dataclasses.replace(finding, location=dataclasses.replace(finding.location, path=resolve(finding.path)))


def _skip(c: Candidate, reason: str) -> dict[str, Any]:
    f = c.finding
    return {"code": f.code, "path": f.path, "line": f.line, "variant": c.label, "reason": reason}


class Experiment:
    def __init__(self, *, script: str, args: list[str], cwd: str, work_dir: Path, budget_s: float,
                 win: Windowing, run_steps: int, make_server: Callable[[Path], WindowServer] = WindowServer) -> None:
        self.script, self.args, self.cwd = script, args, cwd
        self.work_dir, self.budget_s, self.win, self.run_steps = work_dir, budget_s, win, run_steps
        self.make_server = make_server
        self.server: WindowServer | None = None
        self.t0 = time.monotonic()
        self.window_s = win.estimate_s

    def left(self) -> float:
        return self.budget_s - (time.monotonic() - self.t0)

    def _window(self, switches: list[dict[str, Any]], overrides: dict[str, str]) -> dict[str, Any]:
        if self.server is None:
            self.server = self.make_server(self.work_dir)
        t = time.monotonic()
        out = self.server.window(self.script, self.args, self.cwd, max_steps=self.win.max_steps,
                                 switches=switches, overrides=overrides,
                                 timeout_s=max(3 * self.window_s + 10, 30))
        # a running estimate of what a window costs, for the budget
        self.window_s = 0.5 * self.window_s + 0.5 * (time.monotonic() - t)
        return out

    def _precise(self, arms: dict[str, list[list[float]]]) -> bool:
        """Whether the interval is already narrow enough that more pairs would not change
        what the report says. The stopping rule looks at the interval's width, never at
        whether it holds 0: stopping once a difference looks significant would turn noise
        into savings (optional stopping)."""
        try:
            # the interval alone: its width is the rule, the permutation test's p is never read here
            cmp = stats.compare(arms["o"], arms["v"], iterations=300, permutation=False)
        except ValueError:
            return True
        relative, floor = PRECISION
        return (cmp.ci_high - cmp.ci_low) / 2 <= max(relative * abs(cmp.per_step), floor * cmp.original_median)

    def _warm_up(self) -> None:
        """One window of the original, discarded: the first window after the server starts
        runs on cold caches (about 10 % slower here), and ABBA puts it in the original arm
        of the first candidate, where it would read as a saving."""
        if self.server is None:
            self._window([], {})

    def measure(self, c: Candidate, overrides: dict[str, str], description: str,
                share_s: float = float("inf"), win: Windowing | None = None) -> Measurement | dict[str, Any]:
        """Alternate original and variant windows; a Measurement, or a skip record.

        At least ``min_pairs`` pairs while the budget lasts; beyond that, up to MAX_PAIRS
        while the interval is wider than PRECISION and the candidate's ``share_s`` of the
        remaining budget allows (noise is bought down, not reported as a saving).
        ``win``: other windows for this candidate (whole runs, for code outside the steps)."""
        if win is None:
            return self._measure(c, overrides, description, share_s)
        saved, saved_s = self.win, self.window_s
        self.win, self.window_s = win, win.estimate_s
        try:
            return self._measure(c, overrides, description, share_s)
        finally:
            self.win, self.window_s = saved, saved_s

    def _measure(self, c: Candidate, overrides: dict[str, str], description: str,
                 share_s: float) -> Measurement | dict[str, Any]:
        f = c.finding
        loads: list[float] = []
        arms: dict[str, list[list[float]]] = {"o": [], "v": []}
        fired = steps_o = 0
        pairs = 0
        least = self.win.min_pairs
        t_begin = time.monotonic()
        while pairs < MAX_PAIRS:
            need = 2 * self.window_s * (least - pairs if pairs < least else 1)
            if self.server is None:
                need += SERVER_START_S + self.window_s
            if self.left() < need:
                if pairs < least:
                    return _skip(c, f"budget: needs about {need:.0f} s more, {max(self.left(), 0):.0f} s left")
                break
            if pairs >= least and time.monotonic() - t_begin + need > share_s:
                break  # leave the rest of the budget to the candidates after this one
            if pairs >= least and self._precise(arms):
                break
            self._warm_up()
            load = _load()
            if load is not None:
                loads.append(load)
            for arm in ("ov" if pairs % 2 == 0 else "vo"):
                sw, ov = (c.switches, overrides) if arm == "v" else ([], {})
                r = self._window(sw, ov)
                if r.get("timeout") or r.get("crashed") or r.get("status", 0) != 0:
                    who = "the variant" if arm == "v" else "the original"
                    return _skip(c, f"{who} failed: {r.get('error') or 'exit status ' + str(r.get('status'))}")
                if arm == "v":
                    fired += sum(a["calls"] for a in r.get("applied", []))
                else:
                    steps_o += int(r.get("steps") or 0)
                if self.win.mode == "run":
                    arms[arm].append([r["wall_s"]])
                else:
                    arms[arm].append(r["durations_s"][self.win.warmup :])
            pairs += 1
        if c.switches and fired == 0:
            return _skip(c, "the switch never applied: no call was made from the finding's line")
        try:
            cmp = stats.compare(arms["o"], arms["v"])
        except ValueError:
            return _skip(c, "the windows made too few optimizer steps to compare")
        if self.win.mode == "run":  # one whole-script time per window: scale to steps
            n = max(self.run_steps, 1)
            per_step, low, high, total = cmp.per_step / n, cmp.ci_low / n, cmp.ci_high / n, cmp.per_step
            what = f"whole-run windows; script time {cmp.original_median:.3f} s -> {cmp.variant_median:.3f} s"
        else:
            per_step, low, high = cmp.per_step, cmp.ci_low, cmp.ci_high
            total = per_step * self.run_steps
            what = (f"{self.win.max_steps or 'all'}-step windows, first {self.win.warmup} steps dropped; median step "
                    f"{cmp.original_median * 1e3:.2f} ms -> {cmp.variant_median * 1e3:.2f} ms; time outside the "
                    "optimizer steps is not seen")
        how = (f"{description}; {pairs} pairs of windows alternated (ABBA), {what}; "
               f"window-to-window noise {cmp.noise * 100:.0f} %{_load_note(loads)}")
        return Measurement(
            code=f.code, path=f.path, line=f.line, variant=c.label, verdict=cmp.verdict,
            per_step=per_step, ci_low=low, ci_high=high, total=total,
            steps=steps_o if self.win.mode == "run" else cmp.original_steps, why=how,
            windows=([statistics.median(w) for w in arms["o"] if w], [statistics.median(w) for w in arms["v"] if w]),
            p=cmp.p,
        )

    def whole_runs(self, wall_s: float, limit: int | None) -> Windowing:
        """Windows that run the whole script (up to the profiled run's ``--max-steps``),
        for a candidate whose code the step windows' median step does not see."""
        return Windowing(limit, 0, wall_s + 0.3, "run", self.win.min_pairs)

    def close(self, *, force: bool = False) -> None:
        if self.server is not None:
            self.server.close(force=force)


def _load_note(loads: list[float]) -> str:
    """The machine's load average over a candidate's windows; when it moved, that other
    processes, not the fix, made part of the noise (a shared machine)."""
    if not loads:
        return ""
    lo, hi = min(loads), max(loads)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    note = f"; load average {lo:.1f}-{hi:.1f} ({cores} usable cores)"
    if hi - lo >= LOAD_CHANGE or hi > cores:
        note += ": the machine's load changed or exceeded its cores during these windows, so part of the noise is other processes'"
    return note


def corrected(ms: list[Measurement], alpha: float = ALPHA) -> list[Measurement]:
    """The verdicts of one experiment corrected together (Holm): a saving or a slowdown
    stands only if its p-value stays under ``alpha`` once multiplied for the tests beside
    it, so that a ranked list of measured savings holds a false one at most 5 % of the
    time, not 5 % per line."""
    tested = [m for m in ms if m.p is not None]
    adjusted = dict(zip(map(id, tested), stats.holm([m.p for m in tested])))
    out = []
    for m in ms:
        if id(m) not in adjusted:
            out.append(m)
            continue
        q = adjusted[id(m)]
        note = f"windows' permutation p = {m.p:.3f}, {q:.3f} corrected for the {len(tested)} variants tested (Holm)"
        if m.verdict != NO_CHANGE and q >= alpha:
            note += f"; it would read '{m.verdict}' alone, not once corrected"
            m = dataclasses.replace(m, verdict=NO_CHANGE)
        out.append(dataclasses.replace(m, p_corrected=q, why=f"{m.why}; {note}"))
    return out


def _best(ms: list[Measurement]) -> Measurement:
    """Of several variants of one finding (worker counts), the one that saved most."""
    order = {SAVING: 0}
    return min(ms, key=lambda m: (order.get(m.verdict, 1), -(m.per_step or 0.0)))


def run_experiment(session: Any, findings: list[tuple[Finding, float]], run_dir: Path, *,
                   budget_s: float | None = None, config: Any = None,
                   log: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    """Run the experiment for ``(finding, observed seconds)`` pairs of a profiled
    session; writes and returns ``experiment.json``'s content. Never raises for
    the script's or a variant's failure: those become skip records."""
    from torchlint.experiment.variants import VariantError, make_variant

    t_start = time.monotonic()
    load_at_start = _load()
    budget = default_budget(session.wall_s) if budget_s is None else float(budget_s)
    work = run_dir / "experiment"
    work.mkdir(parents=True, exist_ok=True)
    cuda = bool(session.meta.get("cuda"))
    items = [(_abs(f, session.resolve), cost) for f, cost in findings]
    candidates = plan(items, cuda=cuda)
    measurements: list[Measurement] = []
    done: list[Measurement] = []
    skipped: list[dict[str, Any]] = [_skip(c, c.skip) for c in candidates if c.skip]
    todo = [c for c in candidates if not c.skip]
    win = windowing(session.steps, session.wall_s, candidates=len(todo), budget_s=budget)
    exp = None
    if isinstance(win, str):
        skipped.extend(_skip(c, win) for c in todo)
        todo = []
    else:
        exp = Experiment(script=str(session.meta.get("argv", [session.meta.get("script")])[0]),
                         args=list(session.meta.get("argv", [])[1:]), cwd=session.cwd, work_dir=work,
                         budget_s=budget, win=win,
                         run_steps=int(session.steps.get("count") or 0))
        exp.t0 = t_start
    interrupted = False
    try:
        for i, c in enumerate(todo):
            assert exp is not None
            overrides: dict[str, str] = {}
            description = f"runtime switch: {c.label}"
            if c.kind == "source":
                try:
                    v = make_variant(c.finding, work / f"variant-{i}", config)
                except VariantError as exc:
                    skipped.append(_skip(c, str(exc)))
                    continue
                overrides, description = {v.original: v.copy}, v.description
                c.label = f"{v.description.split(':')[0]}: {v.summary()}"
            inside, where = where_it_runs(session, c.finding)
            whole = None
            if exp.win.mode == "steps" and inside is False:  # step windows would time nothing it does
                limit = session.steps.get("max_steps")
                whole = exp.whole_runs(session.wall_s, int(limit) if limit else None)
                description += f"; whole-run windows, since {where}, outside the optimizer steps"
            log(f"torchlint: experiment: {c.finding.code} at line {c.finding.line}: {c.label}")
            try:
                out = exp.measure(c, overrides, description, share_s=exp.left() / (len(todo) - i), win=whole)
            except ServerError as exc:
                skipped.extend(_skip(d, f"the window server failed: {exc}") for d in todo[i:])
                break
            if isinstance(out, Measurement):
                done.append(out)
            elif whole is not None and out["reason"].startswith("budget"):
                out["reason"] = (f"not measurable by this experiment: {where}, which its step windows (the median "
                                 f"optimizer step) do not see, and whole-run windows did not fit the budget "
                                 f"({out['reason'][len('budget: '):]})")
                out["not_measurable"] = True
                skipped.append(out)
            else:
                skipped.append(out)
    except KeyboardInterrupt as stop:  # Ctrl-C (or SIGTERM, SIGHUP) stops the experiment, not the report
        interrupted = True
        why = getattr(stop, "reason", "interrupted (Ctrl-C)")
        seen = {(m.code, m.line, m.variant) for m in done} | {(s["code"], s["line"], s["variant"]) for s in skipped}
        skipped.extend(_skip(d, why) for d in todo if (d.finding.code, d.finding.line, d.label) not in seen)
    finally:
        if exp is not None:
            exp.close(force=interrupted)
    done = corrected(done)
    by_finding: dict[tuple[str, str, int], list[Measurement]] = {}
    for m in done:
        by_finding.setdefault(m.key(), []).append(m)
    for ms in by_finding.values():
        measurements.append(_best(ms))
    for s in skipped:  # a finding skipped for every variant is reported as such
        key = (s["code"], s["path"], s["line"])
        if key not in by_finding and not any(m.key() == key for m in measurements if m.verdict in (SKIPPED, NOT_MEASURABLE)):
            verdict = NOT_MEASURABLE if s.get("not_measurable") else SKIPPED
            measurements.append(Measurement(s["code"], s["path"], s["line"], s["variant"], verdict, why=s["reason"]))
    data = {
        "measurements": [m.to_dict() for m in measurements],
        "variants": [m.to_dict() for m in done],
        "skipped": skipped,
        "budget_s": budget,
        "spent_s": time.monotonic() - t_start,
        "windowing": dataclasses.asdict(win) if not isinstance(win, str) else {"reason": win},
        "load": {"at_start": load_at_start, "at_end": _load()},
    }
    (run_dir / EXPERIMENT_FILE).write_text(json.dumps(data, indent=2), encoding="utf-8")
    return data


def load_experiment(run_dir: Path) -> list[Measurement]:
    path = run_dir / EXPERIMENT_FILE
    if not path.is_file():
        return []
    data = json.loads(path.read_text(encoding="utf-8"))
    return [Measurement.from_dict(m) for m in data.get("measurements", [])]
