"""Where a cold `torchlint check` spends its CPU, stage by stage, beside the parse floor.

    python benchmarks/engine_stages.py [PATH ...] [--repeat 3]

One core, in one process, so that the stages can be told apart: the same files are
checked cold (no cache, every default rule, the project join), alternated with a bare
``libcst.parse_module`` of the same files (the parse floor), each round timed with a CPU
clock (``time.process_time``: these machines are shared, and a wall clock counts the
neighbours' work). In the check, each stage's entry points are wrapped with a timer that
pauses the stage it interrupts, so every row is the stage's *own* CPU time and the rows add
up to the check (cProfile cannot do this fairly: its cost per call falls on the
Python-heavy stages, not on libcst's native parser). The wrappers cost a few microseconds
per call; the unwrapped check beside them says how much. Each row's "calls" counts its timed
calls, and "less timers" takes their cost out (what the timers add to the whole check, over
all timed calls): an analysis asked in many small calls (bindings' lookups, a memo's hits) is
mostly its timers in the first column, not its own work.

Stages: discover (files and configs), read (bytes, decoding), prefilter (the quick parse of
a file that never mentions torch), parse, walk (analysis/tree.py), imports, one row per
analysis module (every method of its classes: the work an analysis does when first asked
and each answer after), checks (the checks themselves, and FileContext's own queries), positions, summary (the step
summary), join, settle, report (the default format with its source lines), engine (what is
left: the pool, suppression, cache keys).

The budget (issue 34): the cold check at most 1.3x the parse floor. The target line says how
far the stages past the parse are from the 0.3x it leaves them, each row's "of budget"
its part of that 0.3x (timers included, so the rows overstate the Python-heavy stages), and
its "spread" the lowest and highest ratio over the rounds (each to its own round's floor).
"""

from __future__ import annotations

import argparse
import gc
import importlib
import statistics
import sys
import time
from collections import defaultdict
from functools import cached_property
from pathlib import Path
from typing import Any, Callable

import libcst

from torchlint.config import Resolver
from torchlint.engine.discover import discover
from torchlint.engine.lint import lint_paths

_clock = time.process_time
_TARGET = 1.3  # the cold check's CPU, every default rule and the project join, over the parse floor's


class StageClock:
    """Exclusive CPU time per stage: entering a stage pauses the one it interrupts."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)  # timed calls per stage (each costs `timer_cost()`)
        self.stack: list[str] = ["engine"]
        self.since = _clock()

    def _switch(self) -> None:
        now = _clock()
        self.seconds[self.stack[-1]] += now - self.since
        self.since = now

    def wrap(self, stage: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            self._switch()
            self.calls[stage] += 1
            self.stack.append(stage)
            try:
                return fn(*args, **kwargs)
            finally:
                self._switch()
                self.stack.pop()

        timed.__wrapped__ = fn  # type: ignore[attr-defined]
        return timed

    def close(self) -> dict[str, float]:
        self._switch()
        return dict(self.seconds)


def _replace_everywhere(orig: Any, new: Any) -> None:
    """``orig`` is imported by name into several modules: each of them gets ``new``."""
    for name, module in list(sys.modules.items()):
        if name.startswith("torchlint") and module is not None:
            for attr, value in list(vars(module).items()):
                if value is orig:
                    setattr(module, attr, new)


def instrument(clock: StageClock) -> Callable[[], None]:
    """Wrap each stage's entry points; returns the function that puts them back."""
    importlib.import_module("torchlint.engine.linter")  # (every module whose names are patched)
    from torchlint.analysis import join, light, names, positions, steps, tree
    from torchlint.engine import discover as discover_mod, prefilter, runner, settle, source
    try:
        parse = importlib.import_module("torchlint.engine.parse")
    except ImportError:  # a tree from before the parse left runner.py (8657dcbd), as engine_stages_ab.py may be given
        parse = runner

    undo: list[Callable[[], None]] = []

    def function(stage: str, orig: Any) -> None:
        new = clock.wrap(stage, orig)
        _replace_everywhere(orig, new)
        undo.append(lambda: _replace_everywhere(new, orig))

    def method(stage: str, cls: type, name: str) -> None:
        orig = cls.__dict__[name]
        setattr(cls, name, clock.wrap(stage, orig))
        undo.append(lambda: setattr(cls, name, orig))

    function("discover", discover_mod.discover)
    function("read", source.read_source)
    function("prefilter", prefilter.quick_parse)
    function("parse", parse.parse)
    function("summary", light.light_summary)
    function("positions", positions.compute_spans)
    function("join", join.join)
    function("settle", settle.settle_steps)
    method("walk", tree.Tree, "__init__")
    method("imports", names.Imports, "__init__")
    function("checks", runner.run_checks)
    for name in ("__init__", "hot_call_nodes", "summary"):
        method("summary", steps.StepSummarizer, name)
    for module_name, module in list(sys.modules.items()):
        # Every method of the analyses' classes: an analysis does its work when it is first
        # asked, so its construction alone says little. Positions, the tree and the summary
        # have their rows already; FileContext's queries are the checks'.
        if not module_name.startswith("torchlint.analysis.") or module is None:
            continue
        stage = "analysis:" + module_name.rsplit(".", 1)[-1]
        if stage in ("analysis:tree", "analysis:positions", "analysis:steps", "analysis:context",
                     "analysis:join", "analysis:light", "analysis:summary"):
            continue
        for cls in [v for v in vars(module).values() if isinstance(v, type) and v.__module__ == module_name]:
            for name, attr in list(vars(cls).items()):
                if isinstance(attr, cached_property):
                    orig_func = attr.func
                    attr.func = clock.wrap(stage, orig_func)
                    undo.append(lambda prop=attr, orig_func=orig_func: setattr(prop, "func", orig_func))
                elif callable(attr) and not isinstance(attr, type) and hasattr(attr, "__code__"):
                    method(stage, cls, name)
    return lambda: [u() for u in reversed(undo)] and None


