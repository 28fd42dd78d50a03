"""Join static findings with what a profiled run measured. Pure: no torch, no libcst.

The rules (docs/profiling.md, "Join rules"):

1. Both sides are compared as absolute, normalised paths: a finding's path is
   resolved against the run's cwd, a measurement's path is the code object's.
2. **Line match.** Probe measurements (timed calls of ``Tensor.item``,
   ``DataLoader.__next__`` ...) and the torch.profiler ops recorded inside them
   are charged to their innermost user frame. A finding matches them when that
   line falls in ``[line, end_line]`` and the probed call is one the rule is
   about (:data:`RULE_PROBES`), so unrelated work on the same line does not
   confirm it.
3. **Related places.** A finding whose cost shows up elsewhere (``Finding.related``:
   the ``for`` statements iterating a flagged ``DataLoader``) also takes the
   measurements at those lines (TL201: the batch fetch time). TL202 (no
   ``pin_memory``) takes the pageable host-to-device copies in those loops'
   bodies, the cost pinned memory changes; the fetch time is its context.
4. **Rules with no probed call** (eval without ``no_grad``, ...) take the line
   sampler's wall time with that line on the stack.
5. **Function context.** cProfile is function-level: the enclosing function
   (found with ``ast``; pstats keys a decorated function by its first decorator
   line, so both that and the ``def`` line match) is shown as context, never
   as the finding's cost.

Findings with measured cost are ranked by it; the rest stay in the report as
static-only. Sampled lines that no finding explains are listed as hotspots,
and runtime-only findings (``TLR01``...) are derived from the run as a whole.
"""

from __future__ import annotations

import ast
import os
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

from torchlint.findings import Finding, Location
from torchlint.profiler.session import Hotspot, ProfileSession
from torchlint.savings import Estimate, Measurement, rank_key

DATALOADER_PROBES = frozenset({"DataLoader.__next__", "DataLoader.__iter__"})

#: Which probed calls are evidence for which rule.
RULE_PROBES: dict[str, frozenset[str]] = {
    "TL101": frozenset({"Tensor.item", "Tensor.tolist"}),
    "TL102": frozenset({"Tensor.cpu", "Tensor.numpy", "Tensor.to"}),
    "TL103": frozenset({"torch.cuda.synchronize", "torch.cuda.empty_cache"}),
    "TL104": frozenset({"Tensor.__bool__"}),
    "TL110": frozenset({"Tensor.to", "Tensor.cuda"}),
    "TL111": frozenset({"Tensor.to", "Tensor.cuda"}),
    "TL112": frozenset({"Tensor.cpu", "Tensor.cuda", "Tensor.to", "Tensor.numpy"}),
    "TL201": DATALOADER_PROBES,
    "TL202": frozenset({"Tensor.to", "Tensor.cuda"}),  # inside the related loops' bodies
    "TL203": frozenset({"torch.tensor", "torch.as_tensor"}),
}

#: For transfer probes, which copy directions count (None: the call moved nothing).
RULE_KINDS: dict[str, frozenset[str | None]] = {
    "TL102": frozenset({"DtoH", None}),
    "TL202": frozenset({"HtoD pageable"}),
    "TL110": frozenset({"HtoD pageable", "HtoD pinned", "HtoD"}),
    "TL111": frozenset({"HtoD pageable", "HtoD pinned", "HtoD"}),
}

#: Rules whose cost is a host-device synchronisation (CUDA sync-debug records count).
SYNC_RULES = frozenset({"TL101", "TL102", "TL103", "TL104", "TL112"})

#: Rules joined through ``Finding.related`` (the cost is where the object is used).
RELATED_RULES = frozenset({"TL201", "TL202"})

#: Rules whose cost is in the body of the related loops, not at their ``for`` line:
#: pinned memory changes the host-to-device copies of the batches, not their fetching.
LOOP_BODY_RULES = frozenset({"TL202"})


@dataclass(frozen=True, slots=True)
class RuntimeRule:
    code: str
    name: str
    fix_hint: str


