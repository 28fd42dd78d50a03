"""Where the join places a file's conditional findings (every step, every N steps, a model's calls, compiled code, unreached), and their tiers."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import TypeVar

from torchlint.analysis.compiled_reach import CompiledInfo
from torchlint.analysis.every_n import EveryN
from torchlint.analysis.sequence_end_words import per_finished_sequence
from torchlint.analysis.impact import LONG_STEP_COSTS, Cost, assess, per_call, with_multiplicity
from torchlint.analysis.join_steps import StepInfo, within_step
from torchlint.analysis.multiplicity import FULL_BATCH_WORDS, Multiplicity, Place, Where, at_call, keywords_counted
from torchlint.analysis.setting_defaults import SettingDefaults
from torchlint.analysis.switch_words import switch_off_words, switch_set_words
from torchlint.analysis.vendored_reach import uncalled_vendored
from torchlint.engine.results import Conditional, FileResult, InStepIfCalled
from torchlint.findings import IMPACT_RANK, LOW, Finding

# checks.base.STEP_PLACEHOLDER, repeated here because checks/ imports libcst and settling
# runs on cached results too (tests/test_startup.py keeps the two equal).
STEP_PLACEHOLDER = "\ue000step\ue000"


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
        condition = keywords_known(condition, settings, here)
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


def every_n_findings(file_result: FileResult, per_step: dict[str, StepInfo], every_n: dict[str, EveryN]) -> Iterator[Finding]:
    """The conditional findings of functions a step calls only under a recurring guard
    (``Steps.every_n``: ``if step % 100 == 0: evaluate()``), at the every-N tier with the guard's
    words, as under that guard in the step itself; none of a rule quiet there (a read for a log line)."""
    for condition in file_result.conditional:
        reach = every_n.get(condition.key)
        # (a rule quiet every N steps, a read for a log line, still holds once per finished sequence: a decode loop's own wait)
        quiet = condition.quiet_every_n and reach is not None and not per_finished_sequence(reach.words)
        if reach is None or condition.key in per_step or condition.compiled or quiet or condition.opt_in or condition.repeated:
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


def unreached_findings(file_result: FileResult, per_step: dict[str, StepInfo],
                        constructed: frozenset[tuple[str, str]] | None = None, waiting: list[Conditional] | None = None,
                        trained: bool = True, never_built: frozenset[tuple[str, str]] = frozenset()) -> Iterator[Finding]:
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
        if (dead := _never_built(condition, file_result, never_built, unreached.reason)) is not None:
            yield dead
            continue
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


def model_findings(file_result: FileResult, per_step: dict[str, StepInfo], models: dict[str, StepInfo],
                    step_loops: dict[str, str], waiting: list[Conditional] | None = None,
                    never_built: frozenset[tuple[str, str]] = frozenset(), settings: SettingDefaults | None = None) -> Iterator[Finding]:
    """The conditional findings no step is found to run, in code run on every call of a model
    (``Steps.models``: a model built from a config or a registry, a library's), where what they
    cost is paid on each call (a wait: ``impact.per_call``); the tier from how often each call
    repeats them. Not under a logging guard or behind a parameter off by default, nor where
    only a tensor argument makes them hold (what the model is given is not visible). TL405's ``unreached`` place has its own words.
    Low, with words, behind a flag every construction leaves off (``SettingDefaults.passed_off_everywhere``:
    minRF's ``else`` of ``if self.ln:``, no ``RF(..., ln=False)``), as in a step."""
    for condition in file_result.conditional if waiting is None else waiting:
        info = models.get(condition.key)
        if info is None or condition.key in per_step or condition.compiled or condition.unreached is not None \
                or not condition.cost or condition.needs_tensor or condition.rare or condition.optional and not info.hook:
            # (behind a parameter off by default, `if debug_percentile is not None:`: whoever calls the model is not seen
            # to pass it; a forward patched into a library's module is passed what that library's model passes: a mask)
            continue
        if condition.device_bound and info.host_only:
            continue  # a project that runs on the host: its models' tensors are host tensors
        if (dead := _never_built(condition, file_result, never_built, Cost[condition.cost].value)) is not None:
            yield dead
            continue
        condition = keywords_known(condition, settings, file_result.summary.path if file_result.summary is not None else None)
        place = _place(info, condition.repeats, condition.position, step_loops)
        if condition.repeated is not None and bool(place.per_step) is not condition.repeated:
            continue  # the rule for the other place (repeated within the call, or once) reports it
        tiered = per_call(Cost[condition.cost], place.per_step, place.position, condition.guard, condition.distributed_only)
        if tiered is None:
            continue
        if condition.returned and condition.cost == Cost.HOST_COPY.name and not place.per_step:
            # `depth_pred.cpu().numpy()` returned by a model's test-time inference: its result, once per call, has to reach the host
            # (a copy of the result; a read that only scales it, `x * x.sum().item()`, is no result of its own)
            tiered = (LOW, f"{tiered[1].partition(':')[0]}: the call's result, copied once and returned to its caller, which needs it on the host")
        finding = condition.finding
        message = finding.message.replace(STEP_PLACEHOLDER, _model_text(condition.key, info))
        here = file_result.summary.path if file_result.summary is not None else None
        off = settings.passed_off_everywhere(here, condition.flag) if condition.flag and settings is not None and here is not None else None
        if not off and settings is not None and here is not None:  # a module only a branch no construction takes builds (OpenNMT's MoE): not its callers' switches, unseen
            off = settings.only_built_off(here, condition.key.partition("#")[0])
        if off:
            tiered = (LOW, f"{off}; {tiered[1]}")
        yield replace(finding, message=with_multiplicity(message, place), impact=tiered[0], impact_reason=tiered[1])


def _never_built(condition: Conditional, file_result: FileResult, never_built: frozenset[tuple[str, str]], cost: str) -> Finding | None:
    """Low, where the class of the condition's method is one the project never builds
    (``Steps.never_built``: no code of the application builds, imports or names it): dead code
    here, a cost only to code outside the project that builds it. None for any other class."""
    key = condition.key.partition("#")[0]
    owner = key.split(".")[0] if "." in key else ""
    here = file_result.summary.path if file_result.summary is not None else ""
    if not owner or (here, owner) not in never_built:
        return None
    finding = condition.finding
    words = f"`{key}()` (`{owner}` is never built in this project: no code of it builds, imports or names the class)"
    return replace(finding, message=finding.message.replace(STEP_PLACEHOLDER, words), impact=LOW,
                   impact_reason=f"{cost.split(',')[0]}, only where code outside the project builds `{owner}`: this project never does")


def _model_text(key: str, info: StepInfo) -> str:
    """Where a finding runs on every call of a model: "`RVRT.upsample()` (called from
    `RVRT.forward()`, on every call of the model `RVRT.forward()`; no loop that runs it is visible)"."""
    name = key.partition("#")[0]
    if info.origin == f"`{name}()`":
        return f"`{name}()` (every call of the model; no loop that runs it is visible)"
    via = f"called from `{info.via.partition('#')[0]}()`, " if info.via else ""
    return f"`{name}()` ({via}on every call of the model {info.origin}; no loop that runs it is visible)"


_Placed = TypeVar("_Placed", Conditional, InStepIfCalled)


def keywords_known(condition: _Placed, settings: SettingDefaults | None, here: str | None) -> _Placed:
    """``condition`` with a loop of its function over its own ``**`` parameter counted by the keywords
    the project's calls pass there (``CallIndexes.keywords_passed``, ``multiplicity.keywords_counted``)."""
    if settings is None or here is None or not any(repeat.keywords for _, repeat in condition.repeats):
        return condition  # (no such loop around it, as for nearly every finding: nothing to ask)
    count = settings.keywords_passed(here, condition.key.partition("#")[0])
    return condition._replace(repeats=keywords_counted(condition.repeats, count))


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
    place = _place(info, condition.repeats, condition.position, step_loops, condition.rare, (condition.guard, condition.distributed_only), off)
    if cost and info.origin == FULL_BATCH_WORDS:
        cost = LONG_STEP_COSTS.get(Cost[cost], Cost[cost]).name  # one write per full-batch epoch: a long step
    impact, reason = assess(Cost[cost], place, info.host_only) if cost else (finding.impact, finding.impact_reason)
    message = info.said(finding.message, STEP_PLACEHOLDER, condition.key, finding.location.path)
    return replace(finding, message=with_multiplicity(message, place), related=related, impact=impact, impact_reason=reason)


def _place(info: StepInfo, repeats: tuple, position: object, step_loops: dict[str, str], rare: bool = False,
           guard: tuple[str, bool] = ("", False), off: str = "") -> Place:
    """How often a line of a per-step function runs per step, and where: the function's
    count times the loops around the line in it (those inside the step), and the line's
    own position where its function says (device work after it), else its call's; every
    N steps under a guard in its function, as under one in a loop of its own file (at most
    once every few seconds under a timer's: ``guard``, its words and whether it is
    multi-process-only, else the function's reach's); rarely, on an opt-in path no
    per-step call turns on (``off``: the words), as often as it would run there."""
    words, distributed_only = guard
    if rare:
        return Place(Where.EVERY_N, guard=words, distributed_only=distributed_only)
    local, unit = within_step(repeats, step_loops)
    # No loop of its function is the step: the function's own count (and what its step is:
    # "per decoded token" when a decode loop calls it) times the loops around the line.
    per_step = info.per_step.then(*local) if unit == "step" else Multiplicity(local, unit)
    if off:  # (its multiplicity kept: a rule that holds only where the line repeats still sees it)
        return Place(Where.EVERY_N, per_step, guard=off)
    if not words:  # (no guard of its own around the line: its reach's, td3's `% policy_freq` on the way)
        words, distributed_only = info.guard, info.distributed_only
    return Place(info.where, per_step, at_call(position, info.position, bool(local) and Multiplicity(local).waits_again), words, distributed_only)  # type: ignore[arg-type]


def compiled_finding(condition: Conditional, traced: CompiledInfo, step: StepInfo | None) -> Finding:
    """A finding in code torch.compile traces: it costs on every call of the compiled code,
    which is every step where the join finds the compiled function per-step (a batch loop's
    otherwise). The same function run eagerly elsewhere breaks no graph there; compiled only with
    a setting off by default (``CompiledInfo.switch``), low."""
    finding = condition.finding
    where = step.where if step is not None else Where.BATCH
    # compiled only with a setting of the run off by default (`if args.torchcompile:`): a run at the defaults breaks no graph
    place = Place(Where.EVERY_N, guard=f"{where.value}, but compiled {traced.switch}") if traced.switch else where
    impact, reason = assess(Cost[condition.cost], place)
    return replace(finding, message=finding.message.replace(STEP_PLACEHOLDER, traced.text(condition.key)), impact=impact, impact_reason=reason)


def raise_impacts(file_result: FileResult, per_step: dict[str, StepInfo], step_loops: dict[str, str],
                   models: dict[str, StepInfo] | None = None, every_n: dict[str, EveryN] | None = None,
                   settings: SettingDefaults | None = None) -> None:
    """Findings in functions a step calls (``forward``, a helper) cost what the step's
    frequency says, not what their place in their own file said (once): the join's place
    gives their tier, reason and multiplicity, as it does to the per-step rules' findings,
    wherever it says as much as the file did or more. In a function no step is seen to run but
    every call of a model does (``Steps.models``: glide's ``timestep_embedding`` in its UNet's
    ``forward``), a wait is paid on each call (``impact.per_call``), as for the per-step rules; in a
    function a step calls every N steps (``Steps.every_n``), the every-N tier and the guard's words; in a
    function only called behind a switch no call turns on (``SettingDefaults.called_switched_off``), the opt-in one;
    behind a flag every call or construction leaves off (``passed_off_everywhere``), low on a model's every call too."""
    raised: dict[tuple[str, object], tuple[str, str, Place]] = {}
    lowered: set[tuple[str, object]] = set()  # (behind a flag no construction turns on: lowered, not raised)
    here = file_result.summary.path if file_result.summary is not None else None
    for pending in file_result.in_functions:
        pending = keywords_known(pending, settings, here)
        info = per_step.get(pending.key)
        if info is not None:
            info, off = turned_on(pending, info, per_step)
            if not off and settings is not None and here is not None:
                off = settings.called_switched_off(here, pending.key.partition("#")[0]) or ""
            if not off and pending.flag and settings is not None and here is not None:
                off = settings.passed_off_everywhere(here, pending.flag) or ""  # every call leaves one of its flags off
            if not off and settings is not None and info.sites:  # a vendored package's loop that no code of the project reaches
                off = uncalled_vendored(settings, info.sites[0]) or ""
            place = _place(info, pending.repeats, pending.position, step_loops, pending.rare, (pending.guard, pending.distributed_only), off)
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
            tiered = per_call(Cost[pending.cost], place.per_step, place.position, pending.guard, pending.distributed_only)
            off = settings.passed_off_everywhere(here, pending.flag) if pending.flag and settings is not None and here is not None else None
            if not off and tiered is not None and settings is not None and here is not None:  # (a module only a branch no construction takes builds)
                off = settings.only_built_off(here, pending.key.partition("#")[0])
            if tiered is not None and off:  # every construction leaves one of its flags off (minRF's `else` of `if self.ln:`): low, saying so
                lowered.add((pending.code, pending.location))
                tiered = (LOW, f"{off}; {tiered[1]}")
            if tiered is not None:
                raised[(pending.code, pending.location)] = (*tiered, place)
    if not raised:
        return
    findings = []
    for finding in file_result.findings:
        better = raised.get((finding.code, finding.location))
        if better is not None and ((finding.code, finding.location) in lowered or IMPACT_RANK[better[0]] <= IMPACT_RANK.get(finding.impact, 3)) \
                and better[1] != finding.impact_reason:
            # (same tier: the reason still changes, "once (not every step)" being untrue)
            times = with_multiplicity("", better[2])  # " (per parameter per step)", once even if settled twice
            message = finding.message if finding.message.endswith(times) else finding.message + times
            finding = replace(finding, message=message, impact=better[0], impact_reason=better[1])
        findings.append(finding)
    file_result.findings = findings