def parse_floor(files: list[Path]) -> float:
    t0 = _clock()
    for path in files:
        gc.disable()
        try:
            libcst.parse_module(path.read_bytes())
        except Exception:
            pass
        gc.enable()
        gc.collect(0)
    return _clock() - t0


def report(result: Any) -> str:
    """The report a user reads (the default format, with its source lines)."""
    from torchlint.cli.check_output import SourceLines
    from torchlint.report import ReportContext, render

    lines = SourceLines()
    return render("full", result.findings, ReportContext(files_checked=result.files_checked, line_text=lines, file_line=lines.file_line))


def check(paths: list[Path]) -> float:
    t0 = _clock()
    report(lint_paths(paths, Resolver(), jobs=1, cache=None, project=True))
    return _clock() - t0


def staged_check(paths: list[Path], calls: dict[str, int] | None = None) -> dict[str, float]:
    """Each stage's own CPU seconds; ``calls``, when given, is filled with its timed calls."""
    clock = StageClock()
    restore = instrument(clock)
    try:
        clock.wrap("report", report)(lint_paths(paths, Resolver(), jobs=1, cache=None, project=True))
    finally:
        restore()
    if calls is not None:
        calls.update(clock.calls)
    return clock.close()


def timer_cost(n: int = 200_000) -> float:
    """The CPU seconds one timed call adds to the staged check (the wrapper and its two
    switches), measured on a no-op: a stage answered in many small calls (a memo's hits)
    carries its calls times this in its row, which the unwrapped check does not pay."""
    clock = StageClock()

    def noop() -> None:
        return None

    timed = clock.wrap("noop", noop)
    t0 = _clock()
    for _ in range(n):
        noop()
    bare = _clock() - t0
    t0 = _clock()
    for _ in range(n):
        timed()
    return max(0.0, (_clock() - t0 - bare) / n)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="*", type=Path)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    paths = args.paths or [Path(__import__("importlib").util.find_spec("torch").origin).parent / "nn"]
    files = [f.path for f in discover(paths, Resolver())]
    print(f"{len(files)} files, {sum(len(p.read_bytes().splitlines()) for p in files)} lines, one core, CPU seconds")
    floors, checks, rounds, calls = [], [], [], []  # type: ignore[var-annotated]
    check(paths)  # imports and first-use caches out of the way
    for _ in range(args.repeat):  # alternated: the floor, the check, the staged check
        floors.append(parse_floor(files))
        checks.append(check(paths))
        calls.append({})
        rounds.append(staged_check(paths, calls[-1]))
    bare_cost = timer_cost()
    floor, total = statistics.median(floors), statistics.median(checks)
    staged = statistics.median(sum(r.values()) for r in rounds)
    print(f"parse floor {floor:.3f} s (rounds {', '.join(f'{f:.3f}' for f in floors)})")
    print(f"check       {total:.3f} s = {total / floor:.2f}x the parse (rounds "
          f"{', '.join(f'{c / f:.2f}x' for c, f in zip(checks, floors))}); staged {staged:.3f} s "
          f"({staged / total - 1:+.1%} for the timers)")
    print(f"target      at most {_TARGET:.2f}x the parse (issue 34): the stages past the parse have "
          f"{(_TARGET - 1) * floor:.3f} s, they take {total - floor:.3f} s here "
          f"({(total - floor) / ((_TARGET - 1) * floor):.1f}x their budget)")
    stages = sorted({s for r in rounds for s in r}, key=lambda s: -statistics.median(r.get(s, 0.0) for r in rounds))
    # "of budget": the stage's part of what the target leaves past the parse (timers included);
    # "spread": the lowest and highest of the rounds' ratios, each to the floor measured beside it;
    # "calls": its timed calls, and "less timers" its CPU less their cost (an estimate: a stage
    # asked in many small calls is mostly the timers' in the first column)
    # In place, a timed call costs more than on a no-op (its frames and switches among the check's
    # own work): what the timers add to the whole check, over its timed calls, is that cost.
    timed_calls = statistics.median(sum(c.values()) for c in calls)
    cost = max(bare_cost, (staged - total) / timed_calls) if timed_calls else bare_cost
    print(f"timers      {cost * 1e6:.2f} us per timed call in place ({bare_cost * 1e6:.2f} us on a no-op), "
          f"{timed_calls:.0f} calls: the rows less them are an estimate")
    print(f"\n{'stage':28} {'CPU s':>8} {'x parse':>8} {'spread':>11} {'share':>7} {'of budget':>10} {'calls':>9} {'less timers':>11}")
    for stage in stages:
        seconds = statistics.median(r.get(stage, 0.0) for r in rounds)
        ratios = [r.get(stage, 0.0) / f for r, f in zip(rounds, floors)]
        budget = "" if stage == "parse" else f"{seconds / ((_TARGET - 1) * floor):10.0%}"
        count = statistics.median(c.get(stage, 0) for c in calls)
        print(f"{stage:28} {seconds:8.3f} {seconds / floor:8.2f} {min(ratios):5.2f}-{max(ratios):<5.2f} {seconds / staged:7.1%} {budget:>10} "
              f"{count:9.0f} {max(0.0, seconds - count * cost):11.3f}")


if __name__ == "__main__":
    main()
