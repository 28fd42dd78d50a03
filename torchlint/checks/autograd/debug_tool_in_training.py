"""The autograd profiler, NVTX ranges or gradcheck left around or inside a training loop."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.context import short_code
from torchlint.analysis.impact import Cost
from torchlint.analysis.multiplicity import Where
from torchlint.analysis.training import wraps_training
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
            enabled = ctx.argument(node, 0, "enabled")
            if enabled is not None and ctx.constants.bool_value(enabled.value, node) is not True:
                return  # off, or a setting the user passes (`enabled=args.profile`)
            if ctx.has_star_kwargs(node) or not wraps_training(ctx, node):
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
