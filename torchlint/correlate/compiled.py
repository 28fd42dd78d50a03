"""torch.compile's graph breaks (TLR14) and recompilations (TLR15): decisions on what the
child recorded (profiler/compilewatch.py) and on the compiled regions of the windows
(profiler/traceregions.py). Pure: no torch, no libcst.

- A **graph break** is one (reason, user file:line): dynamo met it while compiling
  (``compiles`` times), and its *resume function* (``torch_dynamo_resume_in_<fn>_at_<line>``,
  a frame of its own) ran every time the code crossed the break. The torch.profiler
  windows count those runs and time what each spent outside the graphs (the eager code at
  the break, the guards that re-enter, the resume's prologue): per step, times the run's
  steps, that is the break's time over the run.
- A **recompilation** is a compilation of a frame already compiled, because a guard failed:
  grouped by the compiled function and the kind of guard (a tensor's shape, a Python
  scalar's value, a type ...). Its cost is measured: the time torch spent compiling again.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from torchlint.correlate.guards import KINDS, Guard, guard_of
from torchlint.correlate.model import Correlated, Evidence, RuntimeRule, _fmt_s, enclosing_function
from torchlint.findings import Finding
from torchlint.profiler.session import ProfileSession
from torchlint.profiler.usercode import is_user_file

Make = Callable[[str, str, str, int, str | None], Finding]

COMPILE_RULES = {
    "TLR14": RuntimeRule(
        "TLR14", "compile-graph-break",
        "Keep the compiled code traceable at this line: no .item()/.tolist()/print/NumPy on tensors inside the "
        "compiled function, tensor ops instead of Python branches on tensor values (torch.where, torch.cond)",
    ),
    "TLR15": RuntimeRule(
        "TLR15", "compile-recompilation",
        "Keep what the guards check the same between calls, or tell torch.compile it varies "
        "(torch._dynamo.mark_dynamic, dynamic=True, a tensor instead of a Python number)",
    ),
}

#: Static rules whose finding is the same graph break a run shows (the join by file:line,
#: like TL201 and TLR01): their findings take the break's measurements and rank with them,
#: and the TLR14 at their line is then shown, not ranked again (TL504: checks/precision/
#: compiled_graph_break.py).
GRAPH_BREAK_STATIC_RULES: frozenset[str] = frozenset({"TL504"})

RESUME = re.compile(r"^torch_dynamo_resume_in_(?P<fn>.+)_at_(?P<line>\d+)$")
_CID = re.compile(r"^(?P<frame>\d+)/(?P<n>\d+)")
_URL = re.compile(r"https?://\S+")
@dataclass
class CompiledFunction:
    """A compiled function of the user's code, as the report names it."""

    path: str
    line: int
    name: str


@dataclass
class Recompiles:
    function: CompiledFunction
    kind: str
    records: list[dict[str, Any]] = field(default_factory=list)
    guards: list[Guard] = field(default_factory=list)


def _compile(session: ProfileSession) -> dict[str, Any]:
    value = session.meta.get("compile")
    return value if isinstance(value, dict) else {}


def _frame_id(compile_id: Any) -> str | None:
    m = _CID.match(str(compile_id or ""))
    return m.group("frame") if m else None


# --------------------------------------------------------------------------
# which user function a compiled frame is
# --------------------------------------------------------------------------


def compiled_function(session: ProfileSession, record: dict[str, Any]) -> CompiledFunction | None:
    """The user's function a compilation record belongs to: the frame itself when it is
    user code (a resume function belongs to the function it resumes), else the user line
    that called the compiled code (``torch.compile(module)`` compiles torch's own wrapper)."""
    path, line, frame = record.get("path"), record.get("line"), str(record.get("frame") or "")
    if path and line and (record.get("user_code") or is_user_file(str(path))):
        path = session.resolve(str(path))
        m = RESUME.match(frame)
        at = int(m.group("line")) if m else int(line)
        fn = enclosing_function(path, at)
        if fn is not None:
            return CompiledFunction(path, fn[1], fn[2])
        return CompiledFunction(path, int(line), m.group("fn") if m else frame)
    site = record.get("called_at")
    if site:
        return CompiledFunction(session.resolve(str(site[0])), int(site[1]), str(site[2]))
    return None


