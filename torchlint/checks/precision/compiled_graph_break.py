"""A graph break in code torch.compile traces: `.item()`, `.tolist()`, `int(t)`, `print()`, a Python branch on a tensor, an output sized by values."""

from __future__ import annotations

import re

import libcst as cst

from torchlint.analysis.context import short_code
from torchlint.analysis.impact import Cost
from torchlint.analysis.kinds import Kind
from torchlint.analysis.sync_ops import SIZED_BY_VALUES, torch_op
from torchlint.checks.base import STEP_PLACEHOLDER, Check

_SCALAR_READS = frozenset({"item", "tolist"})
_CONVERSIONS = frozenset({"int", "float", "bool"})
# Calls dynamo skips (it does not trace into them): the graph ends at each one.
_SKIPPED_CALLS = frozenset({"torch.autograd.grad", "warnings.warn", "time.time", "time.perf_counter", "time.monotonic", "time.sleep", "time.process_time"})
_LOG_METHODS = frozenset({"debug", "info", "warning", "warn", "error", "exception", "critical", "log"})
_LOGGER_NAME = re.compile(r"^_?(logger|log|LOGGER|LOG)$")
# dynamo's switches that trace what otherwise breaks the graph (set in the same file).
_CAPTURE_SCALARS = "capture_scalar_outputs"
_CAPTURE_SHAPES = "capture_dynamic_output_shape_ops"
# `if not torch.compiler.is_compiling():` holds code dynamo never traces.
_COMPILING_TESTS = ("is_compiling", "is_dynamo_compiling")

_PAGE = " (PyTorch's page on graph breaks: https://docs.pytorch.org/docs/stable/compile/programming_model.graph_breaks_index.html)"
_READ_HINT = "Return the tensor and read it outside the compiled function (or set `torch._dynamo.config.capture_scalar_outputs = True`)" + _PAGE
_PRINT_HINT = "Print, log, warn or time outside the compiled function, or under `if not torch.compiler.is_compiling():`" + _PAGE
_BRANCH_HINT = "Branch on the device: `torch.where(cond, a, b)`, or `torch.cond` for two functions" + _PAGE
_SHAPE_HINT = "Keep shapes static (`torch.where(mask, x, 0)`, `nonzero_static(size=...)`), or set `torch._dynamo.config.capture_dynamic_output_shape_ops = True`" + _PAGE


