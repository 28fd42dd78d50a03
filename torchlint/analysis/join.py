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
from dataclasses import replace

from torchlint.analysis import frameworks
from torchlint.analysis.compiled_reach import compiled_reach
from torchlint.analysis.every_n import every_n_reach
from torchlint.analysis.idle_models import idle_models
from torchlint.analysis.join_counts import sum_call_sites
from torchlint.analysis.join_generations import DECODED, Generations
from torchlint.analysis.join_loops import ModelReach, _loop_where, _step_loops
from torchlint.analysis.join_params import constructed, device_params, element_params, host_call_params, host_params, host_returned, host_steps, listed_params, never_built
from torchlint.analysis.join_spread import _as_training_step, _called_place, _spread
from torchlint.analysis.join_steps import StepInfo, Steps
from torchlint.analysis.multiplicity import ENV_STEP, EVALUATION_WORDS, GENERATION, FULL_BATCH_WORDS, LOOP_WORDS, MODEL_CALL, PHASE_WHERE, ROLLOUT_WORDS, Multiplicity, Position, Repeat, Where, phase_rank
from torchlint.analysis.patch_installs import installed_patches
from torchlint.analysis.project import Project
from torchlint.analysis.summary import FULL_BATCH, CallSite, FileSummary, LoopSummary
from torchlint.analysis.test_paths import test_suite_path


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
    sum_call_sites(project, steps, calls_by_caller, loops_by_file, step_loops)  # (before the loops and branches inside take their function's place)
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
    steps.host_params = host_params(project) | host_returned(project) | host_call_params(project)
    steps.device_params = device_params(project) | listed_params(project) | element_params(project)
    steps.constructed = project.built
    steps.never_built = never_built(project)
    return steps


def _guarded_steps(project: Project) -> dict[tuple[str, str], list[tuple[CallSite, tuple[str, str]]]]:
    """(file, caller) -> the calls it makes only every N runs (``FileSummary.guarded``) of a
    function that is a training step itself (Rainbow's ``if T % replay_frequency == 0:
    dqn.learn(mem)``), each with that function: the guard does not make its body rare, the
    training step is the step."""
    if not any(summary.guarded for summary in project.files.values()):
        return {}
    training = ModelReach(project).trains
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
                                      tensor_args=call.tensors, omitted=project.none_passed(call, callee, path), constants=project.constants(call, callee),
                                      uploaded=project.uploads(call, callee), passed=project.passes(call, callee), per_step=per_step, position=position))


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
            if "forward" in cls.methods and not cls.test and project.is_module(path, cls.key) \
                    and f"{cls.key}.forward" not in summary.trains:  # (a trainer module's `forward` runs the training itself: byol's `BYOLTrainer`)
                forward = f"{cls.key}.forward"
                # (its callers are not seen: any argument, or none, each left at its default)
                seeds.append((path, forward, StepInfo(f"`{forward}()`", (), Where.BATCH, per_step=Multiplicity((), MODEL_CALL), host_only=on_host,
                                                      passed=frozenset({"*"}), omitted=frozenset(project.params.get(path, {}).get(forward, ())))))
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
                evaluation = call.evaluates and loop_where is Where.TRAIN
                if evaluation:  # `result = test(...)` every epoch: its copies run once per evaluation, not in the training step
                    loop_where = Where.EVAL
                sites = (call.location,) if call.location is not None else ()
                omitted, constants = project.none_passed(call, callee, path), project.constants(call, callee)
                per_step, position = _called_place(None, call, callee, loops_here)
                if call.loop is not None and per_step.unit == DECODED and generations.decodes(callee):
                    # a loop its own file takes for a token loop by its shape (`while True:` around `translator.translate(...)`),
                    # whose call runs whole generations, a decode loop of their own: each iteration a generated sequence
                    per_step = replace(per_step, unit=GENERATION)
                if position not in _DRAINED and call.loop is None and loop_where not in (Where.TRAIN, Where.EPOCH) \
                        and loops_here.get(call.within) != DECODED and generations.follows(path, call):
                    # after a call earlier in the iteration that runs a whole generation (whisper's window
                    # loop: `decode_with_fallback(segment)`, then `add_word_timestamps(...)`): once per
                    # generated sequence. (Not in a training loop, whose iteration after a rollout is an
                    # update; not in a token loop itself, where the call still runs per token.)
                    position = Position.AFTER_DECODE
                origin = EVALUATION_WORDS if evaluation else FULL_BATCH_WORDS if call.unit == FULL_BATCH and loop_where is Where.TRAIN \
                    else ROLLOUT_WORDS if call.unit == ENV_STEP and loop_where is Where.INFER else LOOP_WORDS[loop_where]
                seeds.append((phase_rank(loop_where), *callee, StepInfo(origin, sites, loop_where, host_only=path in host_steps,
                                                                        tensor_args=call.tensors, omitted=omitted, constants=constants,
                                                                        uploaded=project.uploads(call, callee), passed=project.passes(call, callee),
                                                                        feeds_env=call.feeds_env, per_step=per_step, position=position,
                                                                        guard=call.guard, distributed_only=call.distributed_only,
                                                                        run_mode=call.run_mode)))
    return seeds


