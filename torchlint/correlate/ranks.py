"""Several ranks of one torchrun job, merged. Pure: no torch, no libcst.

Each profiled rank left ``rank<K>/`` (its own session, traces and profile). Here:
the figures each rank contributes (steps, DataLoader wait, time in collectives,
how it ended), the cost of each finding on every rank and its spread, and the
runtime findings that exist only with several ranks (docs/distributed.md):

- TLR10 collective-wait: a rank spent a large share of its steps in collectives;
- TLR11 straggler-rank: one rank works longer per step, the others wait for it;
- TLR12 dataloader-wait-per-rank: the ranks wait on their DataLoaders unequally;
- TLR13 ranks-same-samples: every rank iterates the whole dataset (TL602 at run time);
- TLR16 ddp-accumulation-sync: DDP all-reduced in more than one backward pass per optimizer
  step (gradient accumulation without no_sync(); correlate/ddpsync.py).
"""

from __future__ import annotations

import json
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torchlint.correlate.ddpsync import DDP_RULES, accumulation_finding, sync_passes
from torchlint.correlate.model import DATALOADER_WAIT_THRESHOLD, Correlated, Correlation, RuntimeRule, UnexplainedHotspot, _fmt_s, display_path
from torchlint.findings import Finding, Location
from torchlint.profiler.session import ProfileSession
from torchlint.profiler.usercode import is_user_file

#: Share of a rank's step time in flight in collectives above which TLR10 fires.
COLLECTIVE_SHARE_THRESHOLD = 0.10
#: A straggler works this much longer per step than the median rank (and 2 ms at least).
STRAGGLER_EXCESS = 0.20
STRAGGLER_MIN_S = 0.002
#: DataLoader wait shares this far apart (and one over the TLR01 threshold): TLR12.
WAIT_SPREAD = 0.05
#: Fewer steps than this on a rank make its per-step figures noise (a crash at step 2).
MIN_STEPS = 3
#: Communication events in a torch.profiler trace: the backends' own ranges (async, on
#: their threads, so their length includes waiting for the other ranks) and NCCL kernels.
COMM_PREFIXES = ("gloo:", "nccl:", "ucc:", "mpi:", "ncclKernel", "ncclDevKernel")


RANK_RULES = {
    "TLR10": RuntimeRule(
        "TLR10", "collective-wait",
        "Find why the ranks arrive at the collective at different times (a straggler, uneven "
        "batches), overlap communication with compute, or synchronise less often",
    ),
    "TLR11": RuntimeRule(
        "TLR11", "straggler-rank",
        "Give every rank the same work (equal shards and batch sizes) and look at what this rank "
        "does that the others do not (logging, checkpointing, a slower device or host)",
    ),
    "TLR12": RuntimeRule(
        "TLR12", "dataloader-wait-per-rank",
        "Give the ranks that wait DataLoader workers (num_workers > 0) or cheaper samples; one "
        "rank's wait holds every rank at the next collective",
    ),
    "TLR13": RuntimeRule(
        "TLR13", "ranks-same-samples",
        "Use DistributedSampler(dataset) as the DataLoader's sampler (and call set_epoch each epoch) "
        "so each rank sees its own shard",
    ),
    **DDP_RULES,
}


