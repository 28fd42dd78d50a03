"""The project-wide join: which functions run once per step, and from where.

Input: the :class:`~torchlint.analysis.steps.FileSummary` of every checked file
(plain data, made file by file), resolved by :class:`~torchlint.analysis.project.Project`.
Output: for each file, the per-step functions with the text that says how they are
reached and the hot call sites that make them so; beside them, what torch.compile
traces (:mod:`torchlint.analysis.compiled_reach`).

A function is per-step when
- a hot loop calls it (the call is not in a rare branch: the summary dropped those),
- a framework calls it once per step (a hook method of a framework subclass, a
  function registered with ``Engine(fn)``), or
- a per-step function calls it on every run (not in a rare branch, not once after a
  loop: such calls sit in the caller's body, which then is not per-step itself).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, replace

from torchlint.analysis import frameworks
from torchlint.analysis.compiled_reach import Compiled, compiled_reach
from torchlint.analysis.every_n import EveryN, every_n_reach
from torchlint.analysis.idle_models import idle_models
from torchlint.analysis.impact import ENV_STEP, FULL_BATCH_WORDS, GENERATION, LOOP_WORDS, MODEL_CALL, ONCE_PER_STEP, PHASE_WHERE, ROLLOUT_WORDS, SEQUENTIAL, Multiplicity, Place, Position, Repeat, Where, at_call, phase_rank
from torchlint.analysis.join_generations import DECODED, Generations
from torchlint.analysis.join_params import constructed, device_params, element_params, host_params, host_returned, host_steps, listed_params
from torchlint.analysis.patch_installs import installed_patches
from torchlint.analysis.project import Project
from torchlint.analysis.summary import FULL_BATCH, CallSite, FileSummary, LoopSummary, Ref
from torchlint.findings import Location

_MAX_SITES = 3  # related locations per finding: enough to find the loop, not a wall


@dataclass(frozen=True, slots=True)
class StepInfo:
    origin: str  # "a training loop", "Lightning `training_step`"
    sites: tuple[Location, ...]  # the hot call sites that make the function per-step
    where: Where = Where.BATCH  # how often that step runs
    hook: bool = False  # the function is the framework's step itself
    host_only: bool = False  # every step that reaches it is in a file that never uses a device
    tensor_args: bool = True  # some reach may pass it a tensor (False: every call site passes Python values)
    via: str = ""  # the per-step function that calls it, when that is not the loop or the hook itself
    omitted: frozenset[str] = frozenset()  # parameters some per-step call leaves to their default
    constants: frozenset[str] = frozenset()  # parameters some per-step call passes a constant (`self.alphas`)
    uploaded: frozenset[str] = frozenset()  # parameters some per-step call passes a batch it just copied to the device
    passed: frozenset[str] = frozenset()  # parameters some per-step call passes a value that may be true ("*": `**kwargs`, any)
    feeds_env: bool = False  # every per-step call hands its result to an environment's `step` (an RL policy's action)
    per_step: Multiplicity = ONCE_PER_STEP  # how many times per step it runs (a block's forward: once per block)
    position: Position = Position.MID_STEP  # where its call sits in the step (device work after it, or not)
    # (parameter, (reference, file)): what the per-step calls hand it as each parameter (a function, an object),
    # where they say; a call of that parameter (`values_transform(val)`) runs only those, not what other callers pass
    handed: frozenset[tuple[str, tuple[Ref, str]]] = frozenset()
    # an every-2nd-or-3rd-step guard around a call on the way (`CallSite.guard`: td3's delayed policy update,
    # `if self.total_it % self.policy_freq == 0: soft_update(...)`): no rare guard, so every step for the tier, but said
    guard: str = ""

    @property
    def place(self) -> Place:
        return Place(self.where, self.per_step, self.position, self.guard)

    def text(self, key: str, here: str) -> str:
        """How a finding in function ``key`` of file ``here`` runs every step (messages):
        "`LengthRegulator.expand()` (called from `LengthRegulator.LR()`, run every step from
        a training loop at train.py:84)"."""
        if self.hook:
            return self.origin
        where = ""
        if self.sites:
            site = self.sites[0]
            where = f" at line {site.line}" if site.path == here else f" at {site.path}:{site.line}"
        via = f"called from `{self.via.partition('#')[0]}()`, " if self.via else ""
        often = "run once per epoch" if self.where is Where.EPOCH else "run every step"  # `trainer.save()` after an epoch's batches
        guard = f", {self.guard}" if self.guard else ""
        return f"`{key.partition('#')[0]}()` ({via}{often} from {self.origin}{where}{guard})"


