"""An op whose output size depends on a device tensor's values, inside a training loop."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.context import short_code
from torchlint.analysis.impact import Cost
from torchlint.analysis.syncs import SIZED_BY_VALUES, torch_op
from torchlint.checks.base import Check



class DataDependentShapeInLoop(Check):
    """`x[mask]`, `nonzero()`, `unique()`, `masked_select()`, `bincount()`, `repeat_interleave(t)` on device tensors inside a hot loop."""

    code = "TL106"
    name = "data-dependent-shape-in-loop"
    cost = Cost.SYNC
    message = "`{expr}` in {loop} makes a tensor whose size depends on its values: the host waits for the device to learn the size, every step"
    per_step = True
    device_bound = True
    default = False
    fix_hint = "Keep shapes static: weight by the mask (`(x * mask).sum() / mask.sum()`), `torch.where(mask, x, 0)`, or give the size (`nonzero_static(size=...)`, `repeat_interleave(..., output_size=n)`)"

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        op, subject = torch_op(ctx, node)
        qualified = ctx.qname(node.func)
        if op is None or subject is None or not self._sized_by_values(op, node, qualified is not None):
            return
        if op == "repeat_interleave":
            subject = self._repeats(node, qualified is not None) or subject
        if ctx.syncs.in_step(node) and ctx.syncs.device_tensor(subject, node):
            self.report(node, expr=short_code(ctx.module, node, limit=60))

    def visit_Subscript(self, node: cst.Subscript) -> None:
        ctx = self.ctx
        parent = ctx.tree.parent(node)
        if isinstance(parent, (cst.AssignTarget, cst.AugAssign, cst.Del)):
            return  # `x[mask] = 0` writes in place: no new tensor of unknown size
        masks = [e.slice.value for e in node.slice if isinstance(e.slice, cst.Index)]
        mask = next((m for m in masks if ctx.syncs.bool_mask(m, node)), None)
        if mask is None or not ctx.syncs.in_step(node):
            return
        if ctx.syncs.device_tensor(mask, node):
            self.report(node, expr=short_code(ctx.module, node, limit=60))

    def _sized_by_values(self, op: str, call: cst.Call, function: bool) -> bool:
        ctx = self.ctx
        if op in SIZED_BY_VALUES:
            return True
        if op == "where":  # `torch.where(cond)`: the indices of the true elements
            return function and len(call.args) == 1 and call.args[0].keyword is None
        if op == "repeat_interleave":  # with a tensor of repeats and no `output_size=`
            return ctx.keyword(call, "output_size") is None and not ctx.has_star_kwargs(call) and self._repeats(call, function) is not None
        return False

    def _repeats(self, call: cst.Call, function: bool) -> cst.BaseExpression | None:
        """The repeats of ``repeat_interleave`` when they are a tensor (an int repeats
        every element the same number of times: a known size)."""
        ctx = self.ctx
        arg = ctx.keyword(call, "repeats") or ctx.argument(call, 1 if function else 0)
        if arg is None and function and len(call.args) == 1:
            arg = call.args[0]  # `torch.repeat_interleave(counts)`
        if arg is None:
            return None
        return arg.value if ctx.syncs.tensorish(arg.value, call) else None
