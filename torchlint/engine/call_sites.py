"""Findings of another file that a given file's calls put into a step, reported at the call.

pre-commit passes only the changed files and an editor lints one buffer. A change that
makes an unchanged helper run every step (``train.py`` now calls ``acc(out)`` in its
training loop, and ``acc`` reads ``.item()``) changes only the caller: so each per-step
finding of a file that is not given, made per-step by a hot call site in a given file, is
reported on that call site too, the helper's line as its related location. When the
helper is given as well (``check .``), its own finding is reported and the call site's is
not: one problem, one finding, as ruff reports it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from pathlib import Path

from torchlint import catalogue
from torchlint.analysis.join_steps import StepInfo, Steps
from torchlint.config import Config
from torchlint.engine.isolate import guarded_stage
from torchlint.engine.results import FileResult, InternalError
from torchlint.engine.settle import step_loops_of, subclass_holds
from torchlint.engine.settle_places import per_step_findings
from torchlint.engine.source import Source
from torchlint.engine.suppress import PerFileIgnores, is_suppressed, selected_codes
from torchlint.findings import IMPACT_RANK, Finding, Location

# What a file of the project that could not be settled costs the given files.
ELSEWHERE_LOST = "the given files' calls into it report none of its per-step findings"


def stepped_elsewhere(steps: Steps, displays: set[str], given: set[str]) -> set[str]:
    """The files (absolute paths, not in ``given``) holding a function that runs every
    step because of a hot call site in a file named in ``displays``."""
    return {
        path for path, functions in steps.items()
        if path not in given and any(site.path in displays for info in functions.values() for site in info.sites)
    }


def at_call_sites(others: Iterable[FileResult], steps: Steps, displays: set[str], *, errors: list[InternalError] | None = None,
                  debug: bool = False) -> list[Finding]:
    """For each hot call site in a file named in ``displays`` and each rule, one finding
    that stands for the per-step findings of ``others`` (results of files not given,
    conditional findings unsettled) that the call puts into the step. Each other file is
    settled under its own guard: one that raises adds nothing and an error to ``errors``."""
    grouped: dict[tuple[Location, str], list[Finding]] = {}
    for other in others:
        if other.summary is None:
            continue
        stepped = guarded_stage(other, "call sites", debug, lambda: list(_stepped(other, steps)), ELSEWHERE_LOST)
        if stepped is None:
            if errors is not None:
                errors.extend(other.errors[-1:])
            continue
        for finding, info in stepped:
            for site in info.sites:
                if site.path in displays and site.path != finding.path:
                    grouped.setdefault((site, finding.code), []).append(finding)
    return sorted((_at(site, found) for (site, _), found in grouped.items()), key=Finding.sort_key)


def _stepped(other: FileResult, steps: Steps) -> Iterator[tuple[Finding, StepInfo]]:
    path = other.summary.path  # type: ignore[union-attr]
    project = getattr(steps, "project", None)
    if any(c.subclass_of and not subclass_holds(project, path, c.subclass_of) for c in other.conditional):
        other = replace(other, conditional=[c for c in other.conditional if not c.subclass_of or subclass_holds(project, path, c.subclass_of)])
    return per_step_findings(other, steps.get(path, {}), step_loops_of(steps, path), getattr(steps, "host_params", frozenset()))


def _at(site: Location, found: list[Finding]) -> Finding:
    found = sorted(found, key=Finding.sort_key)
    worst = min(found, key=lambda f: IMPACT_RANK.get(f.impact, 3))
    lines = ", ".join(f"{f.path}:{f.line}" for f in found)
    return Finding(
        worst.code, worst.name, f"this call runs {lines} every step: {worst.message}", site, worst.fix_hint,
        related=tuple(f.location for f in found), impact=worst.impact, impact_reason=worst.impact_reason,
    )


def for_file(display: str, given: str, steps: Steps, results_of: Callable[[set[str]], list[FileResult]],
             errors: list[InternalError] | None = None, debug: bool = False) -> list[Finding]:
    """The findings at the call sites of the one given file ``display`` (its summary named
    ``given``); ``results_of`` gives the results of other files by absolute path
    (``Context.full_results``); ``errors`` takes those of the files that could not be settled."""
    elsewhere = stepped_elsewhere(steps, {display}, {given})
    return at_call_sites(results_of(elsewhere), steps, {display}, errors=errors, debug=debug) if elsewhere else []


def kept(findings: list[Finding], config: Config, path: Path, source: Source | None) -> list[Finding]:
    """What the caller's file reports of ``findings`` (its own call sites): the rules its
    config selects for it, less its per-file ignores and its ``# noqa`` comments."""
    known = catalogue.defaults()
    codes = selected_codes(config, known) - PerFileIgnores(config, known).ignored_codes(path)
    return [f for f in findings if f.code in codes and not is_suppressed(f, source)]


__all__ = ["at_call_sites", "for_file", "kept", "stepped_elsewhere"]