RUNTIME_RULES = {
    "TLR01": RuntimeRule(
        "TLR01",
        "dataloader-wait-share",
        "Give the DataLoader workers (num_workers > 0, persistent_workers=True) or make "
        "__getitem__ cheaper",
    ),
    "TLR02": RuntimeRule(
        "TLR02",
        "host-device-syncs",
        "Keep values on the device; read them every N steps instead of every step",
    ),
    "TLR03": RuntimeRule(
        "TLR03",
        "pageable-copies",
        "pin_memory=True on the DataLoader and .to(device, non_blocking=True)",
    ),
    "TLR04": RuntimeRule(
        "TLR04",
        "gpu-idle-share",
        "Feed the GPU faster (DataLoader workers, fewer syncs) or give it more work per step "
        "(bigger batch)",
    ),
}

DATALOADER_WAIT_THRESHOLD = 0.05  # torch-tb-profiler's recommendation threshold
SYNCS_PER_STEP_THRESHOLD = 1.0
GPU_IDLE_THRESHOLD = 0.5  # torch-tb-profiler: utilisation under 50 %
HOTSPOT_MIN_SHARE = 0.01
HOTSPOT_LIMIT = 10


@dataclass(frozen=True, slots=True)
class Evidence:
    """One measurement joined to a finding."""

    source: str  # probe | torch | sampler | sync
    path: str  # absolute
    line: int
    function: str
    op: str | None
    kind: str | None
    calls: int
    self_s: float
    total_s: float
    device_s: float = 0.0
    via: str = "line"  # line | related | sampler

    @classmethod
    def of(cls, h: Hotspot, via: str) -> Evidence:
        return cls(
            source=h.source,
            path=h.path,
            line=h.line,
            function=h.function,
            op=h.op,
            kind=h.kind,
            calls=h.calls,
            self_s=h.self_s,
            total_s=h.total_s,
            device_s=h.device_s,
            via=via,
        )

    def to_dict(self, cwd: str) -> dict[str, Any]:
        return {
            "source": self.source,
            "path": display_path(self.path, cwd),
            "line": self.line,
            "function": self.function,
            "op": self.op,
            "kind": self.kind,
            "calls": self.calls,
            "self_s": self.self_s,
            "total_s": self.total_s,
            "device_s": self.device_s,
            "via": self.via,
        }


@dataclass(frozen=True, slots=True)
class FunctionCost:
    """cProfile's numbers for the function enclosing a finding."""

    name: str
    path: str
    line: int
    calls: int
    self_s: float
    total_s: float


@dataclass(slots=True)
class Correlated:
    """A finding with what the run measured for it.

    Three different figures (savings.py): ``observed_s`` is the time spent at the
    finding's call sites; ``expected`` an upper bound on what fixing it saves,
    from a per-rule model (estimate.py); ``measured`` the saving an experiment
    measured. Only the last two rank.
    """

    finding: Finding
    origin: str = "static"  # static | runtime
    evidence: list[Evidence] = field(default_factory=list)  # counted in observed_s
    window: list[Evidence] = field(default_factory=list)  # torch.profiler ops (window only)
    context: list[Evidence] = field(default_factory=list)  # related measurements not counted
    syncs: int = 0  # CUDA sync-debug records at the finding's lines
    function: FunctionCost | None = None
    observed_s: float = 0.0
    calls: int = 0
    self_s: float = 0.0
    total_s: float = 0.0
    share: float | None = None  # observed_s over the script's own time
    rank: int | None = None
    basis: str | None = None  # how observed_s was measured: probe | sampler | run
    expected: Estimate | None = None
    measured: Measurement | None = None
    hint: str | None = None  # a fix hint that agrees with this run, replacing the static one
    loader_workers: int | None = None  # TLR01: the loader's num_workers, as the run saw it

    @property
    def observed(self) -> bool:
        """Something was measured at the finding's lines."""
        return bool(self.evidence) or self.syncs > 0

    @property
    def cost_s(self) -> float:  # the name report.json keeps for observed_s
        return self.observed_s

    def rank_key(self) -> tuple[int, float]:
        return rank_key(self.measured, self.expected)


