"""What the join finds: the per-step functions of a project (StepInfo, Steps) and where a call sits within its step."""

from __future__ import annotations

from dataclasses import dataclass

from torchlint.analysis.compiled_reach import Compiled
from torchlint.analysis.every_n import EveryN
from torchlint.analysis.multiplicity import EVALUATION_WORDS, ONCE_PER_STEP, Multiplicity, Place, Position, Repeat, Where
from torchlint.analysis.project import Project
from torchlint.analysis.summary import Ref
from torchlint.findings import Location


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
    distributed_only: bool = False  # that guard runs it only in a multi-process run (`CallSite.distributed_only`)
    run_mode: bool = False  # a call on the way runs only under a mode flag of the run (`CallSite.run_mode`): for the words only

    @property
    def place(self) -> Place:
        return Place(self.where, self.per_step, self.position, self.guard, self.distributed_only)

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
        # (`trainer.save()` after an epoch's batches; an evaluator's copies in a `test()` the training loop calls every epoch)
        often = "run once per epoch" if self.where is Where.EPOCH else "run once per evaluation" if self.origin == EVALUATION_WORDS else "run every step"
        guard = f", {self.guard}" if self.guard else ""
        return f"`{key.partition('#')[0]}()` ({via}{often} from {self.origin}{where}{guard})"

    def said(self, message: str, placeholder: str, key: str, here: str) -> str:
        """``message`` with ``placeholder`` made ``text``, and an evaluation's "on every step" made "once per
        evaluation": the evaluator's copy runs in the evaluation the training loop calls, not in its step."""
        message = message.replace(placeholder, self.text(key, here))
        return message.replace("on every step", "once per evaluation") if self.origin == EVALUATION_WORDS else message


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
    never_built: frozenset[tuple[str, str]] = frozenset()  # (file, class key): classes no code of an application names (`join_params.never_built`)
    host_steps: frozenset[str] = frozenset()  # the files whose steps run on the host (`host_steps`)
    # file -> function key -> how it runs every N steps: called under a recurring guard of a step (analysis/every_n.py)
    every_n: dict[str, dict[str, EveryN]] = {}


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
