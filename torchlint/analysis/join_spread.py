"""The join's cross-file spread: per-step reach carried from each step function to the functions it calls."""

from __future__ import annotations

from collections import deque
from dataclasses import replace

from torchlint.analysis.join_steps import StepInfo, within_step
from torchlint.analysis.multiplicity import GENERATION, LOOP_WORDS, ONCE_PER_STEP, Multiplicity, Position, Where, at_call, phase_rank
from torchlint.analysis.project import Project
from torchlint.analysis.summary import FULL_BATCH, CallSite, Ref, callers_part

_MAX_SITES = 3  # related locations per finding: enough to find the loop, not a wall


def _spread(project: Project, work: deque[tuple[str, str, StepInfo]], steps: dict[str, dict[str, StepInfo]],
            calls_by_caller: dict[tuple[str, str], list[CallSite]], loops_by_file: dict[str, dict[str, str]],
            omitting: dict[tuple[str, str], StepInfo], guarded: dict[tuple[str, str], list[tuple[CallSite, tuple[str, str]]]] | None = None) -> None:
    """Breadth-first from ``work``: every function the reached functions call on every run,
    with how often (per step, or per call of a model) and from where; and the training steps
    they call every N runs (``guarded``: each the step itself)."""
    phase_passed: dict[tuple[str, str, int], frozenset[str]] = {}  # (file, function, phase) -> what that phase's reaches pass it
    while work:
        path, key, info = work.popleft()
        rebranched = False  # a branch's reach changed: its calls run from the new one (a decoded token's, not a prefill's)
        for name in info.omitted:  # that branch runs as often as the reach that leaves it out, not the function's first
            branch = (path, f"{key}#none:{name}")
            if branch not in omitting or _costlier(info, omitting[branch]):
                rebranched = rebranched or branch in omitting
                omitting[branch] = info
        for name in info.passed:  # `if flag:` (off by default) runs as often as the reach that turns it on
            branch = (path, f"{key}#passed:{name}")
            if branch not in omitting or _costlier(info, omitting[branch]):
                rebranched = rebranched or branch in omitting
                omitting[branch] = info
        known = steps.setdefault(path, {}).get(key)
        later: StepInfo | None = None  # a reach of another phase that passes more: what it hands on goes on from it alone
        phase = (path, key, phase_rank(info.where))
        phase_passed[phase] = phase_passed.get(phase, frozenset()) | info.passed
        if known is not None:
            # (an evaluation's reach over a sampling loop's only where it runs the function as often: a helper
            # called once after the decode loop nested in an evaluation's batch and once per decoded token in it)
            better = not known.hook and phase_rank(info.where) < phase_rank(known.where) \
                and not (_inference(info, known) and known.per_step.outweighs(info.per_step))
            if better:  # a training step reaches it too, deeper in the search: it reads "training", from there
                sites = (*info.sites, *(site for site in known.sites if site not in info.sites))[:_MAX_SITES]
                known = steps[path][key] = replace(known, origin=info.origin, where=info.where, sites=sites, via=info.via, hook=info.hook,
                                                   per_step=info.per_step, position=info.position)
            elif not known.hook and len(known.sites) < _MAX_SITES and info.sites and info.sites[0] not in known.sites:
                known = steps[path][key] = replace(known, sites=known.sites + info.sites[:1])
            if info.tensor_args and not known.tensor_args:  # its own arguments: callees are not affected
                known = steps[path][key] = replace(known, tensor_args=True)
            if not info.constants <= known.constants:  # its own parameters: callees are not affected
                known = steps[path][key] = replace(known, constants=known.constants | info.constants)
            uploaded = not info.uploaded <= known.uploaded  # its callees may be passed them on
            if uploaded:
                known = steps[path][key] = replace(known, uploaded=known.uploaded | info.uploaded)
            grown = not info.omitted <= known.omitted or uploaded  # its own parameters: `if max_len is None:` calls now run
            if grown:
                known = steps[path][key] = replace(known, omitted=known.omitted | info.omitted)
            passes_more = not info.passed <= known.passed  # its own parameters, and what a call handing on its `**kwargs` passes
            if passes_more:
                known = steps[path][key] = replace(known, passed=known.passed | info.passed)
            if not info.handed <= known.handed and known.handed:  # its parameters' calls run more (none known: all, already)
                known = steps[path][key] = replace(known, handed=known.handed | info.handed)
                passes_more = True
            elif known.handed and not info.handed:  # a reach that says nothing of them: any
                known = steps[path][key] = replace(known, handed=frozenset())
                passes_more = True
            if known.feeds_env and not info.feeds_env:  # its own result: another step uses it otherwise
                known = steps[path][key] = replace(known, feeds_env=False)
            repeated = not known.hook and (phase_rank(info.where) <= phase_rank(known.where) or _inference(info, known)) \
                and info.per_step.outweighs(known.per_step)
            if repeated:  # reached once per step and also N times (a block in a list and in a Sequential): N;
                # once per generation (a cache's prefill) and also once per decoded token: per token; once per
                # evaluation batch after its decode loop and also once per decoded token in it (LoRA's
                # `_add_beam_candidate`): per token, the hottest caller's.
                # (the words say who repeats it: that reach's origin, caller and loop, with its count, and where it sits)
                sites = (*info.sites, *(site for site in known.sites if site not in info.sites))[:_MAX_SITES]
                known = steps[path][key] = replace(known, per_step=info.per_step, origin=info.origin, via=info.via, sites=sites, position=info.position,
                                                   guard=info.guard, distributed_only=info.distributed_only,
                                                   where=info.where if _inference(info, known) else known.where)
                grown = True
            plainer = not known.hook and known.run_mode and not info.run_mode and phase_rank(info.where) == phase_rank(known.where) \
                and not known.per_step.outweighs(info.per_step)
            if plainer:  # as often from a reach that needs no mode of the run (PPO's update, beside GAIL's `if args.gail:`): its words
                sites = (*info.sites, *(site for site in known.sites if site not in info.sites))[:_MAX_SITES]
                known = steps[path][key] = replace(known, per_step=info.per_step, origin=info.origin, via=info.via, sites=sites, position=info.position,
                                                   guard=info.guard, distributed_only=info.distributed_only, run_mode=False)
                grown = True
            if known.guard and not info.guard:  # reached on every step too, not only under td3's `% policy_freq`: no guard's words
                known = steps[path][key] = replace(known, guard="", distributed_only=False)
                grown = True
            deeper = not known.hook and info.position is Position.MID_STEP and known.position is not Position.MID_STEP \
                and phase_rank(info.where) == phase_rank(known.where)
            if deeper:  # also called mid-step in that step (SAC's `get_action` in the update, after the critics): its reads wait there
                known = steps[path][key] = replace(known, position=Position.MID_STEP)
                grown = True
            if not (known.host_only and not info.host_only) and not grown and not better:
                if not passes_more and not rebranched:
                    continue  # reached already: recursion and diamonds end here
                # What it hands on through `**kwargs` grew: on to its callees from this reach, whose
                # step is the one that passes it (not the function's first).
            else:
                if known.host_only and not info.host_only:  # a step with device tensors reaches it too: its place is that step's
                    known = replace(known, origin=info.origin, sites=(*info.sites, *(s for s in known.sites if s not in info.sites))[:_MAX_SITES],
                                    where=info.where, via=info.via, hook=info.hook, per_step=info.per_step, position=info.position, guard=info.guard,
                                    distributed_only=info.distributed_only)
                merged = replace(known, host_only=known.host_only and info.host_only)
                steps[path][key] = merged
                # (what a reach of another phase passes is no step's of this one: `generate` handing `looped_inference=True`
                # on through `self.net(x, **kwargs)` turns it on in the sampling loop, not in the training step's `model(x)`)
                later = info if passes_more and phase_rank(info.where) != phase_rank(merged.where) else None
                info = replace(merged, passed=phase_passed.get((path, key, phase_rank(merged.where)), frozenset()))
        else:
            steps[path][key] = info
        for call, callee in guarded.get((path, key), ()) if guarded else ():
            if not call.within and call.loop is None:  # (one in a loop of its own: that loop decides, `_guarded_seed`)
                work.append((*callee, _as_training_step(_callee_reach(project, call, callee, path, key, info, loops_by_file))))
        for call, info in ((call, reach) for reach in (info, later) if reach is not None for call in calls_by_caller.get((path, key), ())):
            if call.branch and call.branch not in info.omitted:
                continue  # `if max_len is None: ...` and every per-step call passes `max_len`
            caller = _passing_reach(call, path, key, info, omitting)
            if caller is None:
                continue  # `if kv_cache is not None: kv_cache.get_pos()` and no per-step call passes `kv_cache`
            elsewhere = _passed_elsewhere(call, path, key, replace(caller, passed=steps[path][key].passed), omitting)
            for callee in _handed_callees(project, call, path, key, info):
                if callee == (path, key):
                    continue
                handed_on = _handed_on(project, call, callee, elsewhere)
                work.append((*callee, _callee_reach(project, call, callee, path, key, caller, loops_by_file, handed_on)))
                for reach in {id(r): r for r in elsewhere.values()}.values():
                    # what the caller hands on of its own parameters a later phase passes it (a decode
                    # loop's `kv_cache`, a training loop leaving it out) reaches the callee from there
                    work.append((*callee, _callee_reach(project, call, callee, path, key, reach, loops_by_file)))


