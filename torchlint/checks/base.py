"""The Check base class: one rule's metadata and the code that finds it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import libcst as cst

from torchlint.analysis.context import FileContext
from torchlint.analysis.impact import Cost, Unreached
from torchlint.analysis.multiplicity import Repeat, Where
from torchlint.findings import Fix, FixSafety

#: Stands for ``{loop}`` in a conditional finding's message until the join says where it runs.
STEP_PLACEHOLDER = "\ue000step\ue000"


@dataclass(frozen=True, slots=True)
class Group:
    """Findings of one check that one fix removes together (one host index copied over at
    each of several indexings of a step): the engine reports them as one finding at the
    first, its other lines related, repeated in its step once per member (engine/groups.py)."""

    key: Any  # the same for every member: (the step, the value's binding, its name)
    what: str  # what each member is, the repetition's kind: "indexing with `mb_inds`"
    # Added to the first member's message: ``{count}`` the members, ``{lines}`` where the
    # others stand (", here and at lines 128, 130", or "" when all are on the first's line).
    words: str
    hint: str = ""  # the group's fix hint (the one fix), replacing the members'
    # The members follow one another with nothing else between them (CORL's `ReplayBuffer.sample`: five
    # indexings with one host index in a row): the first waits for the queue, each after it only for the
    # small gathers before it, a handful of waits worth about one (``multiplicity.one_fix``'s few).
    adjacent: bool = False


@dataclass(slots=True)
class Report:
    """A finding before it has a position: the node it points at and its message."""

    node: cst.CSTNode
    message: str
    fix: Fix | None = None
    related: tuple[cst.CSTNode, ...] = ()
    hint: str = ""  # replaces the check's fix_hint for this finding
    # The function that must run once per step for this finding to hold (the project-wide
    # join decides); None when the finding holds as it is.
    condition: cst.CSTNode | None = None  # a function, or a loop (Loops.step_condition)
    # Holds only if a caller passes a tensor (``if isinstance(v, torch.Tensor): v.item()``
    # on a parameter): the join keeps it when a per-step call site may pass one.
    needs_tensor_argument: bool = False
    cost: Cost | None = None  # replaces the check's cost for this finding (impact.py)
    where: Where | None = None  # how often it runs, when the check knows better than the code's place
    # Holds only if the project-wide join finds the line running more than once per step
    # (True) or exactly once (False): two rules sharing a pattern split it by its place.
    repeated: bool | None = None
    # Where the join finds no step running ``condition``: (where it runs, impact, reason) the
    # finding still holds at; None drops it.
    unreached: Unreached | None = None
    # A loader whose dataset is a class of another file: (its constructor call, whether the
    # finding holds only if that class's samples are heavy work, whether its items are whole
    # batches: `batch_size=None`). The join finds the class and says what it does per sample;
    # None when this file says all.
    dataset: tuple[cst.Call, bool, bool] | None = None
    # A setting read from a config object this file is passed: (the function it is a parameter
    # of, the parameter, the setting). The finding holds only where the join finds its default
    # 0 in the files of that function's callers (`args.num_workers`, `--num-workers` there); with no
    # function, a config object imported from the project, whose every assignment of it there is 0.
    setting: tuple[cst.FunctionDef | None, str, str] | None = None
    # `Cls.__init__:param`: the tensor read is an attribute set from that constructor parameter;
    # the finding holds unless every construction in the project passes a host tensor there.
    unless_host: str = ""
    # A process-wide switch (analysis/switches.py): the finding holds unless some file of the
    # project turns it (`Distribution.set_default_validate_args(False)`).
    unless_switch: str = ""
    # A loader built from a class of another file named like one: (the class, the option left
    # out). The finding holds where the join finds it a `DataLoader` subclass that does not set it.
    loader: tuple[cst.BaseExpression, str] | None = None
    # The constructor of a class of another file whose weights decide the finding: it holds
    # only if the join finds that the class keeps trainable weights and never freezes them.
    trainable_class: cst.Call | None = None
    # Parameters of the node's function that the read needs to be device tensors (a sampler's
    # `sigmas`): the finding holds where every call in the project passes one to any of them.
    if_device: tuple[str, ...] = ()
    # A decoder's call that may run a class of another file (`self.decoder.step(ys, memory)`):
    # the finding holds unless the join finds that the class decodes from a cache it keeps or takes.
    unless_cached: cst.Call | None = None
    # The node repeats its own read each time it runs (a sort's comparisons of device scalars):
    # counted in its multiplicity, innermost.
    itself: Repeat | None = None
    # With ``if_device`` and a ``condition``: the finding holds where either does (an uploaded
    # batch passed down, or a device tensor from every caller).
    either: bool = False
    # (a function, its parameter off by default that turns a cache on): the finding's tier waits for
    # the function's callers in the project; where every one turns it on, what others get is less.
    unless_passed: tuple[cst.FunctionDef, str] | None = None
    # Config fields whose defaults the finding rests on, of classes this file never builds
    # ((class, field, position) each): the join drops it where every construction passes one.
    unless_built: tuple[tuple[str, str, int], ...] = ()
    # The node whose place in the step the finding takes (where it sits, how often it runs):
    # one of a group that one fix removes together takes the group's costliest member's.
    placed_as: cst.CSTNode | None = None
    # A call of a function of another file whose result the node reads (`char = tokenizer.sample_logits(out)`):
    # the finding holds unless the join finds that every function it may run returns host values.
    unless_host_return: cst.Call | None = None
    # One of several findings that one fix removes together: reported as one (Group).
    group: Group | None = None
    # A class of another file and a family of library classes (analysis/library_bases.py): the
    # finding holds only where the join finds the class deriving from one (`FixedNormal(Normal)`).
    subclass_of: tuple[cst.BaseExpression, str] | None = None
    # With ``trainable_class``: the cost the finding takes where the join finds that class's
    # weights a torchvision model's (analysis/frozen.py ``BACKBONE``).
    backbone_cost: Cost | None = None
    # With ``where``: how often it runs in an inference application, where no file of the project
    # trains and one samples (a model's layers
    # in a project that only runs inference): the join re-tiers it so.
    untrained: Where | None = None
    # A call of another file's function whose result is moved (`subsequent_mask(i).to(device)`): the
    # finding holds only where the join finds that every function it may run builds what it returns
    # on the host with a factory, and that the call passes it no device (`FileSummary.host_helpers`).
    host_helper: cst.Call | None = None
    # The constructor of a class of another file that the called module is built as (`RunningMeanStd((1,))`):
    # the finding holds unless the join finds that class registering buffers and no weights
    # (analysis/buffer_modules.py): autograd records nothing through it.
    unless_buffers: cst.Call | None = None
    # Another object's attribute moved to the device (`sde.alphas` of `sde.alphas.to(t.device)`): the finding holds
    # only where the join finds a class that object may be keeping a host tensor there (`FileSummary.host_attributes`).
    host_attribute: cst.Attribute | None = None
    # With ``unless_host_return``: the position of the returned tuple the node reads (-1: the whole result).
    returned_element: int = -1


class Check:
    """Base class of every check. Subclasses set the metadata and define
    ``visit_<NodeType>(self, node)`` methods and/or ``finish(self)``.

    The engine calls each ``visit_X`` for every ``cst.X`` node of the file in
    source order, after the shared analysis is available through ``self.ctx``.
    """

    code: ClassVar[str]
    name: ClassVar[str]
    message: ClassVar[str]  # a str.format template filled by report(**fields)
    fix_hint: ClassVar[str] = ""
    default: ClassVar[bool] = True
    fix_safety: ClassVar[FixSafety] = FixSafety.NONE
    # Findings only hold where the code runs every step (a hot loop, or a function the
    # project-wide join finds per-step). The message may use ``{loop}``: where that is.
    per_step: ClassVar[bool] = False
    # Findings only hold where tensors live on a device: a per-step finding reached only
    # from steps in host-only files is dropped by the join.
    device_bound: ClassVar[bool] = False
    # Findings hold nothing where the code runs only every N steps (a read for a log line every
    # 100 steps): the check stays quiet under such a guard in its own file, and the join keeps it
    # quiet in a function a step calls under one (analysis/every_n.py).
    quiet_every_n: ClassVar[bool] = False
    # Test code (a test suite's file, a unittest ``Test…`` class: ``ctx.in_tests``) runs a
    # library on toy inputs once, not a training run, so what it costs is not a finding.
    # A rule whose finding holds there too (a deprecated API) sets this.
    applies_to_tests: ClassVar[bool] = False
    # Findings only hold in code torch.compile traces: the condition of each is its function
    # being reached from a compiled root (the project-wide join decides), not the step.
    in_compiled: ClassVar[bool] = False
    # What the pattern costs each time it runs: with how often it runs, the finding's
    # impact (analysis/impact.py, docs/impact.md). Every check names one.
    cost: ClassVar[Cost]

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self.reports: list[Report] = []

    @classmethod
    def summary(cls) -> str:
        return (cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else ""

    @classmethod
    def visited_types(cls) -> list[type[cst.CSTNode]]:
        """The node types this check has ``visit_*`` methods for (computed once per class)."""
        cached = cls.__dict__.get("_visited_types")
        if cached is not None:
            return cached
        types = []
        for attr in dir(cls):
            if attr.startswith("visit_"):
                node_type = getattr(cst, attr[len("visit_"):], None)
                if isinstance(node_type, type) and issubclass(node_type, cst.CSTNode):
                    types.append(node_type)
        cls._visited_types = types  # type: ignore[attr-defined]
        return types

    def report(
        self,
        node: cst.CSTNode,
        *,
        fix: tuple[cst.CSTNode, cst.CSTNode] | None = None,
        related: tuple[cst.CSTNode, ...] = (),
        hint: str = "",
        fix_safety: FixSafety | None = None,
        fix_description: str = "",
        cost: Cost | None = None,
        where: Where | None = None,
        condition: cst.CSTNode | None = None,
        repeated: bool | None = None,
        unreached: Unreached | None = None,
        dataset: tuple[cst.Call, bool, bool] | None = None,
        setting: tuple[cst.FunctionDef, str, str] | None = None,
        unless_host: str = "",
        unless_switch: str = "",
        loader: tuple[cst.BaseExpression, str] | None = None,
        trainable_class: cst.Call | None = None,
        if_device: tuple[str, ...] = (),
        unless_cached: cst.Call | None = None,
        itself: Repeat | None = None,
        either: bool = False,
        unless_passed: tuple[cst.FunctionDef, str] | None = None,
        unless_built: tuple[tuple[str, str, int], ...] = (),
        placed_as: cst.CSTNode | None = None,
        unless_host_return: cst.Call | None = None,
        group: Group | None = None,
        subclass_of: tuple[cst.BaseExpression, str] | None = None,
        backbone_cost: Cost | None = None,
        untrained: Where | None = None,
        host_helper: cst.Call | None = None,
        unless_buffers: cst.Call | None = None,
        host_attribute: cst.Attribute | None = None,
        returned_element: int = -1,
        **fields: Any,
    ) -> None:
        """Record a finding at ``node``; ``fix`` is ``(old_node, new_node)``; ``hint``
        replaces the class's ``fix_hint`` for this finding, ``fix_safety`` the class's
        ``fix_safety`` for this fix (a fix that is safe in general but not here), and
        ``fix_description`` says what the fix does. ``cost`` and ``where`` replace what the
        impact model would take (the check's cost, the place's frequency) for this finding.
        A per-step check may give the ``condition`` the finding waits for (a parameter: it
        holds when a per-step call passes a constant there) instead of where ``node`` runs.
        ``repeated``: the finding holds only if the join finds its line repeated within the
        step (True) or run once per step (False); it matters only where the join decides.
        ``unreached``: (where it runs, impact, reason, the functions of this file whose being
        per-step shows its use, or None for any) for a per-step finding the join finds no
        step for, which still holds (in a module's ``forward``); None drops it then.
        ``dataset``: (the constructor of a loader's dataset, a class of another file; whether the
        finding holds only if that class's samples are heavy work; whether it yields whole
        batches): the join settles it.
        ``setting``: (a function, its parameter holding a config object, the setting read): the
        finding holds only where the join finds that setting 0 by default in the callers' files.
        ``unless_host``: ``Cls.__init__:param`` when the value read is an attribute set from
        that parameter: the join drops the finding where every construction passes a host value.
        ``unless_switch``: a process-wide switch (analysis/switches.py) whose turning in any file of
        the project drops the finding. ``loader``: (the class a construction names, an option
        it leaves out) for a class of another file: the join keeps the finding where that class
        subclasses ``DataLoader`` and does not set the option itself.
        ``trainable_class``: the constructor of a class of another file; the finding holds only
        where the join finds that class keeping trainable weights it never freezes.
        ``if_device``: parameters of the node's function (``HiddenSyncs.device_parameters``): the
        join keeps the finding where every call passes a device tensor to one of them (an entry
        ``listed:name``: a Python list to that one, ``summary.LISTED``).
        ``unless_cached``: a model call that may run a class of the project; the join drops the
        finding where that class keeps a key-value cache or the method called takes one.
        ``itself``: what the node repeats each time it runs (a sort's comparisons), counted
        in its multiplicity. ``either``: with both ``condition`` and ``if_device``, the finding
        holds where either holds, not only where both do.
        ``unless_passed``: (a function, its parameter off by default): the join lowers the finding
        where every call of the function in the project passes that parameter (a private one's: drops it).
        ``unless_built``: config fields (class, field, position) whose defaults the finding rests
        on, their class built in no code of this file: the join drops it where every construction
        of one of them in the project passes its own value. ``placed_as``: the node whose
        place in the step (how often, where) the finding takes, the costliest of a group one
        fix removes together. ``unless_host_return``: a call of another file's function whose result
        is read: the join drops the finding where every function it may run returns host values.
        ``group``: the findings one fix removes together, reported as one (``Group``).
        ``subclass_of``: (a class of another file, a family of library classes): the join keeps the
        finding only where the class derives from one (analysis/library_bases.py).
        ``backbone_cost``: with ``trainable_class``, the cost where the join finds that class's
        weights a torchvision model's. ``untrained``: with ``where``, how often it runs where the
        join finds no file of the project training (no backward, no optimizer step) and one sampling.
        ``unless_buffers``: the constructor of another file's class the called module is built as: the
        join drops the finding where that class registers buffers and no weights.
        ``host_attribute``: another object's attribute the node moves to the device: the join keeps the
        finding only where a class that object may be keeps a host tensor there. ``returned_element``: with
        ``unless_host_return``, the position of the returned tuple read (``_, _, lengths = decoder(x)``)."""
        if not self.applies_to_tests and self.ctx.in_tests(node):
            return
        made_fix = None
        safety = fix_safety or self.fix_safety
        if fix is not None and safety is not FixSafety.NONE:
            made_fix = Fix(old=fix[0], new=fix[1], safety=safety, description=fix_description)
        if self.per_step:
            loops = self.ctx.loops
            condition = condition or loops.step_condition(node)
            hot = loops.local_hot_loop(node)
            fields.setdefault("loop", STEP_PLACEHOLDER if condition is not None or hot is None else loops.describe(hot))
        needs_tensor = condition is not None and self.ctx.guards.tensor_if_passed(node)
        self.reports.append(Report(node, self.message.format(**fields), made_fix, related, hint, condition, needs_tensor, cost, where, repeated,
                                   unreached if condition is not None else None, dataset, setting, unless_host, unless_switch, loader, trainable_class,
                                   if_device, unless_cached, itself, either, unless_passed, unless_built, placed_as, unless_host_return,
                                   group, subclass_of, backbone_cost, untrained, host_helper, unless_buffers, host_attribute, returned_element))

    def finish(self) -> None:
        """Called once after every ``visit_*``; for checks that decide at the end."""