@dataclass(slots=True)
class UnexplainedHotspot:
    path: str
    line: int
    function: str
    self_s: float
    total_s: float
    share: float | None
    samples: int
    dataloader_s: float
    probes: list[Evidence] = field(default_factory=list)
    source_line: str = ""
    #: a one-time cost (``import torch``, the first optimizer importing torch._dynamo):
    #: what it was, paid before the script's first line by torchlint, shown at the
    #: line that would have paid it
    cause: str | None = None


@dataclass(slots=True)
class Correlation:
    #: ranked first (by measured, then expected saving), then observed but unranked,
    #: then static-only in source order
    findings: list[Correlated]
    hotspots: list[UnexplainedHotspot]
    runtime: list[Correlated]
    run_s: float  # the script's own time: its wall time less torchlint's work inside it
    cwd: str
    unmatched: list[Measurement] = field(default_factory=list)  # measurements no finding took

    @property
    def ranked(self) -> list[Correlated]:
        return [c for c in self.findings if c.rank is not None]

    @property
    def observed(self) -> list[Correlated]:
        return [c for c in self.findings if c.observed]

    @property
    def static_only(self) -> list[Correlated]:
        return [c for c in self.findings if not c.observed and c.rank is None]


# --------------------------------------------------------------------------


def display_path(path: str, cwd: str) -> str:
    """``path`` relative to ``cwd`` when inside it (POSIX separators), else absolute."""
    if path.startswith("<"):
        return path
    try:
        rel = os.path.relpath(path, cwd)
    except ValueError:
        return path
    if rel.startswith(os.pardir + os.sep) or rel == os.pardir:
        return path
    return rel.replace(os.sep, "/")


@lru_cache(maxsize=256)
def _function_spans(path: str) -> tuple[tuple[int, int, int, str], ...]:
    """(first line incl. decorators, def line, end line, name) of every function in ``path``."""
    try:
        with open(path, "rb") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):
        return ()
    spans = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            spans.append((first, node.lineno, node.end_lineno or node.lineno, node.name))
    return tuple(spans)


@lru_cache(maxsize=256)
def _loop_ends(path: str) -> dict[int, int]:
    """``for`` statement line -> last line of its body, for every loop in ``path``."""
    try:
        with open(path, "rb") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):
        return {}
    ends: dict[int, int] = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.For, ast.AsyncFor)):
            ends[node.lineno] = max(ends.get(node.lineno, 0), node.end_lineno or node.lineno)
    return ends


def enclosing_function(path: str, line: int) -> tuple[int, int, str] | None:
    """(first decorator line, def line, name) of the innermost function around ``line``."""
    best = None
    for first, def_line, end, name in _function_spans(path):
        if first <= line <= end and (best is None or first >= best[0]):
            best = (first, def_line, name)
    return best


@lru_cache(maxsize=256)
def _lines(path: str) -> tuple[str, ...]:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return tuple(f.read().splitlines())
    except OSError:
        return ()


def source_line(path: str, line: int) -> str:
    lines = _lines(path)
    return lines[line - 1].strip() if 0 < line <= len(lines) else ""


class _Index:
    """Hotspots by (path, line), per source; paths resolved against the run's cwd."""

    def __init__(self, session: ProfileSession) -> None:
        real: dict[str, str] = {}
        hotspots = []
        for h in session.hotspots:
            if h.path not in real:
                real[h.path] = session.resolve(h.path)
            hotspots.append(h if real[h.path] == h.path else replace(h, path=real[h.path]))
        self.hotspots = hotspots
        self.by_line: dict[str, dict[tuple[str, int], list[Hotspot]]] = defaultdict(lambda: defaultdict(list))
        self.functions: dict[tuple[str, int], Hotspot] = {}
        for h in hotspots:
            if h.granularity == "function":
                key = (h.path, h.line)
                old = self.functions.get(key)
                if old is None or h.total_s > old.total_s:
                    self.functions[key] = h
            else:
                self.by_line[h.source][(h.path, h.line)].append(h)

    def by_source(self, source: str) -> list[Hotspot]:
        return [h for h in self.hotspots if h.source == source]

    def at(self, source: str, path: str, first: int, last: int) -> list[Hotspot]:
        table = self.by_line.get(source, {})
        out: list[Hotspot] = []
        for line in range(first, last + 1):
            out.extend(table.get((path, line), ()))
        return out


