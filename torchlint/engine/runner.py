"""Run the selected checks over one parsed file and turn their reports into findings."""

from __future__ import annotations

import os
from dataclasses import replace

import libcst as cst

from torchlint.analysis.context import FileContext, Options
from torchlint.analysis.host_consumers import returned
from torchlint.analysis.impact import READ_COSTS, Cost
from torchlint.analysis.positions import compute_spans
from torchlint.analysis.samples import WORK_PLACEHOLDER, unseen_batches
from torchlint.analysis.steps import StepSummarizer, function_key
from torchlint.analysis.summary import HOSTED
from torchlint.analysis.tree import Tree
from torchlint.checks.base import Check, Report
from torchlint.engine.groups import merge_groups
from torchlint.engine.parse import parse, parse_good_cells
from torchlint.engine.prefilter import encodable, light_check, may_hold_a_step, needs_parse
from torchlint.engine.report_places import after_drain_if_ending, guard_words, mid_step_if_working, place_in_function, with_impact
from torchlint.engine.results import PLACED, UNLESS_HOST_STEPS, Pending, Conditional, FileResult, InStepIfCalled, InternalError
from torchlint.engine.source import Source, python_lines, syntax_error
from torchlint.findings import LOW, Finding, Location


def run_checks(source: Source, checks: list[type[Check]], options: Options, debug: bool = False, file: str | None = None,
               tails: frozenset[str] | None = None) -> FileResult:
    """Parse ``source`` once, run every check over the shared analysis, locate the reports.
    ``file``: where the text lives (its step summary is named by that absolute path, which
    module names come from); by default its display name, taken from the working directory.
    ``tails``: the module tails of the project it is joined in, where known (``StepSummarizer``)."""
    result = FileResult(source)
    absolute = os.path.abspath(file if file is not None else source.path)
    ready = encodable(source, result)  # a lone surrogate: said where, a notebook's other cells checked
    if ready is None:
        return result
    source = ready
    if not needs_parse(source.text):  # no check can fire: CPython's parse is enough (engine/prefilter.py)
        return light_check(source, result, absolute)
    module = parse(source)
    if isinstance(module, Finding) and source.cells is not None:
        source, module = parse_good_cells(source, module, result)
    if isinstance(module, Finding):
        result.findings.append(module)
        return result
    result.source = source
    result.module = module
    ctx = FileContext(module, source.path, options)
    torch_file = ctx.imports_torch()
    # A module that never imports torch or makes a step call has nothing to check, but it
    # can still pass steps on (a LightningModule base class, a re-export).
    checked = checks if torch_file or may_hold_a_step(source.text) else []
    made: list[tuple[type[Check], Report]] = []
    for check_type in checked:
        check = check_type(ctx)
        try:
            for node_type in check_type.visited_types():
                visit = getattr(check, f"visit_{node_type.__name__}")
                for node in ctx.tree.nodes(node_type):
                    visit(node)
            check.finish()
        except Exception as error:  # one check's bug must not stop the run
            if debug:
                raise
            result.errors.append(_internal_error(source.path, check_type.code, error))
            continue
        made.extend((check_type, report) for report in check.reports)
    # (`assert not exists(eos_token)` at a function's start, then `if exists(eos_token): ...`: that code never runs)
    # (code an assert makes dead, or a test of an attribute its class fixes to one value that fails it)
    made = [(check_type, report) for check_type, report in made if not ctx.guards.asserted_off(report.node) and not ctx.guards.constant_off(report.node)]
    # (a read after another of the same pass waits only for its own small kernels: the reads are where the waits stand)
    # (only sure ones: not a read that holds where a caller passes a device tensor, or unless another file's value is on the host;
    # a read of a parameter every call may pass a host value is one: where the join drops it, the reads after it of the same value go too)
    sure = [(report.node, report.cost or check_type.cost) for check_type, report in made if (report.cost or check_type.cost) in READ_COSTS
            and not (report.needs_tensor_argument or report.unless_host and HOSTED not in report.unless_host
                     or report.if_device or report.unless_host_return is not None)]
    ctx.places.note_reads((node for node, _ in sure), uploads=(node for node, cost in sure if cost is Cost.SMALL_UPLOAD))
    try:
        summarizer = StepSummarizer(ctx, tails)
        hot_calls = summarizer.hot_call_nodes(located=bool(made))
    except Exception as error:  # the step summary only adds findings: losing it loses no others
        if debug:
            raise
        result.errors.append(_internal_error(source.path, "steps", error))
        summarizer, hot_calls = None, []
    try:
        spans = _spans(module, made, hot_calls, source.text, ctx.tree)
    except RecursionError:  # libcst's code generation recurses once per level of nesting
        result.findings.append(syntax_error(source.path, _TOO_DEEP, hint="Split the expression into steps (named intermediate values)"))
        result.source = result.module = None
        return result
    made = merge_groups(made, source, lambda node: _location(source, spans, node))
    seen: set[tuple[str, int | None, int]] = set()
    for (check_type, report), finding in zip(made, _locate(source, spans, made)):
        key = (check_type.code, finding.location.cell, finding.location.line)
        if key in seen:
            continue  # one finding per rule per line: the first one stands for the line
        seen.add(key)
        cost = report.cost or check_type.cost
        subclass = _subclass_of(summarizer, report)
        if report.subclass_of is not None and subclass is None:
            continue  # a class of another file the summary cannot name: nothing says it derives from the family
        helper = _helper_wait(summarizer, report) if report.host_helper is not None else None
        if report.host_helper is not None and (helper is None or report.condition is not None or not torch_file):
            continue  # another file's function the summary cannot name: nothing says it builds on the host
        kept = _kept_attribute(summarizer, report) if report.host_attribute is not None else None
        if report.host_attribute is not None and (kept is None or not torch_file):
            continue  # an object the summary cannot name: nothing says its class keeps a host tensor there
        if report.condition is None:
            if torch_file:  # a file that never imports torch makes no tensors of its own
                located = finding
                finding, in_function = with_impact(ctx, finding, report, cost)
                if helper is not None:  # another file's function: the join knows whether it builds on the host
                    result.pending.append(Pending(finding, helper[0], False, host_helper=helper[1]))
                    continue
                if kept is not None:  # another object's attribute: the join knows whether its class keeps a host tensor there
                    result.pending.append(Pending(finding, kept[0], False, host_attribute=kept[1]))
                    continue
                if subclass is not None:  # a class of another file: the join knows whether it derives from the family
                    result.pending.append(Pending(finding, subclass[0], False, unless_switch=report.unless_switch, subclass_of=subclass[1]))
                    continue
                if report.dataset is not None or report.setting is not None or report.unless_switch or report.loader is not None:
                    _pending(result, summarizer, finding, report.dataset, _setting_key(ctx, report.setting), report.unless_switch, report.loader)
                    continue
                if report.trainable_class is not None:
                    backbone = with_impact(ctx, located, report, report.backbone_cost)[0] if report.backbone_cost is not None else None
                    _by_trainable_class(result, summarizer, finding, report.trainable_class, backbone)
                    continue
                # (at its step's end before calls of what the file cannot see into: the join knows whether they queue work)
                later = mid_step_if_working(ctx, summarizer, finding, report, cost)
                # (right after a call of another file's function: the join knows whether what it runs ends drained)
                drained = after_drain_if_ending(ctx, summarizer, finding, report, cost) if later is None else None
                # (in a function the project may call only behind a switch nothing turns on: the join knows)
                placed_in = _placed_in(ctx, report.node) if in_function is None and summarizer is not None and finding.impact != LOW else ""
                flags = ctx.guards.run_flags(report.node, direct=True) if placed_in else ()
                # (in a file naming no device, the host-steps wait below decides first)
                if report.unless_host_return is not None and summarizer is not None and (not check_type.device_bound or ctx.devices.names_device()) \
                        and (ref := summarizer.target(report.unless_host_return.func, report.unless_host_return)) is not None:
                    result.pending.append(Pending(finding, ref, False, unless_host_return=True, returned_element=report.returned_element, mid_step=later, after_drain=drained, called_in=placed_in, run_flags=flags))  # what it returns, the join knows
                    continue
                if report.unless_buffers is not None and summarizer is not None \
                        and (ref := summarizer.target(report.unless_buffers.func, report.unless_buffers)) is not None:
                    result.pending.append(Pending(finding, ref, False, unless_buffers=True))  # what the module is, the join knows
                    continue
                # how often it runs in an inference application (nothing trains, something samples): the join knows (a model's layers)
                untrained = with_impact(ctx, located, replace(report, where=report.untrained), cost)[0] \
                    if report.untrained is not None and summarizer is not None else None
                if report.unless_built and summarizer is not None:  # a config's default, built elsewhere: the join knows what is passed
                    result.pending.append(Pending(finding, None, False, unless_built=report.unless_built, untrained=untrained))
                    continue
                if untrained is not None:
                    result.pending.append(Pending(finding, None, False, untrained=untrained))
                    continue
                passed = (function_key(ctx, report.unless_passed[0]), report.unless_passed[1]) if report.unless_passed is not None else None
                if report.unless_cached is not None and summarizer is not None \
                        and (ref := summarizer.target(report.unless_cached.func, report.unless_cached)) is not None:
                    result.pending.append(Pending(finding, ref, False, unless_cached=True, unless_passed=passed))  # what it runs, and its cache, the join knows
                    continue
                if passed is not None:  # a cache off by default: what the function's callers pass, the join knows
                    result.pending.append(Pending(finding, None, False, unless_passed=passed))
                    continue
                if report.if_device:  # placed here; holds where every call passes a device tensor (the join says)
                    result.conditional.append(Conditional(PLACED, finding, check_type.device_bound, if_device=_device_params(ctx, report)))
                    continue
                method = _method_key(ctx, report.node) if summarizer is not None and in_function is None else ""
                if check_type.device_bound and summarizer is not None and not ctx.devices.names_device():
                    # no device named here: the join knows whether the model it builds (another file's) ever sees one
                    result.conditional.append(Conditional(UNLESS_HOST_STEPS, finding, True, unless_overridden=method))
                elif in_function is None and summarizer is not None and finding.impact != LOW \
                        and ((switch := ctx.guards.switch_of(report.node)), (flag := ctx.guards.flag_of(report.node))) != (None, ()):
                    # behind a switch off by default, or flags: do the callers turn it on, does every call leave one off?
                    result.pending.append(Pending(finding, None, False, switch=switch, flag=flag, called_in=placed_in, run_flags=flags))
                elif method:  # placed here, in a method every project subclass may override: the join knows
                    result.conditional.append(Conditional(PLACED, finding, check_type.device_bound, unless_overridden=method, called_in=method))
                elif later is not None:
                    result.pending.append(Pending(finding, None, False, mid_step=later, called_in=placed_in, run_flags=flags))  # what those calls run, the join knows
                elif drained is not None:
                    result.pending.append(Pending(finding, None, False, after_drain=drained, called_in=placed_in, run_flags=flags))  # whether that call ends drained, the join knows
                else:
                    result.findings.append(finding)
                    if placed_in:  # (whether the project calls its function only behind a switch off: the join may lower it)
                        result.pending.append(Pending(finding, None, False, called_in=placed_in, run_flags=flags, lower_only=True))
                if in_function is not None:
                    guard, distributed_only = guard_words(ctx, report.node)
                    result.in_functions.append(InStepIfCalled(in_function, finding.code, finding.location, cost.name, *place_in_function(ctx, report.placed_as or report.node, report.itself),
                                                              guard=guard, distributed_only=distributed_only, opt_in=ctx.guards.opt_in(report.node) or "",
                                                              flag=ctx.guards.flag_of(report.node)))
        elif report.trainable_class is None:  # (a class of another file and a step elsewhere: two joins, not followed)
            guard, distributed_only = guard_words(ctx, report.node)
            result.conditional.append(Conditional(function_key(ctx, report.condition), finding, check_type.device_bound, report.needs_tensor_argument,
                                                  cost.name, check_type.in_compiled, *place_in_function(ctx, report.placed_as or report.node, report.itself), report.repeated,
                                                  report.unreached, guard=guard, distributed_only=distributed_only, opt_in=_opt_in(ctx, report.node),
                                                  returned=check_type.device_bound and returned(ctx, report.node), unless_host=report.unless_host,
                                                  unless_switch=report.unless_switch,
                                                  optional=ctx.guards.opt_in(report.node, optional=True) is not None,
                                                  if_device=_device_params(ctx, report), device_key=_device_key(ctx, report),
                                                  quiet_every_n=check_type.quiet_every_n, subclass_of=subclass,
                                                  off_here=ctx.guards.never_taken(report.node) or "", switch=ctx.guards.switch_of(report.node), flag=ctx.guards.flag_of(report.node),
                                                  unless_overridden=_method_key(ctx, report.node), host_attribute=kept))
    if summarizer is not None:
        result.summary = summarizer.summary(absolute, lambda node: _location(source, spans, node))
    ctx.close()  # the analyses are done: reference counting frees them now (see pool.collector_paused)
    return result