class CompiledGraphBreak(Check):
    """`.item()`, `.tolist()`, `int(t)`, `print()`, logging, `if t:`, `nonzero()` or `x[mask]` in a function torch.compile traces."""

    code = "TL504"
    name = "compiled-graph-break"
    cost = Cost.GRAPH_BREAK
    message = "`{expr}` breaks torch.compile's graph in {place}: {why}"
    in_compiled = True
    fix_hint = _READ_HINT

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        func = node.func
        method = ctx.method_name(node)
        if method in _SCALAR_READS and not node.args:
            receiver = func.value  # type: ignore[attr-defined]
            if ctx.values.kind(receiver, node) not in (Kind.HOST, Kind.NUMPY) and not self._set(_CAPTURE_SCALARS):
                self._report(node, "the tensor's value is read into Python, so the graph ends here", _READ_HINT)
            return
        qualified = ctx.qname(func)
        if qualified in _SKIPPED_CALLS or self._logging_call(node, qualified):
            self._report(node, f"dynamo does not trace `{qualified or short_code(ctx.module, func)}`, so the graph ends here", _PRINT_HINT)
            return
        if qualified is not None and qualified.startswith("math.") and any(ctx.syncs.traced_tensor(a.value, node) for a in node.args):
            self._report(node, "`math` reads the tensor's value into a Python float, so the graph ends here", _READ_HINT)
            return
        if type(func) is cst.Name and qualified is None:
            if func.value == "print":
                self._report(node, "dynamo cannot trace `print`, so the graph ends here", _PRINT_HINT)
            elif func.value in _CONVERSIONS and len(node.args) == 1 and not self._set(_CAPTURE_SCALARS):
                value = node.args[0].value
                if ctx.syncs.traced_tensor(value, node):
                    self._report(node, "the tensor's value is read into Python, so the graph ends here", _READ_HINT)
            return
        op, subject = self._sized_op(node)
        if op is not None and subject is not None and ctx.syncs.traced_tensor(subject, node) and not self._set(_CAPTURE_SHAPES):
            self._report(node, "its output's size depends on the values, so the graph ends here", _SHAPE_HINT)

    def visit_Subscript(self, node: cst.Subscript) -> None:
        ctx = self.ctx
        if isinstance(ctx.tree.parent(node), (cst.AssignTarget, cst.AugAssign, cst.Del)):
            return  # `x[mask] = 0` writes in place: a static shape
        masks = [e.slice.value for e in node.slice if isinstance(e.slice, cst.Index)]
        if any(ctx.syncs.bool_mask(m, node, traced=True) for m in masks) and not self._set(_CAPTURE_SHAPES):
            self._report(node, "a boolean mask makes a tensor sized by the values, so the graph ends here", _SHAPE_HINT)

    def visit_If(self, node: cst.If) -> None:
        self._branch(node.test)

    def visit_While(self, node: cst.While) -> None:
        self._branch(node.test)

    def visit_IfExp(self, node: cst.IfExp) -> None:
        self._branch(node.test)

    # `assert t` is left alone: dynamo turns an assert on a tensor into `torch._assert_async`.

    def _branch(self, test: cst.BaseExpression) -> None:
        if self.ctx.tree.enclosing_function(test) is None:
            return  # module-level code is never compiled (and the tensor analysis is the costly part)
        if self.ctx.syncs.reads_truth(test, test, traced=True):
            self._report(test, "Python must know the tensor's value to pick a branch, so the graph ends here", _BRANCH_HINT)

    def _logging_call(self, call: cst.Call, qualified: str | None) -> bool:
        """``logging.info(...)``, ``logger.warning(...)`` on a ``logging.getLogger()`` or a
        name that says it is one (``self.logger``)."""
        func = call.func
        if type(func) is not cst.Attribute or func.attr.value not in _LOG_METHODS:
            return False
        if qualified is not None:
            return qualified.startswith("logging.")
        receiver = func.value
        if type(receiver) is cst.Call:
            return self.ctx.qname(receiver.func) == "logging.getLogger"
        name = receiver.value if type(receiver) is cst.Name else receiver.attr.value if type(receiver) is cst.Attribute else ""
        if _LOGGER_NAME.match(name):
            return True
        binding = self.ctx.bindings.reaching(name, call) if type(receiver) is cst.Name else None
        value = getattr(binding, "value", None)
        return type(value) is cst.Call and self.ctx.qname(value.func) == "logging.getLogger"

    def _sized_op(self, call: cst.Call) -> tuple[str | None, cst.BaseExpression | None]:
        """``torch.nonzero(x)`` / ``x.nonzero()`` and kin, ``torch.where(cond)``: (op, the tensor it sizes by)."""
        op, subject = torch_op(self.ctx, call)
        if op == "where" and len(call.args) == 1 and self.ctx.qname(call.func) is not None:
            return op, subject  # `torch.where(cond)`: the indices of the true elements
        return (op, subject) if op in SIZED_BY_VALUES else (None, None)

    def _report(self, node: cst.CSTNode, why: str, hint: str) -> None:
        ctx = self.ctx
        function = ctx.tree.enclosing_function(node)
        if function is None:
            return  # module-level code is never compiled
        if ctx.guards.rare(node, stop=function) or self._untraced_branch(node, function):
            return  # a branch dynamo does not trace on a normal call: the graph stays whole there
        self.report(node, condition=function, hint=hint, expr=short_code(self.ctx.module, node), place=STEP_PLACEHOLDER, why=why)

    def _untraced_branch(self, node: cst.CSTNode, function: cst.FunctionDef) -> bool:
        """Under a branch dynamo does not trace on a normal call: ``if not
        torch.compiler.is_compiling():`` (or its ``else``), or a setting that is off by default,
        a parameter that defaults to False or None (``if ret_usages:``) or a string compared
        (``if device.type == "xpu":``): dynamo specialises on Python values and traces such a
        branch only in the setups that take it."""
        child: cst.CSTNode = node
        for ancestor in self.ctx.tree.ancestors(node):
            if ancestor is function:
                return False
            if type(ancestor) is cst.If:
                test = short_code(self.ctx.module, ancestor.test, limit=200)  # once, not once per name looked for
                if any(t in test for t in _COMPILING_TESTS):
                    return True
                if child is not ancestor.test and self.ctx.guards.setting_off(ancestor.test, function):
                    return True
            child = ancestor
        return False

    def _set(self, switch: str) -> bool:
        """Is dynamo's ``switch`` set in this file (``torch._dynamo.config.<switch> = True``)?"""
        return bool(self.ctx.tree.attributes_named(switch))
