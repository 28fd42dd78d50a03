"""Gradients zeroed with a memset instead of being set to None."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.context import short_code
from torchlint.analysis.names import dotted
from torchlint.analysis.losses import optimized_tensors
from torchlint.analysis.values import Kind
from torchlint.analysis.impact import Cost
from torchlint.analysis.positions import plain_code
from torchlint.checks.base import Check
from torchlint.findings import FixSafety

# In-place operations on `.grad` that need the zeroed tensor to exist.
_GRAD_UPDATES = {"add_", "sub_", "copy_", "addcmul_", "addcdiv_", "index_add_", "scatter_add_", "set_", "put_", "index_put_", "masked_scatter_", "mul_", "div_"}
_COLLECTIVES = ("all_reduce", "reduce", "broadcast", "all_gather", "reduce_scatter")


def _grad_owner(expr: cst.BaseExpression) -> cst.BaseExpression | None:
    """``p`` for ``p.grad`` or ``p.grad.data``; None otherwise."""
    if isinstance(expr, cst.Attribute) and expr.attr.value == "data":
        expr = expr.value
    if isinstance(expr, cst.Attribute) and expr.attr.value == "grad":
        return expr.value
    return None


def _is_zero(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.Integer) and expr.value == "0" or isinstance(expr, cst.Float) and float(expr.value) == 0.0


class ZeroGradMemset(Check):
    """`zero_grad(set_to_none=False)` or a manual `p.grad.zero_()`: a memset per parameter every step."""

    code = "TL303"
    name = "zero-grad-memset"
    cost = Cost.SMALL_WORK
    message = "`{call}` writes zeros into every gradient instead of releasing it"
    fix_hint = "Use `zero_grad(set_to_none=True)` (the default since torch 2.0), or `p.grad = None` for a manual loop"
    fix_safety = FixSafety.SAFE

    def visit_Call(self, node: cst.Call) -> None:
        method = self.ctx.method_name(node)
        if method == "zero_grad":
            self._zero_grad(node)
        elif method in ("zero_", "fill_"):
            self._manual(node, method)

    # --- optimizer.zero_grad(...) / model.zero_grad(...) -------------------------------
    def _zero_grad(self, node: cst.Call) -> None:
        ctx = self.ctx
        receiver = node.func.value  # type: ignore[attr-defined]
        if ctx.values.kind(receiver, node) in (Kind.TENSOR, Kind.NUMPY, Kind.HOST, Kind.LOADER):
            return
        if ctx.has_star_kwargs(node) or any(a.star for a in node.args) or self._custom_zero_grad():
            return
        argument = ctx.argument(node, 0, "set_to_none")
        if argument is not None:
            value = argument.value
            if not (isinstance(value, cst.Name) and value.value == "False"):
                return  # True, or a value chosen at run time
            fix = (value, value.with_changes(value="True"))
        else:
            if node.args or ctx.options.target_torch >= (2, 0):
                return  # since torch 2.0 a bare zero_grad() sets the gradients to None
            new_arg = cst.Arg(keyword=cst.Name("set_to_none"), value=cst.Name("True"), equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")))
            # `set_to_none` exists since torch 1.7: offer no fix for an older target.
            fix = (node, node.with_changes(args=[new_arg])) if ctx.options.target_torch >= (1, 7) else None
        if self._grad_updated_later(node):
            return
        self.report(node, fix=fix, call=short_code(ctx.module, node))

    def _custom_zero_grad(self) -> bool:
        """The file defines its own ``zero_grad`` without a ``set_to_none`` parameter."""
        for function in self.ctx.tree.nodes(cst.FunctionDef):
            if function.name.value == "zero_grad":
                params = function.params
                names = {p.name.value for p in (*params.params, *params.kwonly_params, *params.posonly_params)}
                if "set_to_none" not in names and not isinstance(params.star_kwarg, cst.Param):
                    return True
        return False

    # --- for p in model.parameters(): p.grad.zero_() -----------------------------------
    def _manual(self, node: cst.Call, method: str) -> None:
        ctx = self.ctx
        owner = _grad_owner(node.func.value)  # type: ignore[attr-defined]
        if owner is None:
            return
        if method == "fill_" and not (len(node.args) == 1 and _is_zero(node.args[0].value)):
            return
        if method == "zero_" and node.args:
            return
        each = self._loop_over_parameters(owner, node)
        if not each and dotted(owner) not in optimized_tensors(ctx):
            return
        if self._grad_updated_later(node):
            return
        # A loop launches one memset per parameter (an optimizer's `zero_grad` zeroes them all
        # with one multi-tensor kernel): hundreds of launches every step for a large model.
        self.report(node, cost=Cost.PER_PARAMETER_LAUNCHES if each else None, call=short_code(ctx.module, node))

    def _loop_over_parameters(self, owner: cst.BaseExpression, at: cst.CSTNode) -> bool:
        """Is ``owner`` a loop variable over ``.parameters()``/param groups? (Else it may be a
        tensor passed to an optimizer, or updated from its own gradient: ``w -= lr * w.grad``.)"""
        ctx = self.ctx
        name = dotted(owner)
        if name is None:
            return False
        for binding in ctx.bindings.lookup(name, at):
            if binding.kind in ("for", "comp") and binding.value is not None:
                text = plain_code(ctx.module, binding.value)
                if "param" in text.lower():
                    return True
        return False

    def _grad_updated_later(self, node: cst.CSTNode) -> bool:
        """Does the code need the zeroed tensors: the same function (or class) updates
        ``.grad`` in place (``p.grad += g``, ``p.grad.add_(...)``, an all-reduce of ``p.grad``),
        which with ``set_to_none`` would run on the next call too; or it reads ``.grad``
        after the zeroing, before the next backward pass?"""
        ctx = self.ctx
        tree = ctx.tree
        function = tree.enclosing_function(node)
        owner = tree.enclosing_class(node) or function or tree.module
        for aug in tree.nodes(cst.AugAssign):
            if _grad_owner(aug.target) is not None and tree.is_inside(aug, owner):
                return True
        for assign in tree.nodes(cst.Assign):
            for target in assign.targets:
                if isinstance(target.target, cst.Subscript) and _grad_owner(target.target.value) is not None and tree.is_inside(assign, owner):
                    return True
        for call in tree.nodes(cst.Call):
            method = ctx.method_name(call)
            if method in _GRAD_UPDATES and _grad_owner(call.func.value) is not None and tree.is_inside(call, owner):  # type: ignore[attr-defined]
                return True
            callee = (dotted(call.func) or "").rsplit(".", 1)[-1]
            if callee in _COLLECTIVES and call.args and _grad_owner(call.args[0].value) is not None and tree.is_inside(call, owner):
                return True
        return self._grad_read_before_backward(node)

    def _grad_read_before_backward(self, node: cst.CSTNode) -> bool:
        ctx = self.ctx
        tree = ctx.tree
        scope = tree.scope_of(node)
        start = tree.index(node)
        stop = min((tree.index(c) for c in ctx.method_calls({"backward"}) if tree.index(c) > start and tree.scope_of(c) is scope), default=None)
        for attr in tree.nodes(cst.Attribute):
            index = tree.index(attr)
            if attr.attr.value != "grad" or index <= start or (stop is not None and index >= stop) or tree.scope_of(attr) is not scope:
                continue
            if tree.is_inside(attr, node):
                continue
            use: cst.CSTNode = attr
            parent = tree.parent(use)
            if isinstance(parent, cst.Attribute) and parent.attr.value == "data":
                use, parent = parent, tree.parent(parent)
            if isinstance(parent, cst.Attribute) and parent.attr.value in ("zero_", "fill_", "detach_", "requires_grad_"):
                continue  # zeroing the next gradient
            if isinstance(parent, cst.Comparison) or isinstance(parent, cst.ComparisonTarget):
                continue  # `p.grad is None`
            if isinstance(parent, cst.AssignTarget):
                continue
            return True
        return False