def _placed_in(ctx: FileContext, node: cst.CSTNode) -> str:
    """The key of the function a finding its own file placed sits in ("" at module level): the join
    lowers it where every call of that function is made behind a switch nothing turns on."""
    function = ctx.tree.enclosing_function(node)
    return function_key(ctx, function) if function is not None else ""


def _method_key(ctx: FileContext, node: cst.CSTNode) -> str:
    """``Trainer.train_step`` for ``node`` in a method of a class (not a dunder: ``__init__`` and
    ``forward``'s kin run on every object): the join drops its findings where the class is never
    built and every project subclass overrides the method (``dispatch.overridden``); else ""."""
    function = ctx.tree.enclosing_function(node)
    if function is None or function.name.value.startswith("__") or ctx.tree.enclosing_class(function) is None \
            or type(ctx.tree.parent(ctx.tree.parent(function))) is not cst.ClassDef:
        return ""
    return function_key(ctx, function)


def _helper_wait(summarizer: StepSummarizer | None, report: Report) -> tuple[tuple, tuple[int, tuple[str, ...], bool]] | None:
    """``Report.host_helper``'s call: what it runs, as a summary reference, and what it passes (its
    positional arguments, its keywords, a splat), for the join's ``project_callees.builds_on_host``."""
    call = report.host_helper
    ref = summarizer.target(call.func, call) if summarizer is not None and call is not None else None
    if ref is None:
        return None
    keywords = tuple(arg.keyword.value for arg in call.args if arg.keyword is not None)  # type: ignore[union-attr]
    return ref, (sum(1 for arg in call.args if arg.keyword is None and not arg.star), keywords, any(arg.star for arg in call.args))