def _span(loc: Location) -> tuple[int, int]:
    end = loc.end_line if loc.end_line is not None and loc.end_line >= loc.line else loc.line
    return loc.line, end


def _same_call(h: Hotspot, loc: Location) -> bool:
    """Whether probe ``h`` measured the call ``loc`` points at. Probes know the column
    span of the call they timed (co_positions); two calls on one line are told apart
    by overlap. Unknown columns, or a finding over several lines, match by line."""
    if h.column is None or loc.end_line not in (None, loc.line) or h.line != loc.line:
        return True
    end = loc.end_column if loc.end_column is not None else loc.column + 1
    h_end = h.end_column if h.end_column is not None else h.column + 1
    return h.column < end and loc.column < h_end


def _correlate_one(f: Finding, idx: _Index, session: ProfileSession) -> Correlated:
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
    c.observed_s = c.total_s
    run_s = session.script_s
    c.share = (c.observed_s / run_s) if (run_s > 0 and c.observed) else None
    fn = enclosing_function(path, first)
    if fn is not None:
        first_line, def_line, name = fn
        h = idx.functions.get((path, first_line)) or idx.functions.get((path, def_line))
        if h is not None:
            c.function = FunctionCost(name, path, h.line, h.calls, h.self_s, h.total_s)
    return c


def _runtime_finding(code: str, message: str, path: str, line: int, cwd: str, hint: str | None = None) -> Finding:
    rule = RUNTIME_RULES[code]
    return Finding(
        code=code,
        name=rule.name,
        message=message,
        location=Location(display_path(path, cwd), line, 1),
        fix_hint=hint or rule.fix_hint,
    )


def loader_at(session: ProfileSession, path: str, line: int) -> dict[str, Any] | None:
    """The options of the DataLoader iterated at ``path:line``, as the run saw them."""
    for opts in session.dataloader.get("loaders") or ():
        if opts.get("line") == line and session.resolve(str(opts.get("path") or "")) == path:
            return opts
    return None


