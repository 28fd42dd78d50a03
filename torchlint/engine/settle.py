"""The project-wide join over per-file summaries, and each file's waiting findings settled by it (placed by engine/settle_places.py)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

from torchlint.analysis.dispatch import overridden
from torchlint.analysis.join_steps import Steps
from torchlint.analysis.library_bases import derives_from
from torchlint.analysis.loader_bases import confirmed_loader
from torchlint.analysis.project import Project
from torchlint.analysis.join_loops import ModelReach
from torchlint.analysis.project_callees import buffers_only, builds_on_host, decodes_from_a_cache, ends_drained, keeps_host_tensor, queues_work, returns_host
from torchlint.analysis.samples import WORK_PLACEHOLDER, given_items, unseen_batches, workers_hint
from torchlint.analysis.setting_defaults import SettingDefaults
from torchlint.analysis.weight_kinds import BACKBONE, WEIGHTED
from torchlint.engine.isolate import guarded_stage, settle_project
from torchlint.engine.results import PLACED, UNLESS_HOST_STEPS, Conditional, FileResult, Pending
from torchlint.engine.settle_places import (compiled_finding, every_n_findings, model_findings, per_step_findings, raise_impacts,
                                            unreached_findings)
from torchlint.findings import HIGH, IMPACT_RANK, LOW, MEDIUM, Finding


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
        # (and a wait pended only to be lowered after another file's draining call: it stands as placed)
        before = sorted([*file_result.findings, *(c.finding for c in file_result.conditional
                                                  if c.key == UNLESS_HOST_STEPS or c.key == PLACED and not c.if_device),
                         *(d.finding for d in file_result.pending if d.after_drain is not None
                           and d._replace(after_drain=None, called_in="", run_flags=()) == Pending(d.finding, None, False))],
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
    def reach(self) -> ModelReach | None:
        """What the project's functions run a few calls deep (a backward, an optimizer step, a model): made once."""
        if "_reach" not in self.__dict__:
            self._reach = ModelReach(self.project) if self.project is not None else None
        return self._reach

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
        file_result.findings.extend(_called_off(c.finding, c.called_in, (), shared.settings, here)
                                    for c in file_result.conditional if c.key == PLACED and not c.if_device)
        file_result.conditional = [c for c in file_result.conditional if c.key != PLACED or c.if_device]
        file_result.findings.sort(key=Finding.sort_key)
    if any(c.subclass_of for c in file_result.conditional):  # a class of another file: kept where it derives from the family
        file_result.conditional = [c for c in file_result.conditional if not c.subclass_of or subclass_holds(shared.project, here, c.subclass_of)]
    if any(c.host_attribute for c in file_result.conditional):  # another object's attribute moved: kept where its class keeps a host tensor there
        file_result.conditional = [c for c in file_result.conditional if not c.host_attribute or _keeps_host_tensor(shared.project, here, c.host_attribute)]
    if any(c.key == UNLESS_HOST_STEPS for c in file_result.conditional):
        _settle_host_steps(file_result, here in getattr(steps, "host_steps", frozenset()))
    step_loops = step_loops_of(steps, here)
    models = getattr(steps, "models", {}).get(here, {})
    every_n = getattr(steps, "every_n", {}).get(here, {})
    if file_result.in_functions and (per_step or models or every_n):
        raise_impacts(file_result, per_step, step_loops, models, every_n, shared.settings)
    if file_result.pending:
        # (placed in a function the project may call only behind a switch no call turns on: whatever else it waited for)
        called_in = {(d.finding.code, d.finding.location): (d.called_in, d.run_flags) for d in file_result.pending if d.called_in}
        if any(d.lower_only for d in file_result.pending):  # (standing already: lowered where it stands)
            file_result.findings = [_called_off(f, *called_in.get((f.code, f.location), ("", ())), shared.settings, here) for f in file_result.findings]
            file_result.pending = [d for d in file_result.pending if not d.lower_only]
        file_result.findings.extend(_called_off(f, *called_in.get((f.code, f.location), ("", ())), shared.settings, here)
                                    for f in _pending_findings(file_result, shared.project, shared.settings, switches, shared.trained, shared))
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
                file_result.findings.append(compiled_finding(condition, traced, steps.get(traced.root_path, {}).get(traced.root)))
    file_result.findings.extend(finding for finding, _ in per_step_findings(file_result, per_step, step_loops, getattr(steps, "host_params", frozenset()),
                                                                            shared.settings))
    file_result.findings.extend(every_n_findings(file_result, per_step, every_n))
    # (a function a step runs every N steps is placed so: not as one no step runs)
    waiting = [c for c in file_result.conditional if c.key not in every_n] if every_n else file_result.conditional
    never_built = getattr(steps, "never_built", frozenset())
    file_result.findings.extend(unreached_findings(file_result, per_step, getattr(steps, "constructed", None), waiting, shared.trained, never_built))
    file_result.findings.extend(model_findings(file_result, per_step, models, step_loops, waiting, never_built, shared.settings))
    file_result.findings.sort(key=Finding.sort_key)
    return True


