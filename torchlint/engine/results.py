"""What checking one file gives: plain data a worker process returns and the cache keeps."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from torchlint.analysis.impact import Unreached
from torchlint.analysis.multiplicity import Position, Repeat
from torchlint.findings import Finding, Location, pickled_by_fields

if TYPE_CHECKING:
    from torchlint.analysis.summary import FileSummary
    from torchlint.engine.source import Source


@pickled_by_fields
@dataclass(frozen=True, slots=True)
class InternalError:
    """A check (or the engine) that raised on one file: reported, and the run goes on."""

    path: str
    code: str
    error: str
    traceback: str


class Conditional(NamedTuple):
    """A finding that holds only if its function runs every step."""

    key: str  # the function
    finding: Finding
    device_bound: bool  # holds only where the step may use device tensors
    needs_tensor: bool = False  # holds only where a call that makes it per-step may pass a tensor
    cost: str = ""  # the finding's analysis.impact.Cost (by name): its impact follows from the step
    compiled: bool = False  # holds only if its function is traced by torch.compile (not: runs every step)
    repeats: tuple[tuple[str, Repeat], ...] = ()  # the loops around it in its function (analysis/places.py)
    position: Position | None = None  # where it sits in its function's step (None: where the call of the function sits)
    rare: bool = False  # under a guard in its function (`if step % 100 == 0:`, a first-N count): every N steps, not every step
    repeated: bool | None = None  # holds only if its line runs more than once per step (True) or once (False); None: either
    # Where no step is found to run its function: (where it runs, impact, reason) it still holds at
    # (a module's `forward`, per-step code by nature when the model runs), and the functions of its
    # file whose being per-step shows where it is used (None: any); or None: it is dropped.
    unreached: Unreached | None = None
    guard: str = ""  # how often its rare guard lets it run, where that says more than "every N steps" (a timer)
    distributed_only: bool = False  # its guard runs it only in a multi-process run (`guard` its words: Place.distributed_only)
    opt_in: str = ""  # a parameter of its function, off by default, that must be passed for it to run (Guards.opt_in)
    returned: bool = False  # the host value it makes is what its function returns (host_consumers.returned)
    unless_host: str = ""  # `Cls.__init__:param`: dropped where every construction passes a host value there
    optional: bool = False  # behind `if p is not None:` of a parameter defaulting to None: off unless its (unseen) caller passes it
    unless_switch: str = ""  # dropped where a file of the project turns this switch (FileSummary.switches)
    # `f:param`s (Report.if_device; `f:listed:param`: a Python list, summary.LISTED): kept only where every call of `f` passes a device tensor to one of
    # them (Steps.device_params); with the key `PLACED`, the finding's place is its own file's (a hot loop)
    if_device: tuple[str, ...] = ()
    # With `if_device` on a finding that also holds by its `key` (a parameter a per-step call passes
    # a batch it just uploaded, `f#uploaded:lengths`): the key it waits for where the device
    # parameters hold instead (its loop or function; `PLACED`): either condition keeps it.
    device_key: str = ""
    quiet_every_n: bool = False  # its rule holds nothing where the code runs only every N steps (Check.quiet_every_n)
    # (a class this file names, as a summary reference; a family, analysis/library_bases.py): held only
    # where the join finds the class deriving from that family's library classes (Report.subclass_of)
    subclass_of: tuple[tuple, str] | None = None
    # `if top_p > 0:` and every call of its function in its file passes a value that fails the test
    # (Guards.never_taken): the words for the opt-in tier, where no other file of the project calls it
    off_here: str = ""
    # (function key, parameter, optional) of a switch off by default its line runs only with, a parameter or the
    # constructor's parameter an attribute holds (Guards.switch_of): on an opt-in path where no call turns it on
    switch: tuple[str, str, bool] | None = None
    # (function key, parameter)s its line runs only where each is truthy, a parameter or the constructor's parameter an
    # attribute holds (Guards.flag_of): off where every call leaves one off (a literal false, a default off)
    flag: tuple[tuple[str, str], ...] = ()
    # `Cls.m`: a method of a class of this file; dropped where the join finds that no object runs it (the class
    # never built, every project subclass overriding it: analysis/dispatch.overridden)
    unless_overridden: str = ""
    # (an object as a summary reference, its attribute): held only where the join finds a class that object may be
    # keeping a host tensor there (Report.host_attribute, ``project_callees.keeps_host_tensor``)
    host_attribute: tuple[tuple, str] | None = None
    # the function (key) its own file placed it in: low where the project calls that function only behind a switch
    # or a flag of the run that nothing turns on (``SettingDefaults.called_switched_off``: GAIL's `Discriminator.update`)
    called_in: str = ""


#: The key of a conditional finding placed by its own file (a hot loop) that waits only for ``if_device``.
PLACED = "#placed"
#: The key of a device-bound finding placed by its own file, a file that names no device but whose
#: tensors may come from elsewhere: dropped where the join finds the file's steps host-only
#: (``Steps.host_steps``: the model it builds is a class of the project that names no device either).
UNLESS_HOST_STEPS = "#unless-host-steps"


class InStepIfCalled(NamedTuple):
    """A finding in a function that is not known, in its own file, to run every step: when
    the project-wide join finds that function per-step, its impact is that step's."""

    key: str  # the function
    code: str
    location: Location
    cost: str  # analysis.impact.Cost, by name
    repeats: tuple[tuple[str, Repeat], ...] = ()
    position: Position | None = None
    rare: bool = False
    guard: str = ""
    distributed_only: bool = False  # its guard runs it only in a multi-process run (Place.distributed_only)
    opt_in: str = ""
    flag: tuple[tuple[str, str], ...] = ()  # (function key, parameter)s it runs only where each is truthy (Guards.flag_of)