def _runtime_findings(session: ProfileSession, idx: _Index) -> list[Correlated]:
    out: list[Correlated] = []
    cwd = session.cwd
    run_s = session.script_s
    steps = int(session.steps.get("count") or 0)

    # TLR01: time the loop spent waiting for batches
    dl = session.dataloader
    share = dl.get("wait_share")
    fetch_lines: dict[tuple[str, int], list[Hotspot]] = defaultdict(list)
    for h in idx.by_source("probe"):
        if h.op in DATALOADER_PROBES:
            fetch_lines[(h.path, h.line)].append(h)
    if share is not None and share >= DATALOADER_WAIT_THRESHOLD and fetch_lines:
        (path, line), hs = max(fetch_lines.items(), key=lambda kv: sum(h.total_s for h in kv[1]))
        fetch_s = float(dl.get("fetch_s") or 0.0)
        batches = sum(h.calls for h in hs if h.op == "DataLoader.__next__")
        opts = loader_at(session, path, line) or {}
        workers = opts.get("num_workers")
        hint = None
        has = ""
        if isinstance(workers, int) and workers > 0:
            has = f", although the loader has {workers} worker{'s' if workers != 1 else ''}"
            hint = (
                "Its workers do not keep up: make __getitem__ cheaper, or add workers if cores are free"
                + ("" if opts.get("persistent_workers") else "; persistent_workers=True keeps them between epochs")
            )
        msg = (
            f"The training loop waited on the DataLoader for {share:.0%} of its time "
            f"({_fmt_s(fetch_s)} fetching {batches} batches{has})"
        )
        c = Correlated(
            finding=_runtime_finding("TLR01", msg, path, line, cwd, hint),
            origin="runtime",
            evidence=[Evidence.of(h, "line") for h in hs],
            basis="probe",
            loader_workers=workers if isinstance(workers, int) else None,
        )
        c.calls = batches
        c.total_s = c.observed_s = sum(h.total_s for h in hs)
        c.self_s = sum(h.self_s for h in hs)
        c.share = c.observed_s / run_s if run_s else None
        out.append(c)

    # TLR02: host-device syncs per step (CUDA sync-debug records)
    syncs = idx.by_source("sync")
    total_syncs = sum(h.calls for h in syncs)
    if syncs and steps and total_syncs / steps >= SYNCS_PER_STEP_THRESHOLD:
        top = max(syncs, key=lambda h: h.calls)
        msg = (
            f"{total_syncs / steps:.1f} host-device synchronisations per step ({total_syncs} over "
            f"{steps} steps); this line caused {top.calls}"
        )
        c = Correlated(
            finding=_runtime_finding("TLR02", msg, top.path, top.line, cwd),
            origin="runtime",
            evidence=[Evidence.of(h, "line") for h in sorted(syncs, key=lambda h: -h.calls)[:10]],
            syncs=total_syncs,
            basis="run",
        )
        c.calls = total_syncs
        out.append(c)

    # TLR03: host-to-device copies from pageable memory
    pageable = [h for h in idx.by_source("probe") if h.kind == "HtoD pageable"]
    traced = int(session.torch_window.get("pageable_copies") or 0)
    if pageable or traced:
        calls = sum(h.calls for h in pageable)
        if pageable:
            top = max(pageable, key=lambda h: h.total_s)
            path, line = top.path, top.line
        else:
            path, line = session.resolve(str(session.meta.get("script") or "")), 1
        msg = (
            f"{calls} host-to-device copies from pageable (unpinned) memory"
            + (f"; {traced} pageable memcpys in the torch.profiler window" if traced else "")
        )
        c = Correlated(
            finding=_runtime_finding("TLR03", msg, path, line, cwd),
            origin="runtime",
            evidence=[Evidence.of(h, "line") for h in pageable],
            basis="probe" if pageable else "run",
        )
        c.calls = calls
        c.total_s = c.observed_s = sum(h.total_s for h in pageable)
        c.share = c.observed_s / run_s if (run_s and pageable) else None
        out.append(c)

    # TLR04: GPU idle in the window
    idle = session.torch_window.get("gpu_idle_share")
    if idle is not None and idle >= GPU_IDLE_THRESHOLD:
        if fetch_lines:
            path, line = max(fetch_lines, key=lambda k: sum(h.total_s for h in fetch_lines[k]))
        else:
            path, line = session.resolve(str(session.meta.get("script") or "")), 1
        window_s = float(session.torch_window.get("window_s") or 0.0)
        msg = f"The GPU was idle {idle:.0%} of the torch.profiler window ({_fmt_s(window_s)})"
        c = Correlated(finding=_runtime_finding("TLR04", msg, path, line, cwd), origin="runtime", basis="run")
        c.observed_s = idle * window_s
        c.share = idle
        out.append(c)
    return out


@lru_cache(maxsize=64)
def _import_line(path: str, module: str) -> int | None:
    """The first line of ``path`` that imports ``module`` (or a submodule of it)."""
    try:
        with open(path, "rb") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):
        return None
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == module for a in node.names):
            lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == module:
            lines.append(node.lineno)
    return min(lines) if lines else None


def _one_time(session: ProfileSession) -> list[UnexplainedHotspot]:
    """One-time costs the run paid before the script started, at the lines that would
    have paid them. Their share is of the script's time plus theirs: the run as a
    plain ``python SCRIPT`` pays it."""
    costs = [c for c in session.meta.get("one_time") or () if float(c.get("seconds") or 0) > 0]
    base = session.script_s + sum(float(c["seconds"]) for c in costs)
    script = str(session.meta.get("script") or "")
    out = []
    for c in costs:
        path, line = c.get("path"), c.get("line")
        if not path and script and c.get("what", "").startswith("import "):
            path, line = script, _import_line(session.resolve(script), c["what"].split()[1].split(".")[0])
        if not path or not line:
            continue
        path = session.resolve(str(path))
        seconds = float(c["seconds"])
        out.append(
            UnexplainedHotspot(
                path=path, line=int(line), function="", self_s=seconds, total_s=seconds,
                share=seconds / base if base > 0 else None, samples=0, dataloader_s=0.0,
                source_line=source_line(path, int(line)), cause=f"one-time: {c['what']}: {c.get('cause') or ''}".rstrip(": "),
            )
        )
    return out


