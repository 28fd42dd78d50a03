"""Runtime-only findings (``TLR..``): what the run as a whole shows, no source pattern.

Pure: no torch, no libcst.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any

from torchlint.correlate.model import (
    RuntimeRule,
    DATALOADER_PROBES,
    DATALOADER_WAIT_THRESHOLD,
    GPU_IDLE_THRESHOLD,
    SYNCS_PER_STEP_THRESHOLD,
    Correlated,
    Evidence,
    _fmt_s,
    display_path,
)
from torchlint.correlate.allocator import HINT as CHURN_HINT
from torchlint.correlate.allocator import churn_findings, unmeasured_reason
from torchlint.correlate.compiled import COMPILE_RULES, compile_findings
from torchlint.correlate.patterns import ANOMALY_HINT, pattern_findings
from torchlint.correlate.ranks import RANK_RULES
from torchlint.findings import Finding, Location
from torchlint.profiler.session import Hotspot, ProfileSession

if TYPE_CHECKING:
    from torchlint.correlate.index import _Index


RUNTIME_RULES = {
    "TLR01": RuntimeRule(
        "TLR01",
        "dataloader-wait-share",
        "Give the DataLoader workers (num_workers > 0, persistent_workers=True) or make "
        "__getitem__ cheaper",
    ),
    "TLR02": RuntimeRule(
        "TLR02",
        "host-device-syncs",
        "Keep values on the device; read them every N steps instead of every step",
    ),
    "TLR03": RuntimeRule(
        "TLR03",
        "pageable-copies",
        "pin_memory=True on the DataLoader and .to(device, non_blocking=True)",
    ),
    "TLR04": RuntimeRule(
        "TLR04",
        "gpu-idle-share",
        "Feed the GPU faster (DataLoader workers, fewer syncs) or give it more work per step "
        "(bigger batch)",
    ),
    "TLR05": RuntimeRule(
        "TLR05",
        "optimizer-single-tensor",
        "Pass foreach=True to the optimizer (fused=True where it exists, on CUDA)",
    ),
    "TLR06": RuntimeRule(
        "TLR06",
        "fill-then-move",
        "Create the tensor on the device: pass device= to the factory",
    ),
    "TLR07": RuntimeRule(
        "TLR07",
        "low-precision-matmul-misaligned",
        "Pad or choose sizes that are multiples of 8 (features, hidden sizes, vocabulary, batch)",
    ),
    "TLR08": RuntimeRule(
        "TLR08",
        "fp32-matmul-without-tf32",
        "torch.backends.cuda.matmul.allow_tf32 = True, or torch.set_float32_matmul_precision('high')",
    ),
    "TLR09": RuntimeRule(
        "TLR09",
        "host-allocator-churn",
        CHURN_HINT,
    ),
    "TLR17": RuntimeRule(
        "TLR17",
        "anomaly-mode-enabled",
        ANOMALY_HINT,
    ),
}

# The multi-rank findings share the catalogue (TLR10..TLR13, correlate/ranks.py), and so do
# torch.compile's graph breaks and recompilations (TLR14, TLR15, correlate/compiled.py).
RUNTIME_RULES.update(RANK_RULES)  # type: ignore[arg-type]  # same fields: code, name, fix_hint
RUNTIME_RULES.update(COMPILE_RULES)


def _runtime_finding(code: str, message: str, path: str, line: int, cwd: str, hint: str | None = None) -> Finding:
    rule = RUNTIME_RULES[code]
    return Finding(
        code=code,
        name=rule.name,
        message=message,
        location=Location(display_path(path, cwd), line, 1),
        fix_hint=hint or rule.fix_hint,
    )


def loader_at(session: ProfileSession, path: str, line: int) -> dict[str, Any] | None:
    """The options of the DataLoader iterated at ``path:line``, as the run saw them."""
    for opts in session.dataloader.get("loaders") or ():
        if opts.get("line") == line and session.resolve(str(opts.get("path") or "")) == path:
            return opts
    return None


def runtime_findings(session: ProfileSession, idx: _Index) -> list[Correlated]:
    out: list[Correlated] = []
    cwd = session.cwd
    run_s = session.script_s
    steps = int(session.steps.get("count") or 0)

    # TLR01: time the loop spent waiting for batches
    dl = session.dataloader
    share = dl.get("wait_share")
    fetch_lines: dict[tuple[str, int], list[Hotspot]] = defaultdict(list)
    for h in idx.by_source("probe"):
        if h.op in DATALOADER_PROBES:
            fetch_lines[(h.path, h.line)].append(h)
    if share is not None and share >= DATALOADER_WAIT_THRESHOLD and fetch_lines:
        (path, line), hs = max(fetch_lines.items(), key=lambda kv: sum(h.total_s for h in kv[1]))
        fetch_s = float(dl.get("fetch_s") or 0.0)
        batches = sum(h.calls for h in hs if h.op == "DataLoader.__next__")
        opts = loader_at(session, path, line) or {}
        workers = opts.get("num_workers")
        hint = None
        has = ""
        if workers == 0:
            has = "; the loader has num_workers=0, so each batch is made in the main process while the step waits"
        elif isinstance(workers, int) and workers > 0:
            has = f", although the loader has {workers} worker{'s' if workers != 1 else ''}"
            hint = (
                "Its workers do not keep up: make __getitem__ cheaper, or add workers if cores are free"
                + ("" if opts.get("persistent_workers") else "; persistent_workers=True keeps them between epochs")
            )
        msg = (
            f"The training loop waited on the DataLoader for {share:.0%} of its time "
            f"({_fmt_s(fetch_s)} fetching {batches} batches{has})"
        )
        c = Correlated(
            finding=_runtime_finding("TLR01", msg, path, line, cwd, hint),
            origin="runtime",
            evidence=[Evidence.of(h, "line") for h in hs],
            basis="probe",
            loader_workers=workers if isinstance(workers, int) else None,
        )
        c.calls = batches
        c.total_s = c.observed_s = sum(h.total_s for h in hs)
        c.self_s = sum(h.self_s for h in hs)
        c.share = c.observed_s / run_s if run_s else None
        out.append(c)

    # TLR02: host-device syncs per step (CUDA sync-debug records)
    syncs = idx.by_source("sync")
    total_syncs = sum(h.calls for h in syncs)
    if syncs and steps and total_syncs / steps >= SYNCS_PER_STEP_THRESHOLD:
        top = max(syncs, key=lambda h: h.calls)
        msg = (
            f"{total_syncs / steps:.1f} host-device synchronisations per step ({total_syncs} over "
            f"{steps} steps); this line caused {top.calls}"
        )
        c = Correlated(
            finding=_runtime_finding("TLR02", msg, top.path, top.line, cwd),
            origin="runtime",
            evidence=[Evidence.of(h, "line") for h in sorted(syncs, key=lambda h: -h.calls)[:10]],
            syncs=total_syncs,
            basis="run",
        )
        c.calls = total_syncs
        out.append(c)

    # TLR03: host-to-device copies from pageable memory
    pageable = [h for h in idx.by_source("probe") if h.kind == "HtoD pageable"]
    traced = int(session.torch_window.get("pageable_copies") or 0)
    if pageable or traced:
        calls = sum(h.calls for h in pageable)
        if pageable:
            top = max(pageable, key=lambda h: h.total_s)
            path, line = top.path, top.line
        else:
            path, line = session.resolve(str(session.meta.get("script") or "")), 1
        msg = (
            f"{calls} host-to-device copies from pageable (unpinned) memory"
            + (f"; {traced} pageable memcpys in the torch.profiler window" if traced else "")
        )
        c = Correlated(
            finding=_runtime_finding("TLR03", msg, path, line, cwd),
            origin="runtime",
            evidence=[Evidence.of(h, "line") for h in pageable],
            basis="probe" if pageable else "run",
        )
        c.calls = calls
        c.total_s = c.observed_s = sum(h.total_s for h in pageable)
        c.share = c.observed_s / run_s if (run_s and pageable) else None
        out.append(c)

    # TLR04: GPU idle in the window
    idle = session.torch_window.get("gpu_idle_share")
    if idle is not None and idle >= GPU_IDLE_THRESHOLD:
        if fetch_lines:
            path, line = max(fetch_lines, key=lambda k: sum(h.total_s for h in fetch_lines[k]))
        else:
            path, line = session.resolve(str(session.meta.get("script") or "")), 1
        window_s = float(session.torch_window.get("window_s") or 0.0)
        msg = f"The GPU was idle {idle:.0%} of the torch.profiler window ({_fmt_s(window_s)})"
        c = Correlated(finding=_runtime_finding("TLR04", msg, path, line, cwd), origin="runtime", basis="run")
        c.observed_s = idle * window_s
        c.share = idle
        out.append(c)

    # TLR05-TLR08, TLR17: what the pattern probes recorded (correlate/patterns.py)
    out.extend(pattern_findings(session, _maker(cwd))[0])
    # TLR09: memory the allocator gave back and faulted in again (correlate/allocator.py)
    out.extend(churn_findings(session, _maker(cwd))[0])
    # TLR14, TLR15: torch.compile's graph breaks and recompilations (correlate/compiled.py)
    out.extend(compile_findings(session, _maker(cwd)))
    return out


def _maker(cwd: str):  # type: ignore[no-untyped-def]
    return lambda code, message, path, line, hint: _runtime_finding(code, message, path, line, cwd, hint)


def runtime_skipped(session: ProfileSession) -> dict[str, str]:
    """Runtime patterns this run could not show, each with the reason (no GPU ...)."""
    skipped = pattern_findings(session, _maker(session.cwd))[1]
    record = session.meta.get("allocator")
    # an old session has no record; a run under the bar has nothing to say
    reason = unmeasured_reason(record, float(session.script_s or 0.0)) if isinstance(record, dict) and record else None
    if reason:
        skipped["TLR09"] = reason
    return skipped


