"""A device tensor turned into a Python value by a builtin or a list index inside a training loop."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.context import short_code
from torchlint.analysis.kinds import Kind
from torchlint.checks.base import Check

# Builtins that read a tensor's value: conversions, and the ones that compare or count with it.
_CONVERSIONS = frozenset({"int", "float", "bool", "complex"})
_COMPARING = frozenset({"min", "max", "sorted"})
_COUNTING = frozenset({"range"})
# `math` functions convert their argument to a Python float first.
_MATH_PREFIX = "math."


class TensorToPythonInLoop(Check):
    """`int(t)`, `float(t)`, `min(x, t)`, `range(t)`, `math.f(t)` or `items[t]` on a device tensor inside a hot loop."""

    code = "TL105"
    name = "tensor-to-python-in-loop"
    message = "`{expr}` in {loop} reads a device tensor into a Python value: the host waits for the device on every step"
    per_step = True
    device_bound = True
    fix_hint = "Keep the value on the device (`torch.clamp`, `torch.minimum`, tensor indexing), or read it once after the loop"

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        func = node.func
        if type(func) is cst.Name and ctx.qname(func) is None:
            name = func.value
            if name in _CONVERSIONS:
                read = node.args[:1]  # `int(x, base)` reads a string; a tensor is the first argument
            elif name in _COMPARING or name in _COUNTING:
                read = node.args
            else:
                return
        elif (ctx.qname(func) or "").startswith(_MATH_PREFIX):
            read = node.args
        else:
            return
        tensors = [arg.value for arg in read if arg.keyword is None and not arg.star]
        if tensors and ctx.syncs.in_step(node) and any(ctx.syncs.device_tensor(value, node) for value in tensors):
            self.report(node, expr=short_code(ctx.module, node))

    def visit_Subscript(self, node: cst.Subscript) -> None:
        ctx = self.ctx
        if len(node.slice) != 1 or not isinstance(node.slice[0].slice, cst.Index):
            return
        if not self._python_sequence(node.value, node):
            return
        index = node.slice[0].slice.value
        if ctx.syncs.in_step(node) and ctx.syncs.device_tensor(index, node):
            self.report(node, expr=short_code(ctx.module, node))

    def _python_sequence(self, value: cst.BaseExpression, at: cst.CSTNode) -> bool:
        """A Python list or tuple (a dict hashes a tensor by identity: no read)."""
        ctx = self.ctx
        return ctx.values.kind(value, at) is Kind.HOST and ctx.values.is_sequence_literal(value, at)
