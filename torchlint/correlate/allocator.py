"""TLR09 host-allocator-churn: the decision on what the child recorded (profiler/allocator.py).

Pure: no torch, no libcst; tested with plain session data.

A page fault in the steady state is new memory (the peak grew: a growing cache, a
retained graph), a DataLoader worker's batch (shared memory mapped anew), or memory
the process had and gave back. Only the last is churn: ``faults - peak growth -
worker batches``, in pages, is the floor of the re-faulted pages,
and each cost the kernel a map, a fault, a zeroed page and an unmap, timed on the same
machine at the end of the run.
"""

from __future__ import annotations

from typing import Any

from torchlint.correlate.model import Correlated, _fmt_s
from torchlint.correlate.patterns import Make
from torchlint.profiler.session import ProfileSession
from torchlint.profiler.switches import KEEP_BYTES  # the experiment's mallopt values: the advice's

#: report when the re-faults cost this share of the script's time or more
CHURN_SHARE_THRESHOLD = 0.05
HINT = (
    f"Keep freed memory in the process: run with MALLOC_MMAP_THRESHOLD_={KEEP_BYTES} "
    f"MALLOC_TRIM_THRESHOLD_={KEEP_BYTES} (glibc), or preload jemalloc or tcmalloc (LD_PRELOAD)"
)


def refaulted(record: dict[str, Any]) -> int:
    """Faults beyond what the growth of the peak and the DataLoader workers' batches explain:
    pages given back and touched again. A worker's batch arrives in shared memory that the
    main process maps anew (fewer faults than pages: the kernel maps file pages in groups),
    so all its pages are left out: a floor, never the workers' faults counted as churn."""
    page = int(record.get("page_bytes") or 4096)
    explained = (int(record.get("peak_growth_bytes") or 0) + int(record.get("worker_batch_bytes") or 0)) // page
    return max(int(record.get("faults") or 0) - explained, 0)


def unmeasured_reason(record: dict[str, Any], script_s: float) -> str | None:
    """Why this run could not tell churn at all (worth saying in the report), or None."""
    if not record:
        return "not measured in this run"
    if record.get("skipped"):
        return str(record["skipped"])
    name = record.get("allocator")
    if name != "glibc":  # the thresholds and the advice are glibc's
        return f"the process runs on {name}, not glibc's malloc"
    if record.get("options"):  # the user already chose the thresholds
        return f"malloc options already set ({', '.join(record['options'])})"
    if not record.get("fault_cost_s") or script_s <= 0:
        return "the cost of a page fault could not be measured"
    return None


def churn_reason(record: dict[str, Any], script_s: float) -> str | None:
    """Why this run's faults are not reported, or None when they are."""
    reason = unmeasured_reason(record, script_s)
    if reason is not None:
        return reason
    share = churn_seconds(record) / script_s
    if share < CHURN_SHARE_THRESHOLD:
        return f"re-faulted pages cost {share:.1%} of the run, under {CHURN_SHARE_THRESHOLD:.0%}"
    return None


def churn_findings(session: ProfileSession, make: Make) -> tuple[list[Correlated], str | None]:
    """One TLR09 for the run, or the reason there is none."""
    record = session.meta.get("allocator")
    record = record if isinstance(record, dict) else {}
    script_s = float(session.script_s or 0.0)
    reason = churn_reason(record, script_s)
    if reason is not None:
        return [], reason
    pages = refaulted(record)
    cost = float(record["fault_cost_s"])
    seconds = churn_seconds(record)
    size = pages * int(record.get("page_bytes") or 4096)
    path = session.resolve(str(session.meta.get("script") or ""))
    msg = (
        f"glibc's malloc gave memory back to the kernel and took it again: {pages:,} pages "
        f"({size / 2**30:.2f} GiB) faulted in again after the third optimizer step, about {_fmt_s(seconds)} "
        f"at {cost * 1e6:.2f} µs a page (map, fault, zero, unmap) on this machine ({seconds / script_s:.0%} of the run)"
    )
    # no observed time "at lines": the figure is the process's, and it is the estimate's
    c = Correlated(finding=make("TLR09", msg, path, 1, HINT), origin="runtime", basis="run")
    c.calls = pages
    return [c], None


def churn_seconds(record: dict[str, Any]) -> float:
    """The re-faulted pages times the kernel's work per page, as timed in the run."""
    return refaulted(record) * float(record.get("fault_cost_s") or 0.0)