@dataclass
class RankFigures:
    """What one rank measured, as plain numbers (one row of the per-rank table)."""

    rank: int
    directory: str
    node_rank: int | None = None
    local_rank: int | None = None
    host: str | None = None
    exit_status: int | None = None
    stop_reason: str = "unknown"
    traceback: str | None = None
    stopped_at: str | None = None
    incomplete: bool = False
    ended_at: float | None = None  # wall clock, as the rank saw it
    steps: int = 0
    step_median_s: float | None = None
    wall_s: float = 0.0
    wait_share: float | None = None
    fetch_s: float = 0.0
    window_s: float = 0.0  # the torch.profiler window(s)
    window_steps: int = 0
    comm_s: float = 0.0  # collectives in flight during the window
    probed_collectives: dict[str, Any] = field(default_factory=dict)  # whole run, explicit calls
    collective_sites: list[dict[str, Any]] = field(default_factory=list)
    loaders: list[dict[str, Any]] = field(default_factory=list)
    ddp: dict[str, Any] | None = None  # DDP's synchronised backward passes per step (ddpsync.py)

    @property
    def comm_share(self) -> float | None:
        """Share of the step time some collective was in flight: over the torch.profiler
        window (whose steps run slower than the rest, so a share of the window, not its
        seconds, carries over), else the timed collective calls over the whole run."""
        if self.window_steps and self.window_s:
            return min(self.comm_s / self.window_s, 1.0)
        probed = sum(c.get("seconds", 0.0) for c in self.probed_collectives.values())
        if probed and self.steps and self.step_median_s:
            return min(probed / (self.steps * self.step_median_s), 1.0)
        return None

    @property
    def comm_per_step_s(self) -> float | None:
        share = self.comm_share
        return share * self.step_median_s if (share is not None and self.step_median_s) else None

    @property
    def work_per_step_s(self) -> float | None:
        """A step's time less its time in collectives: what this rank itself spends."""
        if self.step_median_s is None:
            return None
        return max(self.step_median_s - (self.comm_per_step_s or 0.0), 0.0)

    @property
    def failed(self) -> bool:
        script_failed = self.stop_reason in ("exception", "sys.exit") and bool(self.exit_status)
        return script_failed or self.incomplete

    def to_dict(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "directory": self.directory,
            "node_rank": self.node_rank,
            "local_rank": self.local_rank,
            "host": self.host,
            "exit_status": self.exit_status,
            "stop_reason": self.stop_reason,
            "failed": self.failed,
            "traceback": self.traceback,
            "stopped_at": self.stopped_at,
            "incomplete": self.incomplete,
            "ended_at": self.ended_at,
            "steps": self.steps,
            "step_median_s": self.step_median_s,
            "wall_s": self.wall_s,
            "dataloader_wait_share": self.wait_share,
            "dataloader_fetch_s": self.fetch_s,
            "window_s": self.window_s,
            "window_steps": self.window_steps,
            "collectives_in_window_s": self.comm_s,
            "collectives_per_step_s": self.comm_per_step_s,
            "collectives_share": self.comm_share,
            "work_per_step_s": self.work_per_step_s,
            "probed_collectives": self.probed_collectives,
            "loaders": self.loaders,
            "ddp_sync": self.ddp,
        }


def rank_figures(rank: int, session: ProfileSession, rank_dir: Path) -> RankFigures:
    """One rank's row, from its loaded session and its trace files."""
    meta, dist = session.meta, dict(session.meta.get("distributed") or {})
    dl, steps = session.dataloader, session.steps
    cycles = (session.coverage.get("torch_profiler") or {}).get("cycles") or []
    training = [c for c in cycles if c.get("trace") and not c.get("eval") and (rank_dir / c["trace"]).is_file()]
    window_steps = sum(len(c.get("steps") or []) for c in training)
    comm_s, window_s = comm_in_traces([rank_dir / c["trace"] for c in training])
    ddp = sync_passes([rank_dir / c["trace"] for c in training])
    return RankFigures(
        rank=rank,
        directory=rank_dir.name,
        node_rank=dist.get("node_rank"),
        local_rank=dist.get("local_rank"),
        host=dist.get("host"),
        exit_status=meta.get("exit_status"),
        stop_reason=str(meta.get("stop_reason") or "unknown"),
        traceback=meta.get("traceback"),
        stopped_at=_innermost_user_frame(meta.get("stopped_at") or meta.get("traceback")),
        incomplete=bool(meta.get("incomplete")),
        ended_at=dist.get("ended_at"),
        steps=int(steps.get("count") or 0),
        step_median_s=steps.get("median_s"),
        wall_s=session.wall_s,
        wait_share=dl.get("wait_share"),
        fetch_s=float(dl.get("fetch_s") or 0.0),
        window_s=window_s,
        window_steps=window_steps,
        comm_s=comm_s,
        probed_collectives=dict(dist.get("collectives") or {}),
        collective_sites=list(dist.get("collective_sites") or []),
        loaders=list(dist.get("loaders") or []),
        ddp=ddp,
    )


