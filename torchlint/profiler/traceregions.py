"""torch.compile's compiled regions in a torch.profiler trace: how often each compiled frame
ran, and the time spent outside its graphs. Pure: no torch (tracefile.py calls it).

Dynamo marks every run of a compiled frame in the trace: a ``TorchDynamo Cache Lookup``
(the guards that pick the compiled version) and then ``Torch-Compiled Region: F/C`` (frame
F, its C-th compilation) around the frame's compiled code. A graph break splits a
function into a frame and a *resume function* dynamo compiles as a frame of its own, which
the first calls from its eager code at the break: its region (and lookup) nest in the
first one's. So per run of a region R nested in a region P:

- ``lookup``: the cache lookup just before R, the guards dynamo evaluates to re-enter;
- ``gap``: P's time from the end of its last graph call before the lookup to the lookup's
  start: the eager code at the break (the ``.item()``, the ``print``), and the bytecode
  that hands the values over. A graph call is ``CompiledFunction`` (AOTAutograd),
  ``## Call CompiledFxGraph ...`` (inductor) or a nested region; a backend that leaves no
  such marker (``backend="eager"``, AOTAutograd without grad) runs the graph's ops as
  plain ops under the region, and then the last op before the lookup ends the graph, so
  the break's own ops count as graph time there;
- ``overhead``: R's own time outside its graph calls and nested regions (its bytecode
  before and after the graph, AOTAutograd's runtime wrapper).

A top-level region (a compiled function called from eager code) has its lookup and
overhead, and no gap.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from typing import Any

MAX_RUNS = 2000  # timed runs kept per compile id for the median
REGION = "Torch-Compiled Region: "
LOOKUP = "TorchDynamo Cache Lookup"
GRAPH_CALLS = ("CompiledFunction", "## Call CompiledFxGraph", REGION)
PROLOGUE = frozenset({"Pregraph bytecode", "AOTDispatcher Runtime Wrapper Prologue", LOOKUP})

COMPILING = "(dynamo_timed)"  # dynamo's own compile phases, as torch records them in the trace


def _compiles(name: str) -> bool:
    """Dynamo compiling: its ``dynamo`` span, the ``(dynamo_timed)`` phases, ``dynamo_data:`` marks."""
    return name == "dynamo" or COMPILING in name or name.startswith("dynamo_data")

#: the row of one compile id: runs (all, nested in another region, and timed: the runs with no
#: compilation inside or just before them), and microseconds over the timed runs: in all of them,
#: in their lookups, in the gaps before them (nested runs only), and their own overhead
FIELDS = ("calls", "nested", "timed", "total_us", "lookup_us", "gap_us", "overhead_us")


def _end(e: dict[str, Any]) -> float:
    return float(e.get("ts", 0.0)) + float(e.get("dur", 0.0))


def _is_graph(name: str) -> bool:
    return name.startswith(GRAPH_CALLS)


class RegionStats:
    """Per compile id (``F/C``), over every thread of every trace read."""

    def __init__(self) -> None:
        self.rows: dict[str, list[float]] = defaultdict(lambda: [0, 0, 0, 0.0, 0.0, 0.0, 0.0])
        #: per compile id, each timed run's lookup + gap + overhead (µs): its median is the figure
        #: (one slow run, a page fault or another process, would move a mean)
        self.costs: dict[str, list[float]] = defaultdict(list)

    def read_thread(self, events: list[dict[str, Any]]) -> None:
        """``events``: one thread's complete events, sorted by start (longest first on ties)."""
        if not any(str(e.get("name", "")).startswith(REGION) for e in events):
            return
        parent: list[int | None] = []
        children: dict[int | None, list[int]] = defaultdict(list)
        stack: list[int] = []
        for i, e in enumerate(events):
            ts = float(e.get("ts", 0.0))
            while stack and _end(events[stack[-1]]) <= ts:
                stack.pop()
            p = stack[-1] if stack else None
            parent.append(p)
            children[p].append(i)
            stack.append(i)
        for i, e in enumerate(events):
            if str(e.get("name", "")).startswith(REGION):
                self._region(i, events, parent, children)

    def _region(self, i: int, events: list[dict[str, Any]], parent: list[int | None],
                children: dict[int | None, list[int]]) -> None:
        e = events[i]
        row = self.rows[str(e["name"])[len(REGION):].strip()]
        row[0] += 1
        p = parent[i]
        nested = p is not None and str(events[p].get("name", "")).startswith(REGION)
        row[1] += int(nested)
        siblings = children[p]
        before = [events[j] for j in siblings[:siblings.index(i)]]
        inside = [events[j] for j in children[i]]
        compiling = any(_compiles(str(c.get("name", ""))) for c in inside)
        # a cache hit runs the region right after its lookup; after a miss, what runs between is compiling
        at = max((k for k, b in enumerate(before) if b.get("name") == LOOKUP), default=None)
        lookup = None
        if at is not None and (at == len(before) - 1 or any(_compiles(str(b.get("name", ""))) for b in before[at + 1:])):
            compiling = compiling or at < len(before) - 1
            lookup = before[at]
            before = before[:at]
        if compiling:  # a run that compiled is no figure of a run: counted, not timed
            return
        row[2] += 1
        row[3] += float(e.get("dur", 0.0))
        cost = float(lookup.get("dur", 0.0)) if lookup is not None else 0.0
        row[4] += cost
        if nested:
            graphs = [b for b in before if _is_graph(str(b.get("name", "")))]
            if not graphs:  # no graph marker: the graph's ops run as plain ops under the region
                graphs = [b for b in before if b.get("name") not in PROLOGUE]
            since = _end(graphs[-1]) if graphs else float(events[p].get("ts", 0.0))  # type: ignore[index]
            gap = max(float((lookup or e).get("ts", 0.0)) - since, 0.0)
            row[5] += gap
            cost += gap
        marked = [c for c in inside if _is_graph(str(c.get("name", "")))]
        if marked:
            work = marked + [c for c in inside if c.get("name") == LOOKUP]
        else:  # the region's ops are its graph; nested lookups belong to the nested regions
            work = [c for c in inside if c.get("name") not in PROLOGUE or c.get("name") == LOOKUP]
        own = max(float(e.get("dur", 0.0)) - sum(float(c.get("dur", 0.0)) for c in work), 0.0)
        row[6] += own
        costs = self.costs[str(e["name"])[len(REGION):].strip()]
        if len(costs) < MAX_RUNS:
            costs.append(cost + own)

    def merge(self, other: RegionStats) -> None:
        for cid, row in other.rows.items():
            acc = self.rows[cid]
            for n, v in enumerate(row):
                acc[n] += v
            self.costs[cid].extend(other.costs.get(cid, ())[: MAX_RUNS - len(self.costs[cid])])

    def to_dict(self) -> dict[str, dict[str, float]]:
        """Compile id -> ``{calls, nested, timed, total_s, lookup_s, gap_s, overhead_s,
        median_outside_s}``: the runs over the traces, the seconds of the timed ones (no
        compilation in them), and the median of one timed run's lookup + gap + overhead."""
        out: dict[str, dict[str, float]] = {}
        for cid, row in sorted(self.rows.items()):
            costs = self.costs.get(cid)
            out[cid] = {"calls": int(row[0]), "nested": int(row[1]), "timed": int(row[2]), "total_s": row[3] / 1e6,
                        "lookup_s": row[4] / 1e6, "gap_s": row[5] / 1e6, "overhead_s": row[6] / 1e6,
                        "median_outside_s": statistics.median(costs) / 1e6 if costs else None}
        return out
