"""The merged report of a multi-rank run: one rank's report in detail, plus every rank.

:func:`merge` adds a ``distributed`` section to the detailed rank's report (built by
:mod:`torchlint.report.profile_json`) and appends the multi-rank runtime findings
(TLR10..TLR13); :func:`render_lines` is its part of the text report; :func:`rank_data`
gives the per-rank rows alone, for a renderer that shows ranks side by side (HTML).
"""

from __future__ import annotations

from typing import Any

from torchlint.correlate import Correlation
from torchlint.correlate.ranks import RankFigures, failed_ranks, finding_spread, multi_rank_findings
from torchlint.profiler.session import ProfileSession
from torchlint.report.profile_json import _finding


def merge(
    report: dict[str, Any],
    *,
    detail_rank: int,
    figures: list[RankFigures],
    sessions: dict[int, ProfileSession],
    correlations: dict[int, Correlation],
    launch: dict[str, Any],
) -> dict[str, Any]:
    """``report`` (the detailed rank's) with every rank merged in; returns it."""
    cwd = report["run"]["cwd"]
    script = str(sessions[detail_rank].meta.get("script") or "")
    extra = multi_rank_findings(figures, sessions, correlations, cwd, script)
    report["runtime_findings"].extend(_finding(c, cwd) for c in extra)
    failed = failed_ranks(figures)
    report["distributed"] = {
        "detail_rank": detail_rank,
        "world_size": launch.get("world_size"),
        "profiled_ranks": sorted(f.rank for f in figures),
        "launch": launch,
        "ranks": [f.to_dict() for f in figures],
        "failed_ranks": [f.rank for f in failed],
        "findings": finding_spread(correlations),
        "multi_rank_findings": [c.finding.code for c in extra],
    }
    return report


def rank_data(report: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per profiled rank (figures, how it ended, each finding's cost there): the data
    a side-by-side view needs; empty for a single-process report."""
    dist = report.get("distributed") or {}
    rows = []
    for row in dist.get("ranks") or []:
        key = str(row["rank"])
        costs = {
            f"{f['code']} {f['path']}:{f['line']}": f["ranks"][key]["observed_s"]
            for f in dist.get("findings") or []
            if key in f["ranks"]
        }
        rows.append({**row, "findings": costs})
    return rows


def _s(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds * 1000:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


def _pct(share: float | None) -> str:
    return "-" if share is None else f"{share:.0%}"


def render_lines(report: dict[str, Any]) -> list[str]:
    """The text report's "Ranks" section (nothing for a single-process report)."""
    dist = report.get("distributed")
    if not dist:
        return []
    launch = dist.get("launch") or {}
    lines = [f"Ranks ({len(dist['ranks'])} profiled of {dist.get('world_size') or '?'}; rank {dist['detail_rank']} in detail below)"]
    if launch.get("stopped"):
        lines.append(f"  the run was stopped: {launch['stopped']}" + (f" after {launch['timeout']:.0f} s (--timeout)" if launch["stopped"] == "timeout" else ""))
    lines.append(f"  {'rank':>4}  {'node':>4}  {'ended':<22} {'steps':>5}  {'median step':>11}  {'in collectives':>14}  {'own work/step':>13}  {'loader wait':>11}")
    for r in dist["ranks"]:
        ended = f"{r['stop_reason']} ({r['exit_status']})" if r["exit_status"] is not None else "no profile written"
        comm = f"{_s(r['collectives_per_step_s'])} {_pct(r['collectives_share'])}" if r["collectives_per_step_s"] is not None else "-"
        lines.append(
            f"  {r['rank']:>4}  {r['node_rank'] if r['node_rank'] is not None else '-':>4}  {ended:<22} {r['steps']:>5}  "
            f"{_s(r['step_median_s']):>11}  {comm:>14}  {_s(r['work_per_step_s']):>13}  {_pct(r['dataloader_wait_share']):>11}"
        )
    failed = dist["failed_ranks"]
    by_rank = {r["rank"]: r for r in dist["ranks"]}
    for n, rank in enumerate(failed):
        r = by_rank[rank]
        lines.append("")
        if n == 0:
            lines.append(f"  rank {rank} failed first ({r['stop_reason']}, exit status {r['exit_status']}); its traceback:")
            lines.extend("    " + t for t in (r.get("traceback") or "(none written)").rstrip().splitlines())
        else:
            last = (r.get("traceback") or "").rstrip().splitlines()[-1:] or ["no traceback"]
            lines.append(f"  rank {rank} failed after rank {failed[0]}: {last[0]}")
    if launch.get("stopped"):
        lines.append("")
        for r in dist["ranks"]:
            if r["exit_status"] is None:
                lines.append(f"  rank {r['rank']} wrote no profile (killed, or it never started)")
            elif r["stop_reason"] in ("terminated", "hangup", "interrupted"):
                lines.append(f"  rank {r['rank']} was stopped after step {r['steps']}, at {r.get('stopped_at') or 'an unknown line'}")
    spread = [f for f in dist["findings"] if len(f["ranks"]) > 1 and f["spread_s"] > 0]
    if spread:
        lines.append("")
        lines.append("  Findings' observed cost per rank (spread: max - min)")
        for f in spread[:10]:
            per = "  ".join(f"r{k} {_s(v['observed_s'])}" for k, v in sorted(f["ranks"].items(), key=lambda kv: int(kv[0])))
            lines.append(f"    {f['code']} {f['path']}:{f['line']}  {per}  spread {_s(f['spread_s'])}")
    lines.append("")
    return lines


def html_section(report: dict[str, Any]) -> str:
    """The ranks side by side, for report.html (empty for a single-process report): one
    column per rank, a row per figure, then a row per finding with its cost on each rank."""
    from html import escape

    rows = rank_data(report)
    if not rows:
        return ""
    failed = set((report.get("distributed") or {}).get("failed_ranks") or [])
    head = "".join(f"<th>rank {r['rank']}{' (failed)' if r['rank'] in failed else ''}</th>" for r in rows)
    figures = [
        ("node", lambda r: str(r["node_rank"]) if r["node_rank"] is not None else "-"),
        ("ended", lambda r: f"{r['stop_reason']} ({r['exit_status']})" if r["exit_status"] is not None else "no profile"),
        ("steps", lambda r: str(r["steps"])),
        ("median step", lambda r: _s(r["step_median_s"])),
        ("in collectives / step", lambda r: f"{_s(r['collectives_per_step_s'])} ({_pct(r['collectives_share'])})"),
        ("own work / step", lambda r: _s(r["work_per_step_s"])),
        ("DataLoader wait", lambda r: _pct(r["dataloader_wait_share"])),
    ]
    out = [f"<h2>Ranks side by side</h2><table><tr><th></th>{head}</tr>"]
    for label, cell in figures:
        out.append(f"<tr><th>{escape(label)}</th>" + "".join(f"<td class=num>{escape(cell(r))}</td>" for r in rows) + "</tr>")
    names = sorted({name for r in rows for name in r["findings"]})
    for name in names[:20]:
        cells = "".join(f"<td class=num>{_s(r['findings'].get(name))}</td>" for r in rows)
        out.append(f"<tr><th><code>{escape(name)}</code></th>{cells}</tr>")
    out.append("</table>")
    for r in rows:
        if r["rank"] in failed and r.get("traceback"):
            out.append(f"<h3>rank {r['rank']}: traceback</h3><pre>{escape(r['traceback'])}</pre>")
    return "".join(out)
