"""``torchlint profile`` report as plain text, rendered from the report.json data."""

from __future__ import annotations

import shlex
from typing import Any

from torchlint.correlate import display_path
from torchlint.correlate import fmt_interval
from torchlint.correlate import fmt_seconds as _s
from torchlint.report.profile_json import ranked_findings
from torchlint.terminal import printable
from torchlint.report.profile_compile import text_lines as compile_lines
from torchlint.findings import IMPACT_RANK
from torchlint.savings import ALPHA, NOT_MEASURABLE


def static_by_impact(findings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The findings nothing in the run measured, highest static impact first (docs/impact.md)."""
    static = [f for f in findings if f.get("rank") is None and not f.get("observed")]
    return sorted(static, key=lambda f: IMPACT_RANK.get(f.get("impact") or "", len(IMPACT_RANK)))  # (no tier, TL000: last)


def _pct(share: float | None) -> str:
    if share is None:
        return "n/a"
    return f"{share * 100:.1f}%" if share >= 0.001 or share == 0 else "<0.1%"


def _steps(window: dict[str, Any]) -> str:
    if window.get("eval"):
        until = f"{window['batches']} batches" if window.get("batches") else f"until {window.get('ended') or 'the end'}"
        return f"evaluation after step {window.get('after_step') or 0} ({until})"
    steps = window.get("steps")
    if not steps:
        return "no steps"
    a, b = steps
    return f"step {a}" if a == b else f"steps {a}-{b}"


def _bytes(n: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


def _amount(value: float | None, unit: str) -> str:
    if value is None:
        return "?"
    return _bytes(value) if unit == "bytes" else _s(value)


def expected_line(e: dict[str, Any] | None) -> str | None:
    """The expected saving, labelled with its model (savings.Estimate as data)."""
    if e is None:
        return None
    if e.get("not_applicable"):
        return f"expected saving: not applicable here: {e['not_applicable']}"
    unit = e.get("unit") or "s"
    if e.get("total") is None and e.get("per_step") is None:
        return f"expected saving: unknown (model: {e['model']})"
    if not e.get("total") and not e.get("per_step") and unit != "bytes":
        return f"expected saving: none here (model: {e['model']})"
    if unit == "bytes":
        return f"retained memory ≤ {_amount(e.get('per_step'), unit)} per step (model: {e['model']})"
    per = f", {_amount(e.get('per_step'), unit)}/step" if e.get("per_step") is not None else ""
    how = "≤" if e.get("bound", True) else "≈"  # an estimate says it is one (TLR09)
    return f"expected saving {how} {_amount(e.get('total'), unit)}{per} (model: {e['model']})"


def measured_line(m: dict[str, Any] | None, inconclusive: bool = False) -> str | None:
    """The experiment's verdict (savings.Measurement as data): a difference inside
    the noise is never shown as a saving."""
    if m is None:
        return None
    variant = m.get("variant") or "variant"
    if m["verdict"] == "skipped":
        return f"experiment skipped ({variant}): {m.get('why') or 'no reason given'}"
    if m["verdict"] == NOT_MEASURABLE:
        return f"{m.get('why') or 'not measurable by this experiment'} (the expected figure ranks)"
    unit = m.get("unit") or "s"
    ci = ""
    if m.get("ci_low") is not None and m.get("ci_high") is not None:
        ci = f", 95% CI {fmt_interval(m['ci_low'], m['ci_high'], unit)}/step"
    per, total = m.get("per_step"), m.get("total")
    if m["verdict"] == "saving":
        return f"measured saving {_amount(total, unit)}/run, {_amount(per, unit)}/step{ci} (experiment: {variant})"
    if m["verdict"] == "slower":
        slower_total = _amount(-total if total is not None else None, unit)
        slower_per = _amount(-per if per is not None else None, unit)
        return f"measured: slower by {slower_total}/run, {slower_per}/step{ci} (experiment: {variant})"
    alone, together = m.get("p"), m.get("p_corrected")
    apart = (m.get("ci_low") or 0) > 0 or (m.get("ci_high") or 0) < 0  # the interval alone said a difference
    if apart and alone is not None and together is not None and alone < ALPHA <= together:
        ci += ", within the noise once corrected for the other variants tested (Holm)"
    if inconclusive:
        ci += "; inconclusive: its interval holds the expected saving, so the expected figure ranks"
    return f"measured: no measurable change{ci} (experiment: {variant})"


def _evidence_line(f: dict[str, Any]) -> str:
    basis = f["basis"] or "run"
    parts = [f"observed {_s(f['cost_s'])} at these lines ({basis})", f"{_pct(f['share'])} of the script"]
    ev = f["evidence"]
    if f["basis"] == "probe":
        by_op: dict[tuple[str, int], int] = {}
        for e in ev:
            key = (e["op"], e["line"], e["via"])
            by_op[key] = by_op.get(key, 0) + e["calls"]
        for (op, line, via), calls in by_op.items():
            if op == "DataLoader.__next__":
                parts.append(f"{calls} batch fetches at line {line}" if via == "related" else f"{calls} batch fetches")
            elif op == "DataLoader.__iter__":
                parts.append(f"{calls} x iter(loader) at line {line}" if via == "related" else f"{calls} x iter(loader)")
            else:
                parts.append(f"{calls} calls of {op}" + (f" at line {line}" if via == "related" else ""))
    elif f["basis"] == "sampler":
        parts.append("wall time with this line on the stack (line sampler)")
    backward = (f.get("observed") or {}).get("backward_s")
    if backward:
        parts.append(f"incl. {_s(backward)} of backward made by these lines (torch.profiler windows, per step x steps)")
    if f.get("syncs"):
        parts.append(f"{f['syncs']} CUDA syncs")
    return " · ".join(parts)


def reads_line(f: dict[str, Any], steps: int | None) -> str | None:
    """How often the host waits at a sync finding's line: its probed calls per optimizer step
    (``24 reads per step (4800 calls of Tensor.item over 200 optimizer steps)``)."""
    per = f.get("reads_per_step")
    if per is None:
        return None
    noun = "sync" if f.get("code") == "TL103" else "read"
    calls: dict[str, int] = {}
    for e in f.get("evidence") or ():
        if e["via"] == "line":
            calls[e["op"]] = calls.get(e["op"], 0) + e["calls"]
    made = ", ".join(f"{n} calls of {op}" for op, n in calls.items())
    over = f" over {steps} optimizer steps" if steps else ""
    count = f"{per:.0f}" if abs(per - round(per)) < 0.05 else f"{per:.1f}"
    return f"host waits: {count} {noun}{'' if count == '1' else 's'} per step ({made}{over})"


def _window_line(f: dict[str, Any]) -> str | None:
    if not f["window"]:
        return None
    ops: dict[str, list[float]] = {}
    for e in f["window"]:
        row = ops.setdefault(e["op"], [0, 0.0, 0.0])
        row[0] += e["calls"]
        row[1] += e["self_s"]
        row[2] += e["device_s"]
    top = sorted(ops.items(), key=lambda kv: -(kv[1][1] + kv[1][2]))[:3]
    bits = []
    for op, (calls, self_s, dev_s) in top:
        bit = f"{op} x{int(calls)} {_s(self_s)} CPU"
        if dev_s:
            bit += f" {_s(dev_s)} GPU"
        bits.append(bit)
    return "torch.profiler window: " + ", ".join(bits)


def _finding_block(f: dict[str, Any], label: str, lines: list[str], show_cost: bool = True, steps: int | None = None) -> None:
    lines.append(f"{label}{f['path']}:{f['line']}:{f['column']}  {f['code']} {f['name']}")
    pad = " " * len(label)
    lines.append(f"{pad}{f['message']}")
    reads = reads_line(f, steps)
    if reads:
        lines.append(f"{pad}{reads}")
    inconclusive = f.get("ranked_by") == "expected" and f.get("measured") is not None
    for figure in (measured_line(f.get("measured"), inconclusive), expected_line(f.get("expected"))):
        if figure:
            lines.append(f"{pad}{figure}")
    if show_cost and f.get("observed"):
        lines.append(f"{pad}{_evidence_line(f)}")
        w = _window_line(f)
        if w:
            lines.append(f"{pad}{w}")
    ctx = f.get("context") or []
    if ctx:
        fetch_s = sum(e["total_s"] for e in ctx)
        lines_ = sorted({e["line"] for e in ctx})
        where = ", ".join(str(n) for n in lines_)
        lines.append(f"{pad}context: {_s(fetch_s)} fetching batches at line {where} (not counted here)")
    fn = f.get("function")
    if fn:
        lines.append(f"{pad}in {fn['name']}(): {_s(fn['total_s'])} total, {fn['calls']} call(s) (cProfile)")
    if f.get("fix_hint"):
        lines.append(f"{pad}fix: {f['fix_hint']}")


def unranked_sections(findings: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """The unranked findings, each in one section: observed (no saving model applies),
    not applicable on this machine (whether or not the sampler happened to catch their
    line: one rule's findings are not split by that), and static-only."""
    def here(f: dict[str, Any]) -> bool:
        return not (f.get("expected") or {}).get("not_applicable")

    rest = [f for f in findings if f.get("rank") is None]
    not_here = [f for f in rest if not here(f)]
    observed = [f for f in rest if here(f) and f.get("observed")]
    return observed, not_here, [f for f in static_by_impact(findings) if here(f)]


def experiment_section(exp: dict[str, Any] | None) -> list[str]:
    """What ``--experiment`` could and could not see, and why each candidate it did not
    measure was left out (experiment.json has the details)."""
    if not exp:
        return []
    spent = f", spent {_s(exp['spent_s'])}" if exp.get("spent_s") is not None else ""
    out = [f"What the experiment could see (budget {_s(exp.get('budget_s') or 0)}{spent}; details in experiment.json)",
           f"  {exp['sees']}"]
    for m in exp.get("measured") or []:
        out.append(f"  measured       {m['code']} at {m['path']}:{m['line']} ({m['variant']}): {m['verdict']}")
    for m in exp.get("not_measurable") or []:
        out.append(f"  not measurable {m['code']} at {m['path']}:{m['line']}: {m['why']}")
    for m in exp.get("skipped") or []:
        variant = f" ({m['variant']})" if m.get("variant") else ""
        out.append(f"  skipped        {m['code']} at {m['path']}:{m['line']}{variant}: {m['why']}")
    load = exp.get("load") or {}
    if load.get("at_start") is not None:
        out.append(f"  load average {load['at_start']:.1f} at the start, {load.get('at_end') or 0:.1f} at the end "
                   "(each measurement's own range is in its line of experiment.json)")
    out.append("")
    return out


def cost_by_line(report: dict[str, Any], top: int = 8) -> list[str]:
    """The "Cost by line" section: the windows' ops per user line, forward and backward."""
    table = report.get("cost_by_line") or {}
    if not table.get("recorded"):
        reason = table.get("not_recorded_reason")
        return [f"Cost by line: not recorded ({reason})", ""] if reason else []
    rows = table.get("lines") or []
    if not rows:
        return []
    device = any(r.get("device_s") for r in rows)
    out = [f"Cost by line in the torch.profiler windows (per step, over {table['steps']} steps; backward is "
           "charged to the line whose forward op made each autograd node)"]
    out.append(f"  {'forward':>9} {'backward':>9}" + (f" {'device':>9}" if device else "") + "  line")
    for r in rows[:top]:
        dev = f" {_s(r['device_s']):>9}" if device else ""
        out.append(f"  {_s(r['forward_s']):>9} {_s(r['backward_s']):>9}{dev}  {r['path']}:{r['line']}  {r['source']}")
    if table.get("backward_unattributed_s"):
        out.append(f"  {'':>9} {_s(table['backward_unattributed_s']):>9}  (gradient accumulation into parameters: no line)")
    out.append("")
    return out


def render(report: dict[str, Any]) -> str:
    """The text report; what it quotes (paths, source, the script's arguments, messages)
    with its control characters as visible escapes: it is read on a terminal."""
    return printable(_render(report))


def _render(report: dict[str, Any]) -> str:
    run = report["run"]
    cov = report["coverage"]
    lines: list[str] = []
    argv = " ".join(shlex.quote(a) for a in run["argv"]) or run["script"]
    lines.append(f"torchlint profile: {argv}")
    status = f"exit status {run['exit_status']} ({run['stop_reason']})"
    facts = [status, f"{run['steps']} optimizer steps", f"script {_s(run['wall_s'])}"]
    if run.get("step_median_s"):
        facts.append(f"median step {_s(run['step_median_s'])}")
    facts.append(str(run.get("device") or "cpu"))
    if run.get("torch"):
        facts.append(f"torch {run['torch']}")
    lines.append("  " + " · ".join(facts))
    if run.get("incomplete"):
        lines.append("  the profiled process ended before it could write its measurements")
    for w in run.get("warnings") or []:
        lines.append(f"  warning: {w}")
    if report.get("distributed"):  # a multi-rank run: every rank, then rank K in detail
        from torchlint.report.profile_ranks import render_lines

        lines.append("")
        lines.extend(render_lines(report))

    lines.append("")
    lines.append("What each profiler covered")
    cp = cov["cprofile"]
    lines.append(
        "  cProfile        "
        + ("whole script, first line to exit (function level)" if cp.get("span") == "script" else "did not run")
    )
    probes = cov["probes"]
    if probes.get("span") == "script":
        lines.append(
            f"  call probes     whole script: {len(probes.get('ops') or [])} torch calls timed at their calling line"
        )
    sm = cov["sampler"]
    if sm.get("span") == "script":
        lines.append(
            f"  line sampler    whole script, every {sm.get('interval_s', 0) * 1000:.0f} ms "
            f"({sm.get('samples', 0)} samples)"
        )
    tp = cov["torch_profiler"]
    if tp["ran"]:
        sched = tp.get("schedule") or {}
        wins = ", ".join(
            _steps(w)
            + (" to the end of the run" if w.get("partial") else "")
            + (f" -> {w['trace']}" if w.get("trace") else "")
            for w in tp["windows"]
        )
        lines.append(
            f"  torch.profiler  {wins} ({tp['active_steps']} active steps of {run['steps']}; "
            f"window wait {sched.get('wait')} / warmup {sched.get('warmup')} / active {sched.get('active')}"
            f" / repeat {sched.get('repeat')}; {'+'.join(tp['activities'])}; no Python tracer)"
        )
        if tp.get("rolling_budget"):
            lines.append(
                f"                  --repeat 0: a new window whenever torchlint's own work was under "
                f"{tp['rolling_budget']:.0%} of the script's time so far"
            )
        if tp["partial"]:
            lines.append("                  the run ended inside a window: the last one is partial")
    else:
        lines.append(f"  torch.profiler  did not run: {tp.get('not_run_reason') or 'unknown'}")
    if cov["sync_debug"].get("enabled"):
        lines.append("  sync debug      whole run after the first step: every CUDA sync with its line")
    if run.get("tool_s"):
        lines.append(
            f"  (torchlint's own work during the run: {_s(run['tool_s'])}, left out of step times and of "
            f"the script's {_s(run.get('script_s') or run['wall_s'])} that shares are taken of)"
        )

    findings = report["findings"]
    ranked = ranked_findings(report)
    unranked, not_here, static_only = unranked_sections(findings)
    lines.append("")
    if ranked:
        lines.append("Findings ranked by what fixing them saves (measured saving first, then expected)")
        for f in ranked:
            _finding_block(f, f"  {f['rank']:>2}  ", lines, steps=run.get("steps"))
            lines.append("")
    if unranked:
        lines.append("Observed but not ranked (observed time is not a saving; no saving model applies here)")
        for f in unranked:
            _finding_block(f, "   -  ", lines, steps=run.get("steps"))
            lines.append("")
    if not_here:
        lines.append("Not applicable on this machine (the remedy has nothing to act on here)")
        for f in not_here:
            reason = (f.get("expected") or {}).get("not_applicable") or ""
            seen = f", observed {_s(f['cost_s'])} at these lines" if f.get("observed") else ""
            lines.append(f"      {f['path']}:{f['line']}:{f['column']}  {f['code']} {f['message']}")
            lines.append(f"      {'':>4}{reason}{seen}")
        lines.append("")
    if not (ranked or unranked) and not report["static"].get("available", True):
        lines.append(f"Static checks unavailable: {report['static'].get('reason')}")
        lines.append("")
    elif not (ranked or unranked):
        lines.append("No finding had an observed cost or an expected saving in this run.")
        lines.append("")
    if static_only:
        lines.append("Static-only findings (nothing measured at these lines in this run), by their static impact")
        for f in static_only:
            impact = f"[{f['impact']}] " if f.get("impact") else ""
            lines.append(f"      {impact}{f['path']}:{f['line']}:{f['column']}  {f['code']} {f['message']}")
            if f.get("context"):
                fetch_s = sum(e["total_s"] for e in f["context"])
                lines.append(f"      {'':>4}context: {_s(fetch_s)} fetching batches from this loader")
        lines.append("")

    lines.extend(experiment_section(report.get("experiment")))

    one_time = [h for h in report["hotspots"] if h.get("cause")]
    hs = [h for h in report["hotspots"] if not h.get("cause")]
    lines.append("Hotspot lines no rule explains (line sampler, wall time as innermost user line)")
    if not hs:
        lines.append("  none above 1% of the run")
    for h in hs:
        where = f"{h['path']}:{h['line']}"
        extra = f"in {h['function']}()"
        if h["dataloader_s"] >= 0.5 * h["self_s"] > 0:
            extra += ", inside DataLoader fetches"
        lines.append(f"  {_s(h['self_s']):>9} {_pct(h['share']):>6}  {where}  {h['source']}")
        lines.append(f"  {'':>16}  {extra}")
    lines.append("")
    if one_time:
        lines.append("One-time costs (paid once per run; share of the script plus these, as `python SCRIPT` pays them)")
        for h in one_time:
            lines.append(f"  {_s(h['self_s']):>9} {_pct(h['share']):>6}  {h['path']}:{h['line']}  {h['source']}")
            lines.append(f"  {'':>16}  {h['cause']}")
        lines.append("")

    lines.append("Runtime findings")
    if not report["runtime_findings"]:
        lines.append("  none")
    for f in report["runtime_findings"]:
        if f.get("rank") is not None:
            lines.append(f"  {f['rank']:>2}  {f['path']}:{f['line']}:{f['column']}  {f['code']} {f['name']} (ranked above)")
        else:
            _finding_block(f, "   -  ", lines, show_cost=False)
    if not str(run.get("device") or "cpu").startswith("cuda"):
        lines.append("  (CPU run: host-device syncs, pageable copies and GPU idle time need a CUDA device)")
    for skipped in report.get("runtime_skipped") or ():
        lines.append(f"  {skipped['code']} not shown here: {skipped['reason']}")
    lines.append("")

    lines.extend(compile_lines(report))

    tw = report["torch_window"]
    if tw.get("ops"):
        lines.append("Top torch ops in the torch.profiler window (self CPU time)")
        for op in tw["ops"][:5]:
            dev = f"  {_s(op['self_device_s'])} GPU" if op.get("self_device_s") else ""
            lines.append(f"  {_s(op['self_cpu_s']):>9}  x{op['calls']:<6} {op['name']}{dev}")
        lines.append("")

    lines.extend(cost_by_line(report))

    st = report["static"]
    if st.get("available"):
        lines.append(
            f"Static checks: {st.get('files_checked', 0)} file(s) the run executed"
            + (f", {len(st['errors'])} internal error(s)" if st.get("errors") else "")
        )
    art = report["artifacts"]
    lines.append(f"Run directory: {display_path(art['run_dir'], report['run']['cwd'])}")
    names = [art.get(k) for k in ("profile", "report_text", "report_json", "report_html", "session", "script_output",
                                  "experiment")]
    names += list(art.get("traces") or [])
    lines.append("  " + "  ".join(n for n in names if n))
    sv = report["snakeviz"]
    if sv.get("launched"):
        lines.append(f"snakeviz: serving {sv['url']} (pid {sv['pid']}; Ctrl-C at the prompt below stops it)")
    elif sv.get("command"):
        reason = sv.get("reason")
        lines.append(f"snakeviz ({reason}): {sv['command']}" if reason else f"snakeviz: {sv['command']}")
    return "\n".join(lines).rstrip() + "\n"
