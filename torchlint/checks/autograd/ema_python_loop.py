"""An exponential moving average of weights updated one parameter at a time in Python."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.impact import Cost
from torchlint.analysis.names import dotted
from torchlint.checks.base import Check

# What iterates a module's tensors: `ema.parameters()`, `model.state_dict().values()`...
_TENSOR_ITERABLES = frozenset({"parameters", "buffers", "values", "named_parameters", "named_buffers", "items"})
# In-place updates that make a moving average (`e.mul_(d).add_(p, alpha=1 - d)`, `e.lerp_(p, w)`).
_AVERAGING = frozenset({"mul_", "add_", "lerp_", "sub_", "addcmul_", "copy_"})


class EmaPythonLoop(Check):
    """`for e, p in zip(ema.parameters(), model.parameters()): e.mul_(d).add_(...)`: an EMA per parameter."""

    code = "TL305"
    name = "ema-python-loop"
    cost = Cost.PER_PARAMETER_LAUNCHES
    per_step = True
    message = "`{head}` in {loop} updates the moving average one parameter at a time: a kernel or two per parameter, every step"
    fix_hint = ("Update every parameter in one call: `torch._foreach_lerp_(ema_params, model_params, 1 - decay)` "
                "(or `torch.optim.swa_utils.AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(decay))`)")

    def visit_For(self, node: cst.For) -> None:
        ctx = self.ctx
        iterable = node.iter
        if not (isinstance(iterable, cst.Call) and dotted(iterable.func) == "zip" and len(iterable.args) >= 2):
            return  # a zip of two sequences of tensors: the averaged and the model's
        if not any(_iterates_module_tensors(ctx, arg.value, node) for arg in iterable.args[:2]):
            return  # zip over anything else (batches, layers) is no weight average
        targets = _names(node.target)
        if not targets or not _averages_in_place(ctx, node, targets):
            return  # a loop that reads the parameters (a norm, a copy elsewhere) averages nothing
        hot = ctx.loops.local_hot_loop(node)
        if hot is None and ctx.tree.enclosing_function(node) is None:
            return  # module code outside any step: a blend made once (loading, exporting)
        if hot is not None and ctx.guards.rare(node, stop=hot):
            return  # every N steps: the launches are paid once per N
        head = f"for {ctx.module.code_for_node(node.target).strip()} in zip(...)"
        self.report(node, head=head)


def _iterates_module_tensors(ctx, expr: cst.BaseExpression, at: cst.CSTNode, depth: int = 0) -> bool:  # type: ignore[no-untyped-def]
    """``m.parameters()``, ``m.state_dict().values()``, ``list(m.parameters())``, or a
    name bound to one of them (``ema_params = list(ema.parameters())``)."""
    if depth > 4:
        return False  # `x = list(x)`: a name bound to itself ends here
    if isinstance(expr, (cst.Name, cst.Attribute)):
        name = dotted(expr)
        if name is None:
            return False
        if any(word in name.rsplit(".", 1)[-1].lower() for word in ("param", "weight")):
            return True  # `target_params`, `self.ema_weights`: a list of a model's tensors by name
        bound = [b for b in ctx.bindings.lookup(name, at) if b.kind == "assign" and b.value is not None]
        return bool(bound) and all(_iterates_module_tensors(ctx, b.value, b.node, depth + 1) for b in bound)
    if not isinstance(expr, cst.Call):
        return False
    if dotted(expr.func) in ("list", "tuple") and expr.args:
        return _iterates_module_tensors(ctx, expr.args[0].value, at, depth + 1)
    return isinstance(expr.func, cst.Attribute) and expr.func.attr.value in _TENSOR_ITERABLES


def _names(target: cst.BaseExpression) -> set[str]:
    """The loop's names (``e, p``; ``(name, e), (_, p)`` of named_parameters)."""
    if isinstance(target, (cst.Tuple, cst.List)):
        return {name for element in target.elements for name in _names(element.value)}
    return {target.value} if isinstance(target, cst.Name) else set()


def _averages_in_place(ctx, loop: cst.For, targets: set[str]) -> bool:  # type: ignore[no-untyped-def]
    """Does the body update a loop variable in place (``e.mul_(...)``, ``e.data.lerp_(...)``,
    ``e.data = d * e.data + ...``, ``e.copy_(...)`` of a blend)?"""
    for node in ctx.tree.descendants(loop.body):
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value in _AVERAGING:
            receiver = node.func.value
            while isinstance(receiver, cst.Call) and isinstance(receiver.func, cst.Attribute):
                receiver = receiver.func.value  # `e.mul_(d).add_(...)`: the chain's root
            root = dotted(receiver) or ""
            if root.split(".")[0] in targets and (node.func.attr.value != "copy_" or node.args and isinstance(node.args[0].value, cst.BinaryOperation)):
                return True
        if isinstance(node, cst.Assign) and len(node.targets) == 1:
            name = dotted(node.targets[0].target) or ""
            if name.endswith(".data") and name.split(".")[0] in targets and isinstance(node.value, cst.BinaryOperation):
                return True
    return False