def _handed_callees(project: Project, call: CallSite, path: str, key: str, info: StepInfo) -> list[tuple[str, str]]:
    """What ``call`` runs: for a call of the function's own parameter (``values_transform(val)``),
    only what this reach's callers handed it there (``to_torch_`` passing ``arr_to_torch`` runs
    ``arr_to_torch``, not the ``arr_to_numpy`` another caller passes); else every callee."""
    callees = project.callees(call.target, path)
    target = call.target
    if not info.handed or target[0] != "object":
        return callees
    passed = callers_part(target[1])  # (an annotated parameter's, or one with a default: what the callers pass first)
    if passed[0] != "passed" or passed[1] != key or len(passed) != 3:
        return callees
    handed = [owner for name, owner in info.handed if name == passed[2]]
    if not handed:
        return callees
    real = {callee for ref, where in handed for callee in project.callees(("object", ref, target[2]), where)}
    return [callee for callee in callees if callee in real]


def _handed(project: Project, call: CallSite, callee: tuple[str, str], path: str, key: str, caller: StepInfo) -> frozenset[tuple[str, tuple[Ref, str]]]:
    """What ``call`` hands ``callee`` by parameter name: its object arguments, and for those that
    are the caller's own parameters (``values_transform`` handed on), what the caller was handed."""
    names = project.parameters(call, callee)
    found = set()
    for where, owner in call.args:
        name = where if isinstance(where, str) else names[where] if where < len(names) else None
        if name is None:
            continue
        passed = callers_part(owner)  # (an annotated parameter's, or one with a default: what the callers pass first)
        if passed[0] == "passed" and passed[1] == key and len(passed) == 3:
            given = [o for n, o in caller.handed if n == passed[2]]
            if not given:
                continue  # what the caller was handed is not known: any
            found.update((name, o) for o in given)
        else:
            found.add((name, (owner, path)))
    return frozenset(found)


