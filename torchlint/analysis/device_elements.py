"""Containers of device tensors a function builds and hands on: a dict of metrics filled in the step
(``losses = {}``, ``losses["reco"] = reco.mean()``, ``{"loss": loss, "acc": acc}``) or a list of
them, whose callee reads each value into Python (demucs' ``averager(losses)``, ``float(value)`` per
metric): ``CallSite.elements``, and the ``elements:`` parameters of ``HiddenSyncs.device_parameters``
(a part of ``HiddenSyncs``)."""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.names import dotted

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext

# Annotations of a parameter that may hold device tensors as its values (`metrics: dict`, `tp.Dict[str, Tensor]`).
_CONTAINERS = frozenset({"dict", "Dict", "Mapping", "MutableMapping", "list", "List", "Sequence", "Iterable", "tuple", "Tuple"})


class DeviceElements:
    """Which containers of one file hold device tensors as their values (``device_tensor`` and
    ``holds_device_tensors`` are ``DeviceTensors``')."""

    ctx: FileContext

    def holds_device_values(self, container: cst.BaseExpression, at: cst.CSTNode) -> bool:
        """Is ``container`` a dict (or a list) whose values include a device tensor: a literal
        (``{"loss": loss}``, ``dict(loss=loss)``, a comprehension), or a name of this function bound to
        one or filled by key (``losses[f"reco_{s}"] = reco[k]``, ``losses.update(loss=loss)``)? Values
        read into Python first (``loss.item()``, ``float(loss)``) are none: nothing left to read."""
        kind = type(container)
        if kind is cst.Dict:
            return any(type(e) is cst.DictElement and self.device_tensor(e.value, at) for e in container.elements)
        if kind is cst.DictComp:
            return self.device_tensor(container.value, container.value)
        if kind is cst.Call and type(container.func) is cst.Name and container.func.value == "dict" and self.ctx.qname(container.func) is None:
            return any(a.keyword is not None and self.device_tensor(a.value, at) for a in container.args)
        if kind is not cst.Name:
            return kind in (cst.List, cst.ListComp, cst.Tuple) and self.holds_device_tensors(container, at)
        memo: dict[tuple[int, str], bool] = self.__dict__.setdefault("_values_memo", {})
        scope = self.ctx.tree.scope_of(at)
        key = (id(scope), container.value)
        if key not in memo:
            memo[key] = False  # `losses = merge(losses)`: the name itself, while asked
            bound = [(b.value, b.node) for b in self.ctx.bindings.lookup(container.value, at)
                     if b.kind == "assign" and b.element is None and type(b.value) in (cst.Dict, cst.DictComp, cst.Call)]
            stored = self._stored.get((id(scope), container.value), ())
            memo[key] = any(self.holds_device_values(value, node) for value, node in bound if type(value) is not cst.Call or dotted(value.func) == "dict") \
                or any(self.device_tensor(value, node) for value, node in stored) or self.holds_device_tensors(container, at)
        return memo[key]

    @cached_property
    def _stored(self) -> dict[tuple[int, str], list[tuple[cst.BaseExpression, cst.CSTNode]]]:
        """(scope, name) -> the values stored into ``name`` by key there (``name[k] = v``, any key)
        and by ``name.update(k=v)``."""
        tree, found = self.ctx.tree, {}
        for assign in tree.nodes(cst.Assign):
            for target in assign.targets:
                if type(target.target) is cst.Subscript and type(target.target.value) is cst.Name:
                    found.setdefault((id(tree.scope_of(assign)), target.target.value.value), []).append((assign.value, assign))
        for call in self.ctx.method_calls("update"):
            receiver = call.func.value  # type: ignore[attr-defined]
            if type(receiver) is cst.Name:
                found.setdefault((id(tree.scope_of(call)), receiver.value), []).extend((a.value, call) for a in call.args if a.keyword is not None)
        return found


def may_hold_values(param: cst.Param) -> bool:
    """``metrics``, ``metrics: dict``, ``losses: tp.Dict[str, torch.Tensor]``: a parameter whose callers
    may pass a container of tensors (no default but None, no annotation but a container's)."""
    default = param.default
    if default is not None and not (type(default) is cst.Name and default.value == "None"):
        return False
    if param.annotation is None:
        return True
    annotation = param.annotation.annotation
    if type(annotation) is cst.Subscript:
        annotation = annotation.value
    name = dotted(annotation)
    return name is not None and name.rsplit(".", 1)[-1] in _CONTAINERS
