"""A module's output detached at once: its autograd graph built for nothing."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.context import short_code
from torchlint.analysis.frozen import built_weights
from torchlint.analysis.weight_kinds import FROZEN, WEIGHTED
from torchlint.analysis.impact import Cost
from torchlint.analysis.kinds import Kind
from torchlint.analysis.host_reads import acting_module, host_only_uses
from torchlint.analysis.multiplicity import Where
from torchlint.analysis.names import dotted
from torchlint.checks.base import Check


_DETACHED = "`.detach()` throws away at once"
_READ_ON_HOST = "nothing reads: its result only goes to the host (`{use}`)"


class DetachInsteadOfNoGrad(Check):
    """A module call whose output is detached at once, or only read on the host, outside `no_grad`."""

    code = "TL309"
    name = "detach-instead-of-no-grad"
    cost = Cost.DETACHED_GRAPH
    per_step = True
    message = (
        "`{call}` in {loop} records an autograd graph (and keeps its activations) that {dropped}: "
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
        self._report(call, module, _DETACHED)

    def visit_Assign(self, node: cst.Assign) -> None:
        # `q_values = q_network(obs)` then only `torch.argmax(q_values, dim=1).cpu().numpy()`: an action picked for the
        # environment on every step, its graph never read (cleanrl's DQN, C51, SAC acting; review 22)
        call = node.value
        if type(call) is not cst.Call or len(node.targets) != 1:
            return
        ctx = self.ctx
        loop = ctx.loops.local_hot_loop(call)
        if loop is None or ctx.loops.where(loop) is not Where.TRAIN:
            return  # not in a training loop of this file (an evaluation's forward: TL301's; a decode loop's: its own rules)
        acting = acting_module(ctx, call)
        if acting is None or ctx.grad.runs_without_grad(call):
            return  # not a module of this program's, or no graph recorded
        uses = host_only_uses(ctx, node)
        if uses:
            dropped = _READ_ON_HOST.format(use=short_code(ctx.module, uses[0], limit=50))
            self._report(call, acting[0], dropped, module_expr=acting[1], cost=Cost.GRAPH_BUILT)  # type: ignore[index]

    def _report(self, call: cst.Call, module: str, dropped: str, module_expr: cst.BaseExpression | None = None, cost: Cost | None = None) -> None:
        ctx = self.ctx
        if module_expr is not None:
            # (acting: a module an optimizer of this file trains requires grad, whatever loop reads its parameters for a soft update)
            requires: bool | cst.Call = self._trained_here(module, call, module_expr)
        else:
            requires = self._requires_grad(module, call, call.func)
        if requires is False or self._evaluated(module, call):
            return
        if isinstance(requires, cst.Call):  # a class of another file: the join says whether it keeps trainable weights
            if ctx.loops.step_condition(call) is None:  # (and a step elsewhere too: two joins, not followed)
                self.report(call, call=short_code(ctx.module, call), module=module, dropped=dropped, trainable_class=requires, cost=cost)
            return
        self.report(call, call=short_code(ctx.module, call), module=module, dropped=dropped, cost=cost)

    def _evaluated(self, module: str, call: cst.Call) -> bool:
        """After ``module.eval()`` in the same function, with no backward after the call: TL301
        reports that call (an evaluation without ``no_grad``), once is enough."""
        tree = self.ctx.tree
        scope, at = tree.scope_of(call), tree.index(call)
        switched = any(dotted(c.func.value) == module and not c.args and tree.index(c) < at and tree.scope_of(c) is scope  # type: ignore[attr-defined]
                       for c in self.ctx.method_calls({"eval"}))
        return switched and not self.ctx.grad.backward_after(call)

    def _trained_here(self, module: str, call: cst.Call, module_expr: cst.BaseExpression) -> bool:
        """Is ``module`` given to an optimizer of this file, built with weights not frozen, and never has its
        ``requires_grad`` set here (a DQN's ``q_network``, whose target copies read ``q_network.parameters()``)?"""
        ctx = self.ctx
        if not ctx.trained.optimized(module, call) or ctx.values.kind(module_expr, call) is not Kind.MODULE:
            return False
        if built_weights(ctx, module_expr, call) == FROZEN:
            return False
        head = module.split(".")[0]
        return not any(dotted(attr.value) in (module, head) for attr in ctx.tree.attributes_named("requires_grad")) \
            and not any(dotted(c.func.value) in (module, head) for c in ctx.method_calls({"requires_grad_"}))  # type: ignore[attr-defined]

    def _requires_grad(self, module: str, call: cst.Call, module_expr: cst.BaseExpression) -> bool | cst.Call:
        """Do ``module``'s parameters require grad, as far as this file shows: an optimizer of
        this file trains it (a GAN's discriminator scoring real images in the generator's
        step), or it is built with weights and nothing here freezes or hands it out
        (a DQN's target network copied with ``load_state_dict``); the constructor of a class
        of another file built so, whose weights the join looks up."""
        ctx = self.ctx
        trained = ctx.trained
        if trained.handled(module, call):
            return False  # frozen for this step (`set_requires_grad(D, False)`), or handed to code not followed
        weights = built_weights(ctx, module_expr, call)
        if trained.optimized(module, call):  # (a module, not a function whose name an optimizer's arguments read)
            return weights != FROZEN and ctx.values.kind(module_expr, call) is Kind.MODULE
        return weights if isinstance(weights, cst.Call) else weights in WEIGHTED
