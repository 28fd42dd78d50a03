"""Where a check's report stands in its step, from its own file: how often it runs and where (a ``Place``),
the guard words around it, the tier and reason that follow (``with_impact``), and, for a wait placed at its
step's end before calls the file cannot see into, the finding as it stands mid-step for the join to keep
(``mid_step_if_working``), and for one right after a call of another file's function, the finding as it
stands right after a sync (``after_drain_if_ending``). The runner (engine/runner.py) asks these for every report it locates."""

from __future__ import annotations

from dataclasses import replace

import libcst as cst

from torchlint.analysis.context import FileContext
from torchlint.analysis.impact import READ_COSTS, Cost, assess, with_multiplicity
from torchlint.analysis.multiplicity import Multiplicity, Place, Position, Repeat, Where
from torchlint.analysis.steps import StepSummarizer, function_key
from torchlint.checks.base import Report
from torchlint.findings import Finding


def with_impact(ctx: FileContext, finding: Finding, report: Report, cost: Cost) -> tuple[Finding, str | None]:
    """``finding`` with its impact as far as this file tells, and the function whose being
    per-step (the project-wide join decides) would raise it; None when the place says it all."""
    place, in_function, host_only = Place(report.where) if report.where is not None else None, None, False
    if place is None:
        place = place_in_file(ctx, report.placed_as or report.node, report.itself)
        function = ctx.tree.enclosing_function(report.node) if place.where is Where.ONCE else None
        if function is not None:
            # `if x_mask is None: x_mask = torch.ones(...)`: per step only where a per-step call leaves `x_mask` out
            branch = ctx.guards.default_branch(report.node)
            in_function = function_key(ctx, branch[0] if branch is not None else function)
        # The file's own code runs where the file puts its tensors. A place the check gave
        # (a model's layers, a loader's batches) may run on a device another file picks.
        host_only = ctx.devices.host_only()
    impact, reason = assess(cost, place, host_only)
    return replace(finding, message=with_multiplicity(finding.message, place), impact=impact, impact_reason=reason), in_function


def mid_step_if_working(ctx: FileContext, summarizer: StepSummarizer | None, finding: Finding, report: Report,
                         cost: Cost) -> tuple[tuple, Finding] | None:
    """A wait its own file places at its step's end, before calls the file cannot see into (mae's
    ``loss_scaler(loss, optimizer, ...)`` of a parameter, ``misc.backward_and_step(loss, opt)``): what
    those calls may run, as one summary reference, and the finding as it stands mid-step, where the
    join finds one of them queueing a backward, an optimizer step or a model after the wait."""
    if summarizer is None or report.where is not None or cost not in READ_COSTS:
        return None
    node = report.placed_as or report.node
    place = place_in_file(ctx, node, report.itself)
    if place.position is not Position.STEP_END:
        return None
    loop = ctx.loops.local_hot_loop(node)
    calls = ctx.places.unplaced_calls_after(node, ctx.places.update_loop(loop)) if loop is not None else []
    refs = tuple(dict.fromkeys(ref for call in calls if (ref := summarizer.target(call.func, call)) is not None))
    if not refs:
        return None
    mid = replace(place, position=Position.MID_STEP)
    impact, reason = assess(cost, mid, ctx.devices.host_only())
    return ("each", refs), replace(finding, impact=impact, impact_reason=reason)


# Positions whose wait the queue's drain before it already took: nothing for a drained call to lower.
_DRAINED = frozenset({Position.AFTER_SYNC, Position.AFTER_READ, Position.BEFORE_SYNC, Position.BEFORE_READ, Position.BEFORE_EVAL, Position.TIMED})


