"""Grad context: is a node run with autograd recording disabled?"""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.names import canonical

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
            if isinstance(ancestor, (cst.With)):
                for item in ancestor.items:
                    state = self.effect(item.item)
                    if state is not None:
                        return not state
            elif isinstance(ancestor, cst.FunctionDef):
                if self.function_disables(ancestor):
                    return True
                return False  # a nested function runs wherever it is called
        return False

    def function_disables(self, function: cst.FunctionDef) -> bool:
        return any(self.effect(d.decorator) is False for d in function.decorators)
