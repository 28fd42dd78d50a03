"""A network in the loss that no optimizer updates, whose weights still get gradients."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.context import short_code
from torchlint.analysis.frozen import built_weights, output_backwards, output_targets
from torchlint.analysis.weight_kinds import BACKBONE, WEIGHTED
from torchlint.analysis.impact import Cost
from torchlint.analysis.losses import DIFFERENTIATED_RETURNS
from torchlint.analysis.names import dotted
from torchlint.checks.base import Check


class FrozenModuleRequiresGrad(Check):
    """A module in the loss that no optimizer is given, whose parameters still require grad."""

    code = "TL308"
    name = "frozen-module-requires-grad"
    cost = Cost.FROZEN_WEIGHT_GRADS
    per_step = True
    message = (
        "`{module}` in {loop} feeds a loss that is backpropagated, but no optimizer is given its parameters and they "
        "still require grad: every backward computes (and accumulates) gradients for its weights"
    )
    fix_hint = "Freeze it once where it is built: `{module}.requires_grad_(False)` (gradients still flow through it to its input)"

    def __init__(self, ctx) -> None:  # type: ignore[no-untyped-def]
        super().__init__(ctx)
        self._reported: set[str] = set()

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        module = dotted(node.func)
        # One finding per network: its first call in the step that feeds the loss stands for the rest.
        if module is None or module in self._reported or ctx.qname(node.func) is not None:
            return
        if ctx.loops.hot_loop(node) is None:
            return  # module-level code outside loops: it runs once
        function = ctx.tree.enclosing_function(node)
        if not ctx.grad.backward_after(node) and (function is None or function.name.value not in DIFFERENTIATED_RETURNS):
            return  # no backward pass after it here (nor a Lightning `training_step`'s returned loss): not a training step
        if not ctx.trained.known(node) or ctx.trained.optimized(module, node):
            return  # trained (`Adam(itertools.chain(G.parameters(), D.parameters()))`), or the optimizers are out of sight
        if ctx.grad.runs_without_grad(node) or not self._feeds_backward(node):
            return  # no graph through it, or its output never reaches a backward here
        if ctx.trained.handled(module, node):
            return  # frozen (`requires_grad_(False)`, a loop over its parameters) or handed to code not followed
        weights = built_weights(ctx, node.func, node)  # a loss, a layer without weights, a model built beyond sight: ""/None
        if isinstance(weights, cst.Call):
            if ctx.loops.step_condition(node) is not None:
                return  # a class of another file in a step found elsewhere: two joins, not followed
            self._reported.add(module)
            self.report(node, module=module, call=short_code(ctx.module, node), trainable_class=weights,
                        backbone_cost=Cost.FROZEN_BACKBONE_GRADS, hint=self.fix_hint.format(module=module))
        elif weights in WEIGHTED:
            self._reported.add(module)
            # A torchvision model's layers (a VGG perceptual loss): commonly larger than the network trained.
            self.report(node, module=module, call=short_code(ctx.module, node), hint=self.fix_hint.format(module=module),
                        cost=Cost.FROZEN_BACKBONE_GRADS if weights == BACKBONE else None)

    def _feeds_backward(self, call: cst.Call) -> bool:
        """Does the call's output reach a backward pass after it (or the loss a Lightning
        ``training_step`` returns)? Not when it is detached at once."""
        ctx = self.ctx
        holder, targets = output_targets(ctx, call)
        if isinstance(holder, cst.Return):
            return _differentiated(ctx, holder)
        if holder is not None or output_backwards(ctx, call):
            return True
        statement = ctx.tree.statement_of(call) or call
        return any(ctx.grad.feeds_returned_loss(name, statement, depth=3) for name in targets)


def _differentiated(ctx, ret: cst.Return) -> bool:  # type: ignore[no-untyped-def]
    """``return l1(self.vgg(fake), ...)`` in a Lightning ``training_step``."""
    function = ctx.tree.enclosing_function(ret)
    return function is not None and function.name.value in DIFFERENTIATED_RETURNS
