"""What a join produces (the data the reports render) and the file helpers it needs.

Pure: no torch, no libcst.
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from torchlint.findings import Finding, Location
from torchlint.profiler.session import Hotspot
from torchlint.savings import Estimate, Measurement, rank_key
from torchlint.textlines import read_lines

DATALOADER_PROBES = frozenset({"DataLoader.__next__", "DataLoader.__iter__"})

#: Which probed calls are evidence for which rule.
RULE_PROBES: dict[str, frozenset[str]] = {
    "TL101": frozenset({"Tensor.item", "Tensor.tolist"}),
    "TL102": frozenset({"Tensor.cpu", "Tensor.numpy", "Tensor.to"}),
    "TL103": frozenset({"torch.cuda.synchronize", "torch.cuda.empty_cache"}),
    "TL104": frozenset({"Tensor.__bool__"}),
    # int()/float()/bool() of a tensor, and a tensor as a size or a bound (its __index__
    # is __int__'s): the syncs TL105 names where no call does
    "TL105": frozenset({"Tensor.__int__", "Tensor.__float__", "Tensor.__bool__", "Tensor.item"}),
    # a distribution's argument checks: `if not valid.all(): raise`, in torch's frames, below the user's line
    "TL107": frozenset({"Tensor.__bool__"}),
    "TL110": frozenset({"Tensor.to", "Tensor.cuda"}),
    "TL113": frozenset({"Tensor.to", "Tensor.cuda"}),  # the upload repeated every step
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
SYNC_RULES = frozenset({"TL101", "TL102", "TL103", "TL104", "TL105", "TL107", "TL112"})

#: Runtime findings that are the symptoms of static ones (a DataLoader's wait, syncs,
#: pageable copies, an idle GPU): their remedies are those findings' (TL201, TL101 ...),
#: already ranked, so they are shown but not ranked again (one fix, one place in the list).
#: TLR01 is ranked where no TL201 finding covers its loader (join._ranks_itself).
SYMPTOM_RULES = frozenset({"TLR01", "TLR02", "TLR03", "TLR04"})

#: Rules joined through ``Finding.related`` (the cost is where the object is used).
RELATED_RULES = frozenset({"TL201", "TL202"})

#: Rules whose cost is in the body of the related loops, not at their ``for`` line:
#: pinned memory changes the host-to-device copies of the batches, not their fetching.
LOOP_BODY_RULES = frozenset({"TL202"})


DATALOADER_WAIT_THRESHOLD = 0.05  # torch-tb-profiler's recommendation threshold
SYNCS_PER_STEP_THRESHOLD = 1.0
GPU_IDLE_THRESHOLD = 0.5  # torch-tb-profiler: utilisation under 50 %
HOTSPOT_MIN_SHARE = 0.01
HOTSPOT_LIMIT = 10


@dataclass(frozen=True, slots=True)
class RuntimeRule:
    """A runtime finding's code, name and fix hint (TLR.., shared by runtime and ranks)."""

    code: str
    name: str
    fix_hint: str


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
    #: a sync rule's probed reads at its own lines over the run's optimizer steps (any device:
    #: the probes count every call), None where no probe counted them or no step ran
    reads_per_step: float | None = None
    function: FunctionCost | None = None
    observed_s: float = 0.0
    backward_s: float = 0.0  # in observed_s: the backward of the autograd nodes its lines' ops made (correlate/lines.py)
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
    #: what a runtime decision saw, for the reports (TLR14/TLR15: compilations, crossings; TLR16: passes)
    facts: dict[str, Any] = field(default_factory=dict)

    @property
    def observed(self) -> bool:
        """Something was measured at the finding's lines."""
        return bool(self.evidence) or self.syncs > 0 or self.backward_s > 0

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
    #: self_s after the first optimizer step (the measured steps); None when the session
    #: did not keep it apart
    step_s: float | None = None


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
    #: runtime patterns this run could not show, by code, with the reason (no GPU ...)
    runtime_skipped: dict[str, str] = field(default_factory=dict)

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
    return read_lines(path)  # Python's lines: a form feed or U+2028 does not end one


def source_line(path: str, line: int) -> str:
    lines = _lines(path)
    return lines[line - 1].strip() if 0 < line <= len(lines) else ""


def _fmt_s(s: float) -> str:
    if abs(s) >= 1:
        return f"{s:.2f} s"
    if abs(s) >= 1e-3:
        return f"{s * 1e3:.1f} ms"
    return f"{s * 1e6:.0f} µs"


_UNITS = {"s": (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)), "bytes": (("GB", 1e9), ("MB", 1e6), ("kB", 1e3), ("B", 1.0))}


def fmt_interval(low: float, high: float, unit: str = "s") -> str:
    """A 95 % interval in one unit, chosen by its wider end, with signs:
    ``[-24.7, +13.8] ms`` (it read ``-24747 µs–13.8 ms``)."""
    units = _UNITS.get(unit, _UNITS["s"])
    big = max(abs(low), abs(high))
    name, size = next(((n, f) for n, f in units if big >= f), units[-1])
    digits = 0 if big / size >= 100 else 1 if big / size >= 10 else 2
    return f"[{low / size:+.{digits}f}, {high / size:+.{digits}f}] {name}"


# re-exported for the renderers
fmt_seconds = _fmt_s



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


def _span(loc: Location) -> tuple[int, int]:
    end = loc.end_line if loc.end_line is not None and loc.end_line >= loc.line else loc.line
    return loc.line, end