class Pending(NamedTuple):
    """A finding the join settles by what other files say: a loader's (TL201) by its dataset, a
    class of another file (what that class does per sample: its summary's ``samples``), and by a
    setting of a config object its function is passed (its default in the callers' files:
    ``settings``); any finding by a process-wide switch some file of the project turns
    (``unless_switch``); a loader's built from a class of another file by that class being a
    ``DataLoader`` subclass (``loader``); a network of another file's class by that class keeping
    trainable weights it never freezes (``trainable_only``: TL308, TL309); a decoder's call by what
    it runs keeping no cache (``unless_cached``: TL407), and one whose cache is off by default by
    what its function's callers pass (``unless_passed``: TL407); a size from a config's default by
    what the config's constructions in other files pass (``unless_built``: TL402); a read of what
    another file's function returns by every function the call may run returning host values
    (``unless_host_return``: TL101); a model's call in eval mode by its class (another file's)
    keeping buffers and no weights (``unless_buffers``: TL301); a wait its file places at its step's
    end by what the calls after it run (``mid_step``: TL101), and one after another file's call by
    what that call runs ending drained (``after_drain``: TL101, TL102, TL105)."""

    finding: Finding  # its message holds analysis.samples.WORK_PLACEHOLDER where the work goes
    dataset: tuple | None  # the class, as a summary reference (analysis.summary.Ref); None: known here
    heavy_only: bool  # holds only if the class's samples are heavy work; else unless they are cheap
    setting: tuple[str, str, str] | None = None  # (function key, parameter, setting): holds only where its default is 0
    prebatched: bool = False  # `batch_size=None`: whole batches; none where the class does no known work, low where it is not the project's
    unless_switch: str = ""  # dropped where a file of the project turns this switch (FileSummary.switches)
    loader: tuple[tuple, str] | None = None  # (a class another file holds, an option): holds where it subclasses DataLoader without setting it
    trainable_only: bool = False  # holds only where the class's summary says its weights train (``"trainable"``, ``"backbone"``)
    unless_cached: bool = False  # ``dataset`` is a model call's reference: dropped where what it runs decodes from a cache (TL407)
    # (function key, parameter off by default that turns the cache on): lowered where every call of
    # the function in the project passes it, dropped then if the function is private (TL407)
    unless_passed: tuple[str, str] | None = None
    # config fields (class, field, position) of this file's classes, built in other files, whose
    # defaults the finding rests on: dropped where every construction in the project passes one (TL402)
    unless_built: tuple[tuple[str, str, int], ...] = ()
    unless_host_return: bool = False  # ``dataset`` is a call's reference: dropped where every function it may run returns host values
    returned_element: int = -1  # with ``unless_host_return``: the position of the returned tuple read (-1: the whole result)
    subclass_of: str = ""  # a family (analysis/library_bases.py): ``dataset`` is a class, held where it derives from one of them
    backbone: Finding | None = None  # with ``trainable_only``: the finding where the class's weights are a torchvision model's (TL308)
    untrained: Finding | None = None  # the finding in an inference application: no file trains, one samples (``FileSummary.trains_anywhere``, ``samples_anywhere``: TL402)
    # (function key, parameter, optional): a finding placed in its own file behind a switch off by default
    # (Guards.switch_of): low where no call in the project turns it on (``SettingDefaults.turned_on_nowhere``)
    switch: tuple[str, str, bool] | None = None
    # (function key, parameter)s: one behind flags (Guards.flag_of): low where every call in the project
    # leaves one off (``SettingDefaults.passed_off_everywhere``)
    flag: tuple[tuple[str, str], ...] = ()
    # ``dataset`` is a call's reference, with (its positional arguments, its keywords, a splat): held
    # where every function it may run builds its result on the host and is passed no device (TL110)
    host_helper: tuple[int, tuple[str, ...], bool] | None = None
    unless_buffers: bool = False  # ``dataset`` is a module's class: dropped where it keeps buffers and no weights (TL301)
    host_attribute: str = ""  # ``dataset`` is an object: held where a class it may be keeps a host tensor in this attribute (TL113)
    # a wait its file places at its step's end: the calls after it the file cannot see into (what each may run, a reference), and
    # this finding, placed mid-step, where one of them runs a backward, an optimizer step or a model (``project_callees.queues_work``)
    mid_step: tuple[tuple, Finding] | None = None
    # a wait its file places with device work before it: the call of another file's function right before it (a
    # reference), and this finding, placed right after a sync, where every function that call may run ends drained
    # (``project_callees.ends_drained``: a helper ending in ``torch.cuda.synchronize()`` or a read)
    after_drain: tuple[tuple, Finding] | None = None
    called_in: str = ""  # as ``Conditional.called_in``: a finding placed in a function the project may call only behind a switch off
    # the run's flags its line runs only with (Guards.run_flags: `if args.augment:`): low where one is off by default (``run_flag_off``)
    run_flags: tuple[tuple[str, bool, bool], ...] = ()
    # its finding stands in ``FileResult.findings`` already (a linter without the join shows it): the join only lowers it there
    lower_only: bool = False