class Steps(dict[str, dict[str, StepInfo]]):
    """File path -> function key -> how it is per-step; and, beside it, what compiled code
    traces (``compiled``: :mod:`torchlint.analysis.compiled_reach`)."""

    compiled: Compiled = {}  # a join sets its own
    step_loops: dict[tuple[str, str], str] = {}  # (file, loop key) -> what it goes over: the loops that are a step themselves
    # file -> function key -> how it runs on every call of a model no step reaches (`_model_reach`)
    models: dict[str, dict[str, StepInfo]] = {}
    project: Project | None = None  # the name resolution the join used (a loader's dataset class in another file)
    host_params: frozenset[tuple[str, str]] = frozenset()  # (file, `Cls.__init__:param`): every construction passes a host value there
    device_params: frozenset[tuple[str, str]] = frozenset()  # (file, `f:param`): every call of `f` passes a device tensor there
    constructed: frozenset[tuple[str, str]] | None = None  # (file, class key): the classes some code of the project builds
    host_steps: frozenset[str] = frozenset()  # the files whose steps run on the host (`host_steps`)
    # file -> function key -> how it runs every N steps: called under a recurring guard of a step (analysis/every_n.py)
    every_n: dict[str, dict[str, EveryN]] = {}


def join(summaries: Iterable[FileSummary], display: dict[str, str] | None = None) -> Steps:
    """Every per-step function of the project, with how it is reached."""
    project = Project(summaries)
    project.index_arguments()
    project.built = constructed(project)  # `self.train_step()`: a base class's own method runs only where it is built, or kept
    project._forget()  # (what was resolved before: as if any class were built)
    steps = Steps()
    steps.project = project
    # Training first: a helper that both training and evaluation reach reads "training".
    step_loops, roots = _step_loops(project)
    steps.host_steps = host_steps(project)
    seeds = _seeds(project, step_loops, roots, steps.host_steps)
    work = deque((path, key, info) for _, path, key, info in sorted(seeds, key=lambda seed: seed[0]))
    loops_by_file: dict[str, dict[str, str]] = {}
    for (path, key), over in roots.items():
        loops_by_file.setdefault(path, {})[key] = over
    calls_by_caller: dict[tuple[str, str], list[CallSite]] = {}
    for path, summary in project.files.items():
        for call in summary.calls:
            if call.caller and call.loop is None:
                calls_by_caller.setdefault((path, call.caller), []).append(call)
    guarded = _guarded_steps(project)
    loops = {(path, loop.key): loop for path, summary in project.files.items() for loop in summary.loops} if guarded else {}
    for (path, caller), callees in guarded.items():
        for call, callee in callees:
            seed = _guarded_seed(project, path, call, callee, step_loops, loops, loops_by_file, steps.host_steps) if call.within or call.loop else None
            if seed is not None:
                work.append((*callee, seed))
    omitting: dict[tuple[str, str], StepInfo] = {}  # (file, `f#none:name`) -> the reach that leaves `name` out
    _spread(project, work, steps, calls_by_caller, loops_by_file, omitting, guarded)
    _inner_places(project, steps, omitting)
    steps.every_n = every_n_reach(project, steps, step_loops, calls_by_caller)
    steps.compiled = compiled_reach(project)
    steps.step_loops = roots
    steps.models = _model_reach(project, steps, calls_by_caller, loops_by_file, on_host(project, seeds))
    _own_training_reach(project, steps, calls_by_caller, loops_by_file)
    for path, summary in project.files.items():  # a patched forward runs as the library's model runs it, not as a self-test loop calls it
        for function, _, _, _ in summary.patched:
            if function in steps.models.get(path, {}):
                steps.get(path, {}).pop(function, None)
    steps.host_params = host_params(project) | host_returned(project)
    steps.device_params = device_params(project) | listed_params(project) | element_params(project)
    steps.constructed = project.built
    return steps


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
                                                   guard=info.guard, where=info.where if _inference(info, known) else known.where)
                grown = True
            if known.guard and not info.guard:  # reached on every step too, not only under td3's `% policy_freq`: no guard's words
                known = steps[path][key] = replace(known, guard="")
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
                                    where=info.where, via=info.via, hook=info.hook, per_step=info.per_step, position=info.position, guard=info.guard)
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
    if not info.handed or target[0] != "object" or target[1][0] != "passed" or target[1][1] != key or len(target[1]) != 3:
        return callees
    handed = [owner for name, owner in info.handed if name == target[1][2]]
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
        if owner[0] == "passed" and owner[1] == key and len(owner) == 3:
            given = [o for n, o in caller.handed if n == owner[2]]
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
                    omitted=project.omitted(call, callee), constants=project.constants(call, callee),
                    uploaded=project.uploads(call, callee) | project.forwarded_uploads(call, callee, caller.uploaded),
                    passed=project.passes(call, callee, (path, key), None if caller.hook else caller.passed) - withheld,
                    feeds_env=call.feeds_env, per_step=per_step, position=position, handed=_handed(project, call, callee, path, key, caller),
                    guard=call.guard or caller.guard)


