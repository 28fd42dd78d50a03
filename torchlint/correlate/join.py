"""The join itself: findings with the measurements at their lines, and ranking.

Pure: no torch, no libcst. See the package docstring for the rules.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence

from torchlint.correlate.compiled import GRAPH_BREAK_STATIC_RULES, breaks_at
from torchlint.correlate.hotspots import one_time, unexplained
from torchlint.correlate.index import _Index
from torchlint.correlate.model import (
    DATALOADER_PROBES,
    HOTSPOT_LIMIT,
    LOOP_BODY_RULES,
    RELATED_RULES,
    RULE_KINDS,
    RULE_PROBES,
    SYMPTOM_RULES,
    SYNC_RULES,
    Correlated,
    Correlation,
    Evidence,
    FunctionCost,
    _loop_ends,
    _span,
    enclosing_function,
)
from torchlint.correlate.lines import LineTable, line_table
from torchlint.correlate.runtime import runtime_findings, runtime_skipped
from torchlint.findings import Finding, Location
from torchlint.profiler.session import Hotspot, ProfileSession
from torchlint.savings import UNRANKED, Estimate, Measurement


def _same_call(h: Hotspot, loc: Location) -> bool:
    """Whether probe ``h`` measured the call ``loc`` points at. Probes know the column
    span of the call they timed (co_positions); two calls on one line are told apart
    by overlap. Unknown columns, or a finding over several lines, match by line."""
    if h.column is None or loc.end_line not in (None, loc.line) or h.line != loc.line:
        return True
    end = loc.end_column if loc.end_column is not None else loc.column + 1
    h_end = h.end_column if h.end_column is not None else h.column + 1
    return h.column < end and loc.column < h_end


def _correlate_one(f: Finding, idx: _Index, session: ProfileSession, lines: LineTable) -> Correlated:
    c = Correlated(finding=f)
    path = session.resolve(f.location.path)
    first, last = _span(f.location)
    probes = RULE_PROBES.get(f.code)
    kinds = RULE_KINDS.get(f.code)
    places: list[tuple[str, int, int, str]] = [(path, first, last, "line")]
    if f.code in LOOP_BODY_RULES:
        for r in f.related:
            rpath = session.resolve(r.path)
            end = _loop_ends(rpath).get(r.line, r.line)
            places.append((rpath, r.line + 1, end, "related"))
            for h in idx.at("probe", rpath, r.line, r.line):
                if h.op in DATALOADER_PROBES:
                    c.context.append(Evidence.of(h, "related"))
    elif f.code in RELATED_RULES:
        places += [(session.resolve(r.path), r.line, r.line, "related") for r in f.related]
    if probes is not None:
        for p, lo, hi, via in places:
            for h in idx.at("probe", p, lo, hi):
                if h.op in probes and (kinds is None or h.kind in kinds):
                    if via == "line" and not _same_call(h, f.location):
                        continue  # another call on the same line
                    c.evidence.append(Evidence.of(h, via))
            for h in idx.at("torch", p, lo, hi):
                if h.kind in probes:
                    c.window.append(Evidence.of(h, via))
        if c.evidence:
            c.basis = "probe"
    else:
        for h in idx.at("sampler", path, first, last):
            if h.total_s > 0:
                c.evidence.append(Evidence.of(h, "sampler"))
        if c.evidence:
            c.basis = "sampler"
    if f.code in SYNC_RULES:
        c.syncs = sum(h.calls for h in idx.at("sync", path, first, last))
    c.calls = sum(e.calls for e in c.evidence) if c.basis == "probe" else 0
    c.self_s = sum(e.self_s for e in c.evidence)
    c.total_s = sum(e.total_s for e in c.evidence)
    steps = int(session.steps.get("count") or 0)
    if f.code in SYNC_RULES and c.basis == "probe" and steps > 0:
        # how often the host waits here: the probes count every call, on any device
        c.reads_per_step = sum(e.calls for e in c.evidence if e.via == "line") / steps
    # backward runs at loss.backward(), not at these lines: the windows charge it to the line
    # of the forward op that made each autograd node; per step, times the run's steps
    c.backward_s = lines.backward_at(path, first, last) * steps
    c.observed_s = c.total_s + c.backward_s
    if c.basis is None and c.backward_s > 0:
        c.basis = "backward"
    run_s = session.script_s
    c.share = (c.observed_s / run_s) if (run_s > 0 and c.observed) else None
    fn = enclosing_function(path, first)
    if fn is not None:
        first_line, def_line, name = fn
        h = idx.functions.get((path, first_line)) or idx.functions.get((path, def_line))
        if h is not None:
            c.function = FunctionCost(name, path, h.line, h.calls, h.self_s, h.total_s)
    return c


def correlate(
    findings: Iterable[Finding],
    session: ProfileSession,
    *,
    measurements: Sequence[Measurement] | None = None,
    estimator: Callable[[Correlated, ProfileSession], Estimate | None] | None = None,
    hotspot_limit: int = HOTSPOT_LIMIT,
) -> Correlation:
    """Join ``findings`` with ``session`` and with an experiment's ``measurements``
    (by code, absolute path and line), give each finding its ``expected`` saving
    from ``estimator`` (estimate.expected_saving; the caller passes it so that this
    module stays below the models), and rank with :func:`savings.rank_key`:
    measured saving first, then expected. Observed time never ranks by itself."""
    idx = _Index(session)
    lines = line_table(session)
    joined = [_correlate_one(f, idx, session, lines) for f in findings]
    runtime = runtime_findings(session, idx)
    for c in joined:
        if c.finding.code in GRAPH_BREAK_STATIC_RULES:
            _take_graph_breaks(c, runtime, session)
    by_key = {(m.code, session.resolve(m.path), m.line): m for m in measurements or ()}
    for c in (*joined, *runtime):
        key = (c.finding.code, session.resolve(c.finding.location.path), c.finding.line)
        c.measured = by_key.pop(key, None)
        if estimator is not None:
            c.expected = estimator(c, session)
    # one ranking for every fix: the static findings and the runtime findings with a remedy
    # of their own (the symptoms' remedies are static findings, ranked there already)
    ranked_all = sorted(
        (c for c in (*joined, *runtime) if c.rank_key()[0] < UNRANKED and _ranks_itself(c, joined, session)),
        key=lambda c: (c.rank_key(), -c.syncs, c.finding.sort_key()),
    )
    for rank, c in enumerate(ranked_all, 1):
        c.rank = rank
    ranked = [c for c in ranked_all if c.origin != "runtime"]
    observed = [c for c in joined if c.rank is None and c.observed]
    static_only = [c for c in joined if c.rank is None and not c.observed]
    hotspots = one_time(session) + unexplained(session, idx, joined + runtime, hotspot_limit)
    return Correlation(
        findings=ranked + observed + static_only,
        hotspots=hotspots,
        runtime=runtime,
        run_s=session.script_s,
        cwd=session.cwd,
        unmatched=list(by_key.values()),
        runtime_skipped=runtime_skipped(session),
    )


def _take_graph_breaks(c: Correlated, runtime: list[Correlated], session: ProfileSession) -> None:
    """A static graph-break finding takes what the run measured of the break at its lines
    (TLR14): the crossings and the time outside the graphs are its cost, and it ranks by them."""
    first, last = _span(c.finding.location)
    # what the sampler saw at the line is the graphs' compute and the compiling, not the break's cost
    c.evidence, c.basis, c.calls = [], None, 0
    c.observed_s = c.total_s = c.self_s = c.backward_s = 0.0
    c.share = None
    for r in breaks_at(runtime, session.resolve(c.finding.location.path), first, last):
        c.evidence.extend(r.evidence)
        c.calls += r.calls
        c.observed_s += r.observed_s
        c.total_s += r.total_s
        c.self_s += r.self_s
        c.facts.setdefault("graph_breaks", []).append(r.facts)
        c.basis = c.basis or r.basis
    if c.observed_s and session.script_s:
        c.share = c.observed_s / session.script_s


def _ranks_itself(c: Correlated, joined: list[Correlated], session: ProfileSession) -> bool:
    """Whether ``c`` takes a place of its own in the ranking. A symptom does not (its remedy
    is a static finding's), except TLR01 at a loop whose loader no TL201 finding covers
    (a loader that has workers, or one TL201 leaves alone): then its remedy, workers, is
    ranked nowhere else. A graph break (TLR14) ranks unless a static graph-break finding at
    its line took its measurements."""
    code = c.finding.code
    if code == "TLR14":  # a static graph-break finding at its line ranks the break once
        path, line = session.resolve(c.finding.location.path), c.finding.line
        return not any(j.finding.code in GRAPH_BREAK_STATIC_RULES and session.resolve(j.finding.location.path) == path
                       and _span(j.finding.location)[0] <= line <= _span(j.finding.location)[1] for j in joined)
    if code == "TLR01":
        place = (session.resolve(c.finding.location.path), c.finding.line)
        return not any(j.finding.code == "TL201" and place in {(session.resolve(r.path), r.line) for r in j.finding.related}
                       for j in joined)
    return code not in SYMPTOM_RULES


def user_files(session: ProfileSession) -> list[str]:
    """User source files the run executed: the ones to lint for correlation."""
    files = {session.resolve(h.path) for h in session.hotspots if h.path.endswith(".py")}
    script = session.meta.get("script")
    if script:
        files.add(session.resolve(str(script)))
    return sorted(p for p in files if os.path.isfile(p))