def _kept_attribute(summarizer: StepSummarizer | None, report: Report) -> tuple[tuple, str] | None:
    """``Report.host_attribute`` as plain data: the object as a summary reference (``("attr", "Corrector", "sde")`` for
    ``sde = self.sde``), and the attribute moved."""
    moved = report.host_attribute
    ref = summarizer.target(moved, moved) if summarizer is not None and moved is not None else None
    return (ref[1], ref[2]) if ref is not None and ref[0] == "object" and ref[2] == moved.attr.value else None  # type: ignore[union-attr]


def _subclass_of(summarizer: StepSummarizer | None, report: Report) -> tuple[tuple, str] | None:
    """``Report.subclass_of`` as plain data: the class as a summary reference, and the family."""
    if report.subclass_of is None or summarizer is None:
        return None
    expr, family = report.subclass_of
    ref = summarizer.target(expr, expr)
    return (ref, family) if ref is not None else None


def _opt_in(ctx: FileContext, node: cst.CSTNode) -> str:
    """The parameter that must be passed for a conditional finding to run (``Guards.opt_in``):
    the join sees every call, so ``if kv_cache is not None:`` counts too, as it does for a call
    (``CallSite.opt_in``): a training step leaving ``kv_cache`` out never runs the cache's code."""
    return ctx.guards.opt_in(node) or ctx.guards.opt_in(node, optional=True, required=True) or ""


