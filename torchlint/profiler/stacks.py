"""The line sampler's stacks as interchange files. Pure: no torch.

- ``samples.speedscope.json``: speedscope's file format (a "sampled" profile, weights
  in seconds; https://www.speedscope.app, or ``speedscope FILE``);
- ``samples.collapsed.txt``: Brendan Gregg's collapsed stacks, ``a;b;c weight`` with
  the weight in microseconds (``flamegraph.pl``, speedscope, inferno).

A stack is outermost-first: the script's user frames (file, line, function), each run
of library frames folded into one ``[torch]`` or ``[lib]`` frame (sampler.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

SPEEDSCOPE_FILE = "samples.speedscope.json"
COLLAPSED_FILE = "samples.collapsed.txt"
SPEEDSCOPE_SCHEMA = "https://www.speedscope.app/file-format-schema.json"

Frame = tuple[str, int, str]  # (file, line, function); a folded group is (label, 0, "")
Stacks = dict[tuple[Frame, ...], float]


def _shown(path: str, cwd: str) -> str:
    """``path`` relative to the run's cwd when it lies below it."""
    try:
        rel = os.path.relpath(path, cwd)
    except ValueError:  # another drive
        return path
    return path if rel.startswith("..") else rel


def frame_label(frame: Frame, cwd: str) -> str:
    path, line, func = frame
    if not func:  # a folded run of library frames
        return path
    return f"{func} ({_shown(path, cwd)}:{line})"


def _ordered(stacks: Stacks) -> list[tuple[tuple[Frame, ...], float]]:
    return sorted(((s, w) for s, w in stacks.items() if w > 0), key=lambda sw: [f[:2] for f in sw[0]])


def to_speedscope(stacks: Stacks, *, name: str, exporter: str) -> dict[str, Any]:
    """speedscope's file format: one sampled profile, root-first stacks of frame indices."""
    frames: list[dict[str, Any]] = []
    index: dict[Frame, int] = {}
    samples: list[list[int]] = []
    weights: list[float] = []
    for stack, weight in _ordered(stacks):
        row = []
        for frame in stack:
            i = index.get(frame)
            if i is None:
                i = index[frame] = len(frames)
                path, line, func = frame
                frames.append({"name": func, "file": path, "line": line} if func else {"name": path})
            row.append(i)
        samples.append(row)
        weights.append(weight)
    total = sum(weights)
    return {
        "$schema": SPEEDSCOPE_SCHEMA,
        "shared": {"frames": frames},
        "profiles": [{"type": "sampled", "name": name, "unit": "seconds", "startValue": 0,
                      "endValue": total, "samples": samples, "weights": weights}],
        "name": name,
        "activeProfileIndex": 0,
        "exporter": exporter,
    }


def to_collapsed(stacks: Stacks, cwd: str) -> str:
    """One ``frame;frame;frame microseconds`` line per stack (';' in a name becomes ':')."""
    lines = []
    for stack, weight in _ordered(stacks):
        us = round(weight * 1e6)
        if us <= 0:
            continue
        names = ";".join(frame_label(f, cwd).replace(";", ":").replace("\n", " ") for f in stack)
        lines.append(f"{names} {us}")
    return "\n".join(lines) + ("\n" if lines else "")


def write(run_dir: Path, stacks: Stacks, *, cwd: str, name: str, exporter: str) -> list[str]:
    """Write both files; returns their names (nothing when there were no samples)."""
    if not stacks:
        return []
    doc = to_speedscope(stacks, name=name, exporter=exporter)
    (Path(run_dir) / SPEEDSCOPE_FILE).write_text(json.dumps(doc), encoding="utf-8")
    (Path(run_dir) / COLLAPSED_FILE).write_text(to_collapsed(stacks, cwd), encoding="utf-8")
    return [SPEEDSCOPE_FILE, COLLAPSED_FILE]


def read_speedscope(path: Path) -> Stacks:
    """The stacks of a ``samples.speedscope.json`` written by :func:`write`."""
    doc = json.loads(Path(path).read_text(encoding="utf-8"))
    frames = [
        (str(f.get("file") or f["name"]), int(f.get("line") or 0), str(f["name"]) if f.get("file") else "")
        for f in doc["shared"]["frames"]
    ]
    out: Stacks = {}
    for profile in doc.get("profiles") or []:
        for sample, weight in zip(profile.get("samples") or [], profile.get("weights") or []):
            key = tuple(frames[i] for i in sample)
            out[key] = out.get(key, 0.0) + float(weight)
    return out