@dataclass(slots=True)
class FileResult:
    source: Source | None
    findings: list[Finding] = field(default_factory=list)
    errors: list[InternalError] = field(default_factory=list)
    module: Any = None  # the libcst Module, while the file is being checked or fixed
    path: Path | None = None  # the file on disk, when it came from one
    # Findings that hold only if their function runs every step. The project-wide join
    # keeps those whose function is per-step (from a step that may use a device, for
    # device-bound ones; through a call that may pass a tensor, for those that need one).
    conditional: list[Conditional] = field(default_factory=list)
    summary: FileSummary | None = None  # where this file's steps are, for that join
    in_functions: list[InStepIfCalled] = field(default_factory=list)  # impacts the join may raise
    pending: list[Pending] = field(default_factory=list)  # findings the join settles by other files' facts (a dataset's class, a setting, a switch)


def plain(result: FileResult) -> FileResult:
    """The result without its tree, source text or fix nodes: picklable data, small, and
    readable without libcst. A fix keeps its safety (what reports and ``--fix`` ask); its
    nodes come back when ``--fix`` checks the file again."""
    return FileResult(
        None,
        [_without_fix_nodes(f) for f in result.findings],
        list(result.errors),
        path=result.path,
        conditional=[c._replace(finding=_without_fix_nodes(c.finding)) for c in result.conditional],
        summary=result.summary,
        in_functions=list(result.in_functions),
        pending=[_plain_pending(d) for d in result.pending],
    )


def _plain_pending(pending: Pending) -> Pending:
    """``pending`` without fix nodes, in its finding and in the ones it may turn into (``mid_step``, ``after_drain``)."""
    mid_step = (pending.mid_step[0], _without_fix_nodes(pending.mid_step[1])) if pending.mid_step is not None else None
    after_drain = (pending.after_drain[0], _without_fix_nodes(pending.after_drain[1])) if pending.after_drain is not None else None
    return pending._replace(finding=_without_fix_nodes(pending.finding), mid_step=mid_step, after_drain=after_drain)


def _without_fix_nodes(finding: Finding) -> Finding:
    if finding.fix is None or (finding.fix.old is None and finding.fix.new is None):
        return finding
    return replace(finding, fix=replace(finding.fix, old=None, new=None))
