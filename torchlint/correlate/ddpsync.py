"""DDP gradient accumulation without ``no_sync()`` at run time (TLR16), from a rank's traces.
Pure: no torch, no libcst.

DDP all-reduces the gradients during every backward pass: its reducer's autograd hooks
launch one all-reduce per gradient bucket, so in a torch.profiler trace each of them is a
``c10d::`` collective op inside an ``autograd::engine::evaluate_function`` event. A
collective the script calls itself (``dist.all_reduce(loss)``) runs outside autograd. A
script that accumulates gradients over N micro-batches per optimizer step needs the
all-reduce only in the last backward: the others belong under ``model.no_sync()``.

Per optimizer step of the windows (a ``ProfilerStep#`` range runs from one optimizer step
to the next): the ``DistributedDataParallel.forward`` calls, and how many of them were
followed by DDP's all-reduces before the next forward (a *synchronised pass*). Passes are
grouped by the user line that called the DDP model (the innermost ``torchlint line`` range
around its forward), so two DDP models in one script are told apart. A rank whose median
step has more than one synchronised pass of one model accumulates without ``no_sync``.

The cost: DDP's share of the collectives' time in flight (the backend's ``gloo:``/``nccl:``
events, matched to the ``c10d::`` ops in order), per synchronised pass, times the extra
passes per step.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from torchlint.correlate.model import Correlated, RuntimeRule, _fmt_s, display_path
from torchlint.findings import Finding, Location
from torchlint.savings import Estimate

DDP_FORWARD = "DistributedDataParallel.forward"
AUTOGRAD = "autograd::engine::evaluate_function"
COLLECTIVE_OP = "c10d::"
COMM_PREFIXES = ("gloo:", "nccl:", "ucc:", "mpi:", "ncclKernel", "ncclDevKernel")
LINE_PREFIX = "torchlint line "

DDP_RULES = {
    "TLR16": RuntimeRule(
        "TLR16", "ddp-accumulation-sync",
        "Run the backward passes of the micro-batches before the last under `with model.no_sync():` "
        "(DDP then all-reduces the accumulated gradients once per optimizer step)",
    ),
}


def _end(e: dict[str, Any]) -> float:
    return float(e.get("ts", 0.0)) + float(e.get("dur", 0.0))


def _inside(e: dict[str, Any], spans: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The innermost span of ``spans`` (same thread) around ``e``."""
    best = None
    ts = float(e.get("ts", 0.0))
    for s in spans:
        if s.get("tid") == e.get("tid") and float(s.get("ts", 0.0)) <= ts and _end(e) <= _end(s):
            if best is None or float(s.get("ts", 0.0)) >= float(best.get("ts", 0.0)):
                best = s
    return best


def sync_passes(paths: list[Path]) -> dict[str, Any] | None:
    """What one rank's training windows show of DDP's gradient all-reduces (None: no DDP forward)."""
    steps: list[dict[str, Any]] = []
    for path in paths:
        try:
            events = [e for e in json.loads(path.read_text(encoding="utf-8")).get("traceEvents") or []
                      if e.get("ph") == "X"]
        except (OSError, ValueError):
            continue
        steps.extend(_steps_of(events))
    if not steps:
        return None
    sites: dict[str, dict[str, Any]] = {}
    for site in {s for step in steps for s in step["sites"]}:
        forwards = [step["sites"].get(site, {}).get("forwards", 0) for step in steps]
        synced = [step["sites"].get(site, {}).get("synced", 0) for step in steps]
        comm = sum(step["sites"].get(site, {}).get("comm_s", 0.0) for step in steps)
        backward = next((step["sites"][site]["backward"] for step in steps if step["sites"].get(site, {}).get("backward")), None)
        passes = sum(synced)
        sites[site] = {
            "forwards_per_step": statistics.median(forwards),
            "synced_per_step": statistics.median(synced),
            "steps": len(steps),
            "comm_per_pass_s": comm / passes if passes else None,
            "backward": backward,  # "torchlint line FILE:LINE" of the backward that all-reduced
        }
    return {"window_steps": len(steps), "sites": sites}


