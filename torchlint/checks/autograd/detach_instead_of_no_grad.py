"""A module's output detached at once: its autograd graph built for nothing."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.context import short_code
from torchlint.analysis.frozen import built_weights
from torchlint.analysis.weight_kinds import FROZEN, WEIGHTED
from torchlint.analysis.impact import Cost
from torchlint.analysis.kinds import Kind
from torchlint.analysis.names import dotted
from torchlint.checks.base import Check


class DetachInsteadOfNoGrad(Check):
    """A module call whose output is detached at once, outside `no_grad`."""

    code = "TL309"
    name = "detach-instead-of-no-grad"
    cost = Cost.DETACHED_GRAPH
    per_step = True
    message = (
        "`{call}` in {loop} records an autograd graph (and keeps its activations) that `.detach()` throws away at once: "
        "`{module}`'s parameters require grad"
    )
    fix_hint = "Run the call under `with torch.no_grad():` (its result needs no `.detach()` then)"

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if type(func) is not cst.Attribute or func.attr.value != "detach" or node.args:  # type: ignore[attr-defined]
            return
        call = func.value  # type: ignore[attr-defined]
        module = dotted(call.func) if type(call) is cst.Call else None
        ctx = self.ctx
        if module is None or ctx.qname(call.func) is not None or ctx.grad.runs_without_grad(call):
            return  # not a module of this program's, or no graph recorded
        if ctx.loops.hot_loop(call) is None:
            return  # module-level code outside loops: it runs once (a plot after training)
        requires = self._requires_grad(module, call)
        if requires is False or self._evaluated(module, call):
            return
        if isinstance(requires, cst.Call):  # a class of another file: the join says whether it keeps trainable weights
            if ctx.loops.step_condition(call) is None:  # (and a step elsewhere too: two joins, not followed)
                self.report(call, call=short_code(ctx.module, call), module=module, trainable_class=requires)
            return
        self.report(call, call=short_code(ctx.module, call), module=module)

    def _evaluated(self, module: str, call: cst.Call) -> bool:
        """After ``module.eval()`` in the same function, with no backward after the call: TL301
        reports that call (an evaluation without ``no_grad``), once is enough."""
        tree = self.ctx.tree
        scope, at = tree.scope_of(call), tree.index(call)
        switched = any(dotted(c.func.value) == module and not c.args and tree.index(c) < at and tree.scope_of(c) is scope  # type: ignore[attr-defined]
                       for c in self.ctx.method_calls({"eval"}))
        return switched and not self.ctx.grad.backward_after(call)

    def _requires_grad(self, module: str, call: cst.Call) -> bool | cst.Call:
        """Do ``module``'s parameters require grad, as far as this file shows: an optimizer of
        this file trains it (a GAN's discriminator scoring real images in the generator's
        step), or it is built with weights and nothing here freezes or hands it out
        (a DQN's target network copied with ``load_state_dict``); the constructor of a class
        of another file built so, whose weights the join looks up."""
        ctx = self.ctx
        trained = ctx.trained
        if trained.handled(module, call):
            return False  # frozen for this step (`set_requires_grad(D, False)`), or handed to code not followed
        weights = built_weights(ctx, call.func, call)
        if trained.optimized(module, call):  # (a module, not a function whose name an optimizer's arguments read)
            return weights != FROZEN and ctx.values.kind(call.func, call) is Kind.MODULE
        return weights if isinstance(weights, cst.Call) else weights in WEIGHTED
