"""The report's torch.compile section: the run's compile time and what it went to (text and HTML).

Renders ``report["compile"]`` (correlate.compiled.compile_summary); the graph breaks and
recompilations themselves are findings (TLR14, TLR15) and render with the others.
"""

from __future__ import annotations

from html import escape
from typing import Any

from torchlint.correlate import fmt_seconds as _s


def _share(share: float | None) -> str:
    return f" ({share:.0%} of the script)" if share is not None else ""


def _headline(c: dict[str, Any]) -> str:
    n, r = c["compilations"], c["recompilations"]
    text = (f"compile time {_s(c['compile_s'])}{_share(c.get('share'))}: {n} compilation{'s' if n != 1 else ''}"
            f"{f', {r} of them recompilations (TLR15)' if r else ''}; {c['graph_breaks']} graph break"
            f"{'s' if c['graph_breaks'] != 1 else ''} (TLR14)")
    if c.get("between_graphs_s") is not None:
        text += f"; about {_s(c['between_graphs_s'])} outside the graphs at the breaks (the windows' crossings x the run's steps)"
    if c.get("backend_s"):
        text += f"; the backend's share {_s(c['backend_s'])}"
        if c.get("inductor_s"):
            text += f", inductor's {_s(c['inductor_s'])}"
    return text


def _row(fn: dict[str, Any]) -> str:
    called = fn.get("called_at")
    where = f", called at {called['path']}:{called['line']}" if called and (called["path"], called["line"]) != (fn["path"], fn["line"]) else ""
    recompiles = f" ({fn['recompilations']} recompilations)" if fn.get("recompilations") else ""
    return (f"{_s(fn['seconds']):>9}  {fn['function']}() at {fn['path']}:{fn['line']}{where}: "
            f"{fn['compilations']} compilation{'s' if fn['compilations'] != 1 else ''}{recompiles}")


def text_lines(report: dict[str, Any]) -> list[str]:
    c = report.get("compile")
    if not c:
        return []
    lines = ["torch.compile (compile time from torch's compilation records; TLR14/TLR15 above)", "  " + _headline(c)]
    lines.extend("  " + _row(fn) for fn in c.get("functions") or [])
    for error in c.get("errors") or []:
        lines.append(f"  note: {error}")
    lines.append("")
    return lines


def html_section(report: dict[str, Any]) -> str:
    c = report.get("compile")
    if not c:
        return ""
    out = [f"<h2>torch.compile</h2><p>{escape(_headline(c))}</p><table>"]
    out.extend(f"<tr><td><code>{escape(_row(fn))}</code></td></tr>" for fn in c.get("functions") or [])
    out.append("</table>")
    out.extend(f'<div class="muted">note: {escape(e)}</div>' for e in c.get("errors") or [])
    return "".join(out)