def _frames_by_id(session: ProfileSession) -> dict[str, dict[str, Any]]:
    """Frame id -> its first compilation record (a frame keeps its code across recompiles)."""
    out: dict[str, dict[str, Any]] = {}
    for r in _compile(session).get("compiles") or ():
        fid = _frame_id(r.get("compile_id"))
        if fid is not None and r.get("frame") and fid not in out:
            out[fid] = r
    return out


# --------------------------------------------------------------------------
# TLR14: graph breaks
# --------------------------------------------------------------------------


def reason_parts(reason: str) -> tuple[str, str | None, str | None]:
    """(the reason in one line, torch's explanation and hint, the graph-break page's URL)."""
    lines = [ln.strip() for ln in reason.splitlines() if ln.strip()]
    body = [ln for ln in lines if not ln.startswith("Encountered graph break when attempting to trace")]
    head = body[0] if body else (lines[0] if lines else "graph break")
    more = [ln for ln in body[1:] if ln.startswith(("Explanation:", "Hint:"))]
    url = _URL.search(reason)
    return head, " ".join(more) or None, url.group(0).rstrip(".") if url else None


def _resume_lines(session: ProfileSession, brk: dict[str, Any], frames: dict[str, dict[str, Any]]) -> set[tuple[str, int]]:
    """(path, line) of the resume functions a break leads to: in each compiled frame that met
    it, the line that frame was at (a break inside a function it inlined resumes at the call)."""
    out = {(session.resolve(str(brk.get("path"))), int(brk.get("line") or 0))}
    for cid in brk.get("compile_ids") or ():
        record = frames.get(_frame_id(cid) or "")
        if not record:
            continue
        m = RESUME.match(str(record.get("frame") or ""))
        name = m.group("fn") if m else str(record.get("frame"))
        for file, line, func in reversed(brk.get("frames") or ()):
            if str(func).strip() in (name, record.get("frame")) and session.resolve(str(file)) == session.resolve(str(record.get("path") or "")):
                out.add((session.resolve(str(file)), int(line)))
                break
    return out


def crossings(session: ProfileSession, brk: dict[str, Any]) -> dict[str, Any] | None:
    """What the windows saw of a break: its resume functions' runs and time outside the graphs."""
    regions = session.torch_window.get("compiled_regions") or {}
    active = int(session.torch_window.get("active_steps") or 0)
    if not regions or not active:
        return None
    frames = _frames_by_id(session)
    resumes = _resume_lines(session, brk, frames)
    calls = timed = 0
    medians: list[tuple[float, int]] = []
    for cid, row in regions.items():
        record = frames.get(_frame_id(cid) or "")
        if not record:
            continue
        m = RESUME.match(str(record.get("frame") or ""))
        if not m or (session.resolve(str(record.get("path") or "")), int(m.group("line"))) not in resumes:
            continue
        calls += int(row.get("nested") or row.get("calls") or 0)
        timed += int(row.get("timed") or 0)
        if row.get("median_outside_s") is not None and row.get("timed"):
            medians.append((float(row["median_outside_s"]), int(row["timed"])))
    if not calls:
        return {"calls": 0, "per_step": 0.0, "cost_s": None, "active_steps": active}
    # the median of each compile id's runs, weighted by its timed runs
    cost = _weighted_median(medians) if medians else None
    return {"calls": calls, "per_step": calls / active, "cost_s": cost, "timed": timed, "active_steps": active}


def _weighted_median(pairs: list[tuple[float, int]]) -> float:
    pairs = sorted(pairs)
    total = sum(n for _, n in pairs)
    acc = 0
    for value, n in pairs:
        acc += n
        if acc * 2 >= total:
            return value
    return pairs[-1][0]


