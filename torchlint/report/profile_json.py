"""``torchlint profile`` report as data: the ``report.json`` schema (docs/report-schema.md).

:func:`build` is the single source of the report's content; the text report
(:mod:`torchlint.report.profile_text`) renders the same dictionary.
"""

from __future__ import annotations

import json
from typing import Any

from torchlint import __version__
from torchlint.correlate import Correlated, Correlation, UnexplainedHotspot, display_path, lines
from torchlint.correlate.compiled import compile_summary
from torchlint.profiler.session import ProfileSession
from torchlint.terminal import json_safe

SCHEMA = "torchlint.profile-report"
#: 2: a finding's ``measured`` became the experiment's Measurement (it was a bool,
#: now ``observed``), ``share`` is of ``run.script_s``, ranks are by saving.
SCHEMA_VERSION = 2


def _finding(c: Correlated, cwd: str) -> dict[str, Any]:
    d = c.finding.to_dict()
    if c.hint:
        d["static_fix_hint"] = d.get("fix_hint")
        d["fix_hint"] = c.hint
    d.update(
        {
            "origin": c.origin,
            "rank": c.rank,
            # the three figures (docs/profiling.md, "What a number is")
            "observed": {"seconds": c.observed_s, "basis": c.basis, "share": c.share,
                         "backward_s": c.backward_s} if c.observed else None,
            "expected": c.expected.to_dict() if c.expected is not None else None,
            "measured": c.measured.to_dict() if c.measured is not None else None,
            # which figure placed it: a measurement only when it decides (savings.rank_key)
            "ranked_by": _ranked_by(c),
            "basis": c.basis,
            "cost_s": c.observed_s,
            "share": c.share,
            "calls": c.calls,
            "self_s": c.self_s,
            "total_s": c.total_s,
            "syncs": c.syncs,
            "reads_per_step": c.reads_per_step,
            "evidence": [e.to_dict(cwd) for e in sorted(c.evidence, key=lambda e: -e.total_s)],
            "window": [e.to_dict(cwd) for e in sorted(c.window, key=lambda e: -e.self_s)],
            "context": [e.to_dict(cwd) for e in sorted(c.context, key=lambda e: -e.total_s)],
            "function": None
            if c.function is None
            else {
                "name": c.function.name,
                "path": display_path(c.function.path, cwd),
                "line": c.function.line,
                "calls": c.function.calls,
                "self_s": c.function.self_s,
                "total_s": c.function.total_s,
            },
        }
    )
    return d


def _ranked_by(c: Correlated) -> str | None:
    group = c.rank_key()[0]
    return {0: "measured", 2: "measured", 1: "expected", 3: "expected"}.get(group)


def _experiment(data: dict[str, Any] | None, cwd: str) -> dict[str, Any] | None:
    """What ``--experiment`` could and could not see, and why candidates were not
    measured: from experiment.json, for the text and HTML reports."""
    if not data:
        return None
    win = data.get("windowing") or {}
    if win.get("mode") == "run":
        sees = ("whole-run windows: the script's own time from its first line to its exit, evaluation passes "
                "and all work between the optimizer steps included")
    elif win.get("mode") == "steps":
        length = f"{win['max_steps']}-step windows" if win.get("max_steps") else "windows of the whole run"
        sees = (f"{length} compared by their median optimizer step (the first {win.get('warmup')} steps dropped): "
                "work outside most steps (evaluation passes, per-epoch set-up) is not seen; a candidate whose code "
                "runs there gets whole-run windows (the script's own time), or is marked not measurable")
    else:
        sees = f"no windows: {win.get('reason') or 'unknown'}"

    def row(m: dict[str, Any], reason_key: str) -> dict[str, Any]:
        return {"code": m.get("code"), "path": display_path(str(m.get("path") or ""), cwd), "line": m.get("line"),
                "variant": m.get("variant"), "verdict": m.get("verdict"), "why": m.get(reason_key)}

    skipped = data.get("skipped") or []
    return {
        "budget_s": data.get("budget_s"),
        "spent_s": data.get("spent_s"),
        "mode": win.get("mode"),
        "sees": sees,
        "measured": [row(m, "why") for m in data.get("variants") or []],
        "not_measurable": [row(m, "reason") for m in skipped if m.get("not_measurable")],
        "skipped": [row(m, "reason") for m in skipped if not m.get("not_measurable")],
        "load": data.get("load"),
    }


