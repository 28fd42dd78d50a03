"""The autograd profiler, NVTX ranges or gradcheck left around or inside a training loop."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.context import short_code
from torchlint.analysis.impact import Cost, Where
from torchlint.analysis.training import trains
from torchlint.checks.base import Check

# The legacy autograd profiler and its range emitters: each op of what they wrap is
# recorded (or given an NVTX/ITT range). torch.profiler.profile, with a schedule, and
# record_function (a label inside an active profiler) are the intended tools: not these.
_PROFILERS = frozenset({
    "torch.autograd.profiler.profile", "torch.autograd.profiler_legacy.profile",
    "torch.autograd.profiler.emit_nvtx", "torch.autograd.profiler.emit_itt",
})
# Numerical checks of a function's gradients: many forward and backward passes each.
_GRADCHECKS = frozenset({
    "torch.autograd.gradcheck", "torch.autograd.gradgradcheck",
    "torch.autograd.gradcheck.gradcheck", "torch.autograd.gradcheck.gradgradcheck",
})


class DebugToolInTraining(Check):
    """`torch.autograd.profiler.profile()`/`emit_nvtx()` around training, or `gradcheck` in a training loop."""

    code = "TL307"
    name = "debug-tool-in-training"
    cost = Cost.DEBUG_MODE
    message = "`{call}` {what}"
    fix_hint = ("Profile a few steps with `torch.profiler.profile(schedule=...)` (or `torchlint profile`), "
                "and check gradients once in a test, not in the training run")

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        name = ctx.qname(node.func)
        if name in _PROFILERS:
            enabled = ctx.keyword(node, "enabled")
            if enabled is not None and ctx.constants.bool_value(enabled.value, node) is not True:
                return  # off, or a setting the user passes (`enabled=args.profile`)
            if ctx.has_star_kwargs(node) or not self._wraps_training(node):
                return
            what = ("records every op of every training step it wraps (the legacy autograd profiler)" if name.endswith("profile")
                    else "opens a profiler range around every op of every training step it wraps")
        elif name in _GRADCHECKS:
            loop = ctx.loops.local_hot_loop(node)
            if loop is None or ctx.guards.rare(node, stop=loop) or not ctx.guards.runs_when_reached(node, stop=loop):
                return  # a check run once, or every N steps on purpose
            what = "runs the function again for every input element, with finite differences, on every step of the training loop"
        else:
            return
        self.report(node, where=Where.TRAIN, call=short_code(ctx.module, node, limit=60), what=what)

    def _wraps_training(self, node: cst.Call) -> bool:
        """Is ``node`` a ``with`` item (or decorator) that runs unconditionally around a
        training loop, a backward, or each step of a training loop?"""
        ctx = self.ctx
        holder = ctx.tree.parent(node)
        if type(holder) is cst.WithItem:
            statement = ctx.tree.parent(holder)
        elif type(holder) is cst.Decorator:
            statement = ctx.tree.parent(holder)
            return type(statement) is cst.FunctionDef and trains(ctx, statement)
        else:
            return False  # `prof = profile(); prof.__enter__()` and kin: rare, and not what this rule reads
        if not ctx.guards.runs_when_reached(statement):
            return False  # behind a flag: profiled when someone asks for it
        if ctx.loops.local_hot_loop(statement) is not None:
            return True  # every step wrapped
        body = statement.body  # type: ignore[union-attr]
        if any(ctx.tree.is_inside(loop, body) for loop in ctx.loops.training_loops()):
            return True
        for call in (n for n in ctx.tree.descendants(body) if type(n) is cst.Call):
            callee = ctx.functions.called(call, None if type(call.func) is cst.Attribute else ctx.qname(call.func))
            if callee is not None and trains(ctx, callee):
                return True  # `with profile(): train(model, loader)`
            if ctx.method_name(call) == "fit" and call.args:
                return True  # a trainer's whole run
        return False  # one step profiled (a benchmark, a debugging session): not the run
