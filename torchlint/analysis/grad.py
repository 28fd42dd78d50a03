"""Grad context: is a node run with autograd recording disabled?"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

import libcst as cst

from torchlint.analysis.losses import DIFFERENTIATED_RETURNS
from torchlint.analysis.names import canonical, dotted

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext

_DISABLING = {"torch.no_grad", "torch.inference_mode", "torch.autograd.no_grad", "torch.autograd.grad_mode.no_grad", "torch.autograd.grad_mode.inference_mode"}
_ENABLING = {"torch.enable_grad", "torch.autograd.enable_grad"}
_SET_GRAD = {"torch.set_grad_enabled", "torch.autograd.set_grad_enabled"}


def _literal_bool(expr: cst.BaseExpression) -> bool | None:
    if isinstance(expr, cst.Name) and expr.value in ("True", "False"):
        return expr.value == "True"
    return None


class GradContext:
    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx

    def effect(self, expr: cst.BaseExpression) -> bool | None:
        """False when ``expr`` (a context manager or decorator) disables grad, True
        when it enables it, None when it does neither or cannot be known."""
        target = expr.func if isinstance(expr, cst.Call) else expr
        name = canonical(self.ctx.qname(target))
        if name in _DISABLING:
            return False
        if name in _ENABLING:
            return True
        if name in _SET_GRAD and isinstance(expr, cst.Call) and expr.args:
            return _literal_bool(expr.args[0].value)
        return None

    def is_disabled(self, node: cst.CSTNode) -> bool:
        """True under ``with torch.no_grad()``/``inference_mode()``/``set_grad_enabled(False)``
        or in a function decorated with ``@torch.no_grad()``/``@torch.inference_mode()``."""
        for ancestor in self.ctx.tree.ancestors(node):
            # Exact types: libcst's classes are ABCs, whose failing isinstance is slow.
            if type(ancestor) is cst.With:
                for item in ancestor.items:  # type: ignore[attr-defined]
                    state = self.effect(item.item)
                    if state is not None:
                        return not state
            elif type(ancestor) is cst.FunctionDef:
                if self.function_disables(ancestor):
                    return True
                return False  # a nested function runs wherever it is called
        return False

    def function_disables(self, function: cst.FunctionDef) -> bool:
        return any(self.effect(d.decorator) is False for d in function.decorators)

    # --- beyond the syntactic context (TL3xx) -----------------------------------------
    def framework_disables(self, function: cst.FunctionDef) -> bool:
        """A method a framework already runs without grad (Lightning ``validation_step``...)."""
        return function.name.value in _FRAMEWORK_NO_GRAD and self.ctx.tree.enclosing_class(function) is not None

    def maybe_disabled(self, node: cst.CSTNode) -> bool:
        """Under a ``with`` whose grad effect depends on a run-time value:
        ``torch.set_grad_enabled(train)``, ``torch.no_grad() if not train else nullcontext()``."""
        for ancestor in self.ctx.tree.ancestors(node):
            if type(ancestor) is cst.FunctionDef:  # exact types: see is_disabled
                return False
            if type(ancestor) is cst.With:
                for item in ancestor.items:
                    expr = item.item
                    if isinstance(expr, cst.IfExp) and False in (self.effect(expr.body), self.effect(expr.orelse)):
                        return True
                    if isinstance(expr, cst.Call) and canonical(self.ctx.qname(expr.func)) in _SET_GRAD and self.effect(expr) is None:
                        return True
                    if self.effect(expr) is None and named_like_grad_off(expr):
                        return True
        return False

    def disabled_by_statement(self, node: cst.CSTNode) -> bool:
        """After a statement ``torch.set_grad_enabled(False)`` earlier in the same scope (or at
        module level, for module-level code), with no later ``set_grad_enabled(True)`` before ``node``."""
        if not hasattr(self, "_grad_statements"):
            tree = self.ctx.tree
            self._grad_statements = [
                (tree.index(call), tree.scope_of(call), self.effect(call))
                for call in tree.nodes(cst.Call)
                if canonical(self.ctx.qname(call.func)) in _SET_GRAD and isinstance(tree.parent(call), cst.Expr)
            ]
        if not self._grad_statements:
            return False
        scope = self.ctx.tree.scope_of(node)
        at = self.ctx.tree.index(node)
        state: bool | None = None
        for index, where, effect in self._grad_statements:
            if index < at and where is scope and effect is not None:
                state = effect
        return state is False

    def call_sites(self, function: cst.FunctionDef) -> list[cst.Call] | None:
        """Calls of ``function`` in this module (``f(...)``, or ``x.f(...)`` for a method);
        None when the function is also referenced without being called (passed as a callback)."""
        name = function.name.value
        is_method = self.ctx.tree.enclosing_class(function) is not None
        sites: list[cst.Call] = []
        tree = self.ctx.tree
        for ref in tree.names_valued(name) if not is_method else ():
            if ref is function.name:
                continue
            parent = tree.parent(ref)
            if isinstance(parent, cst.Call) and parent.func is ref:
                sites.append(parent)
            elif isinstance(parent, cst.Attribute) and parent.attr is ref:
                continue  # `obj.name`: some other object's attribute
            elif isinstance(parent, (cst.ImportAlias, cst.FunctionDef, cst.ClassDef)):
                continue
            else:
                return None
        for attr in tree.attributes_named(name) if is_method else ():
            parent = tree.parent(attr)
            if isinstance(parent, cst.Call) and parent.func is attr:
                sites.append(parent)
            else:
                return None
        return sites

    def only_called_disabled(self, function: cst.FunctionDef, _seen: frozenset[int] = frozenset()) -> bool:
        """Every call site of ``function`` in the module runs with grad disabled (at least one)."""
        if id(function) in _seen or len(_seen) > 4:
            return False
        sites = self.call_sites(function)
        if not sites:
            return False
        seen = _seen | {id(function)}
        return all(self.runs_without_grad(site, seen) for site in sites)

    def runs_without_grad(self, node: cst.CSTNode, _seen: frozenset[int] = frozenset()) -> bool:
        """``is_disabled``, or grad is off here for a reason beyond the ``with``/decorator:
        a ``set_grad_enabled(False)`` statement, a framework hook run without grad, a
        run-time choice (``set_grad_enabled(train)``), or every caller disables it."""
        if self.is_disabled(node) or self.maybe_disabled(node) or self.disabled_by_statement(node):
            return True
        function = self.ctx.tree.enclosing_function(node)
        if function is None:
            return False
        if self.framework_disables(function):
            return True
        if any(self.effect(d.decorator) is None and named_like_grad_off(d.decorator) for d in function.decorators):
            return True  # a project's own wrapper: `@smart_inference_mode()`
        if explicitly_enabled(self.ctx, node):
            return False  # an explicit enable_grad() inside the function
        return self.only_called_disabled(function, _seen)

    def backward_after(self, node: cst.CSTNode, unless_guarded_by: frozenset[str] = frozenset()) -> bool:
        """Does the function (or module-level code) holding ``node`` run a backward pass
        after it: ``.backward()``, ``manual_backward``/``accelerator.backward``, ``torch.autograd.grad``?
        With ``unless_guarded_by``, a backward under an ``if`` testing one of those names
        (``if phase == "train": loss.backward()``) does not count."""
        if not hasattr(self, "_backward_calls"):
            tree = self.ctx.tree
            self._backward_calls = [(tree.index(c), tree.scope_of(c), c) for c in tree.nodes(cst.Call) if is_backward_call(self.ctx, c)]
        scope = self.ctx.tree.scope_of(node)
        at = self.ctx.tree.index(node)
        return any(
            (index > at or self.ctx.tree.is_inside(node, call))  # `criterion(model(x), y).backward()`
            and where is scope
            and not (unless_guarded_by and self._guarded_by(call, unless_guarded_by))
            for index, where, call in self._backward_calls
        )

    def guarded_by(self, node: cst.CSTNode, names: frozenset[str]) -> bool:
        """Is ``node`` under an ``if`` whose test reads one of ``names`` (``if phase == "train":``)?"""
        return bool(names) and self._guarded_by(node, names)

    def _guarded_by(self, node: cst.CSTNode, names: frozenset[str]) -> bool:
        tree = self.ctx.tree
        for branch in self.ctx.guards.conditions(node):
            if any(isinstance(n, cst.Name) and n.value in names for n in (branch.test, *tree.descendants(branch.test))):
                return True
        return False

    def feeds_backward(self, name: str, at: cst.CSTNode, depth: int = 2) -> bool:
        """Does a backward pass after ``at`` in the same scope differentiate ``name``, directly
        (``loss.backward()``, ``torch.stack(losses).mean().backward()``) or through names
        bound from it (``total = sum(losses)`` then ``total.backward()``), up to ``depth`` deep?"""
        return any(True for _ in self._backwards_of(name, at, depth))

    def backwards_fed(self, name: str, at: cst.CSTNode, depth: int = 2) -> list[cst.Call]:
        """The backward calls after ``at`` in the same scope that differentiate ``name`` as
        bound at ``at`` (not a later rebinding of the same name), in source order."""
        return list(self._backwards_of(name, at, depth, bound_at=at))

    def _backwards_of(self, name: str, at: cst.CSTNode, depth: int, bound_at: cst.CSTNode | None = None) -> Iterator[cst.Call]:
        tree = self.ctx.tree
        scope = tree.scope_of(at)
        start = tree.index(at)
        for call in tree.nodes(cst.Call):
            if tree.index(call) <= start or not is_backward_call(self.ctx, call) or tree.scope_of(call) is not scope:
                continue
            roots: list[cst.CSTNode] = [call.func.value] if isinstance(call.func, cst.Attribute) and call.func.attr.value == "backward" else []
            roots += [arg.value for arg in call.args]
            if any(self._mentions(root, name, call, depth=depth, bound_at=bound_at) for root in roots):
                yield call

    def feeds_returned_loss(self, name: str, at: cst.CSTNode, depth: int = 2) -> bool:
        """In a method whose returned loss a framework differentiates (Lightning's
        ``training_step``), does a ``return`` after ``at`` hand back ``name`` or a value bound
        from it (``loss = content + adv`` then ``return loss``)?"""
        function = self.ctx.tree.enclosing_function(at)
        if function is None or function.name.value not in DIFFERENTIATED_RETURNS:
            return False
        start = self.ctx.tree.index(at)
        return any(isinstance(node, cst.Return) and node.value is not None and self.ctx.tree.index(node) > start
                   and self.ctx.tree.enclosing_function(node) is function and self._mentions(node.value, name, node, depth)
                   for node in self.ctx.tree.descendants(function))

    def _mentions(self, root: cst.CSTNode, name: str, at: cst.CSTNode, depth: int, bound_at: cst.CSTNode | None = None) -> bool:
        """Does ``root`` read ``name`` (bound by the statement ``bound_at`` when given), or a name
        bound from it, up to ``depth`` bindings back from ``at``?"""
        for node in (root, *self.ctx.tree.descendants(root)):
            if not isinstance(node, (cst.Name, cst.Attribute)):
                continue
            found = dotted(node)
            if found is None:
                continue
            if found == name:
                if bound_at is None or (self._bound_by(found, at, bound_at) and not self._detached(node)):
                    return True
                continue
            if depth > 0 and isinstance(node, cst.Name):
                binding = self.ctx.bindings.reaching(found, at)
                if binding is not None and binding.value is not None and binding.kind in ("assign", "augassign"):
                    if self._mentions(binding.value, name, binding.node, depth - 1, bound_at):
                        return True
        return False

    def _detached(self, node: cst.CSTNode) -> bool:
        """``x.detach()`` / ``x.data``: no gradient goes back through this read of ``x``."""
        parent = self.ctx.tree.parent(node)
        return isinstance(parent, cst.Attribute) and parent.value is node and parent.attr.value in ("detach", "data")

    def _bound_by(self, name: str, at: cst.CSTNode, statement: cst.CSTNode) -> bool:
        """Is the binding of ``name`` that reaches ``at`` made inside ``statement``?"""
        binding = self.ctx.bindings.reaching(name, at)
        return binding is not None and (binding.node is statement or self.ctx.tree.is_inside(binding.node, statement))


_FRAMEWORK_NO_GRAD = {
    "validation_step", "test_step", "predict_step", "validation_epoch_end", "test_epoch_end",
    "on_validation_epoch_end", "on_test_epoch_end", "on_validation_batch_end", "on_test_batch_end",
}
_RETURNS_GRADS = {"torch.autograd.grad", "torch.autograd.functional.jacobian", "torch.autograd.functional.vjp"}
_AUTOGRAD_GRAD = {"torch.autograd.grad", "torch.autograd.backward", "torch.autograd.functional.jacobian", "torch.autograd.functional.vjp"}


def named_like_grad_off(expr: cst.BaseExpression) -> bool:
    """A decorator or context manager of the project's own named like ``no_grad``/``inference_mode``."""
    target = expr.func if isinstance(expr, cst.Call) else expr
    name = dotted(target)
    last = (name or "").rsplit(".", 1)[-1].lower()
    return "no_grad" in last or "inference_mode" in last or "nograd" in last