def _steps_of(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    steps = sorted((e for e in events if str(e.get("name", "")).startswith("ProfilerStep#")), key=lambda e: float(e["ts"]))
    if not steps:
        return []
    lines = [e for e in events if str(e.get("name", "")).startswith(LINE_PREFIX)]
    autograd = [e for e in events if str(e.get("name", "")).startswith(AUTOGRAD)]
    forwards = sorted((e for e in events if e.get("name") == DDP_FORWARD), key=lambda e: float(e["ts"]))
    if not forwards:
        return []
    ops = sorted((e for e in events if str(e.get("name", "")).startswith(COLLECTIVE_OP)), key=lambda e: float(e["ts"]))
    comm = sorted((e for e in events if str(e.get("name", "")).startswith(COMM_PREFIXES)), key=lambda e: float(e["ts"]))
    # each backend event is one collective, in the order the ops launched them; when the counts
    # differ (collectives the trace split or merged), each op gets the mean
    if len(comm) == len(ops):
        in_flight = [float(c.get("dur", 0.0)) for c in comm]
    else:
        mean = sum(float(c.get("dur", 0.0)) for c in comm) / len(ops) if ops else 0.0
        in_flight = [mean] * len(ops)
    site_of = {}
    for f in forwards:
        line = _inside(f, lines)
        site_of[id(f)] = str(line["name"])[len(LINE_PREFIX):] if line else "DDP model"
    out = []
    for step in steps:
        lo, hi = float(step["ts"]), _end(step)
        mine = [f for f in forwards if lo <= float(f["ts"]) < hi]
        sites: dict[str, dict[str, Any]] = defaultdict(lambda: {"forwards": 0, "synced": 0, "comm_s": 0.0, "backward": None})
        for n, f in enumerate(mine):
            site = sites[site_of[id(f)]]
            site["forwards"] += 1
            until = float(mine[n + 1]["ts"]) if n + 1 < len(mine) else hi
            ddp = [(k, op) for k, op in enumerate(ops) if float(f["ts"]) <= float(op["ts"]) < until and _inside(op, autograd)]
            if ddp:
                site["synced"] += 1
                site["comm_s"] += sum(in_flight[k] for k, _ in ddp) / 1e6
                if site["backward"] is None:
                    line = _inside(ddp[0][1], lines)
                    site["backward"] = str(line["name"])[len(LINE_PREFIX):] if line else None
        out.append({"sites": dict(sites)})
    return out


def _place(where: str | None) -> tuple[str, int] | None:
    if not where or ":" not in where:
        return None
    path, _, line = where.rpartition(":")
    return (path, int(line)) if line.isdigit() else None


def accumulation_finding(ranks: list[tuple[int, dict[str, Any] | None, int]], cwd: str, script: str, resolve: Any) -> list[Correlated]:
    """TLR16 per DDP call site whose median step synchronised more than one backward pass on
    some rank. ``ranks``: (rank, its sync_passes(), its optimizer steps)."""
    worst: dict[str, tuple[int, dict[str, Any], int]] = {}
    for rank, ddp, steps in ranks:
        for site, row in ((ddp or {}).get("sites") or {}).items():
            if row["synced_per_step"] > 1 and (site not in worst or row["synced_per_step"] > worst[site][1]["synced_per_step"]):
                worst[site] = (rank, row, steps)
    out = []
    for site, (rank, row, steps) in sorted(worst.items()):
        synced, forwards = row["synced_per_step"], row["forwards_per_step"]
        extra = synced - 1
        per_pass = row.get("comm_per_pass_s")
        msg = (f"DDP all-reduced the gradients in {synced:g} backward passes per optimizer step "
               f"({forwards:g} forward{'s' if forwards != 1 else ''} of the model called at "
               f"{_short(site, cwd, resolve)} a step; median of {row['steps']} window steps on rank {rank}): gradient "
               f"accumulation without no_sync(), {extra:g} all-reduce round{'s' if extra != 1 else ''} a step more "
               f"than one")
        if per_pass is not None:
            msg += f", each {_fmt_s(per_pass)} in flight"
        place = _place(row.get("backward")) or _place(site)
        path, line = (resolve(place[0]), place[1]) if place else (script, 1)
        rule = DDP_RULES["TLR16"]
        finding = Finding(code="TLR16", name=rule.name, message=msg, location=Location(display_path(path, cwd), line, 1),
                          fix_hint=rule.fix_hint)
        c = Correlated(finding=finding, origin="runtime", basis="ranks")
        c.observed_s = extra * (per_pass or 0.0) * steps
        c.calls = int(round(extra * steps))
        c.facts = {"rank": rank, "site": site, "synced_per_step": synced, "forwards_per_step": forwards,
                   "comm_per_pass_s": per_pass}
        if per_pass is not None:
            c.expected = Estimate(
                model=f"the extra all-reduce rounds' time in flight: {extra:g} a step x {_fmt_s(per_pass)} (DDP's share "
                "of the backend's collective events in the torch.profiler window, per synchronised backward pass) x the "
                "run's steps; DDP overlaps its all-reduces with the backward, so the exposed part is at most that",
                per_step=extra * per_pass, total=c.observed_s)
        out.append(c)
    return out


def _short(site: str, cwd: str, resolve: Any) -> str:
    place = _place(site)
    return f"{display_path(resolve(place[0]), cwd)}:{place[1]}" if place else site
