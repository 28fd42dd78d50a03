"""Which findings an experiment can switch off, and how.

One :class:`Candidate` per variant to try. A finding gets a runtime switch when
one exists (no source change), else a source variant (the engine's autofix or a
mechanical rewrite, made later by :mod:`torchlint.experiment.variants`), else a
reason why it is not tried. Remedies that cannot act on this machine are not
tried either: without CUDA, device syncs, copies, pinned memory, cuDNN and
tensor cores have nothing to act on, so a run could only measure noise.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from torchlint.findings import Finding

#: advice values for DataLoader workers (rules/TL201). 4 is the count estimate.py's
#: expected saving assumes (``W``), so it is always tried: a loader that waits (files,
#: sleeps) gains from more workers than cores, and a measurement of fewer workers than
#: the figure assumes could not confirm or refute it.
WORKER_VALUES = (2, 4)

_NO_GPU = "needs a CUDA device: {what} has nothing to act on without one"
GPU_ONLY = {
    "TL101": "a device sync",
    "TL102": "a device-to-host copy",
    "TL103": "a device sync",
    "TL104": "a device sync",
    "TL105": "a device sync",
    "TL107": "a device sync",
    "TL110": "a host-to-device copy",
    "TL113": "a host-to-device copy",
    "TL114": "a host-to-device copy of the index",
    "TL111": "a host-to-device copy",
    "TL112": "a device round trip",
    "TL202": "pinned memory (it speeds host-to-device copies)",
    "TL402": "tensor-core alignment",
    "TL403": "cudnn.benchmark",
    "TL404": "channels_last (a tensor-core layout)",
    "TL501": "mixed precision (autocast for the GPU)",
    "TL502": "the CUDA amp API",
    "TLR02": "a device sync",
    "TLR03": "pinned memory",
    "TLR04": "GPU idle time",
    "TLR06": "a host-to-device copy",
    "TLR07": "tensor-core alignment",
    "TLR08": "TF32 (a tensor-core mode)",
}
NOT_SWITCHABLE = {
    "TL304": "no mechanical rewrite: inference_mode changes which tensors can be used later",
    "TL503": "no mechanical rewrite for TorchScript",
    "TL601": "needs a distributed (multi-process) run",
    "TL602": "needs a distributed (multi-process) run",
}


@dataclass(slots=True)
class Candidate:
    finding: Finding  # path is absolute
    label: str  # what is switched off ("num_workers=2, persistent_workers=True")
    kind: str  # "runtime" | "source" | "none"
    switches: list[dict[str, Any]] = field(default_factory=list)
    skip: str | None = None  # why it is not tried
    priority: float = 0.0  # observed cost: what to try first within the budget


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def worker_values(cores: int) -> list[int]:
    """The advice's worker counts: 2 where a core is spare, and always the expected
    figure's 4 (issue 28: on 2 cores the experiment tried 2 where the text said 4)."""
    return sorted({n for n in WORKER_VALUES if n == max(WORKER_VALUES) or n < cores}) if cores >= 1 else []


def _span(f: Finding) -> list[int]:
    end = f.location.end_line if f.location.end_line is not None else f.line
    return [f.line, max(end, f.line)]


def candidates_for(finding: Finding, *, cuda: bool, cores: int, priority: float = 0.0) -> list[Candidate]:
    code = finding.code

    def skip(reason: str) -> list[Candidate]:
        return [Candidate(finding, "", "none", skip=reason, priority=priority)]

    if code in GPU_ONLY and not cuda:
        return skip(_NO_GPU.format(what=GPU_ONLY[code]))
    if code in NOT_SWITCHABLE:
        return skip(NOT_SWITCHABLE[code])
    if code == "TL201":
        values = worker_values(cores)
        return [
            Candidate(
                finding,
                f"num_workers={n}, persistent_workers=True",
                "runtime",
                [{"target": "DataLoader", "path": finding.path, "lines": _span(finding),
                  "set": {"num_workers": n, "persistent_workers": True}}],
                priority=priority,
            )
            for n in values
        ]
    if code == "TL202":
        return [Candidate(finding, "pin_memory=True", "runtime",
                          [{"target": "DataLoader", "path": finding.path, "lines": _span(finding),
                            "set": {"pin_memory": True}}], priority=priority)]
    if code == "TL303":
        return [Candidate(finding, "zero_grad(set_to_none=True)", "runtime",
                          [{"target": "zero_grad", "path": finding.path, "lines": _span(finding)}],
                          priority=priority)]
    if code == "TL403":
        return [Candidate(finding, "torch.backends.cudnn.benchmark = True", "runtime",
                          [{"target": "cudnn.benchmark", "path": finding.path, "lines": _span(finding)}],
                          priority=priority)]
    if code in ("TL306", "TLR17"):  # process-wide: every request to turn it on is refused
        return [Candidate(finding, "anomaly detection off", "runtime", [{"target": "anomaly"}], priority=priority)]
    if code == "TLR05":  # the optimizer stepped at its step() line (related, when the finding is at its constructor) runs foreach
        stepped = finding.related[0] if finding.related else finding.location
        return [Candidate(finding, "foreach=True", "runtime",
                          [{"target": "foreach", "path": stepped.path, "lines": [stepped.line, stepped.line]}], priority=priority)]
    if code == "TLR08":
        return [Candidate(finding, "allow_tf32 = True", "runtime", [{"target": "tf32"}], priority=priority)]
    if code == "TLR09":  # the process-wide malloc thresholds, as the hint's environment variables set them
        return [Candidate(finding, "glibc malloc keeps freed memory (mallopt)", "runtime", [{"target": "malloc"}],
                          priority=priority)]
    if code == "TLR01":
        return skip("its remedy is the DataLoader's (TL201 at the loader's construction)")
    if code.startswith("TLR"):
        return skip("a runtime finding with no single call to switch")
    # anything else: a source variant, if the engine or a mechanical rewrite can make one
    return [Candidate(finding, "source", "source", priority=priority)]


def plan(findings: list[tuple[Finding, float]], *, cuda: bool, cores: int | None = None) -> list[Candidate]:
    """Candidates for ``(finding with an absolute path, observed seconds)`` pairs, the
    ones with the most observed time first (only the order of trying; never a rank)."""
    cores = usable_cores() if cores is None else cores
    out: list[Candidate] = []
    for finding, observed in findings:
        out.extend(candidates_for(finding, cuda=cuda, cores=cores, priority=float(observed or 0.0)))
    out.sort(key=lambda c: (c.skip is not None, -c.priority))
    return out
