"""What a step runs every N steps: the functions called only under a recurring guard (a modulo
of the step counter, a wall-clock timer) of a step that also runs outside it (``if step % 100 ==
0: evaluate()`` in a training loop), and what they call, in any file of the project. Their
findings take the every-N tier and words (``FileSummary.every_n``, joined here), as the same
code written in the guarded branch itself does, neither vanishing nor every step."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from torchlint.analysis.multiplicity import LOOP_WORDS, Where
from torchlint.analysis.project import Project
from torchlint.analysis.summary import CallSite
from torchlint.findings import Location


@dataclass(frozen=True, slots=True)
class EveryN:
    """How a function runs every N steps: from which step, where, and how often the guard says."""

    origin: str  # "a training loop"
    site: Location | None  # the guarded call in the step (or the step's own call site)
    words: str  # "every 100 steps (`step % 100`)"
    via: str = ""  # the function whose guarded call it is, or that calls it on every run

    def text(self, key: str, here: str) -> str:
        """"`evaluate()` (called every 100 steps (`step % 100`) from a training loop at line 31)"."""
        where = ""
        if self.site is not None:
            where = f" at line {self.site.line}" if self.site.path == here else f" at {self.site.path}:{self.site.line}"
        via = f"called from `{self.via.partition('#')[0]}()`, " if self.via else ""
        return f"`{key.partition('#')[0]}()` ({via}run {self.words} from {self.origin}{where})"


def every_n_reach(project: Project, steps: Mapping[str, Mapping[str, Any]], step_loops: Mapping[tuple[str, str], Where],
                  calls_by_caller: Mapping[tuple[str, str], list[CallSite]]) -> dict[str, dict[str, EveryN]]:
    """File -> function key -> how it runs every N steps, for the functions no step runs every
    step (``steps``, the join's per-step reach) that a step calls under a recurring guard, and
    those they call on every run of theirs."""
    found: dict[str, dict[str, EveryN]] = {}
    work: deque[tuple[str, str, EveryN]] = deque()
    for path, summary in project.files.items():
        for call in summary.every_n:
            reach = _guarded_call(path, call, steps, step_loops)
            if reach is not None:
                work.extend((*callee, reach) for callee in project.callees(call.target, path) if callee != (path, call.caller))
    while work:
        path, key, reach = work.popleft()
        if key in steps.get(path, {}) or key in found.get(path, {}):
            continue  # every step already (its findings are that step's), or reached already
        found.setdefault(path, {})[key] = reach
        for call in calls_by_caller.get((path, key), ()):
            if call.branch or call.opt_in:
                continue  # run only where a parameter is left out or passed: no every-N caller is seen to
            work.extend((*callee, EveryN(reach.origin, reach.site, reach.words, key)) for callee in project.callees(call.target, path))
    return found


def _guarded_call(path: str, call: CallSite, steps: Mapping[str, Mapping[str, Any]], step_loops: Mapping[tuple[str, str], Where]) -> EveryN | None:
    """The every-N reach of what ``call`` runs: from its own hot loop, from the step loop around
    it, or from the reach of its caller where that is per-step; None elsewhere, and every N
    epochs (an epoch loop's guard counts epochs, not steps)."""
    if call.loop is not None:
        return EveryN(LOOP_WORDS[call.loop], call.location, call.every) if call.loop is not Where.EPOCH else None
    where = step_loops.get((path, call.within)) if call.within else None
    if where is not None:
        return EveryN(LOOP_WORDS[where], call.location, call.every) if where is not Where.EPOCH else None
    info = steps.get(path, {}).get(call.caller) if call.caller else None
    if info is None or info.where is Where.EPOCH:
        return None
    return EveryN(info.origin, info.sites[0] if info.sites else None, call.every, call.caller)
