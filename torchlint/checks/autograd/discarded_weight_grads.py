"""A network trained by its own optimizer, backpropagated through in another network's step."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.frozen import chain_root, output_backwards
from torchlint.analysis.grad import accumulates_grads
from torchlint.analysis.impact import Cost
from torchlint.analysis.losses import DIFFERENTIATED_RETURNS
from torchlint.analysis.names import dotted
from torchlint.analysis.stepped import grads_discarded, stepped_after, toggles_grad
from torchlint.checks.base import Check


class DiscardedWeightGrads(Check):
    """A module whose gradients a backward computes for a step that does not update it."""

    code = "TL310"
    name = "discarded-weight-grads"
    cost = Cost.DISCARDED_GRADS
    per_step = True
    message = (
        "`{module}` in {loop} is backpropagated through by a loss {stepped}; "
        "`{network}`'s own optimizer zeroes what it gets before its next step: {waste} thrown away every time"
    )
    weights_only = "the gradients of its weights (about a third of its forward and backward)"
    whole = "its whole backward (nothing before it is trained by this loss)"
    freeze_hint = (
        "Switch its gradients off for this step: `{network}.requires_grad_(False)` before the call, "
        "`requires_grad_(True)` after the step (gradients still reach its input)"
    )
    detach_hint = "Nothing upstream needs its gradients here: run the call under `torch.no_grad()` or `.detach()` its output"

    def __init__(self, ctx) -> None:  # type: ignore[no-untyped-def]
        super().__init__(ctx)
        self._reported: set[tuple[int, str]] = set()

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        module = dotted(node.func)
        function = ctx.tree.enclosing_function(node)
        # One finding per network per step function: its first such call stands for the rest.
        if module is None or ctx.qname(node.func) is not None or (id(function), module) in self._reported:
            return
        if ctx.loops.hot_loop(node) is None or ctx.loops.step_condition(node) is not None:
            return  # runs once, or in a step the project join must find elsewhere (the optimizers' order is this function's)
        if function is not None and function.name.value in DIFFERENTIATED_RETURNS:
            return  # Lightning's automatic optimization switches off what the stepped optimizer is not given
        if not ctx.trained.known(node):
            return  # optimizers out of sight: whose parameters a step updates is not known
        owners = ctx.trained.owners(module, node)
        if not owners or ctx.grad.runs_without_grad(node):
            return  # not trained here (TL308's case), or no graph through it
        backwards = [b for b in output_backwards(ctx, node) if accumulates_grads(ctx, b)]
        if not backwards:
            return  # its output reaches no backward that writes `.grad` here (or is detached; `autograd.grad` writes none)
        if not all(grads_discarded(ctx, module, owners, backward) for backward in backwards):
            return  # its own optimizer steps with them first (its own loss, or summed on purpose), or not known
        if toggles_grad(ctx, module):
            return  # its gradients are switched off around this step (`requires_grad(D, False)`)
        self._reported.add((id(function), module))
        network = ctx.trained.given_name(module, owners)
        whole = not self._input_needs_grad(node)
        self.report(
            node, module=module, network=network, stepped=_stepped(ctx, backwards),
            waste=self.whole if whole else self.weights_only,
            hint=(self.detach_hint if whole else self.freeze_hint).format(network=network),
            cost=Cost.DISCARDED_BACKWARD if whole else None,  # its input's gradients thrown away too: twice the weights' share
        )

    def _input_needs_grad(self, call: cst.Call) -> bool:
        """Is an argument (or a name it reads) the output of another module call of this
        function, which this backward trains through it? Unknown counts as yes: only its
        weights' gradients are then claimed wasted."""
        ctx = self.ctx
        for arg in call.args:
            for node in (arg.value, *ctx.tree.descendants(arg.value)):
                if isinstance(node, cst.Call) and dotted(node.func) is not None and ctx.qname(node.func) is None:
                    return True
                if not isinstance(node, cst.Name):
                    continue
                for binding in ctx.bindings.lookup(node.value, call):
                    value = binding.value
                    if binding.kind == "param" or value is None:
                        return True
                    root = chain_root(value)[0] if isinstance(value, cst.BaseExpression) else value
                    if isinstance(root, cst.Call) and ctx.qname(root.func) is None:
                        return True  # `fake = G(z)`; a project helper may return one too
        return False



def _stepped(ctx, backwards: list[cst.Call]) -> str:  # type: ignore[no-untyped-def]
    """What the step after the backward updates, for the message."""
    stepped = [found for backward in backwards if (found := stepped_after(ctx, backward)) is not None]
    names = list(dict.fromkeys(name for name, _ in stepped))
    return f"whose step updates only `{'`, `'.join(names)}`'s parameters" if names else "stepped elsewhere"
