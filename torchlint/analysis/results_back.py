"""What the host makes of a value it copied from the device, sent back to the device in the same pass:
VITS' ``maximum_path``, ``neg_cent = neg_cent.data.cpu().numpy()``, a host buffer ``path = np.zeros(...)``
that ``maximum_path_c(path, neg_cent, ...)`` fills from it, then ``torch.from_numpy(path).to(device)``;
or ``order = np.argsort(a)`` of the copy, then uploaded. A new value, not the copy itself (no TL112
round trip): the second leg of TL102's copy, one excursion through the host while the device idles.
A mixin of Uploads, which supplies ``ctx``, ``_moved_to_host_before`` and ``_same_pass``."""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

import libcst as cst

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext

# Host buffers a host function may fill in place (an out-parameter), here or in a compiled extension.
_HOST_BUFFERS = frozenset({"numpy.zeros", "numpy.empty", "numpy.ones", "numpy.full", "numpy.zeros_like", "numpy.empty_like",
                           "numpy.ones_like", "numpy.full_like", "torch.zeros", "torch.empty", "torch.ones", "torch.full"})
# Wrappers and conversions an upload's host value passes through (`torch.from_numpy(path).to(device)`).
_WRAPPERS = frozenset({"torch.from_numpy", "torch.as_tensor", "torch.tensor", "torch.Tensor"})
_CONVERSIONS = frozenset({"astype", "copy", "numpy", "float", "long", "int", "half", "double", "type", "reshape", "view"})


class ResultsBack:
    ctx: FileContext

    def _moved_to_host_before(self, expr: cst.BaseExpression, at: cst.CSTNode) -> cst.Call | None:  # pragma: no cover - Uploads'
        raise NotImplementedError

    def _same_pass(self, first: cst.CSTNode, second: cst.CSTNode) -> bool:  # pragma: no cover - Uploads'
        raise NotImplementedError

    def result_sent_back(self, move: cst.Call) -> cst.Call | None:
        """The upload of what the host computed from the copy ``move`` makes, in the same pass; None if none."""
        return self._results_back.get(id(move))

    @cached_property
    def _results_back(self) -> dict[int, cst.Call]:
        """id(move to the host) -> the move that uploads a host result made from its value. Asked only
        for a reported copy (TL102), so a file with none never looks."""
        ctx = self.ctx
        found: dict[int, cst.Call] = {}
        for call in ctx.tree.nodes(cst.Call):
            if type(call.func) is not cst.Attribute or ctx.tree.enclosing_function(call) is None or ctx.devices.move(call) != "device":
                continue
            result = self._host_result(call.func.value, call)
            if result is None:
                continue
            for source in self._sources(*result):
                if id(source) not in found and self._same_pass(source, call):
                    found[id(source)] = call
        return found

    def _host_result(self, expr: cst.BaseExpression, at: cst.CSTNode) -> tuple[cst.Name, cst.CSTNode] | None:
        """The name of a host array an upload's value is (``path`` of ``torch.from_numpy(path).to(d)``), and the upload."""
        ctx = self.ctx
        for _ in range(4):
            if type(expr) is cst.Call and ctx.qname(expr.func) in _WRAPPERS and len(expr.args) == 1 and ctx.keyword(expr, "device") is None:
                expr = expr.args[0].value
            elif type(expr) is cst.Call and type(expr.func) is cst.Attribute and expr.func.attr.value in _CONVERSIONS:
                expr = expr.func.value
            else:
                break
        return (expr, at) if type(expr) is cst.Name else None

    def _sources(self, name: cst.Name, at: cst.CSTNode) -> list[cst.Call]:
        """The copies to the host a host array is made from: the arguments of the call that returns it
        (``np.argsort(a)``), or of a call it is handed to as a buffer made on the host, beside them
        (``maximum_path_c(path, neg_cent, ...)``, ``path = np.zeros(...)`` before)."""
        ctx = self.ctx
        binding = ctx.bindings.reaching(name.value, at)
        if binding is None or binding.kind != "assign" or binding.element is not None or type(binding.value) is not cst.Call:
            return []
        value = binding.value
        if ctx.qname(value.func) in _HOST_BUFFERS and ctx.keyword(value, "device") is None:
            fills = [ctx.tree.parent(ctx.tree.parent(use)) for use in ctx.bindings.uses(binding, ordered=True)
                     if type(ctx.tree.parent(use)) is cst.Arg and ctx.tree.index(use) < ctx.tree.index(at)]
            calls = [c for c in fills if type(c) is cst.Call and ctx.qname(c.func) not in _WRAPPERS]
        elif ctx.devices.move(value) is None:
            calls = [value]
        else:
            return []  # (the copy itself, or another move: TL112's round trip, or no host result)
        return [m for call in calls for a in call.args if (m := self._moved_to_host_before(a.value, call)) is not None]
