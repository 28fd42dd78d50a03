"""Losses and the autograd graph they carry (TL3xx): a mixin of ValueKinds, which
supplies ``ctx`` and ``kind``."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.names import canonical, dotted, last_segment as _last_segment

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext

# Methods whose returned loss a framework differentiates (Lightning, a Trainer).
DIFFERENTIATED_RETURNS = frozenset({"training_step", "compute_loss"})


class LossFacts:
    """Which values are losses, and which still hold their autograd graph."""

    ctx: FileContext

    def is_loss_module(self, func: cst.BaseExpression, at: cst.CSTNode) -> bool:
        """``criterion`` bound to ``nn.CrossEntropyLoss()`` (or a local ``*Loss`` module), or
        named like one (``criterion``, ``loss_fn``); also ``nn.MSELoss()`` itself."""
        if isinstance(func, cst.Call):
            return _is_loss_class(canonical(self.ctx.qname(func.func)) or dotted(func.func) or "", self.ctx)
        name = dotted(func)
        if name is None or self.ctx.qname(func) is not None:
            return False
        last = _last_segment(name).lower()
        if last in _LOSS_MODULE_NAMES or last.startswith("criterion"):
            return True
        for binding in self.ctx.bindings.lookup(name, at):
            value = binding.value
            if binding.kind == "assign" and isinstance(value, cst.Call) and binding.element is None:
                if _is_loss_class(canonical(self.ctx.qname(value.func)) or dotted(value.func) or "", self.ctx):
                    return True
        return False

    def is_loss_call(self, call: cst.Call, at: cst.CSTNode | None = None) -> bool:
        """``F.cross_entropy(...)``, ``F.mse_loss(...)``, ``criterion(out, y)``."""
        qualified = canonical(self.ctx.qname(call.func))
        if qualified is not None:
            if qualified.startswith("torch.nn.functional."):
                last = _last_segment(qualified)
                return "loss" in last or last in _FUNCTIONAL_LOSSES
            return False
        return self.is_loss_module(call.func, at or call)

    def has_backward(self, name: str, at: cst.CSTNode) -> bool:
        """Is ``name.backward()`` called in the scope (function or module) of ``at``?"""
        if not hasattr(self, "_backward_by_scope"):
            self._backward_by_scope: set[tuple[int, str]] = set()
            for call in self.ctx.method_calls({"backward"}):
                receiver = dotted(call.func.value)  # type: ignore[attr-defined]
                if receiver is not None:
                    self._backward_by_scope.add((id(self.ctx.tree.scope_of(call)), receiver))
        scope = self.ctx.tree.scope_of(at)
        if (id(scope), name) in self._backward_by_scope:
            return True
        # A framework step's returned loss is differentiated by the framework (Lightning's
        # `training_step`, a Trainer's `compute_loss`); a finding there holds only if the
        # project-wide join finds the method is such a hook.
        return isinstance(scope, cst.FunctionDef) and scope.name.value in DIFFERENTIATED_RETURNS and name in self._returned_names(scope)

    def _returned_names(self, function: cst.FunctionDef) -> set[str]:
        found = set()
        for node in self.ctx.tree.descendants(function):
            if isinstance(node, cst.Return) and node.value is not None:
                values = node.value.elements if isinstance(node.value, cst.Tuple) else [node.value]
                for value in values:
                    if isinstance(value, cst.BaseElement):
                        value = value.value
                    if isinstance(value, cst.Dict):
                        found.update(dotted(e.value) for e in value.elements if isinstance(e, cst.DictElement))
                    else:
                        found.add(dotted(value))
        return {n for n in found if n}

    def carries_graph(self, expr: cst.BaseExpression, at: cst.CSTNode, _depth: int = 0) -> bool:
        """Is ``expr`` a loss that still holds its autograd graph: a loss call, a name bound
        to one (or on which ``.backward()`` is called), arithmetic on one; not after
        ``.item()``/``.detach()``/``.cpu()``/``.data``/``float()``, nor when computed under no_grad."""
        if _depth > 5:
            return False
        if isinstance(expr, (cst.Name, cst.Attribute)):
            if isinstance(expr, cst.Attribute) and expr.attr.value in _GRAPH_DROPPING_ATTRS:
                return False
            name = dotted(expr)
            if name is None or self.ctx.qname(expr) is not None:
                return False
            binding = self.ctx.bindings.reaching(name, at)
            if binding is not None and binding.value is not None and binding.kind in ("assign", "augassign"):
                if self.ctx.grad.runs_without_grad(binding.node):
                    return False
                value = binding.value
                if binding.element is not None:
                    if isinstance(value, (cst.Tuple, cst.List)) and binding.element < len(value.elements):
                        value = value.elements[binding.element].value
                    else:
                        return self.has_backward(name, at)
                if self.carries_graph(value, binding.node, _depth + 1):
                    return True
                if binding.kind == "assign" and _drops_graph(value):
                    return False
            return self.has_backward(name, at)
        if isinstance(expr, cst.Call):
            if _drops_graph(expr):
                return False
            if self.is_loss_call(expr, at):
                return True
            func = expr.func
            if isinstance(func, cst.Attribute) and func.attr.value in _GRAPH_KEEPING_METHODS:
                return self.carries_graph(func.value, at, _depth + 1)
            return False
        if isinstance(expr, cst.BinaryOperation):
            return self.carries_graph(expr.left, at, _depth + 1) or self.carries_graph(expr.right, at, _depth + 1)
        if isinstance(expr, cst.UnaryOperation):
            return self.carries_graph(expr.expression, at, _depth + 1)
        return False


_LOSS_MODULE_NAMES = {"loss_fn", "loss_func", "loss_function", "lossfn", "loss_fcn", "loss_module", "loss_criterion"}
_FUNCTIONAL_LOSSES = {"cross_entropy", "binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div"}
_GRAPH_DROPPING_METHODS = {"item", "tolist", "detach", "detach_", "cpu", "numpy"}
_GRAPH_DROPPING_ATTRS = {"data"}
_GRAPH_KEEPING_METHODS = {"mean", "sum", "clone", "squeeze", "unsqueeze", "view", "reshape", "float", "double", "half", "to", "cuda", "mul", "div", "add", "sub", "abs", "sqrt", "exp", "log"}


def _drops_graph(expr: cst.BaseExpression) -> bool:
    """``x.item()``, ``x.detach()``, ``x.cpu()``, ``float(x)``, ``x.data``: no graph left."""
    if isinstance(expr, cst.Call):
        func = expr.func
        if isinstance(func, cst.Attribute) and func.attr.value in _GRAPH_DROPPING_METHODS:
            return True
        if isinstance(func, cst.Name) and func.value in ("float", "int", "round", "str", "bool"):
            return True
    if isinstance(expr, cst.Attribute) and expr.attr.value in _GRAPH_DROPPING_ATTRS:
        return True
    return isinstance(expr, (cst.Integer, cst.Float, cst.BaseString))


def _is_loss_class(name: str, ctx: FileContext) -> bool:
    """``torch.nn.MSELoss`` and friends, or a local nn.Module subclass named ``*Loss``."""
    last = _last_segment(name)
    if name.startswith("torch.nn.") and last.endswith("Loss"):
        return True
    return "." not in name and last.endswith("Loss") and ctx.is_module_class(last)


def _grad_of(expr: cst.CSTNode, tree_descendants) -> set[str]:  # type: ignore[no-untyped-def]
    """Names ``w`` for every ``w.grad`` inside ``expr``."""
    found: set[str] = set()
    for node in (expr, *tree_descendants(expr)):
        if isinstance(node, cst.Attribute) and node.attr.value == "grad":
            owner = node.value
            if isinstance(owner, cst.Attribute) and owner.attr.value == "data":
                owner = owner.value
            name = dotted(owner)
            if name is not None:
                found.add(name)
    return found


def _strip_data(expr: cst.BaseExpression) -> cst.BaseExpression:
    return expr.value if isinstance(expr, cst.Attribute) and expr.attr.value == "data" else expr


def optimized_tensors(ctx: FileContext) -> set[str]:
    """Names of tensors trained as parameters: passed to a ``torch.optim`` optimizer, or
    updated from their own gradient (``w -= lr * w.grad``, ``w.data.sub_(lr * w.grad)``)."""
    tree = ctx.tree
    found: set[str] = set()
    for call in tree.nodes(cst.Call):
        qualified = canonical(ctx.qname(call.func)) or ""
        if qualified.startswith("torch.optim.") and qualified.count(".") == 2 and call.args:
            for node in tree.descendants(call.args[0].value):
                name = dotted(node) if isinstance(node, (cst.Name, cst.Attribute)) else None
                if name is not None:
                    found.add(name)
        elif isinstance(call.func, cst.Attribute) and call.func.attr.value in ("sub_", "add_") and call.args:
            owner = dotted(_strip_data(call.func.value))
            if owner is not None and owner in _grad_of(call.args[0].value, tree.descendants):
                found.add(owner)
    for aug in tree.nodes(cst.AugAssign):
        owner = dotted(_strip_data(aug.target))
        if owner is not None and owner in _grad_of(aug.value, tree.descendants):
            found.add(owner)
    return found