_FRAME = re.compile(r'^\s*File "(?P<path>[^"]+)", line (?P<line>\d+), in (?P<func>.+)$', re.M)


def _innermost_user_frame(traceback: str | None) -> str | None:
    """``path:line in func`` of the last user frame of a traceback: where a stopped rank was."""
    frames = [m for m in _FRAME.finditer(traceback or "") if is_user_file(m.group("path"))]
    if not frames:
        return None
    last = frames[-1]
    return f"{last.group('path')}:{last.group('line')} in {last.group('func')}"


def comm_in_traces(paths: list[Path]) -> tuple[float, float]:
    """(seconds some collective was in flight, seconds recorded) over the trace files."""
    comm = window = 0.0
    for path in paths:
        try:
            events = json.loads(path.read_text(encoding="utf-8")).get("traceEvents") or []
        except (OSError, ValueError):
            continue
        spans = [(float(e.get("ts", 0)), float(e.get("ts", 0)) + float(e.get("dur", 0))) for e in events if e.get("ph") == "X"]
        comms = [
            (float(e.get("ts", 0)), float(e.get("ts", 0)) + float(e.get("dur", 0)))
            for e in events
            if e.get("ph") == "X" and str(e.get("name", "")).startswith(COMM_PREFIXES)
        ]
        if spans:
            window += (max(end for _s, end in spans) - min(start for start, _e in spans)) / 1e6
        comm += _union(comms) / 1e6
    return comm, window


