"""The lines the profile reports (text and HTML) say of one finding or window: its expected and
measured saving, the cost observed at its lines, how often the host waits there, its ops in the
torch.profiler window; with the share and step-range wording they share."""

from __future__ import annotations

from typing import Any

from torchlint.correlate import fmt_interval
from torchlint.correlate import fmt_seconds as _s
from torchlint.savings import ALPHA, NOT_MEASURABLE


def pct(share: float | None) -> str:
    if share is None:
        return "n/a"
    return f"{share * 100:.1f}%" if share >= 0.001 or share == 0 else "<0.1%"


def window_steps(window: dict[str, Any]) -> str:
    if window.get("eval"):
        until = f"{window['batches']} batches" if window.get("batches") else f"until {window.get('ended') or 'the end'}"
        return f"evaluation after step {window.get('after_step') or 0} ({until})"
    steps = window.get("steps")
    if not steps:
        return "no steps"
    a, b = steps
    return f"step {a}" if a == b else f"steps {a}-{b}"


def _bytes(n: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


def _amount(value: float | None, unit: str) -> str:
    if value is None:
        return "?"
    return _bytes(value) if unit == "bytes" else _s(value)


def expected_line(e: dict[str, Any] | None) -> str | None:
    """The expected saving, labelled with its model (savings.Estimate as data)."""
    if e is None:
        return None
    if e.get("not_applicable"):
        return f"expected saving: not applicable here: {e['not_applicable']}"
    unit = e.get("unit") or "s"
    if e.get("total") is None and e.get("per_step") is None:
        return f"expected saving: unknown (model: {e['model']})"
    if not e.get("total") and not e.get("per_step") and unit != "bytes":
        return f"expected saving: none here (model: {e['model']})"
    if unit == "bytes":
        return f"retained memory ≤ {_amount(e.get('per_step'), unit)} per step (model: {e['model']})"
    per = f", {_amount(e.get('per_step'), unit)}/step" if e.get("per_step") is not None else ""
    how = "≤" if e.get("bound", True) else "≈"  # an estimate says it is one (TLR09)
    return f"expected saving {how} {_amount(e.get('total'), unit)}{per} (model: {e['model']})"


def measured_line(m: dict[str, Any] | None, inconclusive: bool = False) -> str | None:
    """The experiment's verdict (savings.Measurement as data): a difference inside
    the noise is never shown as a saving."""
    if m is None:
        return None
    variant = m.get("variant") or "variant"
    if m["verdict"] == "skipped":
        return f"experiment skipped ({variant}): {m.get('why') or 'no reason given'}"
    if m["verdict"] == NOT_MEASURABLE:
        return f"{m.get('why') or 'not measurable by this experiment'} (the expected figure ranks)"
    unit = m.get("unit") or "s"
    ci = ""
    if m.get("ci_low") is not None and m.get("ci_high") is not None:
        ci = f", 95% CI {fmt_interval(m['ci_low'], m['ci_high'], unit)}/step"
    per, total = m.get("per_step"), m.get("total")
    if m["verdict"] == "saving":
        return f"measured saving {_amount(total, unit)}/run, {_amount(per, unit)}/step{ci} (experiment: {variant})"
    if m["verdict"] == "slower":
        slower_total = _amount(-total if total is not None else None, unit)
        slower_per = _amount(-per if per is not None else None, unit)
        return f"measured: slower by {slower_total}/run, {slower_per}/step{ci} (experiment: {variant})"
    alone, together = m.get("p"), m.get("p_corrected")
    apart = (m.get("ci_low") or 0) > 0 or (m.get("ci_high") or 0) < 0  # the interval alone said a difference
    if apart and alone is not None and together is not None and alone < ALPHA <= together:
        ci += ", within the noise once corrected for the other variants tested (Holm)"
    if inconclusive:
        ci += "; inconclusive: its interval holds the expected saving, so the expected figure ranks"
    return f"measured: no measurable change{ci} (experiment: {variant})"


def evidence_line(f: dict[str, Any]) -> str:
    basis = f["basis"] or "run"
    parts = [f"observed {_s(f['cost_s'])} at these lines ({basis})", f"{pct(f['share'])} of the script"]
    ev = f["evidence"]
    if f["basis"] == "probe":
        by_op: dict[tuple[str, int], int] = {}
        for e in ev:
            key = (e["op"], e["line"], e["via"])
            by_op[key] = by_op.get(key, 0) + e["calls"]
        for (op, line, via), calls in by_op.items():
            if op == "DataLoader.__next__":
                parts.append(f"{calls} batch fetches at line {line}" if via == "related" else f"{calls} batch fetches")
            elif op == "DataLoader.__iter__":
                parts.append(f"{calls} x iter(loader) at line {line}" if via == "related" else f"{calls} x iter(loader)")
            else:
                parts.append(f"{calls} calls of {op}" + (f" at line {line}" if via == "related" else ""))
    elif f["basis"] == "sampler":
        parts.append("wall time with this line on the stack (line sampler)")
    backward = (f.get("observed") or {}).get("backward_s")
    if backward:
        parts.append(f"incl. {_s(backward)} of backward made by these lines (torch.profiler windows, per step x steps)")
    if f.get("syncs"):
        parts.append(f"{f['syncs']} CUDA syncs")
    return " · ".join(parts)


def reads_line(f: dict[str, Any], steps: int | None) -> str | None:
    """How often the host waits at a sync finding's line: its probed calls per optimizer step
    (``24 reads per step (4800 calls of Tensor.item over 200 optimizer steps)``)."""
    per = f.get("reads_per_step")
    if per is None:
        return None
    noun = "sync" if f.get("code") == "TL103" else "read"
    calls: dict[str, int] = {}
    for e in f.get("evidence") or ():
        if e["via"] == "line":
            calls[e["op"]] = calls.get(e["op"], 0) + e["calls"]
    made = ", ".join(f"{n} calls of {op}" for op, n in calls.items())
    over = f" over {steps} optimizer steps" if steps else ""
    count = f"{per:.0f}" if abs(per - round(per)) < 0.05 else f"{per:.1f}"
    return f"host waits: {count} {noun}{'' if count == '1' else 's'} per step ({made}{over})"


def window_line(f: dict[str, Any]) -> str | None:
    if not f["window"]:
        return None
    ops: dict[str, list[float]] = {}
    for e in f["window"]:
        row = ops.setdefault(e["op"], [0, 0.0, 0.0])
        row[0] += e["calls"]
        row[1] += e["self_s"]
        row[2] += e["device_s"]
    top = sorted(ops.items(), key=lambda kv: -(kv[1][1] + kv[1][2]))[:3]
    bits = []
    for op, (calls, self_s, dev_s) in top:
        bit = f"{op} x{int(calls)} {_s(self_s)} CPU"
        if dev_s:
            bit += f" {_s(dev_s)} GPU"
        bits.append(bit)
    return "torch.profiler window: " + ", ".join(bits)
