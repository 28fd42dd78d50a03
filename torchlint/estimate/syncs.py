"""What a sync finding's fix saves, from a profiled run (one of :mod:`torchlint.estimate`'s
models, apart for its size): on a GPU, the idle gap each sync leaves, read from the
torch.profiler window; on the CPU, the reads per step the probes counted, times the gap
one read leaves on a GPU (an estimate, labelled so). Pure: no torch, no libcst."""

from __future__ import annotations

from typing import Any

from torchlint.correlate import RULE_PROBES, Correlated, fmt_seconds
from torchlint.correlate.model import _span
from torchlint.profiler.session import ProfileSession
from torchlint.savings import Estimate

#: What each sync rule's call does on the CPU, where there is no device to wait for.
SYNCS_ON_THE_CPU = {
    "TL101": "a CPU tensor's `.item()` or `.tolist()` has no device to wait for",
    "TL102": "`.cpu()` or `.numpy()` of a CPU tensor copies nothing and has no device to wait for",
    "TL103": "`torch.cuda.synchronize()` has no device to wait for",
    "TL104": "a CPU tensor's truth value has no device to wait for",
    "TL105": "`int()` or `float()` of a CPU tensor has no device to wait for",
    "TL107": "a CPU distribution's argument checks have no device to wait for",
    "TL112": "a round trip that stays on the CPU copies nothing and has no device to wait for",
}
#: A sync's cost on a GPU where this run has none to measure it (a CPU run): the idle gap
#: one `.item()` a step left on an H200 (issue 26: 0.12 ms of an 8.9 ms step, removing it
#: measured). Mid-step reads leave a gap of the same kind (the host refilling the queue).
SYNC_GAP_ESTIMATE_S = 0.12e-3



def on_gpu(session: ProfileSession) -> bool:
    return bool(session.meta.get("cuda")) or str(session.meta.get("device") or "").startswith("cuda")


def run_steps(session: ProfileSession) -> int:
    return int(session.steps.get("count") or 0)



def sync_estimate(c: Correlated, session: ProfileSession) -> Estimate:
    """A sync costs the GPU idle gap it leaves (from its return to the next kernel's start,
    the window's ``sync_gaps``), never more than the host waited in it: while the host
    waits, the GPU still runs what was queued. Issue 26: the older bound said 4.3 ms a step
    where removing the ``.item()`` saved 0.12 ms, the next step's launch latency."""
    if not on_gpu(session):
        return _sync_on_the_cpu(c, session)
    steps = run_steps(session)
    gaps = _gaps_at(c, session)
    active = int(session.torch_window.get("active_steps") or 0)
    measured = sum(int(g.get("measured") or 0) for g in gaps)
    if gaps and measured and active:
        syncs = sum(int(g.get("syncs") or 0) for g in gaps)
        per_sync = sum(float(g.get("saving_s") or 0.0) for g in gaps) / measured
        gap = sum(float(g.get("gap_s") or 0.0) for g in gaps) / measured
        waited = sum(float(g.get("wait_s") or 0.0) for g in gaps) / syncs
        per = per_sync * syncs / active
        return Estimate(
            model=f"a sync costs the GPU idle gap it leaves, from its return to the next kernel's start, and never more "
            f"than the host waited in it: {fmt_seconds(gap)} gap, {fmt_seconds(waited)} waited per sync, "
            f"{syncs / active:.1f} sync(s) a step (torch.profiler window)",
            per_step=per,
            total=per * steps if steps else per,
        )
    return _sync_bound_without_trace(c, session, steps)


def _sync_on_the_cpu(c: Correlated, session: ProfileSession) -> Estimate:
    """A CPU run has no device to wait for, but its probes count every read exactly: the
    reads per step times :data:`SYNC_GAP_ESTIMATE_S`, labelled an estimate of what the same
    reads would cost on a GPU (so a line read 24 times a step ranks above one read once)."""
    reads = c.reads_per_step
    what = SYNCS_ON_THE_CPU.get(c.finding.code, "a CPU tensor has no device to wait for")
    if not reads:
        return Estimate(model=f"CPU run, no device trace: {what}; it costs only the call", per_step=0.0, total=0.0)
    per = reads * SYNC_GAP_ESTIMATE_S
    steps = run_steps(session)
    return Estimate(
        model=f"CPU run: {fmt_count(reads)} read(s) per step, counted exactly by the probes; the cost is an estimate for a GPU, "
        f"not measured here: each read idles it about {fmt_seconds(SYNC_GAP_ESTIMATE_S)} (one .item() a step on an H200, "
        f"issue 26); on this CPU {what}, so a read costs only the call",
        per_step=per,
        total=per * steps if steps else per,
        bound=False,
    )


def fmt_count(n: float) -> str:
    """``24``, ``0.5``, ``1.3``: a count per step, whole when it is one."""
    return f"{n:.0f}" if abs(n - round(n)) < 0.05 else f"{n:.1f}"


def _gaps_at(c: Correlated, session: ProfileSession) -> list[dict[str, Any]]:
    """The window's sync gaps at the finding's lines, from the calls its rule is about."""
    calls = RULE_PROBES.get(c.finding.code)
    path = session.resolve(c.finding.location.path)
    first, last = _span(c.finding.location)
    return [g for g in session.torch_window.get("sync_gaps") or ()
            if first <= int(g.get("line") or 0) <= last and session.resolve(str(g.get("path") or "")) == path
            and (calls is None or g.get("call") in calls)]


def _sync_bound_without_trace(c: Correlated, session: ProfileSession, steps: int) -> Estimate:
    """The older bound where no trace covers the syncs: labelled, it overstates on a busy GPU."""
    observed = c.observed_s
    if not steps:
        return Estimate(model="the wait at these lines (no optimizer steps to spread it over; no device trace)",
                        total=observed)
    wait = observed / steps
    median = float(session.steps.get("median_s") or 0.0)
    host = max(median - wait, 0.0)
    tw = session.torch_window
    idle, window_s, active = tw.get("gpu_idle_share"), tw.get("window_s"), tw.get("active_steps")
    device = None
    if idle is not None and window_s and active:
        device = (1.0 - float(idle)) * float(window_s) / int(active)
    bound = min(wait, host) if device is None else min(wait, host, device)
    what = "min(host, device) time per step" if device is not None else "min(host time, wait) per step (no device time measured)"
    return Estimate(
        model=f"no device trace of these syncs (no GPU idle gap to read): the older bound, which overstates on a busy "
        f"GPU: a sync serialises host and device, removing it overlaps them, saving at most {what}, "
        f"and never more than the {fmt_seconds(wait)} waited here per step",
        per_step=bound,
        total=bound * steps,
    )