def _device_params(ctx: FileContext, report: Report) -> tuple[str, ...]:
    """``f:param`` for each parameter the report needs to be a device tensor (Report.if_device)."""
    function = ctx.tree.enclosing_function(report.node) if report.if_device else None
    key = function_key(ctx, function) if function is not None else ""
    return tuple(f"{key}:{name}" for name in report.if_device)


def _device_key(ctx: FileContext, report: Report) -> str:
    """For a finding that holds by its condition or by its device parameters (``Report.either``):
    what it waits for where the device parameters hold (its loop or function, or ``PLACED``)."""
    if not report.either or not report.if_device:
        return ""
    step = ctx.loops.step_condition(report.node)
    return function_key(ctx, step) if step is not None else PLACED


def _pending(result: FileResult, summarizer: StepSummarizer | None, finding: Finding, dataset: tuple[cst.Call, bool, bool] | None,
             setting: tuple[str, str, str] | None, switch: str, loader: tuple[cst.BaseExpression, str] | None = None) -> None:
    """A loader finding whose dataset is a class of another file, or whose setting's default
    is in another file, and a finding that holds unless a file of the project turns a switch,
    wait for the join (engine/settle.py); one whose class the summary cannot name is settled
    here, as unknown work: it holds as it is (or waits for its setting or switch alone),
    unless it holds only for heavy work."""
    built, heavy_only, batched = dataset if dataset is not None else (None, False, False)
    ref = summarizer.target(built.func, built) if summarizer is not None and built is not None else None
    if loader is not None:  # a class of another file named like a loader: only the join knows it is one
        loader_ref = summarizer.target(loader[0], loader[0]) if summarizer is not None else None
        if loader_ref is not None:
            result.pending.append(Pending(finding, ref, heavy_only, setting, batched, switch, (loader_ref, loader[1])))
        return
    if ref is not None or (setting is not None and summarizer is not None) or switch:
        result.pending.append(Pending(finding, ref, heavy_only, setting, batched, switch))
    elif not heavy_only and setting is None:
        finding = replace(finding, message=finding.message.replace(WORK_PLACEHOLDER, ""))
        result.findings.append(unseen_batches(finding) if batched else finding)