def _guarded_steps(project: Project) -> dict[tuple[str, str], list[tuple[CallSite, tuple[str, str]]]]:
    """(file, caller) -> the calls it makes only every N runs (``FileSummary.guarded``) of a
    function that is a training step itself (Rainbow's ``if T % replay_frequency == 0:
    dqn.learn(mem)``), each with that function: the guard does not make its body rare, the
    training step is the step."""
    if not any(summary.guarded for summary in project.files.values()):
        return {}
    training = _ModelReach(project).trains
    found: dict[tuple[str, str], list[tuple[CallSite, tuple[str, str]]]] = {}
    for path, summary in project.files.items():
        for call in summary.guarded:
            for callee in project.callees(call.target, path):
                if callee != (path, call.caller) and training(callee):
                    found.setdefault((path, call.caller), []).append((call, callee))
    return found


def _guarded_seed(project: Project, path: str, call: CallSite, callee: tuple[str, str], step_loops: dict[tuple[str, str], Where],
                  loops: dict[tuple[str, str], LoopSummary], loops_by_file: dict[str, dict[str, str]], host_steps: frozenset[str]) -> StepInfo | None:
    """The reach of the training step ``callee`` that ``call`` makes every N iterations of a hot
    loop, a step loop, or a loop that may step and whose only step it is (an environment loop
    that learns every N steps); None elsewhere, and in an epoch loop (every N epochs)."""
    loop = loops.get((path, call.within))
    where = call.loop if call.loop is not None else step_loops.get((path, call.within)) or (loop.where if loop is not None and loop.may_step else None)
    if where is None or where is Where.EPOCH:
        return None
    per_step, position = _called_place(None, call, callee, loops_by_file.get(path, {}))
    return _as_training_step(StepInfo(LOOP_WORDS[where], (call.location,) if call.location is not None else (), where, host_only=path in host_steps,
                                      tensor_args=call.tensors, omitted=project.omitted(call, callee), constants=project.constants(call, callee),
                                      uploaded=project.uploads(call, callee), passed=project.passes(call, callee), per_step=per_step, position=position))


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
    None where no per-step call passes it."""
    if not call.opt_in or info.hook or "*" in info.passed:
        return info  # (a framework's hook: its callers are not seen)
    if call.opt_in not in info.passed:
        return None
    return omitting.get((path, f"{key}#passed:{call.opt_in}"), info)


def _model_reach(project: Project, steps: Steps, calls_by_caller: dict[tuple[str, str], list[CallSite]],
                 loops_by_file: dict[str, dict[str, str]], on_host: bool = False) -> dict[str, dict[str, StepInfo]]:
    """What runs on every call of a model no step is seen to reach (built from a config or a
    registry, a library's model): from the ``forward`` of each module class (its bases in any
    file) of a file no step reaches into, what it calls, each with its count per call of the
    model ("once in each `Block.forward()`": a block's forward seeded alone is counted again from
    the model's). A file some step reaches is left out: there the join sees how its code is used;
    so is test code (a test's model exercises the library on toy inputs). A function patched into a
    library's module (``FileSummary.patched``) is seeded wherever it is: only the library calls it;
    not where the function that installs it is called nowhere in the project (``patch_installs.installed_patches``).
    ``on_host``: the project runs on the host (``on_host``), its models with it."""
    seeds: list[tuple[str, str, StepInfo]] = []
    installed = installed_patches(project)
    idle = idle_models(project)
    for path, summary in project.files.items():
        for function, cls, per_layer, installer in summary.patched:  # `LlamaAttention.forward = forward`: the library's model runs it
            if installer and (path, installer) not in installed:
                continue  # LLaVA's `replace_llama_attn_with_flash_attn()`, which no code calls: the library's model never runs it
            repeats = (Repeat("layer", via=f"{cls}.forward"),) if per_layer else ()
            seeds.append((path, function, StepInfo(f"`{cls}.forward()` (patched with `{function}()`)", (), Where.BATCH, hook=True,
                                                   per_step=Multiplicity(repeats, MODEL_CALL), passed=frozenset({"*"}))))  # (the library calls it)
        if steps.get(path):
            continue
        for cls in summary.classes:
            if (path, cls.key) in idle:
                continue  # built only to ask another method, or to export: no code runs it as a model
            if "forward" in cls.methods and not cls.test and project.is_module(path, cls.key):
                forward = f"{cls.key}.forward"
                seeds.append((path, forward, StepInfo(f"`{forward}()`", (), Where.BATCH, per_step=Multiplicity((), MODEL_CALL), host_only=on_host,
                                                      passed=frozenset({"*"}))))  # (its callers are not seen: any argument)
    models: Steps = Steps()
    _spread(project, deque(seeds), models, calls_by_caller, loops_by_file, {})
    # The models themselves first (forwards no other reached function calls): a block's findings
    # then name the model that runs it, and count it per call of that model.
    called = {callee for (path, key) in {(p, k) for p, known in models.items() for k in known}
              for call in calls_by_caller.get((path, key), ()) for callee in project.callees(call.target, path) if callee != (path, key)}
    models = Steps()
    _spread(project, deque(seed for seed in seeds if seed[:2] not in called), models, calls_by_caller, loops_by_file, {})
    _spread(project, deque(seed for seed in seeds if seed[1] not in models.get(seed[0], {})), models, calls_by_caller, loops_by_file, {})
    _inner_places(project, models, {})
    return models


def on_host(project: Project, seeds: list[tuple[int, str, str, StepInfo]]) -> bool:
    """Does the whole project run on the host: some step, every step host-only, and no file that
    places anything on a device? Then a model no step is seen to reach (built from a class a
    step's caller picks: spinningup's ``actor_critic=core.MLPActorCritic``) runs there too; in a
    library with no step, or with a device somewhere, who runs it is not known."""
    return bool(seeds) and all(info.host_only for *_, info in seeds) and not any(summary.names_device for summary in project.files.values())


def _seeds(project: Project, step_loops: dict[tuple[str, str], Where], roots: dict[tuple[str, str], str],
           host_steps: frozenset[str] = frozenset()) -> list[tuple[int, str, str, StepInfo]]:
    """(phase rank, file, key, info) for what runs every step by itself: framework hooks,
    calls made from hot loops, loops the join finds to be step loops and their calls; each
    host-only where its file's steps are (``host_steps``)."""
    seeds: list[tuple[int, str, str, StepInfo]] = []
    for path, summary in project.files.items():
        for cls in summary.classes:
            hooks = project.framework_hooks(path, cls)
            if hooks is None:
                continue
            for method in cls.methods:
                if method in hooks.methods:
                    where = PHASE_WHERE[hooks.methods[method]]
                    # after a training hook come the backward and the optimizer step (but a batch-end hook runs after
                    # them, a batch-start hook before the step's work); after the others, the next batch
                    position = Position.STEP_END if method in frameworks.BATCH_END_HOOKS \
                        else Position.STEP_START if method in frameworks.BATCH_START_HOOKS \
                        else Position.MID_STEP if where is Where.TRAIN else Position.STEP_END
                    info = StepInfo(frameworks.phase_text(hooks.framework, method), (), where, hook=True, host_only=path in host_steps, position=position)
                    seeds.append((phase_rank(where), path, f"{cls.key}.{method}", info))
        for hook in summary.hooks:
            # an ignite step function or iteration handler: what follows it is the next batch
            seeds.append((0, path, hook.function, StepInfo(hook.text, (), hook.where, hook=True, host_only=path in host_steps,
                                                           position=Position.STEP_END)))
    for (path, key), where in step_loops.items():
        seeds.append((phase_rank(where), path, key, StepInfo(LOOP_WORDS[where], (), where, hook=True, host_only=path in host_steps)))
    generations = Generations(project)
    for path, summary in project.files.items():
        loops_here = {key: over for (file, key), over in roots.items() if file == path}
        for call in summary.calls:
            if call.loop is not None:
                where: Where | None = call.loop
            else:
                where = step_loops.get((path, call.within)) if call.within else None
            for callee in project.callees(call.target, path) if where is not None else ():
                loop_where = _loop_where(where, project, callee)  # type: ignore[arg-type]
                sites = (call.location,) if call.location is not None else ()
                omitted, constants = project.omitted(call, callee), project.constants(call, callee)
                per_step, position = _called_place(None, call, callee, loops_here)
                if position not in _DRAINED and call.loop is None and loop_where not in (Where.TRAIN, Where.EPOCH) \
                        and loops_here.get(call.within) != DECODED and generations.follows(path, call):
                    # after a call earlier in the iteration that runs a whole generation (whisper's window
                    # loop: `decode_with_fallback(segment)`, then `add_word_timestamps(...)`): once per
                    # generated sequence. (Not in a training loop, whose iteration after a rollout is an
                    # update; not in a token loop itself, where the call still runs per token.)
                    position = Position.AFTER_DECODE
                origin = FULL_BATCH_WORDS if call.unit == FULL_BATCH and loop_where is Where.TRAIN \
                    else ROLLOUT_WORDS if call.unit == ENV_STEP and loop_where is Where.INFER else LOOP_WORDS[loop_where]
                seeds.append((phase_rank(loop_where), *callee, StepInfo(origin, sites, loop_where, host_only=path in host_steps,
                                                                        tensor_args=call.tensors, omitted=omitted, constants=constants,
                                                                        uploaded=project.uploads(call, callee), passed=project.passes(call, callee),
                                                                        feeds_env=call.feeds_env, per_step=per_step, position=position,
                                                                        guard=call.guard)))
    return seeds


# Positions more telling than "after a generation": the queue was drained right before.
_DRAINED = frozenset({Position.AFTER_SYNC, Position.BEFORE_SYNC, Position.BEFORE_READ, Position.BEFORE_EVAL, Position.TIMED})


def _own_training_reach(project: Project, steps: Steps, calls_by_caller: dict[tuple[str, str], list[CallSite]],
                        loops_by_file: dict[str, dict[str, str]]) -> None:
    """What runs every step of a module's method that makes one whole training step itself (a
    backward and an optimizer step: audiocraft's ``AdversarialLoss.train_adv``, the
    discriminator's step a GAN solver calls through a dict of losses no summary resolves): it
    runs once per step of whatever calls it, seen or not. Added after the steps and the model
    reach, never over them: a loop that reaches it names itself, and a file it reaches keeps the
    model reach of its forwards (the generator's side of the same loss)."""
    own: Steps = Steps()
    seeds = [seed for seed in _own_training_steps(project, steps.host_steps) if seed[1] not in steps.get(seed[0], {})]
    _spread(project, deque(seeds), own, calls_by_caller, loops_by_file, {})
    _inner_places(project, own, {})
    for path, known in own.items():
        for key, info in known.items():
            steps.setdefault(path, {}).setdefault(key, info)


def _own_training_steps(project: Project, host_steps: frozenset[str]) -> list[tuple[str, str, StepInfo]]:
    """The seeds of :func:`_own_training_reach`: each module method but ``forward`` in ``one_step``."""
    seeds: list[tuple[str, str, StepInfo]] = []
    for path, summary in project.files.items():
        classes = {cls.key: cls for cls in summary.classes}
        for key in summary.one_step:
            owner, _, method = key.rpartition(".")
            cls = classes.get(owner)
            # (a forward is the model reach's; a test's class exercises a library on toy inputs)
            if cls is None or cls.test or method == "forward" or not project.is_module(path, owner):
                continue
            seeds.append((path, key, StepInfo(f"the training step `{key}()`", (), Where.TRAIN, hook=True,
                                                                      host_only=path in host_steps, position=Position.MID_STEP)))
    return seeds


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
        if stands is Position.AFTER_SYNC:
            return per_step, Position.AFTER_SYNC  # its arguments' blocking copies (or a sync just before) drained the queue
        return per_step, Position.STEP_START if stands is Position.STEP_START else Position.MID_STEP
    # (a step loop's call with nothing after it in its function, loop included: the step's end)
    return per_step, at_call(call.position, caller.position if caller is not None else Position.STEP_END)


def within_step(repeats: tuple[tuple[str, Repeat], ...], roots: dict[str, str] | set[str]) -> tuple[tuple[Repeat, ...], str]:
    """The loops (outermost first) inside the innermost one that is a step itself (a loop
    the join found to be a step loop is the step, not a repetition within it), and what that
    step is: "decoded token" for a decode loop, "step" when nothing names it."""
    for index in range(len(repeats) - 1, -1, -1):
        key = repeats[index][0]
        if key in roots:
            over = roots[key] if isinstance(roots, dict) else ""
            unit = over if over and over not in ("iteration", "member") else "step"
            return tuple(repeat for _, repeat in repeats[index + 1:]), unit
    return tuple(repeat for _, repeat in repeats), "step"


def _step_loops(project: Project) -> tuple[dict[tuple[str, str], Where], dict[tuple[str, str], str]]:
    """Loops that are step loops because their own body calls a model of the project
    (``self.policy(obs)``, whose class another module defines) or a function of another
    module that makes one training step; and the loops nested in them. Key -> how often;
    and the loops that are a step themselves (not nested in one) -> what each goes over."""
    loops = {(path, loop.key): loop for path, summary in project.files.items() for loop in summary.loops}
    found: dict[tuple[str, str], Where] = {}
    generating: set[tuple[str, str]] = set()
    reaches = _ModelReach(project)
    through: dict[tuple[str, str], list[tuple[str, str]]] = {}  # a loop found through a callee's model runs -> those callees
    for path, summary in project.files.items():
        for call in summary.calls:
            where = (path, call.within)
            loop = loops.get(where) if call.within else None
            # (a loop taken for sampling may still train: `policy.select_action(s)` then `policy.train(buffer)`)
            if loop is None or not loop.may_step or found.get(where, Where.INFER) is not Where.INFER \
                    or call.target[0] not in ("object", "method", "local", "import") or _in_module_forward(project, path, loop):
                continue
            for callee in project.callees(call.target, path):
                if callee[1] in project.files[callee[0]].one_step:
                    # (a loop its own file shows evaluating, under no_grad, after `.eval()`, in
                    # `evaluate()`, runs the step function with its training off: score_sde's
                    # `eval_step = get_step_fn(sde, train=False)`)
                    found[where] = Where.EVAL if loop.where is Where.EVAL else Where.TRAIN
                elif reaches.trains(callee) and loop.where is not Where.EPOCH and (where not in found or _calls_a_model(call, callee) or reaches(callee)):
                    # a training step a few calls deep (a backward, an optimizer step: dreamerv3's
                    # `for _ in range(steps): self._train(next(self._dataset))` in the agent's `__call__`
                    # that an environment loop runs every step): each iteration is one training step,
                    # whatever else the loop or its caller samples. (Not an epoch loop, whose own calls
                    # run once per epoch around the loop of steps: imagen's `trainer.valid_step(...)`.)
                    found[where] = Where.EVAL if loop.where is Where.EVAL else Where.TRAIN
                elif where in found:
                    if _calls_a_model(call, callee) or reaches(callee):  # (what else makes it a step: `_drop_loops_over_runs`)
                        through.setdefault(where, []).append(None if _calls_a_model(call, callee) else callee)
                    continue
                elif _calls_a_model(call, callee):
                    found[where] = loop.where or Where.BATCH  # a model's forward
                    through.setdefault(where, []).append(None)
                elif reaches(callee):
                    # `self.inference.logits(seq)`, `predict(x)` of a module-level model: a function
                    # that runs a model once per call, so once per request, token or sample: an
                    # inference step unless the loop trains.
                    # Its outermost loop in the function is the step (`for t in range(max_len):`
                    # around `for seq in beams:`): the loops inside it repeat within the step.
                    # An epoch loop is no decode loop: what it calls runs once per epoch.
                    # A loop of decoded tokens or denoising steps, or a `while` loop (`while not done:`
                    # stepping an environment), is the step itself: a loop around it goes over
                    # generations or episodes. So is a loop whose call runs a whole generation (read_fast's
                    # `for j, text in enumerate(texts): gen = tts.tts(text)`): a loop around it goes over other work.
                    generation = reaches.generates(callee)
                    while not generation and loop.where is not Where.EPOCH and loop.over not in SEQUENTIAL and not loop.until and loop.parent in {k for p, k in loops if p == path} \
                            and loops[(path, loop.parent)].where is not Where.EPOCH:
                        where, loop = (path, loop.parent), loops[(path, loop.parent)]
                    if where not in found:
                        # (an evaluation loop over a loader's batches stays one: dlrm's `inference()`
                        # over `test_ld` through `dlrm_wrap(...)`; a decode loop is sampling)
                        # (around a generation, `model.recognize(x)` decoding each utterance, a sampling loop)
                        # (an evaluation over episodes, an environment's steps, samples its policy too)
                        kept = (Where.TRAIN, Where.EPOCH, Where.EVAL) if loop.batches and loop.over not in SEQUENTIAL \
                            and not reaches.generates(callee) else (Where.TRAIN, Where.EPOCH)
                        found[where] = loop.where if loop.where in kept else Where.INFER
                        if generation and found[where] is Where.INFER and loop.over not in SEQUENTIAL:
                            generating.add(where)  # each iteration a whole generation: its step is a generated sequence
                    through.setdefault(where, []).append(callee)
                else:
                    continue
                break
    _drop_loops_over_runs(found, through, loops)
    roots = dict(found)
    for (path, key), loop in loops.items():  # loops inside a step loop run every step too
        parent = (path, loop.parent)
        while parent in loops and parent not in roots:
            parent = (path, loops[parent].parent)
        if parent in roots and (path, key) not in found:
            found[(path, key)] = found[parent]
    return found, {root: GENERATION if root in generating else _step_unit(loops[root], found[root]) for root in roots}


def _drop_loops_over_runs(found: dict[tuple[str, str], Where], through: dict[tuple[str, str], list[tuple[str, str] | None]],
                          loops: dict[tuple[str, str], LoopSummary]) -> None:
    """Drop the sampling loops found only through functions that have a step loop of their own, one of
    windows or requests, no token loop: whisper's ``for audio_path in ...: transcribe(model, audio_path)``,
    whose ``transcribe`` runs the model once (language detection) before its own loop over 30-s windows.
    Each iteration is a whole run of those steps, as a loop around a training run goes over runs: what
    the function does outside its own loop runs once per run, not per step. (A function whose own step
    loop decodes tokens is one generation: a loop around it still goes over generations.)"""
    stepping = {(path, key.partition("#")[0]) for (path, key) in found if loops[(path, key)].over not in SEQUENTIAL}
    for where, callees in through.items():
        if found.get(where) is Where.INFER and None not in callees \
                and all(callee in stepping and callee != (where[0], where[1].partition("#")[0]) for callee in callees):
            del found[where]


def _step_unit(loop: LoopSummary, where: Where) -> str:
    """What one iteration of a step loop is: what it goes over, or an evaluation batch."""
    return "evaluation batch" if where is Where.EVAL and loop.over in ("iteration", "member") else loop.over


def _in_module_forward(project: Project, path: str, loop: LoopSummary) -> bool:
    """Does ``loop`` run within each call of a model, a class whose being an ``nn.Module`` shows
    only through its bases in other files (detectron2's cascade stages in
    ``CascadeROIHeads._forward_box``)? Then it is no step of its own: the step that calls the model is."""
    return bool(loop.forward_of) and project.is_module(path, loop.forward_of)


def _inner_places(project: Project, steps: Steps, omitting: dict[tuple[str, str], StepInfo]) -> None:
    """Places inside a per-step function that findings wait for (``Loops.step_condition``):
    a loop (not hot itself) runs every step with its function; the branch
    ``if max_len is None:`` runs every step when a per-step call leaves ``max_len`` out."""
    for path, summary in project.files.items():
        known = steps.get(path)
        if not known:
            continue
        for loop in summary.loops:  # source order: a loop's parent comes first
            if loop.key not in known and loop.parent in known:
                known[loop.key] = known[loop.parent]
        for key, info in list(known.items()):
            for name in info.omitted if "#" not in key else ():
                branch = f"{key}#none:{name}"
                reach = omitting.get((path, branch))
                known.setdefault(branch, replace(reach, omitted=info.omitted, constants=info.constants) if reach is not None else info)
            for name in info.constants if "#" not in key else ():
                known.setdefault(f"{key}#const:{name}", info)
            for name in info.uploaded if "#" not in key else ():
                known.setdefault(f"{key}#uploaded:{name}", info)
            for name in info.passed if "#" not in key else ():
                branch = f"{key}#passed:{name}"
                reach = omitting.get((path, branch))
                known.setdefault(branch, reach if reach is not None else info)


class _ModelReach:
    """Does a function run a model's ``forward`` once per call (in its body, not in a loop of
    its own), itself or through the functions it calls, a few calls deep? Memoised."""

    _DEPTH = 3

    def __init__(self, project: Project) -> None:
        self.project = project
        self.memo: dict[tuple[str, str], bool] = {}
        self.training: dict[tuple[str, str], bool] = {}
        self.calls: dict[tuple[str, str], list[CallSite]] = {}
        # Functions with a training or evaluation loop of their own (yolov5's `train()`: its epochs
        # and batches; timm's `validate()`: a warm-up forward, then a loop over its loader) are a
        # whole run: a loop around their call goes over runs (hyperparameter evolution, a sweep over
        # models, a retry with a smaller batch), not steps. (A decode loop of its own makes a
        # function one generation: a loop over inputs around it is still an inference loop, each
        # of its iterations a generation.)
        self.runs = {(path, call.caller) for path, summary in project.files.items() for call in summary.calls
                     if call.loop in (Where.TRAIN, Where.EPOCH, Where.EVAL)}
        # functions with a decode or sampling loop of their own: one generation per call
        self.decoders = {(path, call.caller) for path, summary in project.files.items() for call in summary.calls if call.loop is Where.INFER}
        for path, summary in project.files.items():
            for call in summary.calls:
                # A call in a loop of its own makes the function a whole run or epoch, not a step.
                if call.caller and call.loop is None and not call.within:
                    self.calls.setdefault((path, call.caller), []).append(call)

    def trains(self, function: tuple[str, str], depth: int = 0) -> bool:
        """Is ``function`` a training step: it makes one (``FileSummary.one_step``), or runs a
        backward or an optimizer step and is no whole run, itself or through the functions it
        calls, a few calls deep?"""
        known = self.training.get(function)
        if known is not None:
            return known
        self.training[function] = False  # recursion ends here
        summary = self.project.files.get(function[0])
        found = summary is not None and (function[1] in summary.one_step or function[1] in summary.trains and function not in self.runs)
        if not found and depth < self._DEPTH and function not in self.runs:
            found = any(self.trains(callee, depth + 1) for call in self.calls.get(function, ())
                        for callee in self.project.callees(call.target, function[0]) if callee != function)
        self.training[function] = found
        return found

    def generates(self, function: tuple[str, str], depth: int = 0) -> bool:
        """Does ``function`` run a decode or sampling loop, itself or through the functions it
        calls, a few calls deep (a beam search behind ``model.recognize(x)``)?"""
        if function in self.decoders:
            return True
        calls = self.calls.get(function, ())
        if any(call.target[0] == "object" and call.target[-1] == "generate" for call in calls):
            return True  # a model's `.generate(...)` (a library's, Hugging Face's): a whole generation, as in its own file
        return depth < self._DEPTH and any(self.generates(callee, depth + 1) for call in calls
                                           for callee in self.project.callees(call.target, function[0]) if callee != function)

    def __call__(self, function: tuple[str, str], depth: int = 0) -> bool:
        known = self.memo.get(function)
        if known is not None:
            return known
        if function in self.runs:
            return False
        self.memo[function] = False  # recursion ends here
        found = False
        for call in self.calls.get(function, ()) if depth < self._DEPTH else ():
            for callee in self.project.callees(call.target, function[0]):
                if _calls_a_model(call, callee) or self(callee, depth + 1):
                    found = True
                    break
            if found:
                break
        self.memo[function] = found
        return found


def _calls_a_model(call: CallSite, callee: tuple[str, str]) -> bool:
    """Does ``call`` run a model's ``forward`` by calling the model (``model(x)``, ``self.net(x)``,
    ``self.model.mask_decoder(x)``: a module the object's class keeps), not a method of
    another name?"""
    return callee[1].rsplit(".", 1)[-1] == "forward" and (call.target[-1] in ("__call__", "forward") or call.target[0] in ("method", "object"))


def _loop_where(where: Where, project: Project, callee: tuple[str, str]) -> Where:
    """A loop that only calls the step function is a training loop when that function
    trains (``for x, y in loader: train_step(x, y)``)."""
    if where is Where.BATCH and callee[1] in project.files[callee[0]].trains:
        return Where.TRAIN
    return where