def ranked_findings(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Every ranked finding of a report, static and runtime, in rank order."""
    both = [*(report.get("findings") or ()), *(report.get("runtime_findings") or ())]
    return sorted((f for f in both if f.get("rank") is not None), key=lambda f: f["rank"])


def _hotspot(h: UnexplainedHotspot, cwd: str) -> dict[str, Any]:
    return {
        "path": display_path(h.path, cwd),
        "line": h.line,
        "function": h.function,
        "source": h.source_line,
        "self_s": h.self_s,
        "total_s": h.total_s,
        "share": h.share,
        "samples": h.samples,
        "dataloader_s": h.dataloader_s,
        "probes": [e.to_dict(cwd) for e in h.probes],
        "cause": h.cause,
    }


def _coverage(session: ProfileSession) -> dict[str, Any]:
    cov = session.coverage
    tp = dict(cov.get("torch_profiler") or {})
    windows = []
    for cyc in tp.get("cycles") or []:
        steps = cyc.get("steps") or []
        windows.append(
            {
                "steps": [min(steps), max(steps)] if steps else None,
                "active_steps": len(steps),
                "trace": cyc.get("trace"),
                "partial": bool(cyc.get("partial")),
                "eval": bool(cyc.get("eval")),
                "after_step": cyc.get("after_step"),
                "batches": cyc.get("batches"),
                "ended": cyc.get("ended"),
            }
        )
    return {
        "cprofile": cov.get("cprofile") or {"span": "none"},
        "sampler": cov.get("sampler") or {"span": "none"},
        "probes": cov.get("probes") or {"span": "none", "ops": []},
        "torch_profiler": {
            "ran": bool(tp.get("ran")),
            "activities": tp.get("activities") or [],
            "schedule": tp.get("schedule"),
            "rolling_budget": tp.get("rolling_budget"),
            "windows": windows,
            "active_steps": tp.get("active_steps", 0),
            "partial": bool(tp.get("partial")),
            "with_stack": tp.get("with_stack", False),
            "record_shapes": bool(tp.get("record_shapes")),
            "profile_memory": bool(tp.get("profile_memory")),
            "not_run_reason": tp.get("not_run_reason"),
            "error": tp.get("error"),
        },
        "sync_debug": cov.get("sync_debug") or {"enabled": False},
    }


def _modules(window: dict[str, Any], top: int = 25) -> list[dict[str, Any]]:
    """Per ``nn.Module`` path: its forward (host time, the windows' hooks) and the backward
    of the autograd nodes its forward made (the trace), both totals over the windows."""
    backward = window.get("module_backward") or {}
    rows = []
    for m in list(window.get("modules") or [])[:top]:
        path = m["module"]
        inside = [b for p, b in backward.items() if p == path or p.startswith(path + ".")]  # with its children, as forward
        rows.append({**m, "backward_s": sum(b["backward_s"] for b in inside) if backward else None,
                     "backward_device_s": sum(b.get("backward_device_s") or 0.0 for b in inside) if backward else None})
    return rows


def _compile(session: ProfileSession, correlation: Correlation) -> dict[str, Any] | None:
    """The run's compile time and what it went to, with paths as the report shows them, and
    the time outside the graphs at its graph breaks (the TLR14 findings' figures)."""
    summary = compile_summary(session)
    if summary is None:
        return None
    cwd = correlation.cwd
    breaks = [c for c in correlation.runtime if c.finding.code == "TLR14"]
    timed = [c for c in breaks if c.facts.get("crossings") and (c.facts["crossings"] or {}).get("cost_s") is not None]
    summary["between_graphs_s"] = sum(c.observed_s for c in timed) if timed else None
    for fn in summary["functions"]:
        fn["path"] = display_path(fn["path"], cwd) if fn["path"] else fn["path"]
        if fn.get("called_at"):
            fn["called_at"]["path"] = display_path(fn["called_at"]["path"], cwd)
    return summary


def build(
    correlation: Correlation,
    session: ProfileSession,
    *,
    run_dir: str,
    static: dict[str, Any],
    artifacts: dict[str, Any],
    snakeviz: dict[str, Any],
    experiment: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The report as JSON-ready data (``experiment``: experiment.json's content, if any)."""
    cwd = correlation.cwd
    meta = session.meta
    steps = session.steps
    window = session.torch_window
    return {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "torchlint_version": __version__,
        "run": {
            "script": display_path(str(meta.get("script") or ""), cwd),
            "argv": meta.get("argv") or [],
            "cwd": cwd,
            "python": meta.get("python"),
            "torch": meta.get("torch"),
            "device": meta.get("device"),
            "started_at": meta.get("started_at"),
            "wall_s": session.wall_s,
            "script_s": session.script_s,
            "setup_s": meta.get("setup_s"),
            "tool_s": meta.get("tool_s"),
            "exit_status": meta.get("exit_status"),
            "stop_reason": meta.get("stop_reason", "unknown"),
            "traceback": meta.get("traceback"),
            "steps": int(steps.get("count") or 0),
            "step_median_s": steps.get("median_s"),
            "max_steps": meta.get("max_steps"),
            "incomplete": bool(meta.get("incomplete")),
            "warnings": list(meta.get("warnings") or []),
        },
        "coverage": _coverage(session),
        "findings": [_finding(c, cwd) for c in correlation.findings],
        "unmatched_measurements": [m.to_dict() for m in correlation.unmatched],
        "runtime_findings": [_finding(c, cwd) for c in correlation.runtime],
        "runtime_skipped": [{"code": code, "reason": reason} for code, reason in sorted(correlation.runtime_skipped.items())],
        "hotspots": [_hotspot(h, cwd) for h in correlation.hotspots],
        "dataloader": dict(session.dataloader),
        "torch_window": {
            "window_s": window.get("window_s"),
            "active_steps": window.get("active_steps"),
            "syncs": window.get("syncs"),
            "pageable_copies": window.get("pageable_copies"),
            "gpu_idle_share": window.get("gpu_idle_share"),
            "memcpy": window.get("memcpy") or {},
            "ops": list(window.get("ops") or [])[:15],
            "sync_gaps": [{**g, "path": display_path(str(g.get("path") or ""), cwd)} for g in window.get("sync_gaps") or []],
            "matmul_device_s": window.get("matmul_device_s"),
        },
        "compile": _compile(session, correlation),
        "experiment": _experiment(experiment, cwd),
        "cost_by_line": lines.to_dict(lines.line_table(session), cwd),
        "modules": _modules(window),
        "static": static,
        "artifacts": {"run_dir": run_dir, **artifacts},
        "snakeviz": snakeviz,
    }


def render(report: dict[str, Any]) -> str:
    return json_safe(json.dumps(report, indent=2, ensure_ascii=False)) + "\n"
