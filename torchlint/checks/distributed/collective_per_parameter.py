"""A collective (all-reduce, broadcast, gather) issued once per parameter tensor in a Python loop."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.context import short_code
from torchlint.analysis.impact import Cost
from torchlint.analysis.module_tensors import loop_names, model_tensors
from torchlint.checks.base import Check

# The collectives that launch one communication kernel per call (and wait for it on the stream).
_COLLECTIVES = frozenset(f"torch.distributed.{name}" for name in (
    "all_reduce", "broadcast", "reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter_tensor", "reduce_scatter",
))


class CollectivePerParameter(Check):
    """`for p in model.parameters(): dist.all_reduce(p.grad)`: one collective per parameter tensor."""

    code = "TL606"
    name = "collective-per-parameter"
    cost = Cost.PER_PARAMETER_COLLECTIVES
    per_step = True
    message = ("`{call}` inside `{head}` in {loop} issues one {collective} per parameter tensor: "
               "a latency-bound launch and a wait each, where one flattened bucket would do")
    fix_hint = ("Wrap the model in `DistributedDataParallel` (buckets, overlapped with backward), or flatten the "
                "tensors into one buffer: `flat = torch._utils._flatten_dense_tensors(grads)`, one "
                "`dist.all_reduce(flat)`, then `_unflatten_dense_tensors(flat, grads)` copied back")

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        name = ctx.qname(node.func)
        if name not in _COLLECTIVES or not node.args:
            return  # not a torch.distributed collective (a metric's own `all_reduce`, a library's wrapper)
        asynchronous = ctx.keyword(node, "async_op")
        if asynchronous is not None and not _false(asynchronous.value):
            return  # handles gathered and waited once: the launches overlap each other and the rest of the step
        loop = _parameter_loop(ctx, node)
        if loop is None:
            return  # not once per parameter: one flattened buffer, a loop over buckets or named metrics
        head = f"for {short_code(ctx.module, loop.target)} in {short_code(ctx.module, loop.iter)}"
        self.report(node, call=short_code(ctx.module, node, limit=50), head=head, collective=name.rsplit(".", 1)[-1])


def _false(value: cst.BaseExpression) -> bool:
    return isinstance(value, cst.Name) and value.value == "False"


def _parameter_loop(ctx, call: cst.Call) -> cst.For | None:  # type: ignore[no-untyped-def]
    """The innermost ``for`` around ``call`` (in its function) over a model's tensors whose
    tensor the call is given (``p.grad``, ``p.data``, ``p``, or a name made from one in the
    loop): None when the call's tensor is anything else."""
    tensor = call.args[0].value
    function = ctx.tree.enclosing_function(call)
    for loop in ctx.loops.enclosing_loops(call):
        if not isinstance(loop, cst.For) or ctx.tree.enclosing_function(loop) is not function:
            continue  # a `while`, or a loop of an outer function around a nested one
        names = loop_names(loop.target)
        if not model_tensors(ctx, loop.iter, loop):
            continue  # a loop over buckets, ranks, metrics: not one tensor of the model each
        if names and _from_loop_tensor(ctx, tensor, names, loop):
            return loop
    return None


def _root(expr: cst.BaseExpression) -> str | None:
    """The name under attributes, subscripts and method calls: ``p`` of ``p.grad.data``."""
    while True:
        if isinstance(expr, cst.Attribute):
            expr = expr.value
        elif isinstance(expr, cst.Subscript):
            expr = expr.value
        elif isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute):
            expr = expr.func.value  # `p.grad.detach()`
        else:
            return expr.value if isinstance(expr, cst.Name) else None


def _from_loop_tensor(ctx, tensor: cst.BaseExpression, names: set[str], loop: cst.For) -> bool:  # type: ignore[no-untyped-def]
    """Is ``tensor`` one of the loop's tensors, or a name the loop's body binds from one
    (``g = p.grad.data``)?"""
    if _indexed_by(tensor, names):
        return True  # `grads[name]`, `self.deltas[index]`: a tensor kept per parameter
    root = _root(tensor)
    if root is None:
        return False
    if root in names:
        return True
    bound = [b for b in ctx.bindings.lookup(root, tensor) if b.kind == "assign" and b.value is not None and ctx.tree.is_inside(b.node, loop)]
    return any(_root(value) in names for b in bound for value in _branches(b.value))


def _indexed_by(tensor: cst.BaseExpression, names: set[str]) -> bool:
    """``grads[name]``, ``self.deltas[index]`` (also under ``.data``): indexed by a loop name."""
    while isinstance(tensor, cst.Attribute):
        tensor = tensor.value
    if not isinstance(tensor, cst.Subscript) or len(tensor.slice) != 1 or not isinstance(tensor.slice[0].slice, cst.Index):
        return False
    index = tensor.slice[0].slice.value
    return isinstance(index, cst.Name) and index.value in names


def _branches(value: cst.BaseExpression) -> tuple[cst.BaseExpression, ...]:
    """Both values of ``p.data if plain else grads[i]`` (fairseq's BMUF), else the value itself."""
    return (value.body, value.orelse) if isinstance(value, cst.IfExp) else (value,)