def _callee_reach(project: Project, call: CallSite, callee: tuple[str, str], path: str, key: str, caller: StepInfo,
                  loops_by_file: dict[str, dict[str, str]], withheld: frozenset[str] = frozenset()) -> StepInfo:
    """How ``callee`` is reached through ``call`` from the reach ``caller`` of function ``key``
    (less the parameters ``withheld``: another reach passes them)."""
    # Called by the framework's step itself: the call in the hook is the site.
    sites = (call.location,) if caller.hook and call.location is not None else caller.sites
    per_step, position = _called_place(caller, call, callee, loops_by_file.get(path, {}))
    return StepInfo(caller.origin, sites, caller.where, host_only=caller.host_only, tensor_args=call.tensors, via="" if caller.hook else key,
                    omitted=project.none_passed(call, callee, path, caller.omitted), constants=project.constants(call, callee),
                    uploaded=project.uploads(call, callee) | project.forwarded_uploads(call, callee, caller.uploaded),
                    passed=project.passes(call, callee, (path, key), None if caller.hook else caller.passed) - withheld,
                    feeds_env=call.feeds_env or call.returned and caller.feeds_env, per_step=per_step, position=position, handed=_handed(project, call, callee, path, key, caller),
                    guard=call.guard or caller.guard, distributed_only=call.distributed_only if call.guard else caller.distributed_only,
                    run_mode=call.run_mode or caller.run_mode)


def _as_training_step(reach: StepInfo) -> StepInfo:
    """``reach`` of a function that is a training step, made every N iterations of its loop: each
    run is one step of training, whatever the loop around it samples or evaluates."""
    return replace(reach, where=Where.TRAIN, origin=LOOP_WORDS[Where.TRAIN], per_step=ONCE_PER_STEP)


def _passed_elsewhere(call: CallSite, path: str, key: str, info: StepInfo, omitting: dict[tuple[str, str], StepInfo]) -> dict[str, StepInfo]:
    """The caller's own parameters that ``call`` hands on, which the reach ``info`` does not pass
    but a reach of a later phase does (its ``f#passed:name``): each with that reach. ``info`` is
    all the function's reaches merged, its ``passed`` too; a reach that passed the name itself
    would have set that branch's reach to its phase or an earlier one."""
    if not call.own_params or info.hook or "*" in info.passed:
        return {}
    found: dict[str, StepInfo] = {}
    for _, name in call.own_params:
        reach = omitting.get((path, f"{key}#passed:{name}")) if name in info.passed else None
        if reach is not None and phase_rank(reach.where) > phase_rank(info.where):
            found[name] = reach
    return found