def graph_break_findings(session: ProfileSession, make: Make) -> list[Correlated]:
    out = []
    steps = int(session.steps.get("count") or 0)
    for brk in _compile(session).get("graph_breaks") or ():
        path = session.resolve(str(brk.get("path") or ""))
        line = int(brk.get("line") or 1)
        head, more, url = reason_parts(str(brk.get("reason") or ""))
        seen = crossings(session, brk)
        where = f" in `{brk['function']}()`" if brk.get("function") else ""
        compiles = int(brk.get("compiles") or 0)
        msg = f"Graph break{where}: {head}; dynamo left the graph here in {compiles} compilation{'s' if compiles != 1 else ''}"
        observed = 0.0
        if seen is None:
            msg += "; no torch.profiler window timed the compiled code"
        elif not seen["calls"]:
            msg += "; the code did not cross it in the torch.profiler window"
        else:
            per = seen["per_step"]
            msg += f"; crossed {per:.3g} time{'s' if per != 1 else ''} a step in the torch.profiler window"
            if seen["cost_s"] is not None:
                observed = seen["cost_s"] * per * steps
                msg += (f", {_fmt_s(seen['cost_s'])} outside the graphs each (median: the eager code at the break, "
                        f"the guards to re-enter, the resume's prologue)")
        hint = " ".join(p for p in (more, f"PyTorch's page on this break: {url}" if url else None) if p) or None
        c = Correlated(finding=make("TLR14", msg, path, line, hint), origin="runtime", basis="window")
        calls = int(round(seen["per_step"] * steps)) if seen and seen["calls"] else 0
        c.evidence.append(Evidence(source="compile", path=path, line=line, function=str(brk.get("function") or ""),
                                   op=head[:200], kind="graph break", calls=calls, self_s=observed, total_s=observed))
        c.calls = calls
        c.observed_s = c.total_s = c.self_s = observed
        c.share = observed / session.script_s if (observed and session.script_s) else None
        c.facts = {"compiles": compiles, "crossings": seen, "reason": head, "url": url}
        out.append(c)
    return out


# --------------------------------------------------------------------------
# TLR15: recompilations
# --------------------------------------------------------------------------


def recompile_groups(session: ProfileSession) -> list[Recompiles]:
    groups: dict[tuple[str, int, str], Recompiles] = {}
    records = _compile(session).get("compiles") or ()
    frames = _frames_by_id(session)
    for r in records:
        if not r.get("recompile_reason") or r.get("forward") is False:
            continue
        # a failed record (the recompile limit) has no frame: its frame id's first record has
        known = r if r.get("frame") else frames.get(_frame_id(r.get("compile_id")) or "", r)
        fn = compiled_function(session, known)
        if fn is None:
            continue
        guard = guard_of(str(r["recompile_reason"]))
        group = groups.setdefault((fn.path, fn.line, guard.kind), Recompiles(fn, guard.kind))
        group.records.append(r)
        group.guards.append(guard)
    # the backward graphs recompiled with their forward: their compile time is the recompilation's too
    backward: dict[str, float] = defaultdict(float)
    for r in records:
        if r.get("forward") is False and r.get("compile_id"):
            backward[str(r["compile_id"])] += float(r.get("seconds") or 0.0)
    for g in groups.values():
        for r in g.records:
            r["_with_backward_s"] = float(r.get("seconds") or 0.0) + backward.get(str(r.get("compile_id")), 0.0)
    return list(groups.values())


def _guards_text(g: Recompiles) -> str:
    parts: list[str] = []
    seen: set[str] = set()
    for guard, record in zip(g.guards, g.records):
        if guard.kind == "shape" and guard.values:
            text = f"tensor '{guard.name}' {guard.values[0]} -> {guard.values[1]}"
        else:
            text = guard.detail
        if (guard.name or "").startswith("___stack"):  # dynamo's name for a value a graph break hands over
            text = f"the value the graph break hands over ({text})"
        if guard.used_at:
            text += f" (read at line {guard.used_at[1]})"
        resumed = RESUME.match(str(record.get("frame") or ""))
        if resumed:
            text += f" after the graph break at line {resumed.group('line')}"
        if text not in seen:
            seen.add(text)
            parts.append(text)
    more = f"; {len(parts) - 3} more" if len(parts) > 3 else ""
    return "; ".join(parts[:3]) + more


