"""What the step summary's call places cost where the join never reads them (issue 34).

    python benchmarks/place_oracle.py PATH [--rounds 4]

The summary records each call site's place in its step (``CallSite.repeats`` and
``position``, its costliest facts: ``steps._place``); the join reads them only where it
resolves the call's target to a project function (``Project.callees``). One core, one
process, the project join on: a first check records which sites resolve; then, alternated
each round with the plain check (order flipped every round) and beside the parse floor:

- ``oracle``: the places of the sites that do not resolve left out: the most that a summary
  placing only what the join follows can save (findings may move: it knows the answer);
- ``names``: a cheap filter the engine could apply before the join: an absolute import
  (``("import", 0, "einops.rearrange")``) none of whose dotted parts is the last part of a
  project module's name (a file's stem, a package's directory) can never split into a
  project module (``Project._split``, ``_split_rooted_elsewhere``), so a call of it, or of a
  method of an object of a class so imported or made by a factory so imported
  (``("object", ("import", 0, "fastapi.FastAPI"), "get")``), is left unplaced.
  Its findings are compared with the plain check's (they must not move).

Prints the sites each variant leaves out, and per variant the whole check and the summary,
step_position and places stages as multiples of the parse floor (medians over the rounds).
"""

from __future__ import annotations

import argparse
import os
import statistics
from dataclasses import replace
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import engine_stages as es  # noqa: E402 - the same check, floor and stage timers

from torchlint.analysis import steps  # noqa: E402
from torchlint.analysis.project import Project  # noqa: E402
from torchlint.config import Resolver  # noqa: E402
from torchlint.engine.lint import lint_paths  # noqa: E402

_STAGES = ("summary", "analysis:step_position", "analysis:places")


class Variant:
    """Which call sites ``StepSummarizer._call_site`` leaves unplaced (unit kept) in this run."""

    def __init__(self) -> None:
        self.mode = "base"
        self.resolving: set[tuple[str, int, Any]] = set()  # (file, call's pre-order index, target)
        self.module_parts: set[str] = set()  # the last part of every project module's name
        self.left_out = 0

    def unplaced(self, path: str, order: int, target: Any) -> bool:
        if self.mode == "oracle":
            return (path, order, target) not in self.resolving
        if self.mode == "names":
            dotted = _absolute_import(target[1] if target[0] == "object" else target)
            return dotted is not None and not set(dotted.split(".")) & self.module_parts
        return False


def _absolute_import(ref: Any) -> str | None:
    """The absolute import a call's target, or the class of the object it calls, is found through
    alone: ``("import", 0, name)``, or what a factory so imported returns (``Project.class_of``)."""
    if ref[0] == "returned":
        ref = ref[1]
    return ref[2] if ref[0] == "import" and ref[1] == 0 else None


def install(variant: Variant, seen: dict[tuple, tuple[str, int, Any]], projects: list[Project]) -> None:
    original_summary, original_site, original_init = steps.StepSummarizer.summary, steps.StepSummarizer._call_site, Project.__init__

    def summary(self: steps.StepSummarizer, path: str, locate: Any) -> Any:
        self._bench_path = path  # type: ignore[attr-defined]
        return original_summary(self, path, locate)

    def call_site(self: steps.StepSummarizer, caller: str, target: Any, loop: Any, call: Any, within: str, locate: Any) -> Any:
        key = (getattr(self, "_bench_path", ""), self.ctx.tree.order.get(id(call), -1), target)
        if id(call) not in self._places and variant.unplaced(*key):
            hot = self.ctx.loops.local_hot_loop(call)  # the unit as `_place` finds it: the join reads every call's
            unit = (steps.FULL_BATCH if self.ctx.loops.full_batch(hot) else self.ctx.places.step_unit(hot)) if hot is not None else "step"
            self._places[id(call)] = ((), None, unit)
            variant.left_out += 1
        site = original_site(self, caller, target, loop, call, within, locate)
        seen[(key[0], site.caller, site.target, site.location, site.loop, site.within)] = key
        return site

    def init(self: Project, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        projects.append(self)

    steps.StepSummarizer.summary, steps.StepSummarizer._call_site, Project.__init__ = summary, call_site, init  # type: ignore[method-assign]


def findings(paths: list[Path]) -> list[str]:
    """Every finding in full (its impact, tier and related places), but the fix's nodes."""
    return sorted(repr(replace(f, fix=None)) for f in lint_paths(paths, Resolver(), jobs=1, cache=None, project=True).findings)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", type=Path)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    paths, files = [args.path], sorted(args.path.rglob("*.py"))
    variant, seen, projects = Variant(), {}, []  # type: ignore[var-annotated]
    install(variant, seen, projects)
    plain = findings(paths)
    project = projects[-1]
    for path, summary in project.files.items():
        for call in (*summary.calls, *summary.guarded):
            key = seen.get((path, call.caller, call.target, call.location, call.loop, call.within))
            if key is not None and project.callees(call.target, path):
                variant.resolving.add(key)
    variant.module_parts = {os.path.basename(os.path.dirname(p)) if p.endswith("__init__.py") else os.path.basename(p)[:-3] for p in project.files}
    print(f"{len(files)} files, {len(seen)} call sites the summary makes, {len(variant.resolving)} of them resolved by the join")
    for mode in ("oracle", "names"):
        variant.mode, variant.left_out = mode, 0
        moved = findings(paths) != plain
        print(f"{mode}: {variant.left_out} sites left unplaced; findings {'MOVED' if moved else 'identical'}")
    results: dict[str, list[tuple[float, float, dict[str, float]]]] = {"base": [], "oracle": [], "names": []}
    for round_ in range(args.rounds):
        order = list(results) if round_ % 2 == 0 else list(reversed(results))
        floor = es.parse_floor(files)
        for mode in order:
            variant.mode = mode
            results[mode].append((floor, es.check(paths), es.staged_check(paths)))
        print(f"round {round_ + 1}: " + ", ".join(f"{m} {r[-1][1] / r[-1][0]:.2f}x" for m, r in results.items()), flush=True)
    print(f"\n{'variant':8} {'check':>7} " + " ".join(f"{s.split(':')[-1]:>14}" for s in _STAGES) + "   (x parse, medians)")
    for mode, rounds in results.items():
        ratio = [statistics.median(s.get(stage, 0.0) / f for f, _, s in rounds) for stage in _STAGES]
        print(f"{mode:8} {statistics.median(c / f for f, c, _ in rounds):7.3f} " + " ".join(f"{r:14.3f}" for r in ratio))


if __name__ == "__main__":
    main()
