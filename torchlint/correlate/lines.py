"""Cost by line: what each source line of the user's code cost in the torch.profiler
windows, forward and backward. Pure: no torch.

The child marks every user line it runs in a window with a range (linetrace.py) and
tracefile.py charges each op to the innermost line around it, and each autograd node's
backward to the line of the forward op that created it (the two share the node's
sequence number; torch links them with ``fwdbwd`` flow events). Here those totals are
divided by the window's steps and joined with the source, for the report; a finding's
observed cost takes the backward of its lines (:func:`backward_at`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torchlint.correlate.model import source_line
from torchlint.profiler.session import ProfileSession


@dataclass(frozen=True, slots=True)
class LineCost:
    path: str  # absolute
    line: int
    function: str
    source: str
    forward_s: float  # per training step, host time of the ops launched at the line
    backward_s: float  # per training step, the backward of the autograd nodes its ops made
    device_s: float  # per training step, device time of both (0 on a CPU run)
    eval_forward_s: float  # the evaluation window's forward, per batch

    @property
    def step_s(self) -> float:
        return self.forward_s + self.backward_s


@dataclass(slots=True)
class LineTable:
    lines: list[LineCost]
    steps: int  # training steps the windows recorded
    eval_batches: int
    backward_unattributed_s: float  # per step: nodes no forward op in the window made (AccumulateGrad)
    recorded: bool
    why_not: str | None = None

    @property
    def backward_s(self) -> float:
        return sum(c.backward_s for c in self.lines) + self.backward_unattributed_s

    def backward_at(self, path: str, first: int, last: int) -> float:
        """Per step: the backward charged to the lines ``first``-``last`` of ``path``."""
        return sum(c.backward_s for c in self.lines if c.path == path and first <= c.line <= last)


def line_table(session: ProfileSession) -> LineTable:
    window = session.torch_window
    cycles = (session.coverage.get("torch_profiler") or {}).get("cycles") or []
    steps = sum(len(c.get("steps") or []) for c in cycles if not c.get("eval"))
    batches = sum(int(c.get("batches") or 0) for c in cycles if c.get("eval"))
    info = window.get("line_ranges") or {}
    rows = window.get("lines")
    if rows is None:
        why = info.get("refused") or ("torch.profiler did not record" if not cycles else "a run made before line costs")
        return LineTable([], steps, batches, 0.0, False, why)
    per_step = 1.0 / steps if steps else 0.0
    per_batch = 1.0 / batches if batches else 0.0
    out = []
    for r in rows:
        path = session.resolve(str(r["path"]))
        out.append(LineCost(path=path, line=int(r["line"]), function=str(r.get("function") or ""),
                            source=source_line(path, int(r["line"])), forward_s=r["forward_s"] * per_step,
                            backward_s=r["backward_s"] * per_step, device_s=r.get("device_s", 0.0) * per_step,
                            eval_forward_s=r.get("eval_forward_s", 0.0) * per_batch))
    unattributed = float(window.get("backward_unattributed_s") or 0.0) * per_step
    return LineTable(out, steps, batches, unattributed, True, None)


def to_dict(table: LineTable, cwd: str, top: int = 15) -> dict[str, Any]:
    """The ``cost_by_line`` section of report.json."""
    from torchlint.correlate.model import display_path

    ranked = sorted(table.lines, key=lambda c: -(c.step_s + c.device_s))
    return {
        "recorded": table.recorded,
        "not_recorded_reason": table.why_not,
        "steps": table.steps,
        "eval_batches": table.eval_batches,
        "per": "step",
        "backward_unattributed_s": table.backward_unattributed_s,
        "lines": [
            {"path": display_path(c.path, cwd), "line": c.line, "function": c.function, "source": c.source,
             "forward_s": c.forward_s, "backward_s": c.backward_s, "device_s": c.device_s,
             "eval_forward_s": c.eval_forward_s,
             "backward_share": (c.backward_s / table.backward_s) if table.backward_s > 0 else None}
            for c in ranked[:top]
        ],
    }