def _dead_method(project: Project | None, path: str | None, key: str) -> bool:
    """Is method ``key`` (``Cls.m``) of file ``path`` one no object of the project runs?"""
    class_key, _, name = key.rpartition(".")
    return project is not None and path in project.files and overridden(project, path, class_key, name)


def subclass_holds(project: Project | None, path: str | None, subclass_of: tuple[tuple, str]) -> bool:
    """Does the class of ``Conditional.subclass_of`` derive from its family's library classes?"""
    return project is not None and path is not None and path in project.files and derives_from(project, path, *subclass_of)


def _keeps_host_tensor(project: Project | None, path: str | None, kept: tuple[tuple, str]) -> bool:
    """``Conditional.host_attribute`` (or a pending one's object and attribute): does a class the object may be keep a host tensor there?"""
    return project is not None and path is not None and path in project.files and keeps_host_tensor(project, kept[0], path, kept[1])


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


def turned_switches(steps: Steps) -> frozenset[str]:
    """The process-wide switches some file of the joined project turns (``FileSummary.switches``)."""
    project = getattr(steps, "project", None)
    return frozenset(s for summary in project.files.values() for s in summary.switches) if project is not None else frozenset()


def _pending_findings(file_result: FileResult, project: Project | None, settings: SettingDefaults | None,
                      switches: frozenset[str] = frozenset(), trained: bool = True, shared: _Shared | None = None) -> Iterator[Finding]:
    """The loader findings that waited for their dataset's class (another file's): dropped
    where it only indexes what it holds (nothing for workers) or, for one that holds only
    for heavy work, where it does none; else with what it does per sample, and the hint a
    stream needs. One that waited for a setting's default (``args.num_workers``, parsed in
    its callers' files) holds only where that default is 0."""
    path = file_result.summary.path if file_result.summary is not None else None
    for pending in file_result.pending:
        pending = pending._replace(called_in="", run_flags=(), lower_only=False)  # (`_settle_file` lowers what it turns into: `_called_off`)
        if pending == Pending(pending.finding, None, False):  # waiting for nothing else
            yield pending.finding
            continue
        if pending.mid_step is not None:  # (a call after it queues a step's work: the wait is mid-step)
            reach, (later, moved) = shared.reach if shared is not None else None, pending.mid_step
            working = reach is not None and path in reach.project.files and queues_work(reach.project, later, path, reach)
            pending = pending._replace(finding=moved if working else pending.finding, mid_step=None)
            if pending == Pending(pending.finding, None, False):  # waiting for nothing else
                yield pending.finding
                continue
        if pending.after_drain is not None:  # (right after another file's call: low where what it runs ends drained)
            reach, (before, drained) = shared.reach if shared is not None else None, pending.after_drain
            ending = reach is not None and path in reach.project.files and ends_drained(reach.project, before, path)
            pending = pending._replace(finding=drained if ending else pending.finding, after_drain=None)
            if pending == Pending(pending.finding, None, False):  # waiting for nothing else
                yield pending.finding
                continue
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
        if pending.host_attribute:
            if _keeps_host_tensor(project, path, (pending.dataset, pending.host_attribute)):  # type: ignore[arg-type]
                yield pending.finding
            continue  # no class the object may be keeps a host tensor there (or none of the project's)
        if pending.unless_host_return:
            if project is None or path not in project.files or not returns_host(project, pending.dataset, path, pending.returned_element):
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


def _called_off(finding: Finding, function: str, flags: tuple[tuple[str, bool, bool], ...], settings: SettingDefaults | None, path: str | None) -> Finding:
    """``finding``, placed by its own file in ``function``: low, saying so, where its line runs only
    with a flag of the run that is off by default (``flags``: ``if args.augment:``), or where every call
    of that function in the project is made behind a switch or such a flag that nothing turns on."""
    if not function or finding.impact == LOW or settings is None or path is None:
        return finding  # (low already: behind its own function's switch, or a wait the join lowered)
    words = settings.run_flag_off(path, flags) or settings.called_switched_off(path, function)
    return finding if words is None else opt_in_finding(finding, words)


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


