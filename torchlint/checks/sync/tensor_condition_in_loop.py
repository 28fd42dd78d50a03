"""Python `if`/`while` on a tensor value inside a training loop."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.context import short_code
from torchlint.analysis.values import Kind
from torchlint.analysis.impact import Cost
from torchlint.checks.base import Check

# Comparisons that do not read the tensor's value.
_IDENTITY = (cst.Is, cst.IsNot, cst.In, cst.NotIn)


class TensorConditionInLoop(Check):
    """`if`/`while` whose test is a tensor value, inside a hot loop."""

    code = "TL104"
    name = "tensor-condition-in-loop"
    cost = Cost.SYNC
    message = "`{test}` branches on a tensor value in {loop}: the host waits for the device to decide"
    per_step = True
    device_bound = True
    fix_hint = "Keep the decision on the device with `torch.where` / masking, or test it every N steps"
    default = False

    def visit_If(self, node: cst.If) -> None:
        self._check(node, node.test)

    def visit_While(self, node: cst.While) -> None:
        self._check(node, node.test)

    def visit_IfExp(self, node: cst.IfExp) -> None:
        self._check(node, node.test)

    def _check(self, statement: cst.CSTNode, test: cst.BaseExpression) -> None:
        ctx = self.ctx
        loop = ctx.loops.hot_loop(test)
        if loop is None or ctx.devices.host_only(test):
            return
        if ctx.guards.rare(statement, stop=loop):
            return
        if self._reads_tensor(test, test):
            self.report(test, test=short_code(ctx.module, test))

    def _reads_tensor(self, expr: cst.BaseExpression, at: cst.CSTNode) -> bool:
        """Does Python take the truth value of a device tensor to evaluate ``expr``?"""
        if isinstance(expr, cst.BooleanOperation):
            return self._reads_tensor(expr.left, at) or self._reads_tensor(expr.right, at)
        if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Not):
            return self._reads_tensor(expr.expression, at)
        if isinstance(expr, cst.Comparison):
            if any(isinstance(c.operator, _IDENTITY) for c in expr.comparisons):
                return False
            operands = [expr.left, *(c.comparator for c in expr.comparisons)]
            return any(self._device_tensor(o, at) for o in operands)
        return self._device_tensor(expr, at)

    def _device_tensor(self, expr: cst.BaseExpression, at: cst.CSTNode) -> bool:
        ctx = self.ctx
        if ctx.values.kind(expr, at) is not Kind.TENSOR:
            return False
        return not (ctx.devices.is_host_batch(expr, at) or ctx.devices.moved_to_host(expr, at))
