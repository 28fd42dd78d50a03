"""The charts of report.html, drawn here as inline SVG and HTML (no charting library).

- :func:`step_chart`: each optimizer step's time over the run, with the torch.profiler
  windows and the steps the experiment's windows compared marked as bands;
- :func:`flame_graph`: the line sampler's stacks as an icicle (callers on top), one
  absolutely placed ``div`` per frame; report.html's script zooms on a click.
"""

from __future__ import annotations

from html import escape
from typing import Any

from torchlint.correlate import fmt_seconds

WIDTH, HEIGHT, PAD_LEFT, PAD_BOTTOM, PAD_TOP = 900, 220, 56, 28, 10
MAX_DOTS = 600  # hover dots per step up to this many steps; the line has every step
MIN_FLAME_SHARE = 0.002  # frames narrower than this share of the run are not drawn
FLAME_ROW_PX = 18


def _x(step: float, first: int, last: int) -> float:
    span = max(last - first, 1)
    return PAD_LEFT + (step - first) / span * (WIDTH - PAD_LEFT - 10)


def _y(seconds: float, top: float) -> float:
    inner = HEIGHT - PAD_BOTTOM - PAD_TOP
    return PAD_TOP + inner - (seconds / top * inner if top > 0 else 0)


def _band(a: float, b: float, first: int, last: int, css: str, label: str) -> str:
    x0, x1 = _x(a - 0.5, first, last), _x(b + 0.5, first, last)
    x0, x1 = max(x0, PAD_LEFT), min(x1, WIDTH - 10)
    return (f'<rect class="{css}" x="{x0:.1f}" y="{PAD_TOP}" width="{max(x1 - x0, 1):.1f}" '
            f'height="{HEIGHT - PAD_BOTTOM - PAD_TOP}"><title>{escape(label)}</title></rect>'
            f'<text class="band-label" x="{x0 + 3:.1f}" y="{PAD_TOP + 11}">{escape(label)}</text>')


def step_chart(durations: list[float], windows: list[dict[str, Any]], experiment: dict[str, Any] | None) -> str:
    """An SVG line of step times: ``durations[i]`` is step ``i + 2`` (the time since the
    step before it). ``windows``: report.json's torch.profiler windows; ``experiment``:
    experiment.json's ``windowing`` (the steps its windows ran and compared)."""
    if not durations:
        return '<p class="muted">No step times: the run made fewer than two optimizer steps.</p>'
    first, last = 2, len(durations) + 1
    top = max(durations) * 1.1 or 1.0
    parts = [f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" '
             'role="img" aria-label="time of each optimizer step">']
    for w in windows:
        if w.get("eval"):
            at = float(w.get("after_step") or 0)
            parts.append(_band(at, at, first, last, "band-eval", f"evaluation window after step {int(at)}"))
        elif w.get("steps"):
            a, b = w["steps"]
            parts.append(_band(a, b, first, last, "band-window", f"torch.profiler window, steps {a}-{b}"))
    if experiment and experiment.get("mode"):
        k = experiment.get("max_steps") or last
        warm = int(experiment.get("warmup") or 0)
        what = "whole-run" if experiment["mode"] == "run" else f"{k}-step"
        parts.append(_band(max(warm + 1, first), min(int(k), last), first, last, "band-experiment",
                           f"experiment: {what} windows compare steps {warm + 1}-{k}"))
    for frac in (0.0, 0.5, 1.0):  # y axis: 0, half, top
        y = _y(top * frac, top)
        parts.append(f'<line class="grid" x1="{PAD_LEFT}" x2="{WIDTH - 10}" y1="{y:.1f}" y2="{y:.1f}"/>'
                     f'<text class="axis" x="{PAD_LEFT - 4}" y="{y + 4:.1f}" text-anchor="end">{fmt_seconds(top * frac)}</text>')
    base = HEIGHT - PAD_BOTTOM + 16
    parts.append(f'<text class="axis" x="{PAD_LEFT}" y="{base}">step {first}</text>'
                 f'<text class="axis" x="{WIDTH - 10}" y="{base}" text-anchor="end">step {last}</text>')
    points = " ".join(f"{_x(i + 2, first, last):.1f},{_y(d, top):.1f}" for i, d in enumerate(durations))
    parts.append(f'<polyline class="steps" data-steps="{len(durations)}" points="{points}"/>')
    if len(durations) <= MAX_DOTS:
        for i, d in enumerate(durations):
            parts.append(f'<circle class="step" cx="{_x(i + 2, first, last):.1f}" cy="{_y(d, top):.1f}" r="2.5">'
                         f"<title>step {i + 2}: {fmt_seconds(d)}</title></circle>")
    parts.append("</svg>")
    return "".join(parts)


class _Node:
    __slots__ = ("name", "kind", "value", "children")

    def __init__(self, name: str, kind: str) -> None:
        self.name, self.kind, self.value = name, kind, 0.0
        self.children: dict[str, _Node] = {}


def _tree(stacks: list[tuple[list[tuple[str, str]], float]]) -> _Node:
    root = _Node("all samples", "root")
    for frames, weight in stacks:
        root.value += weight
        node = root
        for name, kind in frames:
            child = node.children.get(name)
            if child is None:
                child = node.children[name] = _Node(name, kind)
            child.value += weight
            node = child
    return root


def flame_graph(stacks: list[tuple[list[tuple[str, str]], float]]) -> str:
    """``stacks``: (outermost-first [(label, kind)], seconds), kind one of "user",
    "torch", "lib". Each frame is a div at its share of the run; title = hover text."""
    root = _tree(stacks)
    if root.value <= 0:
        return '<p class="muted">No stack samples were recorded.</p>'
    total = root.value
    cells: list[str] = []
    depth_max = 0

    def place(node: _Node, x: float, depth: int) -> None:
        nonlocal depth_max
        w = node.value / total
        if w < MIN_FLAME_SHARE:
            return
        depth_max = max(depth_max, depth)
        label = escape(node.name)
        hover = escape(f"{node.name}: {fmt_seconds(node.value)} ({w * 100:.1f}% of the samples)")
        cells.append(f'<div class="fg {node.kind}" data-x="{x:.6f}" data-w="{w:.6f}" data-d="{depth}" '
                     f'style="left:{x * 100:.4f}%;width:{w * 100:.4f}%;top:{depth * FLAME_ROW_PX}px" '
                     f'title="{hover}">{label}</div>')
        offset = x
        for child in sorted(node.children.values(), key=lambda c: -c.value):
            place(child, offset, depth + 1)
            offset += child.value / total

    place(root, 0.0, 0)
    height = (depth_max + 1) * FLAME_ROW_PX
    return f'<div class="flame" id="flame" style="height:{height}px">{"".join(cells)}</div>'
