"""The join's call-site sums: how many times per step a function runs, from every sure call site that reaches it within one step."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from torchlint.analysis.arms_counts import Arms, arms_count, arms_sum
from torchlint.analysis.join_loops import _loop_where
from torchlint.analysis.join_steps import Steps, within_step
from torchlint.analysis.multiplicity import CALL_SITE, FEW_ITEMS, LOOP_WORDS, Multiplicity, Repeat, Where
from torchlint.analysis.project import Project
from torchlint.analysis.summary import CallSite
from torchlint.findings import Location

_DEPTH = 100  # calls deep from a step: past it, what a function runs is not counted
Function = tuple[str, str]  # (file, function key); a step's own root is ("", its group's key)


@dataclass
class _Step:
    """One step of the project (a loop's body, a framework's hook): the functions its body calls, by call site."""

    where: Where
    unit: str
    name: str  # the function holding the loop ("" at a module's top level)
    site: Location | None
    calls: dict[Function, list[Arms]] = field(default_factory=dict)


def sum_call_sites(project: Project, steps: Steps, calls_by_caller: dict[Function, list[CallSite]],
                   loops_by_file: dict[str, dict[str, str]], step_loops: dict[tuple[str, str], Where]) -> None:
    """Each function of ``steps`` reached once per step (no loop between it and its step) whose sure
    call sites in one step add up to two or more: that many times per step (``Repeat.calls`` says from
    where); a sampling step's count where the function's phase calls it once and the sampling step
    runs it more often (``Multiplicity.outweighs``)."""
    found: dict[Function, list[tuple[_Step, int, tuple[tuple[str, int, int], ...]]]] = {}
    edges: dict[Function, dict[Function, list[Arms]]] = {}
    runs: dict[Function, dict[Function, int] | None] = {}
    for step in _steps(project, steps, loops_by_file, step_loops):
        for function, (count, callers) in _counts(project, steps, step, calls_by_caller, edges, runs).items():
            if count >= 2:
                found.setdefault(function, []).append((step, count, callers))
    for (path, key), counts in found.items():
        known = steps.get(path, {}).get(key)
        if known is None or known.hook or known.per_step.repeats:
            continue  # (a loop between it and the step: its loop's count stands, as the spread found it)
        same = [entry for entry in counts if entry[0].where is known.where]
        if same:
            step, count, callers = max(same, key=lambda entry: entry[1])
            steps[path][key] = replace(known, per_step=Multiplicity((_summed(count, callers),), known.per_step.unit))
            continue
        step, count, callers = max(counts, key=lambda entry: (Multiplicity((Repeat(CALL_SITE, entry[1]),), entry[0].unit)._weight()))
        summed = Multiplicity((_summed(count, callers),), step.unit)
        if summed.outweighs(known.per_step):  # (a sampling step runs it 8 times per denoising step, the training step once)
            steps[path][key] = replace(known, where=step.where, origin=LOOP_WORDS[step.where], per_step=summed, guard="", distributed_only=False,
                                       sites=(step.site,) if step.site is not None else known.sites, via=callers[0][0] if callers[0][0] != key else "")


def _summed(count: int, callers: tuple[tuple[str, int, int], ...]) -> Repeat:
    """The repeat ``count`` sure calls in one step make. Up to ``FEW_ITEMS`` are a few, as a loop over a
    few fixed items is: the calls' reads often sit side by side (ConvNeXt's `update(class_acc=...)` then
    `update(grad_norm=...)`, right after the step's synchronize), and after the first each waits only for
    its own small kernels; past that, the waits add up (DiT's ten uploads of a schedule per step)."""
    return Repeat(CALL_SITE, count, calls=callers, few=count <= FEW_ITEMS)


def _steps(project: Project, steps: Steps, loops_by_file: dict[str, dict[str, str]], step_loops: dict[tuple[str, str], Where]) -> list[_Step]:
    """The project's steps with their sure call sites: a hot loop's or step loop's calls, grouped by
    their loop and phase; and each framework hook, a step calling itself once."""
    found: dict[tuple[Where, str, str], _Step] = {}  # (phase, file, the loop): one step
    for path, summary in project.files.items():
        placed = [call for call in summary.calls if call.loop is not None or call.within and (path, call.within) in step_loops]
        for call, callee in _sure_sites(project, path, placed):
            where = call.loop if call.loop is not None else step_loops[(path, call.within)]
            if within_step(call.repeats, loops_by_file.get(path, {}))[0]:
                continue  # (in a loop within the step: its loop's count stands)
            phase = Where.EVAL if call.evaluates else _loop_where(where, project, callee)  # type: ignore[arg-type]
            unit = within_step(call.repeats, loops_by_file.get(path, {}))[1]
            if phase is Where.EPOCH:
                continue  # (an epoch loop's own calls run once per epoch, beside its steps: no count per step)
            step = found.setdefault((phase, path, str(call.hot_loop) if call.hot_loop >= 0 else call.within), _Step(phase, call.unit if unit == "step" else unit, call.caller, call.location))
            step.calls.setdefault(callee, []).append(call.arms)  # type: ignore[arg-type]
    for path, functions in steps.items():
        for key, info in functions.items():
            if info.hook and not info.sites and "#" not in key and key in project.files[path].functions:
                found.setdefault((info.where, path, key), _Step(info.where, info.per_step.unit, key, None, {(path, key): [()]}))
    return list(found.values())


def _sure_sites(project: Project, path: str, calls: list[CallSite]) -> list[tuple[CallSite, Function]]:
    """The calls of ``calls`` that run one function, each with it, where they run on every run of
    their caller's code there (their exclusive branches aside: ``CallSite.arms``); not a call that may
    run another function (a union of possibilities: the sites one call makes for a container's members
    or an attribute's branches, ``CallSite.node``), none, or only under a guard, a switch or a parameter
    passed or left out."""
    by_node: dict[int, list[tuple[CallSite, list[Function]]]] = {}
    for index, call in enumerate(calls):
        by_node.setdefault(call.node if call.node >= 0 else -1 - index, []).append((call, project.callees(call.target, path)))
    found = []
    for sites in by_node.values():
        callees = {callee for _, each in sites for callee in each}
        call = sites[0][0]
        if len(callees) == 1 and all(_unguarded(site) for site, _ in sites) and (path, call.caller) not in callees:
            found.append((call, next(iter(callees))))
    return found


def _unguarded(call: CallSite) -> bool:
    """Does ``call`` run on every run of its caller's code there, its ``if``/``else`` arms aside, and
    may it hand its callee a tensor (or nothing)? A call passing Python values only (dinov2's
    ``metric_logger.update(lr=lr)``) makes no read its callee does under ``isinstance(v, torch.Tensor)``."""
    if call.arms is None or call.opt_in or call.branch or call.switch or call.guard or call.every or call.flags or call.run_flags:
        return False
    return call.tensors or call.given == (0, ())


def _callees(project: Project, steps: Steps, function: Function, calls_by_caller: dict[Function, list[CallSite]],
             edges: dict[Function, dict[Function, list[Arms]]]) -> dict[Function, list[Arms]]:
    """The functions ``function`` calls on every run, outside its loops, by sure call sites; memoised in ``edges``."""
    known = edges.get(function)
    if known is None:
        known = edges[function] = {}
        if function[1] in steps.get(function[0], {}):  # (only what a step reaches: the rest runs in no step)
            outside = [call for call in calls_by_caller.get(function, ()) if not call.within]  # (in a loop of its own: the loop's count stands)
            for call, callee in _sure_sites(project, function[0], outside):
                known.setdefault(callee, []).append(call.arms)  # type: ignore[arg-type]
    return known


def _counts(project: Project, steps: Steps, step: _Step, calls_by_caller: dict[Function, list[CallSite]],
            edges: dict[Function, dict[Function, list[Arms]]], runs: dict[Function, dict[Function, int] | None]) -> dict[Function, tuple[int, tuple[tuple[str, int, int], ...]]]:
    """Each function ``step`` reaches by sure call sites: how many times one step runs it (``arms_sum``
    over the step's sites, each weighing what its callee runs per run), and its callers' shares."""
    per_step = arms_sum([(arms, _with_callee(callee, _per_run(project, steps, callee, calls_by_caller, edges, runs)))
                         for callee, sites in step.calls.items() for arms in sites])
    found: dict[Function, tuple[int, tuple[tuple[str, int, int], ...]]] = {}
    for function, count in per_step.items():
        if count >= 2:
            shares = [(caller, per_step.get(caller, 0), arms_count(callees[function]))
                      for caller, callees in edges.items() if function in callees and per_step.get(caller)]
            if function in step.calls:
                shares.insert(0, (("", step.name), 1, arms_count(step.calls[function])))
            shares.sort(key=lambda share: (-share[1] * share[2], share[0][1]))  # (the largest share first)
            found[function] = count, tuple((caller[1], n, sites) for caller, n, sites in shares if n * sites)  # type: ignore[index]
    return found


def _with_callee(callee: Function, below: dict[Function, int] | None) -> dict[object, int]:
    weight: dict[object, int] = dict(below or {})
    weight[callee] = weight.get(callee, 0) + 1
    return weight


def _per_run(project: Project, steps: Steps, function: Function, calls_by_caller: dict[Function, list[CallSite]],
             edges: dict[Function, dict[Function, list[Arms]]], runs: dict[Function, dict[Function, int] | None],
             depth: int = 0) -> dict[Function, int] | None:
    """What one run of ``function`` runs by sure call sites, each with how many times; memoised in
    ``runs`` across steps. A recursion (a function asked while it is being counted) adds nothing more."""
    if function in runs:
        return runs[function]
    if depth > _DEPTH:
        return None  # (a chain of calls this deep: what lies below is not counted, nor is Python's stack spent on it)
    runs[function] = None  # (in progress: a recursion back to it counts no further)
    runs[function] = arms_sum([(arms, _with_callee(callee, _per_run(project, steps, callee, calls_by_caller, edges, runs, depth + 1)))  # type: ignore[misc]
                               for callee, sites in _callees(project, steps, function, calls_by_caller, edges).items() for arms in sites])
    return runs[function]