def accumulates_grads(ctx: FileContext, call: cst.Call) -> bool:
    """A backward that writes ``.grad`` (``loss.backward()``, ``manual_backward``,
    ``accelerator.backward``, ``torch.autograd.backward``), not ``torch.autograd.grad``, which
    returns the gradients it is asked for and leaves the parameters' ``.grad`` alone."""
    return is_backward_call(ctx, call) and canonical(ctx.qname(call.func)) not in _RETURNS_GRADS


def is_backward_call(ctx: FileContext, call: cst.Call) -> bool:
    """``x.backward()``, ``self.manual_backward(loss)``, ``accelerator.backward(loss)``, ``torch.autograd.grad(...)``."""
    if type(call.func) is cst.Attribute and call.func.attr.value in ("backward", "manual_backward"):
        return True
    return canonical(ctx.qname(call.func)) in _AUTOGRAD_GRAD


def explicitly_enabled(ctx: FileContext, node: cst.CSTNode) -> bool:
    """Under ``with torch.enable_grad()`` / ``set_grad_enabled(True)`` inside ``node``'s function."""
    for ancestor in ctx.tree.ancestors(node):
        if type(ancestor) is cst.FunctionDef:
            return False
        if isinstance(ancestor, cst.With) and any(ctx.grad.effect(i.item) is True for i in ancestor.items):
            return True
    return False
