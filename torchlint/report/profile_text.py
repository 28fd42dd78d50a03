"""``torchlint profile`` report as plain text, rendered from the report.json data."""

from __future__ import annotations

import shlex
from typing import Any

from torchlint.correlate import display_path
from torchlint.correlate import fmt_seconds as _s
from torchlint.report.finding_lines import evidence_line, expected_line, measured_line, pct, reads_line, window_line, window_steps
from torchlint.report.profile_json import ranked_findings
from torchlint.terminal import printable
from torchlint.report.profile_compile import text_lines as compile_lines
from torchlint.findings import IMPACT_RANK


def static_by_impact(findings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The findings nothing in the run measured, highest static impact first (docs/impact.md)."""
    static = [f for f in findings if f.get("rank") is None and not f.get("observed")]
    return sorted(static, key=lambda f: IMPACT_RANK.get(f.get("impact") or "", len(IMPACT_RANK)))  # (no tier, TL000: last)


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
        lines.append(f"{pad}{evidence_line(f)}")
        w = window_line(f)
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
            window_steps(w)
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
        lines.append(f"  {_s(h['self_s']):>9} {pct(h['share']):>6}  {where}  {h['source']}")
        lines.append(f"  {'':>16}  {extra}")
    lines.append("")
    if one_time:
        lines.append("One-time costs (paid once per run; share of the script plus these, as `python SCRIPT` pays them)")
        for h in one_time:
            lines.append(f"  {_s(h['self_s']):>9} {pct(h['share']):>6}  {h['path']}:{h['line']}  {h['source']}")
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