def _handed_on(project: Project, call: CallSite, callee: tuple[str, str], elsewhere: dict[str, StepInfo]) -> frozenset[str]:
    """The parameters of ``callee`` that ``call`` fills with the caller's own parameters in ``elsewhere``."""
    if not elsewhere:
        return frozenset()
    names = project.parameters(call, callee)
    return frozenset(where if isinstance(where, str) else names[where] for where, name in call.own_params
                     if name in elsewhere and (isinstance(where, str) or where < len(names)))


def _costlier(info: StepInfo, known: StepInfo) -> bool:
    """Does the reach ``info`` of a branch decide its place over ``known``: an earlier phase (a
    training step), a device step over a host-only one, or in the same phase a reach that runs
    it more often (per decoded token over once per generation: ``Multiplicity.outweighs``)?"""
    if phase_rank(info.where) < phase_rank(known.where) or _on_device_first(known, info):
        return True
    return phase_rank(info.where) == phase_rank(known.where) and known.host_only is info.host_only and not known.hook \
        and info.per_step.outweighs(known.per_step)


def _inference(info: StepInfo, known: StepInfo) -> bool:
    """Are both reaches inference, an evaluation's or a sampling loop's (no training step): the one
    that runs the function more often decides its place, whichever phase is ranked first."""
    return Where.TRAIN not in (info.where, known.where) and info.where in _INFERENCE and known.where in _INFERENCE


_INFERENCE = frozenset({Where.EVAL, Where.INFER})


def _on_device_first(known: StepInfo, info: StepInfo) -> bool:
    """Is ``info`` a reach with device tensors where the one ``known`` is host-only: a device
    step decides for a branch both run."""
    return known.host_only and not info.host_only


def _passing_reach(call: CallSite, path: str, key: str, info: StepInfo, omitting: dict[tuple[str, str], StepInfo]) -> StepInfo | None:
    """The reach of the function ``key`` that makes ``call``: ``info``, or for a call made only when
    a parameter is passed (``CallSite.opt_in``), the reach of a per-step call that passes it (not
    the function's first: a training step leaving ``kv_cache`` out makes no ``kv_cache.get_pos()``);
    None where no per-step call passes it. A call made only when a parameter is left out
    (``CallSite.branch``) runs from the reach that leaves it out: vector-quantize-pytorch's
    ``if not exists(seed): seed = get_maybe_sync_seed(device)`` not once per group of a grouped
    model that draws the seed itself and hands it to each group."""
    if call.branch:
        return omitting.get((path, f"{key}#none:{call.branch}"), info)
    if not call.opt_in or info.hook or "*" in info.passed:
        return info  # (a framework's hook: its callers are not seen)
    if call.opt_in not in info.passed:
        return None
    return omitting.get((path, f"{key}#passed:{call.opt_in}"), info)


def _called_place(caller: StepInfo | None, call: CallSite, callee: tuple[str, str], step_loops: dict[str, str]) -> tuple[Multiplicity, Position]:
    """How many times per step ``callee`` runs through ``call`` (the caller's count times the
    loops around the call, the innermost running the callee: "once in each `Block.forward()`"),
    and where that call sits in the step (a module's forward is mid-step: its other layers and
    its backward follow)."""
    repeats, unit = within_step(call.repeats, step_loops)
    # a hot decode loop's iteration is a decoded token (a full-batch epoch's is a step: its origin says it)
    unit = call.unit if unit == "step" and call.unit != FULL_BATCH else unit
    if unit == "step" and step_loops.get(call.within) == GENERATION:
        unit = GENERATION  # made in the loop whose iteration is a whole generation (its loops not recorded: a module's top level)
    if repeats:
        repeats = (*repeats[:-1], replace(repeats[-1], via=callee[1].partition("#")[0]))
    per_step = caller.per_step.then(*repeats) if caller is not None else Multiplicity(repeats, unit)
    if callee[1].rsplit(".", 1)[-1] in ("forward", "__call__") or call.target[-1] == "__call__":
        # mid-step, unless the model's call is the step's first device work (then the reads
        # on its forward's first lines, which take this position, wait for the last step's tail)
        stands = call.position if call.position is not None or caller is None else caller.position
        if stands in (Position.AFTER_SYNC, Position.AFTER_LAST_READ):
            return per_step, stands  # its arguments' blocking copies (or a sync just before, or the last step's read) drained the queue
        return per_step, Position.STEP_START if stands is Position.STEP_START else Position.MID_STEP
    # (a step loop's call with nothing after it in its function, loop included: the step's end)
    return per_step, at_call(call.position, caller.position if caller is not None else Position.STEP_END)