def after_drain_if_ending(ctx: FileContext, summarizer: StepSummarizer | None, finding: Finding, report: Report,
                          cost: Cost) -> tuple[tuple, Finding] | None:
    """A wait its own file places in a step, right after a call of another file's function with only
    host work between (``self.timer.stop()``, ``misc.sync_all()``, a helper whose last line is
    ``x = out.cpu()``): that call, as a summary reference, and the finding as it stands right after
    a sync, where the join finds every function the call may run ending drained."""
    if summarizer is None or report.where is not None or cost not in READ_COSTS:
        return None
    node = report.placed_as or report.node
    place = place_in_file(ctx, node, report.itself)
    if place.where in (Where.ONCE, Where.EVERY_N) or place.position in _DRAINED:
        return None  # (placed by its function's callers, rare, or drained already)
    loop = ctx.loops.local_hot_loop(node)
    call = ctx.places.call_right_before(node, ctx.places.update_loop(loop)) if loop is not None else None
    ref = summarizer.target(call.func, call) if call is not None else None
    if ref is None:
        return None
    # Drained in the same pass of its innermost loop (PlaNet's `act(...)` ending in `env.step(action.cpu())`, then
    # `action.cpu()`): the read after it waits for almost nothing however often the pass repeats; drained before that loop, on each pass again.
    same_pass = bool(place.per_step) and ctx.loops.statement_loop(call) is ctx.loops.statement_loop(node)  # type: ignore[union-attr]
    impact, reason = assess(cost, replace(place, position=Position.AFTER_READ if same_pass else Position.AFTER_SYNC), ctx.devices.host_only())
    return ref, replace(finding, impact=impact, impact_reason=reason)


def place_in_file(ctx: FileContext, node: cst.CSTNode, itself: Repeat | None = None) -> Place:
    """How often ``node`` runs and where in its step, from the loops of its own file (and
    what ``node`` repeats itself, a sort's comparisons)."""
    loop = ctx.loops.local_hot_loop(node)
    if loop is None:
        return Place(Where.ONCE)
    if ctx.guards.rare(node, stop=loop):
        return Place(Where.EVERY_N, guard=ctx.guards.rare_words(node, stop=loop))
    step = ctx.places.update_loop(loop)  # gradient accumulation: the micro-batch loop repeats within it
    own = (itself,) if itself is not None else ()
    repeats = Multiplicity(tuple(repeat for _, repeat in ctx.places.repeats(node, step)) + own, ctx.places.step_unit(step))
    return Place(ctx.loops.where(loop), repeats, ctx.places.position(node, step) or Position.MID_STEP, *ctx.guards.step_guard(node, stop=loop))


def place_in_function(ctx: FileContext, node: cst.CSTNode, itself: Repeat | None = None) -> tuple[tuple[tuple[str, Repeat], ...], Position | None, bool]:
    """The loops around ``node`` in its function (and what ``node`` repeats itself), where it
    sits there, and whether a guard there runs it every N steps or a few times only: with what
    the join says of the function, how many times per step it runs and where."""
    function = ctx.tree.enclosing_function(node)
    step = _step_in_function(ctx, node)
    own = (("", itself),) if itself is not None else ()
    return ctx.places.repeats(node, function) + own, ctx.places.position(node, step) if step is not None else None, ctx.guards.rare(node, stop=step)


def _step_in_function(ctx: FileContext, node: cst.CSTNode) -> cst.CSTNode | None:
    """What runs once per step around ``node``: its function; for module-level code, the
    outermost loop around it (the join decides whether that is a step loop)."""
    function = ctx.tree.enclosing_function(node)
    if function is not None:
        return function
    loops = [loop for loop in ctx.loops.enclosing_loops(node) if type(loop) in (cst.For, cst.While)]
    return loops[-1] if loops else None


def guard_words(ctx: FileContext, node: cst.CSTNode) -> tuple[str, bool]:
    """How often the rare guard around ``node`` in its step lets it run (a timer's words), or
    the every-2nd-step or multi-process-only guard that does not make it rare, or the switch off by default it needs; or "";
    and whether those words are a multi-process-only guard's (``Place.distributed_only``)."""
    stop = _step_in_function(ctx, node)
    rare = ctx.guards.rare_words(node, stop=stop)
    if rare:
        return rare, False
    words, distributed_only = ctx.guards.step_guard(node, stop=stop)
    # (then the switch it runs only with, where a caller may turn it on: `if not exists(self.checkpoint_path): return`)
    return (words, distributed_only) if words else (ctx.guards.switch_words(node), False)
