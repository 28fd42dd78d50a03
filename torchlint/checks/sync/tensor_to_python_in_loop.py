"""A device tensor turned into a Python value by a builtin or a list index inside a training loop."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.context import short_code
from torchlint.analysis.kinds import Kind
from torchlint.analysis.syncs import plainly_python
from torchlint.analysis.uploads import FACTORIES
from torchlint.analysis.impact import Cost
from torchlint.checks.base import Check

# Builtins that read a tensor's value: conversions, and the ones that compare or count with it.
_CONVERSIONS = frozenset({"int", "float", "bool", "complex"})
_COMPARING = frozenset({"min", "max", "sorted"})
_COUNTING = frozenset({"range"})
# Sizes are Python ints: a tensor given as one is read (`torch.arange(lengths.max())`, `x.view(n, -1)`).
_SIZED_METHODS = frozenset({"view", "reshape", "expand", "repeat", "new_zeros", "new_ones", "new_empty", "narrow"})
_SIZE_KEYWORDS = frozenset({"start", "end", "step", "size", "steps", "high", "low"})
# `math` functions convert their argument to a Python float first.
_MATH_PREFIX = "math."


class TensorToPythonInLoop(Check):
    """`int(t)`, `float(t)`, `min(x, t)`, `range(t)`, `math.f(t)`, `items[t]`, `x[a:t]` or a size `torch.arange(t)` on a device tensor inside a hot loop."""

    code = "TL105"
    name = "tensor-to-python-in-loop"
    cost = Cost.SYNC
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
        elif ctx.qname(func) in FACTORIES or type(func) is cst.Attribute and func.attr.value in _SIZED_METHODS and ctx.qname(func) is None:
            read = [a for a in node.args if a.keyword is None or a.keyword.value in _SIZE_KEYWORDS]  # `torch.arange(t)`: a size
        else:
            return
        tensors = [arg.value for arg in read if arg.keyword is None and not arg.star and not plainly_python(arg.value)]
        if tensors and ctx.syncs.in_step(node) and any(ctx.syncs.device_tensor(value, node) for value in tensors):
            self.report(node, expr=short_code(ctx.module, node))

    def visit_Subscript(self, node: cst.Subscript) -> None:
        ctx = self.ctx
        read: list[cst.BaseExpression] = []
        for element in node.slice:  # `x[:, start:end]` with tensor bounds: each bound is read
            if type(element.slice) is cst.Slice:
                read.extend(b for b in (element.slice.lower, element.slice.upper, element.slice.step) if b is not None and not plainly_python(b))
        index = node.slice[0].slice.value if len(node.slice) == 1 and type(node.slice[0].slice) is cst.Index else None
        if index is not None and not plainly_python(index) and self._python_sequence(node.value, node):
            read.append(index)  # `items[t]` on a list
        if read and ctx.syncs.in_step(node) and any(ctx.syncs.device_tensor(value, node) for value in read):
            self.report(node, expr=short_code(ctx.module, node))

    def _python_sequence(self, value: cst.BaseExpression, at: cst.CSTNode) -> bool:
        """A Python list or tuple (a dict hashes a tensor by identity: no read)."""
        ctx = self.ctx
        if type(value) not in (cst.Name, cst.Attribute, cst.List, cst.Tuple):
            return False
        return ctx.values.is_sequence_literal(value, at) and ctx.values.kind(value, at) is Kind.HOST