def _unexplained(
    session: ProfileSession, idx: _Index, findings: Sequence[Correlated], limit: int
) -> list[UnexplainedHotspot]:
    explained: set[tuple[str, int]] = set()
    for c in findings:
        f = c.finding
        p = session.resolve(f.location.path)
        lo, hi = _span(f.location)
        explained.update((p, n) for n in range(lo, hi + 1))
        for r in f.related:
            explained.add((session.resolve(r.path), r.line))
    rows: dict[tuple[str, int], list[Any]] = {}
    for h in idx.by_source("sampler"):
        key = (h.path, h.line)
        row = rows.setdefault(key, [h.function, 0.0, 0.0, 0, 0.0])
        row[1] += h.self_s
        row[2] += h.total_s
        row[3] += h.samples
        row[4] += h.dataloader_s
    run_s = session.script_s
    out = []
    for (path, line), (func, self_s, total_s, samples, dl_s) in sorted(rows.items(), key=lambda kv: -kv[1][1]):
        if (path, line) in explained or self_s <= 0:
            continue
        share = self_s / run_s if run_s else None
        if share is not None and share < HOTSPOT_MIN_SHARE:
            break
        probes = [Evidence.of(h, "line") for h in idx.at("probe", path, line, line)]
        out.append(
            UnexplainedHotspot(
                path=path,
                line=line,
                function=func,
                self_s=self_s,
                total_s=total_s,
                share=share,
                samples=int(samples),
                dataloader_s=dl_s,
                probes=sorted(probes, key=lambda e: -e.total_s),
                source_line=source_line(path, line),
            )
        )
        if len(out) >= limit:
            break
    return out


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
    joined = [_correlate_one(f, idx, session) for f in findings]
    runtime = _runtime_findings(session, idx)
    by_key = {(m.code, session.resolve(m.path), m.line): m for m in measurements or ()}
    for c in (*joined, *runtime):
        key = (c.finding.code, session.resolve(c.finding.location.path), c.finding.line)
        c.measured = by_key.pop(key, None)
        if estimator is not None:
            c.expected = estimator(c, session)
    ranked = sorted(
        (c for c in joined if c.rank_key()[0] < 3),
        key=lambda c: (c.rank_key(), -c.syncs, c.finding.sort_key()),
    )
    for rank, c in enumerate(ranked, 1):
        c.rank = rank
    observed = [c for c in joined if c.rank is None and c.observed]
    static_only = [c for c in joined if c.rank is None and not c.observed]
    hotspots = _one_time(session) + _unexplained(session, idx, joined + runtime, hotspot_limit)
    return Correlation(
        findings=ranked + observed + static_only,
        hotspots=hotspots,
        runtime=runtime,
        run_s=session.script_s,
        cwd=session.cwd,
        unmatched=list(by_key.values()),
    )


def user_files(session: ProfileSession) -> list[str]:
    """User source files the run executed: the ones to lint for correlation."""
    files = {session.resolve(h.path) for h in session.hotspots if h.path.endswith(".py")}
    script = session.meta.get("script")
    if script:
        files.add(session.resolve(str(script)))
    return sorted(p for p in files if os.path.isfile(p))


def _fmt_s(s: float) -> str:
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.1f} ms"
    return f"{s * 1e6:.0f} µs"


# re-exported for the renderers
fmt_seconds = _fmt_s

__all__ = [
    "Correlated",
    "Correlation",
    "Evidence",
    "FunctionCost",
    "RULE_PROBES",
    "RUNTIME_RULES",
    "UnexplainedHotspot",
    "correlate",
    "display_path",
    "fmt_seconds",
    "user_files",
]