# Positions more telling than "after a generation": the queue was drained right before.
_DRAINED = frozenset({Position.AFTER_SYNC, Position.AFTER_LAST_READ, Position.BEFORE_SYNC, Position.BEFORE_READ, Position.BEFORE_EVAL, Position.TIMED})


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
    """The seeds of :func:`_own_training_reach`: each function in ``one_step`` but a ``forward``: a
    module's method; another class's method or a top-level function that no call the join sees runs
    but from another such step (drqv2's ``DrQV2Agent.update()``, called through an agent that
    ``hydra.utils.instantiate`` builds: no summary resolves it; not a warm start ``main()`` calls once)."""
    seeds: list[tuple[str, str, StepInfo]] = []
    own = _OwnSteps(project)
    for path, summary in project.files.items():
        for key in summary.one_step:
            if own.is_step(path, key):
                seeds.append((path, key, StepInfo(f"the training step `{key}()`", (), Where.TRAIN, hook=True,
                                                  host_only=path in host_steps, position=Position.MID_STEP)))
    return seeds


class _OwnSteps:
    """Which functions of ``FileSummary.one_step`` are training steps of their own (see
    :func:`_own_training_steps`); the callers the join sees are indexed once, where asked."""

    def __init__(self, project: Project) -> None:
        self.project = project
        self.one_step = {(path, key) for path, summary in project.files.items() for key in summary.one_step}
        self._callers: dict[tuple[str, str], set[tuple[str, str]]] | None = None
        self._known: dict[tuple[str, str], bool] = {}

    def is_step(self, path: str, key: str) -> bool:
        known = self._known.get((path, key))
        if known is None:
            self._known[(path, key)] = False  # (a recursion through callers: no step of its own)
            known = self._known[(path, key)] = self._decide(path, key)
        return known

    def _decide(self, path: str, key: str) -> bool:
        owner, _, method = key.rpartition(".")
        cls = next((c for c in self.project.files[path].classes if c.key == owner), None) if owner else None
        # (a forward is the model reach's; a test's class or file exercises a library on toy inputs)
        if method == "forward" or (cls.test if cls is not None else owner or test_suite_path(path)):
            return False
        if cls is not None and self.project.is_module(path, owner):
            return True  # (a module's own step: audiocraft's `AdversarialLoss.train_adv`, whoever calls it)
        if key in self.project.files[path].one_step_called:
            return False  # (its own file calls it, under whatever guard, once or every N: that call decides)
        # (an agent's `update()` or a script's `train_step()`: a step where every caller seen is a step of its own)
        return all(caller in self.one_step and self.is_step(*caller) for caller in self.callers().get((path, key), ()))

    def callers(self) -> dict[tuple[str, str], set[tuple[str, str]]]:
        """(file, function key) -> the (file, caller key) of each call the join resolves to it."""
        if self._callers is None:
            self._callers = {}
            for path, summary in self.project.files.items():
                for call in summary.calls:
                    for callee in self.project.callees(call.target, path):
                        self._callers.setdefault(callee, set()).add((path, call.caller))
        return self._callers


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