def _union(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for lo, hi in sorted(intervals):
        if hi <= end:
            continue
        total += hi - max(lo, end)
        end = hi
    return total


# -- findings on every rank ----------------------------------------------------


def finding_spread(correlations: dict[int, Correlation]) -> list[dict[str, Any]]:
    """Per finding (code and place): its observed cost and expected saving on each rank,
    and the spread of the cost (max - min) over the ranks where it was seen."""
    merged: dict[tuple[Any, ...], dict[str, Any]] = {}
    for rank, corr in sorted(correlations.items()):
        for c in [*corr.findings, *corr.runtime]:
            loc = c.finding.location
            key = (c.finding.code, loc.path, loc.line, loc.column)
            row = merged.setdefault(
                key,
                {"code": c.finding.code, "path": loc.path, "line": loc.line, "column": loc.column, "ranks": {}},
            )
            expected = c.expected.total if (c.expected is not None and c.expected.unit == "s") else None
            row["ranks"][str(rank)] = {"observed_s": c.observed_s, "expected_s": expected, "share": c.share}
    out = []
    for row in merged.values():
        costs = [r["observed_s"] for r in row["ranks"].values()]
        row["spread_s"] = max(costs) - min(costs) if len(costs) > 1 else 0.0
        row["max_rank"] = max(row["ranks"], key=lambda k: row["ranks"][k]["observed_s"]) if costs else None
        out.append(row)
    return sorted(out, key=lambda r: -max((v["observed_s"] for v in r["ranks"].values()), default=0.0))


# -- runtime findings that need several ranks ------------------------------------


def _finding(code: str, message: str, path: str, line: int, cwd: str) -> Correlated:
    rule = RANK_RULES[code]
    finding = Finding(code=code, name=rule.name, message=message, location=Location(display_path(path, cwd), line, 1), fix_hint=rule.fix_hint)
    return Correlated(finding=finding, origin="runtime", basis="ranks")


def _pct(share: float | None) -> str:
    return f"{share:.0%}" if share is not None else "?"


def multi_rank_findings(figs: list[RankFigures], sessions: dict[int, ProfileSession], correlations: dict[int, Correlation], cwd: str, script: str) -> list[Correlated]:
    """TLR10..TLR13 over the ranks that wrote a profile (none with fewer than two)."""
    done = [f for f in figs if not f.incomplete]
    if len(done) < 2:
        return []
    stepped = [f for f in done if f.steps >= MIN_STEPS]
    if len(stepped) < len(done):  # per-step figures of a rank that barely ran compare nothing
        stepped = []
    found = (
        _collective_wait(stepped, cwd, script) if stepped else None,
        _straggler(stepped, correlations, cwd, script) if stepped else None,
        _wait_per_rank(stepped, sessions, cwd, script) if stepped else None,
        _same_samples(done, correlations, cwd, script),
    )
    resolve = next(iter(sessions.values())).resolve if sessions else (lambda p: p)
    accumulation = accumulation_finding([(f.rank, f.ddp, f.steps) for f in done], cwd, script, resolve)
    return [c for c in found if c is not None] + accumulation


def _collective_wait(figs: list[RankFigures], cwd: str, script: str) -> Correlated | None:
    shares = {f.rank: f.comm_share for f in figs if f.comm_share is not None}
    if not shares or max(shares.values()) < COLLECTIVE_SHARE_THRESHOLD:
        return None
    worst = max(shares, key=lambda r: shares[r])
    fig = next(f for f in figs if f.rank == worst)
    per_rank = ", ".join(f"rank {r} {_pct(s)}" for r, s in sorted(shares.items()))
    basis = f"{fig.window_steps} steps of the torch.profiler window" if fig.window_steps else "the timed collective calls"
    msg = (
        f"Rank {worst} had a collective in flight for {_pct(shares[worst])} of its step time "
        f"({_fmt_s(fig.comm_per_step_s or 0.0)} a step, over {basis}); per rank: {per_rank}"
    )
    sites = fig.collective_sites
    path, line = (sites[0]["path"], sites[0]["line"]) if sites else (script, 1)
    c = _finding("TLR10", msg, path, line, cwd)
    c.observed_s = (fig.comm_per_step_s or 0.0) * fig.steps
    c.share = shares[worst]
    return c


def _straggler(figs: list[RankFigures], correlations: dict[int, Correlation], cwd: str, script: str) -> Correlated | None:
    work = {f.rank: f.work_per_step_s for f in figs if f.work_per_step_s is not None}
    if len(work) < 2:
        return None
    slow = max(work, key=lambda r: work[r])
    others = statistics.median(v for r, v in work.items() if r != slow)
    excess = work[slow] - others
    if excess < STRAGGLER_MIN_S or excess < STRAGGLER_EXCESS * max(others, 1e-9):
        return None
    per_rank = ", ".join(f"rank {r} {_fmt_s(v)}" for r, v in sorted(work.items()))
    msg = (
        f"Rank {slow} is a straggler: {_fmt_s(work[slow])} of its own work per step against "
        f"{_fmt_s(others)} on the other ranks, which wait for it in the collectives "
        f"(work per step, step time less time in collectives: {per_rank})"
    )
    path, line = script, 1
    extra = _straggler_line(slow, correlations)
    if extra is not None:
        path, line, extra_s = extra
        msg += f"; the line where it spends the most time beyond the others is {display_path(path, cwd)}:{line} (+{_fmt_s(extra_s)})"
    c = _finding("TLR11", msg, path, line, cwd)
    steps = next(f.steps for f in figs if f.rank == slow)
    c.observed_s = excess * steps
    return c


def _straggler_line(slow: int, correlations: dict[int, Correlation]) -> tuple[str, int, float] | None:
    """The unexplained line where the straggler spent the most time beyond the other ranks'
    median there: what it does that they do not (a line every rank waits on, such as the
    rendezvous, cancels out). Its excess is per step, so only the time after the first
    optimizer step counts: a rank that reached the rendezvous or DDP's first broadcast
    before the others waited there once, longer than its steps' excess can add up to."""
    mine = correlations.get(slow)
    if mine is None:
        return None
    others = [c for r, c in correlations.items() if r != slow]
    best = None
    for h in mine.hotspots:
        if h.cause:  # a one-time cost (import torch) every rank paid
            continue
        theirs = [next((_in_steps(o) for o in c.hotspots if (o.path, o.line) == (h.path, h.line)), 0.0) for c in others]
        extra = _in_steps(h) - (statistics.median(theirs) if theirs else 0.0)
        if extra > 0 and (best is None or extra > best[2]):
            best = (h.path, h.line, extra)
    return best


def _in_steps(h: UnexplainedHotspot) -> float:
    """A line's time during the measured steps; all of it in a session that did not keep it apart."""
    return h.self_s if h.step_s is None else h.step_s


def _wait_per_rank(figs: list[RankFigures], sessions: dict[int, ProfileSession], cwd: str, script: str) -> Correlated | None:
    shares = {f.rank: f.wait_share for f in figs if f.wait_share is not None}
    if len(shares) < 2:
        return None
    top = max(shares, key=lambda r: shares[r])
    low = min(shares.values())
    if shares[top] < DATALOADER_WAIT_THRESHOLD or shares[top] - low < WAIT_SPREAD:
        return None
    per_rank = ", ".join(f"rank {r} {_pct(s)}" for r, s in sorted(shares.items()))
    msg = f"The ranks waited on their DataLoader unequally ({per_rank} of the loop); the others wait for rank {top} at each collective"
    loaders = (sessions[top].dataloader.get("loaders") or [{}])
    path, line = str(loaders[0].get("path") or script), int(loaders[0].get("line") or 1)
    c = _finding("TLR12", msg, path, line, cwd)
    c.share = shares[top]
    return c


def _same_samples(figs: list[RankFigures], correlations: dict[int, Correlation], cwd: str, script: str) -> Correlated | None:
    """Every rank's loader at one place goes over the whole dataset: the ranks repeat each
    other's samples. Identical first batches (same seed) say so even more plainly."""
    by_site: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for f in figs:
        for loader in f.loaders:
            by_site.setdefault((str(loader.get("path")), int(loader.get("line") or 0)), []).append(loader)
    for (path, line), loaders in by_site.items():
        if len(loaders) < 2:
            continue
        whole = [ld for ld in loaders if ld.get("dataset_len") and ld.get("samples_per_epoch") == ld.get("dataset_len")]
        if len(whole) < len(loaders):
            continue
        digests = {ld.get("first_batches_digest") for ld in loaders}
        same = len(digests) == 1 and None not in digests
        msg = (
            f"Each of the {len(loaders)} ranks iterates all {loaders[0]['dataset_len']} samples of the dataset "
            f"({loaders[0].get('sampler')}, no DistributedSampler): every epoch is repeated on every rank"
            + ("; their first batches were identical" if same else "")
        )
        static = [c.finding for corr in correlations.values() for c in corr.findings if c.finding.code == "TL602"]
        if static:
            msg += f"; this confirms TL602 at {static[0].location.path}:{static[0].location.line}"
        return _finding("TLR13", msg, path if path != "None" else script, line or 1, cwd)
    return None


def failed_ranks(figs: list[RankFigures]) -> list[RankFigures]:
    """The ranks whose script failed (an exception or a non-zero exit), or that wrote nothing,
    the first to fail first: the others usually failed because it did (a closed connection)."""
    return sorted((f for f in figs if f.failed), key=lambda f: (f.ended_at is None, f.ended_at or 0.0, f.rank))