def recompile_findings(session: ProfileSession, make: Make) -> list[Correlated]:
    out = []
    compilations: dict[tuple[str, int], int] = defaultdict(int)  # compiled function -> its compilations
    for r in _compile(session).get("compiles") or ():
        fn = compiled_function(session, r) if r.get("forward") is not False and r.get("frame") else None
        if fn is not None:
            compilations[(fn.path, fn.line)] += 1
    for g in recompile_groups(session):
        seconds = sum(float(r.get("_with_backward_s") or 0.0) for r in g.records if not r.get("fail_type"))
        limit = [r for r in g.records if "recompile limit" in str(r.get("fail_reason") or "").lower()
                 or "cache_size_limit" in str(r.get("fail_reason") or "")]
        n = len(g.records) - len(limit)
        what, hint = KINDS.get(g.kind, KINDS["other"])
        total = compilations.get((g.function.path, g.function.line), 0)
        msg = (f"`{g.function.name}()` was recompiled {n} time{'s' if n != 1 else ''} because {what}: {_guards_text(g)}; "
               f"{_fmt_s(seconds)} compiling again ({total} compilation{'s' if total != 1 else ''} of it in all)")
        if limit:
            msg += ("; then it hit torch._dynamo's recompile limit, and the frame ran uncompiled (eager) from then on")
        c = Correlated(finding=make("TLR15", msg, g.function.path, g.function.line, hint), origin="runtime", basis="compile")
        for r in g.records:
            c.evidence.append(Evidence(source="compile", path=g.function.path, line=g.function.line,
                                       function=g.function.name, op=str(r.get("compile_id")), kind=g.kind, calls=1,
                                       self_s=float(r.get("_with_backward_s") or 0.0),
                                       total_s=float(r.get("_with_backward_s") or 0.0)))
        c.calls = n
        c.observed_s = c.total_s = c.self_s = seconds
        c.share = seconds / session.script_s if (seconds and session.script_s) else None
        c.facts = {"recompiles": n, "kind": g.kind, "limit_hit": bool(limit)}
        out.append(c)
    return out


# --------------------------------------------------------------------------
# the run's compile time, for the report
# --------------------------------------------------------------------------


def compile_summary(session: ProfileSession) -> dict[str, Any] | None:
    """The run's compile time and what it went to (None when nothing was compiled)."""
    data = _compile(session)
    records = list(data.get("compiles") or ())
    if not data.get("used") and not records:
        return None
    total = sum(float(r.get("seconds") or 0.0) for r in records)
    by_fn: dict[tuple[str, int, str], list[float]] = {}
    frames = _frames_by_id(session)
    for r in records:
        known = r if r.get("frame") else frames.get(_frame_id(r.get("compile_id")) or "", r)
        fn = compiled_function(session, known)
        key = (fn.path, fn.line, fn.name) if fn else ("", 0, str(known.get("frame") or "?"))
        row = by_fn.setdefault(key, [0, 0, 0.0, known.get("called_at")])
        if r.get("forward") is not False:
            row[0] += 1
            row[1] += int(bool(r.get("recompile_reason")))
        row[2] += float(r.get("seconds") or 0.0)
    return {
        "compile_s": total,
        "share": total / session.script_s if session.script_s else None,
        "compilations": sum(1 for r in records if r.get("forward") is not False),
        "recompilations": sum(1 for r in records if r.get("recompile_reason") and r.get("forward") is not False),
        # the backend's: AOTAutograd's in the forward records, and the backward graphs' whole compile
        "backend_s": sum(float(r.get("backend_s") or 0.0) if r.get("forward") is not False else float(r.get("seconds") or 0.0)
                         for r in records),
        "inductor_s": sum(float(r.get("inductor_s") or 0.0) for r in records),
        "graph_breaks": len(data.get("graph_breaks") or ()),
        "functions": [
            {"path": path, "line": line, "function": name, "compilations": int(row[0]), "recompilations": int(row[1]),
             "seconds": row[2],
             "called_at": {"path": session.resolve(str(row[3][0])), "line": int(row[3][1])} if row[3] else None}
            for (path, line, name), row in sorted(by_fn.items(), key=lambda kv: -kv[1][2])
        ],
        "errors": list(data.get("errors") or ()),
        "dropped": {"compilations": int(data.get("compiles_dropped") or 0),
                    "graph_breaks": int(data.get("graph_breaks_dropped") or 0)},
    }


def compile_findings(session: ProfileSession, make: Make) -> list[Correlated]:
    """TLR14 and TLR15 of a run (none when nothing was compiled)."""
    if not _compile(session):
        return []
    return [*graph_break_findings(session, make), *recompile_findings(session, make)]


def breaks_at(findings: list[Correlated], path: str, first: int, last: int) -> list[Correlated]:
    """The TLR14 findings at ``path`` lines ``first``..``last`` (the static join)."""
    return [c for c in findings if c.finding.code == "TLR14" and first <= c.finding.line <= last
            and c.finding.location.path and c.evidence and c.evidence[0].path == path]


__all__ = ["COMPILE_RULES", "GRAPH_BREAK_STATIC_RULES", "breaks_at", "compile_findings", "compile_summary"]
