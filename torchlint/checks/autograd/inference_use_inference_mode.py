"""`torch.no_grad()` around pure inference, where `torch.inference_mode()` would do."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.grad import is_backward_call
from torchlint.analysis.impact import Cost
from torchlint.analysis.kind_names import looks_like_optimizer
from torchlint.analysis.kinds import Kind
from torchlint.analysis.names import canonical, dotted
from torchlint.checks.base import Check

_NO_GRAD = {"torch.no_grad", "torch.autograd.no_grad", "torch.autograd.grad_mode.no_grad"}
# Calls that change a model or its parameters, or that must not see inference tensors.
_STATEFUL_METHODS = {"step", "load_state_dict", "register_buffer", "register_parameter", "apply", "backward", "zero_grad", "requires_grad_", "train"}
_STATEFUL_PREFIXES = ("torch.nn.init.", "torch.jit.", "torch.onnx.", "torch.compile", "torch.nn.Parameter", "torch.nn.parameter.", "torch.autograd.", "torch.func.", "torch.export.", "copy.deepcopy", "torch.save")
_STATEFUL_NAMES = {"requires_grad", "grad", "data", "_grad", "weight_g"}


class InferenceUseInferenceMode(Check):
    """`with torch.no_grad():` around pure inference: `torch.inference_mode()` skips more bookkeeping."""

    code = "TL304"
    name = "inference-use-inference-mode"
    cost = Cost.SMALL_WORK
    message = "`torch.no_grad()` wraps pure inference; `torch.inference_mode()` also skips view and version tracking"
    fix_hint = "Use `with torch.inference_mode():` for blocks whose results never re-enter autograd"
    default = False

    def visit_With(self, node: cst.With) -> None:
        ctx = self.ctx
        if ctx.options.target_torch < (1, 9):
            return  # inference_mode() exists since torch 1.9
        grad_items = [item for item in node.items if ctx.grad.effect(item.item) is False]
        if len(grad_items) != 1:
            return
        item = grad_items[0]
        target = item.item.func if isinstance(item.item, cst.Call) else item.item
        if canonical(ctx.qname(target)) not in _NO_GRAD or item.asname is not None:
            return
        if any(ctx.grad.effect(a.item) is not None for a in self._enclosing_withs(node)):
            return  # nested in another grad context: leave the combination alone
        body = list(ctx.tree.descendants(node.body))
        if not self._pure(body, node):
            return
        if self._results_escape(node, body):
            return
        self.report(node)

    def _enclosing_withs(self, node: cst.CSTNode) -> list[cst.WithItem]:
        items: list[cst.WithItem] = []
        for ancestor in self.ctx.tree.ancestors(node):
            if isinstance(ancestor, cst.FunctionDef):
                break
            if isinstance(ancestor, cst.With):
                items.extend(ancestor.items)
        return items

    def _pure(self, body: list[cst.CSTNode], node: cst.With) -> bool:
        """Model calls and bookkeeping only: no parameter updates, no state changes."""
        ctx = self.ctx
        model_calls = 0
        for inner in body:
            if isinstance(inner, (cst.FunctionDef, cst.ClassDef, cst.Lambda, cst.Return, cst.Yield, cst.Global, cst.Nonlocal)):
                return False
            if isinstance(inner, cst.Name) and inner.value in _STATEFUL_NAMES:
                return False
            if isinstance(inner, cst.Attribute) and inner.attr.value in _STATEFUL_NAMES:
                return False
            if isinstance(inner, cst.AugAssign) and not isinstance(inner.target, cst.Name):
                return False
            if isinstance(inner, cst.AssignTarget) and not _plain_names(inner.target):
                return False
            if isinstance(inner, (cst.AnnAssign, cst.Del)):
                return False
            if isinstance(inner, cst.Call):
                method = ctx.method_name(inner)
                if method is not None and (method.endswith("_") and not method.endswith("__") or method in _STATEFUL_METHODS):
                    return False
                if method in ("append", "extend") and not isinstance(inner.func.value, cst.Name):  # type: ignore[attr-defined]
                    return False  # stored into an object's state
                qualified = canonical(ctx.qname(inner.func)) or ""
                if qualified.startswith(_STATEFUL_PREFIXES) or is_backward_call(ctx, inner):
                    return False
                callee = dotted(inner.func) or ""
                if callee.startswith("self.") and self._mutating_local_function(callee.rsplit(".", 1)[-1]):
                    return False  # `self._momentum_update()`: updates parameters in place
                if looks_like_optimizer(callee) or ctx.values.kind(inner.func, inner) is Kind.OPTIMIZER:
                    return False
                if ctx.values.kind(inner.func, inner) is Kind.MODULE and not ctx.values.is_loss_module(inner.func, inner):
                    model_calls += 1
        return model_calls > 0

    def _results_escape(self, node: cst.With, body: list[cst.CSTNode]) -> bool:
        """Could a tensor made in the block reach autograd or an in-place update later:
        returned or yielded, or used after the block in a scope that trains?"""
        ctx = self.ctx
        tree = ctx.tree
        bound = {b for inner in body if isinstance(inner, (cst.AssignTarget, cst.For, cst.WithItem, cst.NamedExpr)) for b in _bound_names(inner)}
        if not bound:
            return False
        scope = tree.scope_of(node)
        trains = any(is_backward_call(ctx, c) or ctx.loops.is_step_call(c) and ctx.method_name(c) == "step" for c in self._scope_calls(scope))
        start, end = tree.index(node), max((tree.index(n) for n in body), default=tree.index(node))
        loops = ctx.loops.enclosing_loops(node)
        for ref in tree.nodes(cst.Name):
            if ref.value not in bound or tree.scope_of(ref) is not scope:
                continue
            index = tree.index(ref)
            if start <= index <= end:
                continue
            if index > end:
                binding = ctx.bindings.reaching(ref.value, ref)
                if binding is None or not tree.is_inside(binding.node, node):
                    continue
            elif not (loops and tree.is_inside(ref, loops[-1])):
                continue  # before the block, outside any loop that repeats it
            if trains or self._escapes_here(ref) or index > end and self._returns_after(node, scope):
                return True
        return False

    def _returns_after(self, node: cst.With, scope: cst.CSTNode) -> bool:
        """A ``return value``/``yield`` after the block: a result derived from the block's
        tensors may leave the function and reach autograd in the caller."""
        tree = self.ctx.tree
        if not isinstance(scope, cst.FunctionDef):
            return False
        start = tree.index(node)
        for kind in (cst.Return, cst.Yield):
            for ret in tree.nodes(kind):
                if ret.value is not None and tree.index(ret) > start and tree.scope_of(ret) is scope:
                    return True
        return False

    def _mutating_local_function(self, name: str) -> bool:
        """A function or method of this file called ``name`` that updates tensors in place."""
        if not hasattr(self, "_mutating"):
            self._mutating: set[str] = set()
            for function in self.ctx.tree.nodes(cst.FunctionDef):
                for inner in self.ctx.tree.descendants(function.body):
                    if isinstance(inner, cst.Call):
                        method = self.ctx.method_name(inner)
                        if method and method.endswith("_") and not method.endswith("__"):
                            self._mutating.add(function.name.value)
                            break
                    target = getattr(inner, "target", None) if isinstance(inner, (cst.AugAssign, cst.AssignTarget)) else None
                    if isinstance(target, cst.Attribute) and target.attr.value in ("data", "grad"):
                        self._mutating.add(function.name.value)
                        break
        return name in self._mutating

    def _escapes_here(self, ref: cst.Name) -> bool:
        """Returned, yielded, stored on an object, or updated in place."""
        tree = self.ctx.tree
        for ancestor in tree.ancestors(ref):
            if isinstance(ancestor, (cst.Return, cst.Yield)):
                return True
            if isinstance(ancestor, cst.AugAssign) and tree.is_inside(ref, ancestor.target) or isinstance(ancestor, cst.AugAssign) and ancestor.target is ref:
                return True
            if isinstance(ancestor, cst.Assign) and any(not _plain_names(t.target) for t in ancestor.targets):
                return True
            if isinstance(ancestor, cst.Call):
                method = self.ctx.method_name(ancestor)
                if method and method.endswith("_") and not method.endswith("__") and ancestor.func.value is ref:  # type: ignore[attr-defined]
                    return True
            if isinstance(ancestor, cst.BaseStatement):
                return False
        return False

    def _scope_calls(self, scope: cst.CSTNode) -> list[cst.Call]:
        tree = self.ctx.tree
        return [c for c in tree.nodes(cst.Call) if tree.scope_of(c) is scope]


def _plain_names(target: cst.BaseExpression) -> bool:
    if isinstance(target, cst.Name):
        return True
    if isinstance(target, (cst.Tuple, cst.List)):
        return all(_plain_names(e.value) for e in target.elements)
    if isinstance(target, cst.StarredElement):
        return _plain_names(target.value)
    return False


def _bound_names(node: cst.CSTNode) -> set[str]:
    target = None
    if isinstance(node, cst.AssignTarget):
        target = node.target
    elif isinstance(node, cst.For):
        target = node.target
    elif isinstance(node, cst.WithItem) and node.asname is not None:
        target = node.asname.name
    elif isinstance(node, cst.NamedExpr):
        target = node.target
    names: set[str] = set()
    stack = [target] if target is not None else []
    while stack:
        current = stack.pop()
        if isinstance(current, cst.Name):
            names.add(current.value)
        elif isinstance(current, (cst.Tuple, cst.List)):
            stack.extend(e.value for e in current.elements)
        elif isinstance(current, cst.StarredElement):
            stack.append(current.value)
    return names
