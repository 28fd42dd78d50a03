"""A loss that still holds its autograd graph kept beyond the step."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.context import short_code
from torchlint.analysis.names import dotted
from torchlint.analysis.impact import Cost
from torchlint.checks.base import Check


class LossGraphRetained(Check):
    """A loss tensor (with its graph) appended to or summed into a value that outlives the step."""

    code = "TL302"
    name = "loss-graph-retained"
    cost = Cost.MEMORY_KEPT
    message = "`{store}` keeps every step's loss with its autograd graph alive"
    per_step = True
    fix_hint = "Store `loss.detach()` instead (it stays on the device; read it with `.item()` once after the loop)"

    def visit_Call(self, node: cst.Call) -> None:
        if self.ctx.method_name(node) != "append" or len(node.args) != 1 or node.args[0].keyword or node.args[0].star:
            return
        accumulator = dotted(node.func.value)  # type: ignore[attr-defined]
        self._check(node, accumulator, node.args[0].value)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        if not isinstance(node.operator, (cst.AddAssign, cst.SubtractAssign)):
            return
        self._check(node, dotted(node.target), node.value)

    def visit_Assign(self, node: cst.Assign) -> None:
        if len(node.targets) != 1 or not isinstance(node.targets[0].target, cst.Subscript):
            return
        target = node.targets[0].target
        if _fixed_key(target):
            return  # `losses["d"] = d_loss` replaces last step's entry: nothing accumulates
        self._check(node, dotted(target.value), node.value)

    def _check(self, node: cst.CSTNode, accumulator: str | None, value: cst.BaseExpression) -> None:
        ctx = self.ctx
        if accumulator is None:
            return
        loop = self._step_loop(node)
        if loop is None:
            return
        if not ctx.values.carries_graph(value, node):
            return
        if self._created_inside(accumulator, node, loop):
            return  # a fresh container each step: nothing outlives the step
        if self._returned_step_loss(accumulator, node, loop):
            return  # the step's loss summed over a model's outputs, for the caller's backward
        if ctx.grad.runs_without_grad(node):
            return
        if ctx.grad.feeds_backward(accumulator, node):
            return  # the step's own loss, built up and then differentiated
        statement = ctx.tree.statement_of(node) if not isinstance(node, cst.Call) else node
        self.report(node, store=short_code(ctx.module, statement if statement is not None else node))

    def _step_loop(self, node: cst.CSTNode) -> cst.CSTNode | None:
        """The loop whose iterations are the steps: one over a DataLoader, else the outermost
        hot loop, else the enclosing function. A loop over a model's outputs or loss terms
        is not a step loop."""
        loops = self.ctx.loops.enclosing_loops(node)
        for loop in loops:
            if self.ctx.loops.loader_of(self.ctx.loops.iterated_expression(loop), loop) is not None:
                return loop
        hot = [loop for loop in loops if self.ctx.loops.is_hot(loop)]
        # Else the function, a step if the project-wide join finds it per-step
        # (Lightning's `training_step`, a helper a hot loop calls).
        return hot[-1] if hot else self.ctx.tree.enclosing_function(node)

    def _returned_step_loss(self, accumulator: str, node: cst.CSTNode, loop: cst.CSTNode) -> bool:
        """``total += criterion(out, t)`` in a loop whose only module calls are losses (over a
        model's outputs or loss terms, not a DataLoader), in a function that returns ``total``."""
        ctx = self.ctx
        tree = ctx.tree
        function = tree.enclosing_function(node)
        if function is None or loop is function or not tree.is_inside(loop, function):
            return False
        if ctx.loops.loader_of(ctx.loops.iterated_expression(loop), loop) is not None:
            return False
        for call in tree.descendants(loop):
            if isinstance(call, cst.Call) and ctx.loops.is_step_call(call) and not ctx.values.is_loss_call(call):
                return False  # a forward pass, backward or optimizer step: a loop over steps
        local = any(
            b.kind == "assign" and tree.is_inside(b.node, function) and not tree.is_inside(b.node, loop)
            for b in ctx.bindings.lookup(accumulator, node)
        )
        return local and self._returns(function, accumulator)

    def _returns(self, function: cst.FunctionDef, name: str) -> bool:
        """Does ``function`` return ``name``, in an expression or through a name bound from it?"""
        ctx = self.ctx
        for ret in ctx.tree.descendants(function):
            if not isinstance(ret, cst.Return) or ret.value is None or ctx.tree.enclosing_function(ret) is not function:
                continue
            for read in (ret.value, *ctx.tree.descendants(ret.value)):
                if not isinstance(read, (cst.Name, cst.Attribute)):
                    continue
                found = dotted(read)
                if found == name:
                    return True
                binding = ctx.bindings.reaching(found, ret) if found is not None else None
                if binding is not None and binding.value is not None and any(
                    dotted(n) == name for n in ctx.tree.descendants(binding.value) if isinstance(n, (cst.Name, cst.Attribute))
                ):
                    return True
        return False

    def _created_inside(self, accumulator: str, node: cst.CSTNode, loop: cst.CSTNode) -> bool:
        tree = self.ctx.tree
        for binding in self.ctx.bindings.lookup(accumulator, node):
            if binding.kind == "assign" and (binding.node is loop or tree.is_inside(binding.node, loop)):
                return True
        return False


def _fixed_key(target: cst.Subscript) -> bool:
    """``d["loss"]``, ``d[0]``: a literal key, the same entry on every step."""
    if len(target.slice) != 1 or not isinstance(target.slice[0].slice, cst.Index):
        return False
    return isinstance(target.slice[0].slice.value, (cst.SimpleString, cst.Integer))
