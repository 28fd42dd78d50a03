"""Device knowledge: does the module use an accelerator, and which values stay on the host."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.names import dotted

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext

_MOVE_METHODS = {"to", "cuda"}


def string_value(node: cst.CSTNode) -> str | None:
    """The text of a plain string literal, or the leading text of an f-string."""
    if isinstance(node, cst.SimpleString):
        try:
            value = node.evaluated_value
        except Exception:  # noqa: BLE001 - odd escapes: not a device string anyway
            return None
        return value if isinstance(value, str) else None
    if isinstance(node, cst.FormattedString) and node.parts and isinstance(node.parts[0], cst.FormattedStringText):
        return node.parts[0].value
    if isinstance(node, cst.ConcatenatedString):
        return string_value(node.left)
    return None


def is_cuda_string(node: cst.CSTNode) -> bool:
    value = string_value(node)
    return value is not None and (value == "cuda" or value.startswith("cuda:") or (isinstance(node, cst.FormattedString) and value.startswith("cuda")))


def is_cpu_device(expr: cst.BaseExpression, ctx: FileContext) -> bool:
    """``"cpu"`` or ``torch.device("cpu")``."""
    if string_value(expr) == "cpu" and not isinstance(expr, cst.FormattedString):
        return True
    if isinstance(expr, cst.Call) and ctx.qname(expr.func) == "torch.device" and expr.args:
        return is_cpu_device(expr.args[0].value, ctx)
    return False


class Devices:
    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self._uses_accelerator: bool | None = None

    def uses_accelerator(self) -> bool:
        if self._uses_accelerator is None:
            self._uses_accelerator = self._find_accelerator()
        return self._uses_accelerator

    def _find_accelerator(self) -> bool:
        ctx = self.ctx
        if ctx.method_calls({"cuda"}):
            return True
        for node in ctx.tree.nodes(cst.Attribute):
            name = ctx.qname(node) or ""
            if name.startswith(("torch.cuda.", "torch.accelerator.")):
                return True
        for kind in (cst.SimpleString, cst.FormattedString):
            for node in ctx.tree.nodes(kind):
                if is_cuda_string(node) and self._in_device_position(node):
                    return True
        return False

    def _in_device_position(self, node: cst.CSTNode) -> bool:
        tree = self.ctx.tree
        child: cst.CSTNode = node
        for ancestor in tree.ancestors(node):
            if isinstance(ancestor, (cst.IfExp, cst.ConcatenatedString)):
                child = ancestor
                continue
            if isinstance(ancestor, cst.Arg):
                if ancestor.keyword is not None and ancestor.keyword.value == "device":
                    return True
                call = tree.parent(ancestor)
                if isinstance(call, cst.Call):
                    if self.ctx.qname(call.func) == "torch.device":
                        return True
                    return isinstance(call.func, cst.Attribute) and call.func.attr.value == "to"
                return False
            if isinstance(ancestor, (cst.Assign, cst.AnnAssign)):
                return child is ancestor.value
            return False
        return False

    def is_host_batch(self, expr: cst.BaseExpression, at: cst.CSTNode) -> bool:
        """A value straight from iterating a DataLoader that is never moved to a device
        (or computed from one on the host: ``x[0]``, ``y.sum()``)."""
        while True:
            if isinstance(expr, cst.Subscript):
                expr = expr.value
            elif isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value not in _MOVE_METHODS:
                expr = expr.func.value
            else:
                break
        name = dotted(expr)
        if name is None:
            return False
        bindings = self.ctx.bindings.lookup(name, at)
        if not bindings:
            return False
        for binding in bindings:
            if binding.kind not in ("for", "comp"):
                return False  # rebound, e.g. `x = x.to(device)`
            loop = binding.node
            if self.ctx.loops.loader_of(binding.value, loop) is None:
                return False
        return True
