"""Hot lines no finding explains, and the one-time costs of a run.

Pure: no torch, no libcst.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from torchlint.correlate.model import (
    HOTSPOT_MIN_SHARE,
    Correlated,
    Evidence,
    UnexplainedHotspot,
    _import_line,
    _span,
    source_line,
)
from torchlint.profiler.session import ProfileSession

if TYPE_CHECKING:
    from torchlint.correlate.index import _Index


def one_time(session: ProfileSession) -> list[UnexplainedHotspot]:
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


def unexplained(
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
        row = rows.setdefault(key, [h.function, 0.0, 0.0, 0, 0.0, 0.0])
        row[1] += h.self_s
        row[2] += h.total_s
        row[3] += h.samples
        row[4] += h.dataloader_s
        if h.step_self_s is None:
            row[5] = None
        elif row[5] is not None:
            row[5] += h.step_self_s
    run_s = session.script_s
    out = []
    for (path, line), (func, self_s, total_s, samples, dl_s, step_s) in sorted(rows.items(), key=lambda kv: -kv[1][1]):
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
                step_s=step_s,
            )
        )
        if len(out) >= limit:
            break
    return out