def _setting_key(ctx: FileContext, setting: tuple[cst.FunctionDef | None, str, str] | None) -> tuple[str, str, str] | None:
    """``Report.setting`` as plain data: the function by its key ("" for an imported config object)."""
    if setting is None:
        return None
    return (function_key(ctx, setting[0]) if setting[0] is not None else "", setting[1], setting[2])


def _by_trainable_class(result: FileResult, summarizer: StepSummarizer | None, finding: Finding, built: cst.Call,
                        backbone: Finding | None = None) -> None:
    """A finding that holds only if a class of another file keeps trainable weights waits for
    the join (``backbone``: the finding where they are a torchvision model's); one whose class
    the summary cannot name is dropped (nothing says it does)."""
    ref = summarizer.target(built.func, built) if summarizer is not None else None
    if ref is not None:
        result.pending.append(Pending(finding, ref, False, trainable_only=True, backbone=backbone))


def _internal_error(path: str, where: str, error: Exception) -> InternalError:
    """The error being handled, as an ``InternalError`` of ``where`` (a rule, or the steps)."""
    import traceback  # only on this error path: a clean run never loads it

    return InternalError(path, where, f"{type(error).__name__}: {error}", traceback.format_exc())


_TOO_DEEP = "not checked: an expression is nested too deeply for libcst to place its findings (`not not ... x`, `a or a or ...` thousands deep)"


def _spans(module: cst.Module, made: list[tuple[type[Check], Report]], extra: list[cst.CSTNode], text: str, tree: Tree) -> dict:  # type: ignore[type-arg]
    """Positions of every reported, related and extra node, in one codegen pass (of the
    top-level statements that hold them)."""
    nodes = [report.node for _, report in made] + [n for _, report in made for n in report.related] + list(extra)
    spans = compute_spans(module, nodes, tree, text) if nodes else {}
    if spans and "\x0c" in text:
        spans = _with_dropped_form_feeds(spans, text, module.code)
    return spans


def _with_dropped_form_feeds(spans: dict, text: str, code: str) -> dict:  # type: ignore[type-arg]
    """The spans as columns of ``text``: libcst's code drops the form feeds before a
    statement's indentation, so a column on such a line is short by their number."""
    shift: dict[int, int] = {}
    for number, (line, regenerated) in enumerate(zip(python_lines(text), python_lines(code)), start=1):
        if len(line) > len(regenerated) and line.endswith(regenerated) and not line[: len(line) - len(regenerated)].strip(" \t\x0c"):
            shift[number] = len(line) - len(regenerated)
    if not shift:
        return spans
    return {
        key: (line, column + shift.get(line, 0), end_line, end_column + shift.get(end_line, 0))
        for key, (line, column, end_line, end_column) in spans.items()
    }


def _locate(source: Source, spans: dict, made: list[tuple[type[Check], Report]]) -> list[Finding]:  # type: ignore[type-arg]
    findings = []
    for check_type, report in made:
        location = _location(source, spans, report.node)
        related = tuple(_location(source, spans, node) for node in report.related)
        findings.append(
            Finding(check_type.code, check_type.name, report.message, location, report.hint or check_type.fix_hint, report.fix, related)
        )
    return findings


def _location(source: Source, spans: dict, node: cst.CSTNode) -> Location:  # type: ignore[type-arg]
    line, column, end_line, end_column = spans.get(id(node), (1, 0, 1, 0))
    return source.location(line, column + 1, end_line, end_column + 1)
