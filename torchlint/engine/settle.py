"""The project-wide join over per-file summaries, and the conditional findings it settles."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

from torchlint.analysis.compiled_reach import CompiledInfo
from torchlint.analysis.dispatch import overridden
from torchlint.analysis.every_n import EveryN
from torchlint.analysis.impact import Cost, assess, per_call, with_multiplicity
from torchlint.analysis.join_steps import StepInfo, Steps, within_step
from torchlint.analysis.library_bases import derives_from
from torchlint.analysis.loader_bases import confirmed_loader
from torchlint.analysis.multiplicity import Multiplicity, Place, Where, at_call
from torchlint.analysis.project import Project
from torchlint.analysis.project_callees import buffers_only, builds_on_host, decodes_from_a_cache, returns_host
from torchlint.analysis.samples import WORK_PLACEHOLDER, given_items, unseen_batches, workers_hint
from torchlint.analysis.setting_defaults import SettingDefaults
from torchlint.analysis.switch_words import switch_off_words, switch_set_words
from torchlint.analysis.vendored_reach import uncalled_vendored
from torchlint.analysis.weight_kinds import BACKBONE, WEIGHTED
from torchlint.engine.isolate import guarded_stage, settle_project
from torchlint.engine.results import PLACED, UNLESS_HOST_STEPS, Conditional, FileResult, InStepIfCalled
from torchlint.findings import HIGH, IMPACT_RANK, LOW, MEDIUM, Finding

# checks.base.STEP_PLACEHOLDER, repeated here because checks/ imports libcst and settling
# runs on cached results too (tests/test_startup.py keeps the two equal).
STEP_PLACEHOLDER = "\ue000step\ue000"


def settle_steps(results: list[FileResult], steps: Steps | None = None, *, debug: bool = False) -> Steps:
    """The project-wide join (made from the results' summaries unless ``steps`` is given):
    each conditional finding whose function runs every step becomes a finding, its message
    saying where it runs and its ``related`` places carrying the hot call sites.

    Each file is settled under its own guard (``engine/isolate.py``): one that raises keeps
    the findings its own file shows and an error naming it; the others are settled."""
    if steps is None:  # the results are the whole project
        summaries = [r.summary for r in results if r.summary is not None]
        return settle_project(results, summaries, lambda some, joined: settle_steps(some, joined, debug=debug), debug)[0]
    shared = _Shared(steps)
    for file_result in results:
        # (what its own file placed, device-bound in a file naming no device, included: only the join could drop them)
        before = sorted([*file_result.findings, *(c.finding for c in file_result.conditional
                                                  if c.key == UNLESS_HOST_STEPS or c.key == PLACED and not c.if_device)],
                        key=Finding.sort_key)
        if guarded_stage(file_result, "settle", debug, lambda: _settle_file(file_result, steps, shared)) is None:
            file_result.findings = before  # as its own file shows them
        file_result.conditional, file_result.pending = [], []
    return steps


class _Shared:
    """What settling every file of a join asks of the project alike: made once, lazily."""

    def __init__(self, steps: Steps) -> None:
        self.project = getattr(steps, "project", None)
        self.switches = turned_switches(steps)
        self._settings: SettingDefaults | None = None
        # Is the project an inference application: no file trains (no backward, no optimizer step) and one
        # samples (a decode or denoising loop)? Its models' layers run forwards only (TL402, TL405's
        # unreached attention). A library of models with neither may be trained by its users: trained.
        files = self.project.files.values() if self.project is not None else ()
        self.trained = not files or any(s.trains_anywhere for s in files) or not any(s.samples_anywhere for s in files)

    @property
    def settings(self) -> SettingDefaults | None:
        if self._settings is None and self.project is not None:
            self._settings = SettingDefaults(self.project)  # one index of the project's callers, for every file's loaders
        return self._settings


def _settle_file(file_result: FileResult, steps: Steps, shared: _Shared) -> bool:
    """Settle one file's waiting findings into ``file_result.findings`` (True: done)."""
    switches = shared.switches
    if switches and file_result.conditional:  # `Distribution.set_default_validate_args(False)` somewhere: its findings go
        file_result.conditional = [c for c in file_result.conditional if c.unless_switch not in switches]
    per_step = steps.get(file_result.summary.path, {}) if file_result.summary is not None else {}
    here = file_result.summary.path if file_result.summary is not None else None
    if any(c.unless_overridden for c in file_result.conditional):  # a base class's method no object runs: nothing it holds happens
        file_result.conditional = [c for c in file_result.conditional if not c.unless_overridden or not _dead_method(shared.project, here, c.unless_overridden)]
    if any(c.key == PLACED and not c.if_device for c in file_result.conditional):  # placed here, waiting only for that
        file_result.findings.extend(c.finding for c in file_result.conditional if c.key == PLACED and not c.if_device)
        file_result.conditional = [c for c in file_result.conditional if c.key != PLACED or c.if_device]
        file_result.findings.sort(key=Finding.sort_key)
    if any(c.subclass_of for c in file_result.conditional):  # a class of another file: kept where it derives from the family
        file_result.conditional = [c for c in file_result.conditional if not c.subclass_of or subclass_holds(shared.project, here, c.subclass_of)]
    if any(c.key == UNLESS_HOST_STEPS for c in file_result.conditional):
        _settle_host_steps(file_result, here in getattr(steps, "host_steps", frozenset()))
    step_loops = step_loops_of(steps, here)
    models = getattr(steps, "models", {}).get(here, {})
    every_n = getattr(steps, "every_n", {}).get(here, {})
    if file_result.in_functions and (per_step or models or every_n):
        _raise_impacts(file_result, per_step, step_loops, models, every_n, shared.settings)
    if file_result.pending:
        file_result.findings.extend(_pending_findings(file_result, shared.project, shared.settings, switches, shared.trained))
        file_result.findings.sort(key=Finding.sort_key)
    if not file_result.conditional or file_result.summary is None:
        return True
    device_params = getattr(steps, "device_params", frozenset())
    if any(condition.if_device for condition in file_result.conditional):  # waiting for what every caller passes
        file_result.conditional = [_with_devices(c, any((here, p) in device_params for p in c.if_device)) for c in file_result.conditional
                                   if not c.if_device or c.device_key or any((here, p) in device_params for p in c.if_device)]
        file_result.findings.extend(c.finding for c in file_result.conditional if c.key == PLACED)
    compiled = getattr(steps, "compiled", {}).get(file_result.summary.path, {})  # a join's Steps carries it
    for condition in file_result.conditional:
        if condition.compiled:
            traced = compiled.get(condition.key)
            if traced is not None:  # it runs as often as the compiled function: the root's step, not its own
                file_result.findings.append(_compiled_finding(condition, traced, steps.get(traced.root_path, {}).get(traced.root)))
    file_result.findings.extend(finding for finding, _ in per_step_findings(file_result, per_step, step_loops, getattr(steps, "host_params", frozenset()),
                                                                            shared.settings))
    file_result.findings.extend(_every_n_findings(file_result, per_step, every_n))
    # (a function a step runs every N steps is placed so: not as one no step runs)
    waiting = [c for c in file_result.conditional if c.key not in every_n] if every_n else file_result.conditional
    file_result.findings.extend(_unreached_findings(file_result, per_step, getattr(steps, "constructed", None), waiting, shared.trained))
    file_result.findings.extend(_model_findings(file_result, per_step, models, step_loops, waiting))
    file_result.findings.sort(key=Finding.sort_key)
    return True


def _dead_method(project: Project | None, path: str | None, key: str) -> bool:
    """Is method ``key`` (``Cls.m``) of file ``path`` one no object of the project runs?"""
    class_key, _, name = key.rpartition(".")
    return project is not None and path in project.files and overridden(project, path, class_key, name)


def subclass_holds(project: Project | None, path: str | None, subclass_of: tuple[tuple, str]) -> bool:
    """Does the class of ``Conditional.subclass_of`` derive from its family's library classes?"""
    return project is not None and path is not None and path in project.files and derives_from(project, path, *subclass_of)


def _settle_host_steps(file_result: FileResult, host: bool) -> None:
    """The device-bound findings of a file that names no device (``UNLESS_HOST_STEPS``): findings
    as its own file placed them, unless the join finds its steps host-only (``host``)."""
    waiting = [c for c in file_result.conditional if c.key == UNLESS_HOST_STEPS]
    file_result.conditional = [c for c in file_result.conditional if c.key != UNLESS_HOST_STEPS]
    if not host:
        file_result.findings.extend(c.finding for c in waiting)
        file_result.findings.sort(key=Finding.sort_key)


def _with_devices(condition: Conditional, on_device: bool) -> Conditional:
    """A finding that holds by its key or by its device parameters (``Conditional.device_key``):
    waiting for the place the device parameters give where they hold, else for its key."""
    if not condition.device_key:
        return condition
    return condition._replace(key=condition.device_key, if_device=()) if on_device else condition._replace(if_device=())


def step_loops_of(steps: Steps, path: str | None) -> dict[str, str]:
    """The loops of file ``path`` that the join made steps: a line's loops inside them repeat
    within the step, the step loop itself does not."""
    return {key: over for (where, key), over in getattr(steps, "step_loops", {}).items() if where == path}


def per_step_findings(file_result: FileResult, per_step: dict[str, StepInfo],
                      step_loops: dict[str, str] | None = None, host_params: frozenset[tuple[str, str]] = frozenset(),
                      settings: SettingDefaults | None = None) -> Iterator[tuple[Finding, StepInfo]]:
    """The conditional findings of ``file_result`` whose function runs every step
    (``per_step``: the join's for its file), settled, each with how it is per-step; one whose
    branch every call in its file skips (``Conditional.off_here``) at the opt-in tier where
    ``settings`` (the project's callers) shows no other file calls its function."""
    here = file_result.summary.path if file_result.summary is not None else None
    for condition in file_result.conditional:
        if condition.compiled:
            continue  # waits for compiled code, not for the step
        info = per_step.get(condition.key)
        if info is None or (condition.device_bound and info.host_only):
            continue
        if condition.needs_tensor and not info.tensor_args:
            continue  # `if isinstance(v, Tensor): v.item()` and every caller passes Python values
        if condition.unless_host and (file_result.summary.path, condition.unless_host) in host_params:  # type: ignore[union-attr]
            continue  # `self.out_dim.item()` and every construction passes a host tensor as `out_dim`
        if condition.returned and info.feeds_env:
            continue  # `return self.actor(s).cpu().numpy()` and every per-step caller steps an environment with it
        info, off = turned_on(condition, info, per_step)
        if not off and condition.off_here and settings is not None and here is not None \
                and settings.called_only_in(here, condition.key.partition("#")[0]):
            off = condition.off_here  # `if top_p > 0:` and every call in the project passes `TOP_P = 0.0`
        if not off and not condition.opt_in and condition.switch is not None and settings is not None and here is not None:
            off = settings.turned_on_nowhere(here, *condition.switch) or ""  # `if self.debug:` and no construction passes `debug=True`
            if not off:  # a construction may turn it on (dreamerv3's `config.dyn_discrete`): its default is no run's
                condition = _switch_set(condition)
        if not off and condition.flag and settings is not None and here is not None:
            off = settings.passed_off_everywhere(here, condition.flag) or ""  # `if check:` (on by default) and every call passes `check=False`
        if not off and settings is not None and here is not None:  # `if top_k is not None: top_k_logits(...)`, its only call, and none passes `top_k`
            off = settings.called_switched_off(here, condition.key.partition("#")[0]) or ""
        if not off and settings is not None and info.sites:  # a vendored package's loop that no code of the project reaches
            off = uncalled_vendored(settings, info.sites[0]) or ""
        if condition.repeated is not None and bool(_place(info, condition.repeats, condition.position, step_loops or {}, condition.rare).per_step) is not condition.repeated:
            continue  # the rule for the other place (repeated within the step, or once) reports it
        yield _per_step_finding(condition, info, step_loops or {}, off), info


def _every_n_findings(file_result: FileResult, per_step: dict[str, StepInfo], every_n: dict[str, EveryN]) -> Iterator[Finding]:
    """The conditional findings of functions a step calls only under a recurring guard
    (``Steps.every_n``: ``if step % 100 == 0: evaluate()``), at the every-N tier with the guard's
    words, as under that guard in the step itself; none of a rule quiet there (a read for a log line)."""
    for condition in file_result.conditional:
        reach = every_n.get(condition.key)
        if reach is None or condition.key in per_step or condition.compiled or condition.quiet_every_n or condition.opt_in or condition.repeated:
            continue  # (a rule that holds only where its line repeats within a step: not every N steps)
        finding = condition.finding
        place = Place(Where.EVERY_N, guard=reach.words)
        impact, reason = assess(Cost[condition.cost], place) if condition.cost else (finding.impact, finding.impact_reason)
        message = finding.message.replace(STEP_PLACEHOLDER, reach.text(condition.key, finding.location.path))
        related = finding.related + tuple(site for site in (reach.site,) if site is not None and site not in finding.related and site != finding.location)
        yield replace(finding, message=message, related=related, impact=impact, impact_reason=reason)


def turned_on(condition: Conditional | InStepIfCalled, info: StepInfo, per_step: dict[str, StepInfo]) -> tuple[StepInfo, str]:
    """The reach that runs a finding under ``if flag:`` (a parameter off by default): one
    whose call passes the flag (``f#passed:flag``, or ``**kwargs``); where none does, the
    function's own reach and the words that say the path is opt-in."""
    if not condition.opt_in:
        return info, ""
    function = condition.key.partition("#")[0]
    caller = per_step.get(function)
    if caller is None or caller.hook:
        return info, ""  # a framework's hook or a step loop of its own: its callers are not seen
    passing = per_step.get(f"{function}#passed:{condition.opt_in}") or per_step.get(f"{function}#passed:*")
    if passing is not None:
        return passing, ""
    return info, f"only on an opt-in path: `{condition.opt_in}` is off by default and no per-step call in the project passes it"


def turned_switches(steps: Steps) -> frozenset[str]:
    """The process-wide switches some file of the joined project turns (``FileSummary.switches``)."""
    project = getattr(steps, "project", None)
    return frozenset(s for summary in project.files.values() for s in summary.switches) if project is not None else frozenset()


def _pending_findings(file_result: FileResult, project: Project | None, settings: SettingDefaults | None,
                      switches: frozenset[str] = frozenset(), trained: bool = True) -> Iterator[Finding]:
    """The loader findings that waited for their dataset's class (another file's): dropped
    where it only indexes what it holds (nothing for workers) or, for one that holds only
    for heavy work, where it does none; else with what it does per sample, and the hint a
    stream needs. One that waited for a setting's default (``args.num_workers``, parsed in
    its callers' files) holds only where that default is 0."""
    path = file_result.summary.path if file_result.summary is not None else None
    for pending in file_result.pending:
        if pending.switch is not None or pending.flag:  # behind a switch off by default or flags: low where no call turns it on
            words = settings.turned_on_nowhere(path, *pending.switch) if settings is not None and path is not None and pending.switch is not None else None
            if words is None and settings is not None and path is not None and pending.flag:
                words = settings.passed_off_everywhere(path, pending.flag)  # every call leaves one of them off
            yield pending.finding if words is None else opt_in_finding(pending.finding, words)
            continue
        if pending.untrained is not None and not trained:
            pending = pending._replace(finding=pending.untrained)  # an inference application: its layers run forwards only
        if pending.unless_switch and pending.unless_switch in switches:
            continue  # a file of the project turns the switch that makes it moot
        if pending.subclass_of:
            if project is not None and path in project.files and derives_from(project, path, pending.dataset, pending.subclass_of):  # type: ignore[arg-type]
                yield pending.finding
            continue  # not the project's class, or one deriving from no class of the family
        if pending.host_helper is not None:
            if project is not None and path in project.files and builds_on_host(project, pending.dataset, path, *pending.host_helper):  # type: ignore[arg-type]
                yield pending.finding
            continue  # not the project's function, or one that builds on the device (or is given it)
        if pending.unless_host_return:
            if project is None or path not in project.files or not returns_host(project, pending.dataset, path):
                yield pending.finding
            continue  # every function the call may run returns host values: nothing on the device to wait for
        if pending.unless_buffers:
            if project is None or path not in project.files or not buffers_only(project, pending.dataset, path):
                yield pending.finding
            continue  # buffers and no weights: nothing records a graph through it
        if pending.unless_built:
            if settings is None or path is None or not any(settings.always_built(path, *field) for field in pending.unless_built):
                yield pending.finding
            continue  # the default is no run's value: every construction passes its own
        if pending.unless_cached or pending.unless_passed:
            if not pending.unless_cached or project is None or path not in project.files or not decodes_from_a_cache(project, pending.dataset, path):
                # (a library's model, or one of the project's that keeps no cache)
                finding = _by_callers(pending.finding, pending.unless_passed, settings, path)
                if finding is not None:
                    yield finding
            continue
        if pending.loader is not None and (project is None or path not in project.files or not confirmed_loader(project, path, *pending.loader)):
            continue  # not a DataLoader subclass, or one that sets the option itself
        if pending.setting is not None and (settings is None or path is None or settings.passed_default(path, *pending.setting) != 0):
            continue  # the setting is the run's choice, or set to workers
        work = cls = None
        if pending.dataset is not None and project is not None and path in project.files:
            owner = project.class_of(pending.dataset, path, 0)
            # (a factory function, `dataset()` of another file, resolves too: only a class says what it does per sample)
            cls = project.classes.get(owner[0], {}).get(owner[1]) if owner is not None else None
            if cls is not None:
                work = cls.samples
        if pending.trainable_only:  # TL308/TL309: a network of another file's class
            if cls is not None and cls.weights in WEIGHTED:
                yield pending.backbone if cls.weights == BACKBONE and pending.backbone is not None else pending.finding
            continue
        if (work is not None and work.cheap and not work.given) or (pending.heavy_only and (work is None or not work.heavy)):
            continue
        if pending.prebatched and pending.dataset is not None and work is not None and not work.work:
            continue  # whole batches sliced from what the dataset holds: one call per step, nothing for workers
        finding = pending.finding
        if pending.prebatched and pending.dataset is not None and work is None:
            finding = unseen_batches(finding)  # a library's batches: what it does per batch is not seen
        elif work is not None and work.given:
            finding = given_items(finding)  # items in memory, wherever they were loaded: only collation left
        yield replace(finding, message=finding.message.replace(WORK_PLACEHOLDER, work.words() if work is not None else ""),
                      fix_hint=workers_hint(work, finding.fix_hint))
    file_result.pending = []


def opt_in_finding(finding: Finding, words: str) -> Finding:
    """``finding`` on an opt-in path no call of the project turns on: low, the reason saying so."""
    return replace(finding, impact=LOW if IMPACT_RANK.get(finding.impact, 0) < IMPACT_RANK[LOW] else finding.impact,
                   impact_reason=f"{words}; {finding.impact_reason}" if finding.impact_reason else words)


def _by_callers(finding: Finding, passed: tuple[str, str] | None, settings: SettingDefaults | None, path: str | None) -> Finding | None:
    """A decoder whose cache a parameter of its function turns on, off by default (TL407), as
    it is unless every call of that function in the project turns it on: then a public
    function's default is what callers outside the project get (medium), and a private one's
    no caller gets (none)."""
    if passed is None or settings is None or path is None or not settings.always_passed(path, *passed):
        return finding
    function, flag = passed
    if function.rpartition(".")[2].startswith("_"):
        return None
    name = function.rpartition(".")[2]
    return replace(finding, impact=MEDIUM if finding.impact == HIGH else finding.impact,
                   impact_reason=f"{finding.impact_reason}; every call of `{name}()` in the project passes `{flag}`: "
                                 f"callers outside it get the default")


def _unreached_findings(file_result: FileResult, per_step: dict[str, StepInfo],
                        constructed: frozenset[tuple[str, str]] | None = None, waiting: list[Conditional] | None = None,
                        trained: bool = True) -> Iterator[Finding]:
    """The conditional findings no step is found to run (a module's ``forward``: run
    whenever the model is, by code not visible here: a model built from a config, a
    library), at the place and tier they carry, unless the steps show where they are used:
    a per-step function of the file that uses them (all its functions, where the finding
    names none) runs per step and they are not (an evaluation helper's module). Where no
    file of the project trains (``trained``), at the tier they carry for that, if any."""
    for condition in file_result.conditional if waiting is None else waiting:
        if condition.unreached is None or condition.compiled or condition.key in per_step:
            continue
        unreached = condition.unreached
        if per_step and (unreached.users is None or any(user in per_step for user in unreached.users)):
            continue
        here = file_result.summary.path if file_result.summary is not None else ""
        if per_step and unreached.users and constructed is not None \
                and not any((here, user.rpartition(".")[0]) in constructed for user in unreached.users):
            continue  # a step reaches the file, and no code of the project builds a module that uses it
        finding = condition.finding
        owner = condition.key.rpartition(".")[0]
        if per_step and unreached.users == () and constructed is not None and owner and (here, owner) not in constructed:
            # the project's steps run this file's models, yet no module of the file builds this one, and no code of the
            # project does (RWKV's `RWKV_TinyAttn`, its one construction commented out): dead code here, what it costs
            # only where other code builds it (a model library, which no step reaches, keeps its tier)
            yield replace(finding, message=finding.message.replace(STEP_PLACEHOLDER, f"`{condition.key}()` (its class `{owner}` is built nowhere "
                                                                                       "in the project)"),
                          impact=LOW, impact_reason=f"{unreached.reason.split(',')[0]}, only where code outside the project builds `{owner}`")
            continue
        impact, reason = unreached.untrained if unreached.untrained is not None and not trained else (unreached.impact, unreached.reason)
        yield replace(finding, message=finding.message.replace(STEP_PLACEHOLDER, unreached.where), impact=impact, impact_reason=reason)


def _model_findings(file_result: FileResult, per_step: dict[str, StepInfo], models: dict[str, StepInfo],
                    step_loops: dict[str, str], waiting: list[Conditional] | None = None) -> Iterator[Finding]:
    """The conditional findings no step is found to run, in code run on every call of a model
    (``Steps.models``: a model built from a config or a registry, a library's), where what they
    cost is paid on each call (a wait: ``impact.per_call``); the tier from how often each call
    repeats them. Not under a logging guard or behind a parameter off by default, nor where
    only a tensor argument makes them hold (what the model is given is not visible). TL405's ``unreached`` place has its own words."""
    for condition in file_result.conditional if waiting is None else waiting:
        info = models.get(condition.key)
        if info is None or condition.key in per_step or condition.compiled or condition.unreached is not None \
                or not condition.cost or condition.needs_tensor or condition.rare or condition.optional and not info.hook:
            # (behind a parameter off by default, `if debug_percentile is not None:`: whoever calls the model is not seen
            # to pass it; a forward patched into a library's module is passed what that library's model passes: a mask)
            continue
        if condition.device_bound and info.host_only:
            continue  # a project that runs on the host: its models' tensors are host tensors
        place = _place(info, condition.repeats, condition.position, step_loops)
        if condition.repeated is not None and bool(place.per_step) is not condition.repeated:
            continue  # the rule for the other place (repeated within the call, or once) reports it
        tiered = per_call(Cost[condition.cost], place.per_step, place.position)
        if tiered is None:
            continue
        if condition.returned and condition.cost == Cost.HOST_COPY.name and not place.per_step:
            # `depth_pred.cpu().numpy()` returned by a model's test-time inference: its result, once per call, has to reach the host
            # (a copy of the result; a read that only scales it, `x * x.sum().item()`, is no result of its own)
            tiered = (LOW, f"{tiered[1].partition(':')[0]}: the call's result, copied once and returned to its caller, which needs it on the host")
        finding = condition.finding
        message = finding.message.replace(STEP_PLACEHOLDER, _model_text(condition.key, info))
        yield replace(finding, message=with_multiplicity(message, place), impact=tiered[0], impact_reason=tiered[1])


def _model_text(key: str, info: StepInfo) -> str:
    """Where a finding runs on every call of a model: "`RVRT.upsample()` (called from
    `RVRT.forward()`, on every call of the model `RVRT.forward()`; no loop that runs it is visible)"."""
    name = key.partition("#")[0]
    if info.origin == f"`{name}()`":
        return f"`{name}()` (every call of the model; no loop that runs it is visible)"
    via = f"called from `{info.via.partition('#')[0]}()`, " if info.via else ""
    return f"`{name}()` ({via}on every call of the model {info.origin}; no loop that runs it is visible)"


def _switch_set(condition: Conditional) -> Conditional:
    """``condition`` with its constructor switch's words "only when `discrete` is set on `RSSM()`", not
    "(off by default)", where a construction in the project may turn it on."""
    function, param, optional = condition.switch  # type: ignore[misc]
    owner, _, name = function.rpartition(".")
    if name != "__init__" or condition.guard != switch_off_words(owner, param, optional):
        return condition  # (another guard's words: a timer's, an every-2nd-step one)
    return condition._replace(guard=switch_set_words(owner, param, optional))


def _per_step_finding(condition: Conditional, info: StepInfo, step_loops: dict[str, str], off: str = "") -> Finding:
    finding, cost = condition.finding, condition.cost
    related = finding.related + tuple(site for site in info.sites if site not in finding.related and site != finding.location)
    place = _place(info, condition.repeats, condition.position, step_loops, condition.rare, condition.guard, off)
    impact, reason = assess(Cost[cost], place, info.host_only) if cost else (finding.impact, finding.impact_reason)
    message = finding.message.replace(STEP_PLACEHOLDER, info.text(condition.key, finding.location.path))
    return replace(finding, message=with_multiplicity(message, place), related=related, impact=impact, impact_reason=reason)


def _place(info: StepInfo, repeats: tuple, position: object, step_loops: dict[str, str], rare: bool = False, guard: str = "",
           off: str = "") -> Place:
    """How often a line of a per-step function runs per step, and where: the function's
    count times the loops around the line in it (those inside the step), and the line's
    own position where its function says (device work after it), else its call's; every
    N steps under a guard in its function, as under one in a loop of its own file (at most
    once every few seconds under a timer's: ``guard``); rarely, on an opt-in path no
    per-step call turns on (``off``: the words), as often as it would run there."""
    if rare:
        return Place(Where.EVERY_N, guard=guard)
    local, unit = within_step(repeats, step_loops)
    # No loop of its function is the step: the function's own count (and what its step is:
    # "per decoded token" when a decode loop calls it) times the loops around the line.
    per_step = info.per_step.then(*local) if unit == "step" else Multiplicity(local, unit)
    if off:  # (its multiplicity kept: a rule that holds only where the line repeats still sees it)
        return Place(Where.EVERY_N, per_step, guard=off)
    return Place(info.where, per_step, at_call(position, info.position, bool(local) and Multiplicity(local).waits_again), guard or info.guard)  # type: ignore[arg-type]


def _compiled_finding(condition: Conditional, traced: CompiledInfo, step: StepInfo | None) -> Finding:
    """A finding in code torch.compile traces: it costs on every call of the compiled code,
    which is every step where the join finds the compiled function per-step (a batch loop's
    otherwise). The same function run eagerly elsewhere breaks no graph there."""
    finding = condition.finding
    impact, reason = assess(Cost[condition.cost], step.where if step is not None else Where.BATCH)
    return replace(finding, message=finding.message.replace(STEP_PLACEHOLDER, traced.text(condition.key)), impact=impact, impact_reason=reason)


def _raise_impacts(file_result: FileResult, per_step: dict[str, StepInfo], step_loops: dict[str, str],
                   models: dict[str, StepInfo] | None = None, every_n: dict[str, EveryN] | None = None,
                   settings: SettingDefaults | None = None) -> None:
    """Findings in functions a step calls (``forward``, a helper) cost what the step's
    frequency says, not what their place in their own file said (once): the join's place
    gives their tier, reason and multiplicity, as it does to the per-step rules' findings,
    wherever it says as much as the file did or more. In a function no step is seen to run but
    every call of a model does (``Steps.models``: glide's ``timestep_embedding`` in its UNet's
    ``forward``), a wait is paid on each call (``impact.per_call``), as for the per-step rules; in a
    function a step calls every N steps (``Steps.every_n``), the every-N tier and the guard's words; in a
    function only called behind a switch no call turns on (``SettingDefaults.called_switched_off``), the opt-in one."""
    raised: dict[tuple[str, object], tuple[str, str, Place]] = {}
    here = file_result.summary.path if file_result.summary is not None else None
    for pending in file_result.in_functions:
        info = per_step.get(pending.key)
        if info is not None:
            info, off = turned_on(pending, info, per_step)
            if not off and settings is not None and here is not None:
                off = settings.called_switched_off(here, pending.key.partition("#")[0]) or ""
            if not off and pending.flag and settings is not None and here is not None:
                off = settings.passed_off_everywhere(here, pending.flag) or ""  # every call leaves one of its flags off
            if not off and settings is not None and info.sites:  # a vendored package's loop that no code of the project reaches
                off = uncalled_vendored(settings, info.sites[0]) or ""
            place = _place(info, pending.repeats, pending.position, step_loops, pending.rare, pending.guard, off)
            raised[(pending.code, pending.location)] = (*assess(Cost[pending.cost], place, info.host_only), place)
            continue
        reach = (every_n or {}).get(pending.key)
        if reach is not None:  # (the same tier as once: its reason says how often, "once (not every step)" being untrue)
            place = Place(Where.EVERY_N, guard=reach.words)
            raised[(pending.code, pending.location)] = (*assess(Cost[pending.cost], place), place)
            continue
        info = (models or {}).get(pending.key)
        if info is not None and not pending.rare and not pending.opt_in:  # (whoever calls the model is not seen to pass a flag)
            place = _place(info, pending.repeats, pending.position, step_loops)
            tiered = per_call(Cost[pending.cost], place.per_step, place.position)
            if tiered is not None:
                raised[(pending.code, pending.location)] = (*tiered, place)
    if not raised:
        return
    findings = []
    for finding in file_result.findings:
        better = raised.get((finding.code, finding.location))
        if better is not None and IMPACT_RANK[better[0]] <= IMPACT_RANK.get(finding.impact, 3) and better[1] != finding.impact_reason:
            # (same tier: the reason still changes, "once (not every step)" being untrue)
            times = with_multiplicity("", better[2])  # " (per parameter per step)", once even if settled twice
            message = finding.message if finding.message.endswith(times) else finding.message + times
            finding = replace(finding, message=message, impact=better[0], impact_reason=better[1])
        findings.append(finding)
    file_result.findings = findings
