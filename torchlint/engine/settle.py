"""The project-wide join over per-file summaries, and the conditional findings it settles."""

from __future__ import annotations

from dataclasses import replace

from torchlint.analysis.project import StepInfo, Steps, join
from torchlint.engine.results import FileResult
from torchlint.findings import Finding

# checks.base.STEP_PLACEHOLDER, repeated here because checks/ imports libcst and settling
# runs on cached results too (tests/test_startup.py keeps the two equal).
STEP_PLACEHOLDER = "\ue000step\ue000"


def settle_steps(results: list[FileResult], steps: Steps | None = None) -> Steps:
    """The project-wide join (made from the results' summaries unless ``steps`` is given):
    each conditional finding whose function runs every step becomes a finding, its message
    saying where it runs and its ``related`` places carrying the hot call sites."""
    if steps is None:
        steps = join(r.summary for r in results if r.summary is not None)
    for file_result in results:
        if not file_result.conditional or file_result.summary is None:
            file_result.conditional = []
            continue
        per_step = steps.get(file_result.summary.path, {})
        for condition in file_result.conditional:
            info = per_step.get(condition.key)
            if info is None or (condition.device_bound and info.host_only):
                continue
            if condition.needs_tensor and not info.tensor_args:
                continue  # `if isinstance(v, Tensor): v.item()` and every caller passes Python values
            file_result.findings.append(_per_step_finding(condition.finding, condition.key, info))
        file_result.conditional = []
        file_result.findings.sort(key=Finding.sort_key)
    return steps


def _per_step_finding(finding: Finding, key: str, info: StepInfo) -> Finding:
    related = finding.related + tuple(site for site in info.sites if site not in finding.related and site != finding.location)
    return replace(finding, message=finding.message.replace(STEP_PLACEHOLDER, info.text(key, finding.location.path)), related=related)
