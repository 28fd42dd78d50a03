"""``report.html``: the profile report as one self-contained page (inline CSS and JS,
no network), rendered from the report.json data, the loaded session and the files of
the run directory (the sampled stacks, experiment.json, the user's sources). No torch.
"""

from __future__ import annotations

import json
import shlex
from html import escape
from pathlib import Path
from typing import Any

from torchlint import catalogue
from torchlint.correlate import fmt_seconds as _s
from torchlint.profiler import stacks as stack_files
from torchlint.profiler.session import EXPERIMENT_FILE, ProfileSession
from torchlint.report import svg
from torchlint.report.profile_json import ranked_findings
from torchlint.report.profile_compile import html_section as compile_section
from torchlint.report.finding_lines import evidence_line, expected_line, measured_line, pct, reads_line, window_steps
from torchlint.report.profile_text import unranked_sections
from torchlint.textlines import read_lines
from torchlint.terminal import printable

HTML_FILE = "report.html"
PERFETTO = "https://ui.perfetto.dev"
EXCERPT_LINES = 2  # source lines shown above and below a finding's line
TOP_MODULES = 25

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,sans-serif;margin:0 auto;max-width:1100px;padding:0 16px 40px;color:#1d1d1f}
h1{font-size:20px;margin:18px 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:3px}
code,pre{font:12.5px/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
.muted{color:#666}.facts span{margin-right:14px}
.finding{border:1px solid #ddd;border-radius:6px;padding:8px 12px;margin:10px 0}
.finding .head{font-weight:600}.rank{display:inline-block;min-width:2em;color:#b3261e}
.figure{margin:2px 0}.measured{color:#1b6e20}.expected{color:#0b57d0}
pre.src{background:#f6f6f6;padding:6px 8px;overflow-x:auto;margin:6px 0}
pre.src .hit{background:#fff1b8;display:inline-block;width:100%}
table{border-collapse:collapse;margin:6px 0}td,th{padding:2px 10px 2px 0;text-align:left;vertical-align:top}
td.num,th.num{text-align:right}
svg.chart{max-width:100%;height:auto;background:#fff}
svg .steps{fill:none;stroke:#0b57d0;stroke-width:1.5}svg .step{fill:#0b57d0}
svg .grid{stroke:#e6e6e6}svg .axis{font-size:11px;fill:#555}svg .band-label{font-size:10px;fill:#555}
svg .band-window{fill:#fbbc04;opacity:.25}svg .band-eval{fill:#a142f4;opacity:.3}svg .band-experiment{fill:#34a853;opacity:.18}
.flame{position:relative;width:100%;overflow:hidden;margin:6px 0}
.fg{position:absolute;height:17px;box-sizing:border-box;border:1px solid #fff;font-size:11px;line-height:15px;
white-space:nowrap;overflow:hidden;text-overflow:ellipsis;padding:0 3px;cursor:pointer}
.fg.root{background:#d0d0d0}.fg.user{background:#f6a96b}.fg.torch{background:#8ab4f8}.fg.lib{background:#c8c8c8}
.fg:hover{filter:brightness(.9)}.fg.hidden{display:none}
"""

# Click a frame to zoom to it; click the top bar to zoom out. Hover text is each div's title.
_JS = """
(function(){var f=document.getElementById('flame');if(!f)return;
f.addEventListener('click',function(e){var t=e.target;if(!t.classList.contains('fg'))return;
var zx=+t.dataset.x,zw=+t.dataset.w,zd=+t.dataset.d;
f.querySelectorAll('.fg').forEach(function(n){var x=+n.dataset.x,w=+n.dataset.w,d=+n.dataset.d;
var inside=x>=zx-1e-9&&x+w<=zx+zw+1e-9;
if(d<zd){n.classList.toggle('hidden',!(x<=zx+1e-9&&x+w>=zx+zw-1e-9));n.style.left='0%';n.style.width='100%';return;}
n.classList.toggle('hidden',!inside);if(inside){n.style.left=((x-zx)/zw*100)+'%';n.style.width=(w/zw*100)+'%';}});});})();
"""


def _rule_link(code: str) -> str:
    rule = catalogue.find(code, runtime=True)  # the runtime TLR codes have pages too
    path = catalogue.page_path(rule) if rule is not None else None
    if path is None:
        return ""
    return f' <a class="rule" href="{escape(path.resolve().as_uri())}">rule page</a>'


def source_excerpt(path: str, line: int, cwd: str) -> str:
    """A few lines around ``path:line`` (escaped), the line itself marked; '' if unreadable."""
    file = Path(path) if Path(path).is_absolute() else Path(cwd) / path
    lines = read_lines(str(file))  # Python's lines: a form feed or U+2028 does not end one
    lo, hi = max(line - 1 - EXCERPT_LINES, 0), min(line + EXCERPT_LINES, len(lines))
    if lo >= hi:
        return ""
    rows = []
    for n in range(lo, hi):
        text = f"{n + 1:>5}  {escape(lines[n])}"
        rows.append(f'<span class="hit">{text}</span>' if n + 1 == line else text)
    return '<pre class="src">' + "\n".join(rows) + "</pre>"


def _finding(f: dict[str, Any], cwd: str, label: str, show_cost: bool = True, steps: int | None = None) -> str:
    where = f"{f['path']}:{f['line']}:{f.get('column') or 1}"
    out = [f'<div class="finding" id="{escape(f["code"])}-{escape(where)}">',
           f'<div class="head"><span class="rank">{escape(label)}</span> <code>{escape(f["code"])}</code> '
           f'{escape(f.get("name") or "")} <code class="where">{escape(where)}</code>{_rule_link(f["code"])}</div>',
           f'<div>{escape(f.get("message") or "")}</div>']
    reads = reads_line(f, steps)
    if reads:
        out.append(f'<div class="figure reads">{escape(reads)}</div>')
    inconclusive = f.get("ranked_by") == "expected" and f.get("measured") is not None
    measured, expected = measured_line(f.get("measured"), inconclusive), expected_line(f.get("expected"))
    if measured:
        out.append(f'<div class="figure measured">{escape(measured)}</div>')
    if expected:
        out.append(f'<div class="figure expected">{escape(expected)}</div>')
    if show_cost and f.get("observed"):
        out.append(f'<div class="figure observed">{escape(evidence_line(f))}</div>')
    out.append(source_excerpt(f["path"], int(f["line"]), cwd))
    if f.get("fix_hint"):
        out.append(f'<div class="muted">fix: {escape(f["fix_hint"])}</div>')
    out.append("</div>")
    return "".join(out)


def _experiment_section(exp: dict[str, Any] | None) -> str:
    """What the experiment could and could not see, and why candidates were left out."""
    if not exp:
        return ""
    out = [f"<h3>What the experiment could see</h3><p>{escape(exp['sees'])}</p><ul>"]
    for m in exp.get("measured") or []:
        out.append(f"<li>measured <code>{escape(str(m['code']))}</code> at <code>{escape(m['path'])}:{m['line']}"
                   f"</code> ({escape(str(m['variant']))}): {escape(str(m['verdict']))}</li>")
    for kind in ("not_measurable", "skipped"):
        label = "not measurable" if kind == "not_measurable" else "skipped"
        for m in exp.get(kind) or []:
            out.append(f"<li>{label} <code>{escape(str(m['code']))}</code> at <code>{escape(m['path'])}:{m['line']}"
                       f"</code>{' (' + escape(str(m['variant'])) + ')' if m.get('variant') else ''}: "
                       f"{escape(str(m['why']))}</li>")
    out.append("</ul>")
    return "".join(out)


def _findings(report: dict[str, Any], cwd: str) -> str:
    findings = report["findings"]
    ranked = ranked_findings(report)
    unranked, not_here, static_only = unranked_sections(findings)
    out = ["<h2>Findings ranked by what fixing them saves</h2>"]
    if not ranked and not unranked:
        out.append('<p class="muted">No finding had an observed cost or an expected saving in this run.</p>')
    steps = (report.get("run") or {}).get("steps")
    out.extend(_finding(f, cwd, f"#{f['rank']}", steps=steps) for f in ranked)
    if unranked:
        out.append("<h3>Observed but not ranked (no saving model applies here)</h3>")
        out.extend(_finding(f, cwd, "–", steps=steps) for f in unranked)
    if not_here:
        out.append("<h3>Not applicable on this machine</h3>")
        out.extend(_finding(f, cwd, "–") for f in not_here)
    if static_only:
        out.append("<h3>Static-only findings (nothing measured at these lines), by their static impact</h3><ul>")
        out.extend(f"<li>{escape(f.get('impact') or '')} <code>{escape(f['path'])}:{f['line']}</code> <code>{escape(f['code'])}</code> "
                   f"{escape(f['message'])}{_rule_link(f['code'])}</li>" for f in static_only)
        out.append("</ul>")
    out.append(_experiment_section(report.get("experiment")))
    unranked_runtime = [f for f in report["runtime_findings"] if f.get("rank") is None]
    if unranked_runtime or not report["runtime_findings"]:  # ranked ones have their card above: no empty heading
        out.append("<h2>Runtime findings</h2>")
        out.extend(_finding(f, cwd, "–", show_cost=False) for f in unranked_runtime)
        if not report["runtime_findings"]:
            out.append('<p class="muted">none</p>')
    return "".join(out)


def _experiment_windowing(run_dir: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((run_dir / EXPERIMENT_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    win = data.get("windowing") if isinstance(data, dict) else None
    return win if isinstance(win, dict) and win.get("mode") else None


def _step_section(report: dict[str, Any], session: ProfileSession, run_dir: Path) -> str:
    durations = [float(d) for d in session.steps.get("durations_s") or []]
    windows = report["coverage"]["torch_profiler"]["windows"]
    marks = ", ".join(window_steps(w) for w in windows) or "none"
    return ("<h2>Step times</h2>"
            f'<p class="muted">Each optimizer step\'s wall time (torchlint\'s own work taken out). '
            f"Bands: torch.profiler windows ({escape(marks)}), the evaluation window, and the steps "
            f"the experiment's windows compare when <code>--experiment</code> ran.</p>"
            + svg.step_chart(durations, windows, _experiment_windowing(run_dir)))


def _kind(frame: tuple[str, int, str]) -> str:
    if frame[2]:
        return "user"
    return "torch" if frame[0] == "[torch]" else "lib"


def _flame_section(session: ProfileSession, run_dir: Path) -> str:
    head = ("<h2>Where the time went: sampled stacks</h2>"
            '<p class="muted">The line sampler\'s stacks (wall time, main thread): the script\'s frames, '
            "each run of library frames folded into <code>[torch]</code> or <code>[lib]</code>. "
            "Hover for the time, click to zoom, click the top bar to zoom out.</p>")
    path = run_dir / stack_files.SPEEDSCOPE_FILE
    if not path.is_file():
        return head + '<p class="muted">This run has no sampled stacks (made by an older torchlint).</p>'
    try:
        stacks = stack_files.read_speedscope(path)
    except (OSError, ValueError, KeyError, IndexError, TypeError) as exc:
        return head + f'<p class="muted">Could not read {escape(path.name)}: {escape(str(exc))}</p>'
    cwd = session.cwd
    rows = [([(stack_files.frame_label(f, cwd), _kind(f)) for f in stack], w) for stack, w in stacks.items()]
    return head + svg.flame_graph(rows)


def _ops_section(report: dict[str, Any], session: ProfileSession) -> str:
    out = ["<h2>In the torch.profiler windows</h2>"]
    ops = report["torch_window"].get("ops") or []
    if ops:
        out.append("<h3>Top torch ops (self CPU time)</h3><table><tr><th class=num>self CPU</th>"
                   "<th class=num>device</th><th class=num>calls</th><th>op</th></tr>")
        out.extend(f"<tr><td class=num>{_s(op['self_cpu_s'])}</td><td class=num>"
                   f"{_s(op['self_device_s']) if op.get('self_device_s') else ''}</td>"
                   f"<td class=num>{op['calls']}</td><td><code>{escape(op['name'])}</code></td></tr>" for op in ops)
        out.append("</table>")
    out.append(_lines_section(report))
    modules = list(report.get("modules") or [])[:TOP_MODULES]
    steps = int(report["coverage"]["torch_profiler"].get("active_steps") or 0)
    if modules:
        out.append("<h3>Time per module</h3><p class=muted>Host time of each <code>nn.Module</code>'s "
                   f"forward in the windows ({steps} steps), by its path in the model, and the backward of the "
                   "autograd nodes its forward made (from the trace).</p>"
                   "<table><tr><th class=num>forward</th><th class=num>per step</th><th class=num>self</th>"
                   "<th class=num>backward</th><th class=num>calls</th><th>module</th></tr>")
        for m in modules:
            per = _s(m["total_s"] / steps) if steps else ""
            bwd = _s(m["backward_s"]) if m.get("backward_s") is not None else ""
            out.append(f"<tr><td class=num>{_s(m['total_s'])}</td><td class=num>{per}</td>"
                       f"<td class=num>{_s(m['self_s'])}</td><td class=num>{bwd}</td><td class=num>{m['calls']}</td>"
                       f"<td><code>{escape(m['module'])}</code></td></tr>")
        out.append("</table>")
    if len(out) == 1:
        reason = report["coverage"]["torch_profiler"].get("not_run_reason") or "nothing was recorded"
        out.append(f'<p class="muted">torch.profiler did not record: {escape(str(reason))}</p>')
    return "".join(out)


def _lines_section(report: dict[str, Any]) -> str:
    table = report.get("cost_by_line") or {}
    rows = table.get("lines") or []
    if not table.get("recorded") or not rows:
        reason = table.get("not_recorded_reason")
        return f'<h3>Cost by line</h3><p class="muted">Not recorded: {escape(str(reason))}</p>' if reason else ""
    device = any(r.get("device_s") for r in rows)
    out = [f"<h3>Cost by line</h3><p class=muted>Per step, over the windows' {table['steps']} steps: the ops each "
           "line of your code launched (forward), and the backward of the autograd nodes those ops made (the "
           "trace links each node to its forward op).</p><table><tr><th class=num>forward</th>"
           "<th class=num>backward</th>" + ("<th class=num>device</th>" if device else "") + "<th>line</th></tr>"]
    for r in rows:
        dev = f"<td class=num>{_s(r['device_s'])}</td>" if device else ""
        out.append(f"<tr><td class=num>{_s(r['forward_s'])}</td><td class=num>{_s(r['backward_s'])}</td>{dev}"
                   f"<td><code>{escape(r['path'])}:{r['line']}</code> <code>{escape(r['source'])}</code></td></tr>")
    out.append("</table>")
    return "".join(out)


def _hotspots(report: dict[str, Any]) -> str:
    rows = [h for h in report["hotspots"] if not h.get("cause")]
    if not rows:
        return ""
    out = ["<h2>Hot lines no rule explains</h2><table>"]
    out.extend(f"<tr><td class=num>{_s(h['self_s'])}</td><td class=num>{pct(h['share'])}</td>"
               f"<td><code>{escape(h['path'])}:{h['line']}</code></td><td><code>{escape(h['source'] or '')}</code></td></tr>"
               for h in rows)
    out.append("</table>")
    return "".join(out)


def _files(report: dict[str, Any], run_dir: Path) -> str:
    art = report["artifacts"]
    out = ["<h2>Files of this run</h2><ul>"]
    if art.get("profile"):
        prof = (run_dir / art["profile"]).resolve()
        command = (report.get("snakeviz") or {}).get("command") or f"snakeviz {shlex.quote(str(prof))}"
        out.append(f'<li><a href="{escape(art["profile"])}">{escape(art["profile"])}</a>: cProfile, '
                   f"function level. <code>{escape(command)}</code></li>")
    for trace in art.get("traces") or []:
        out.append(f'<li><a href="{escape(trace)}">{escape(trace)}</a>: torch.profiler trace; open in '
                   f'<a href="{PERFETTO}">{PERFETTO}</a> (or <code>chrome://tracing</code>)</li>')
    if art.get("traces") and any(t.startswith("traces/") for t in art["traces"]):
        out.append(f"<li><code>tensorboard --logdir {escape(shlex.quote(str((run_dir / 'traces').resolve())))}</code>"
                   " (torch-tb-profiler) or HTA's <code>TraceAnalysis(trace_dir=...)</code> on one window's folder</li>")
    for name, what in ((stack_files.SPEEDSCOPE_FILE, "the sampled stacks for speedscope"),
                       (stack_files.COLLAPSED_FILE, "collapsed stacks for flamegraph.pl / inferno"),
                       (art.get("report_json"), "this report as data"),
                       (art.get("report_text"), "the text report"),
                       (art.get("session"), "everything measured"),
                       (art.get("experiment"), "what --experiment measured, and what it could not")):
        if name and (run_dir / name).is_file():
            out.append(f'<li><a href="{escape(name)}">{escape(name)}</a>: {what}</li>')
    out.append("</ul>")
    return "".join(out)


def _header(report: dict[str, Any]) -> str:
    run = report["run"]
    argv = " ".join(shlex.quote(a) for a in run["argv"]) or run["script"]
    facts = [f"exit status {run['exit_status']} ({run['stop_reason']})", f"{run['steps']} optimizer steps",
             f"script {_s(run['wall_s'])}"]
    if run.get("step_median_s"):
        facts.append(f"median step {_s(run['step_median_s'])}")
    facts.append(str(run.get("device") or "cpu"))
    if run.get("torch"):
        facts.append(f"torch {run['torch']}")
    warnings = "".join(f'<div class="muted">warning: {escape(w)}</div>' for w in run.get("warnings") or [])
    return (f"<h1>torchlint profile: <code>{escape(argv)}</code></h1>"
            f'<div class="facts">{"".join(f"<span>{escape(x)}</span>" for x in facts)}</div>{warnings}')


def render(report: dict[str, Any], session: ProfileSession, run_dir: Path) -> str:
    """The whole page."""
    run_dir = Path(run_dir)
    cwd = report["run"]["cwd"]
    from torchlint.report.profile_ranks import html_section  # several ranks: side by side

    body = (_header(report) + html_section(report) + _findings(report, cwd) + _step_section(report, session, run_dir)
            + compile_section(report) + _flame_section(session, run_dir) + _ops_section(report, session) + _hotspots(report)
            + _files(report, run_dir))
    title = escape(f"torchlint profile: {report['run']['script']}")
    # A browser acts on bidi overrides (Trojan Source) and hides other controls: shown as escapes.
    body, title = printable(body), printable(title)
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{title}</title>'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<style>{_CSS}</style></head><body>{body}<script>{_JS}</script></body></html>\n")
