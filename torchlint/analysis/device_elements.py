"""Containers of device tensors a function builds and hands on: a dict of metrics filled in the step
(``losses = {}``, ``losses["reco"] = reco.mean()``, ``{"loss": loss, "acc": acc}``) or a list of
them, whose callee reads each value into Python (demucs' ``averager(losses)``, ``float(value)`` per
metric): ``CallSite.elements``, and the ``elements:`` parameters of ``HiddenSyncs.device_parameters``
(a part of ``HiddenSyncs``); and lists of device tensors (``scores.append(loss)``), which ``max(scores)``
or ``scores[0] < scores[1]`` read one comparison at a time: ``holds_device_tensors``."""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.names import dotted
from torchlint.analysis.sync_ops import host_items

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext

# Annotations of a parameter that may hold device tensors as its values (`metrics: dict`, `tp.Dict[str, Tensor]`).
_CONTAINERS = frozenset({"dict", "Dict", "Mapping", "MutableMapping", "list", "List", "Sequence", "Iterable", "tuple", "Tuple"})


class DeviceElements:
    """Which containers of one file hold device tensors as their values or items (``device_tensor``
    is ``DeviceTensors``')."""

    ctx: FileContext

    def holds_device_tensors(self, container: cst.BaseExpression, at: cst.CSTNode) -> bool:
        """Is ``container`` a Python list (or generator) of device tensors: ``[model(x).max()
        for x in xs]``, or a name bound to one in this function, or ``scores = []`` then
        ``scores.append(loss)`` with ``loss`` one? ``max(scores)``, ``sorted(scores)`` and
        ``scores[0] < scores[1]`` compare them with ``__bool__``: one read per comparison."""
        container_type = type(container)
        if container_type in (cst.ListComp, cst.GeneratorExp, cst.SetComp):
            return self.device_tensor(container.elt, container.elt)
        if container_type in (cst.List, cst.Tuple):
            return any(not isinstance(e, cst.StarredElement) and (self.device_tensor(e.value, at) or self._read_back_here(e.value, at))
                       for e in container.elements)
        if container_type is not cst.Name:
            return False
        ctx = self.ctx
        rebound = ctx.bindings.reaching_each(container.value, at)
        if rebound and all(b.kind == "assign" and b.element is None and b.value is not None and host_items(b.value) for b in rebound):
            # `size_list = [int(s.item()) for s in size_list]`: made again of Python values, so the
            # device tensors gathered into it before are gone; only what is appended after it counts (in a loop, after the read too)
            after = max(ctx.tree.index(b.node) for b in rebound)
            scope = ctx.tree.scope_of(at)
            known: dict[tuple[int, str, int], bool] = self.__dict__.setdefault("_holds_after_memo", {})
            key = (id(scope), container.value, after)
            if key not in known:
                known[key] = False  # (asked again while asked: the appended value read from the list itself)
                known[key] = any(self.device_tensor(call.args[0].value, call) for call in ctx.method_calls("append")
                                 if dotted(call.func.value) == container.value and len(call.args) == 1  # type: ignore[attr-defined]
                                 and ctx.tree.index(call) > after and ctx.tree.scope_of(call) is scope)
            return known[key]
        memo: dict[tuple[int, str], bool] = self.__dict__.setdefault("_holds_memo", {})
        scope = ctx.tree.scope_of(at)
        key = (id(scope), container.value)
        if key not in memo:
            memo[key] = False  # `xs = xs + [x]`: the list itself, while asked
            items = [(b.value, b.node) for b in ctx.bindings.lookup(container.value, at)
                     if b.kind == "assign" and b.element is None and type(b.value) in (cst.ListComp, cst.List)]
            items += [(call.args[0].value, call) for call in ctx.method_calls("append")
                      if dotted(call.func.value) == container.value and len(call.args) == 1 and ctx.tree.scope_of(call) is scope]  # type: ignore[attr-defined]
            # `actions += [sampled_action]` (and `xs = xs + [x]`): a list grown by concatenation
            items += self._concatenated(container.value, scope, at)
            memo[key] = any(self.holds_device_tensors(value, node) if type(value) in (cst.ListComp, cst.List)
                            else self.device_tensor(value, node) or self._read_back_here(value, node) for value, node in items)
        return memo[key]

    def _concatenated(self, name: str, scope: cst.CSTNode, at: cst.CSTNode) -> list[tuple[cst.List, cst.CSTNode]]:
        """The list literals ``name += [x]`` or ``name = name + [x]`` adds to the list, in ``scope``."""
        tree, found = self.ctx.tree, []
        for node in tree.nodes(cst.AugAssign):
            if type(node.operator) is cst.AddAssign and dotted(node.target) == name and type(node.value) is cst.List \
                    and tree.scope_of(node) is scope:
                found.append((node.value, node))
        for binding in self.ctx.bindings.lookup(name, at):
            value = binding.value if binding.kind == "assign" and binding.element is None else None
            if type(value) is cst.BinaryOperation and type(value.operator) is cst.Add and dotted(value.left) == name \
                    and type(value.right) is cst.List:
                found.append((value.right, binding.node))
        return found

    def _read_back_here(self, value: cst.BaseExpression, at: cst.CSTNode) -> bool:
        """``sampled_action`` where its function reads it back with ``sampled_action.cpu()`` (``.cpu().numpy()``):
        a tensor whose maker another file holds (``sample(model, ...)``), on the device until that copy."""
        if type(value) is not cst.Name:
            return False
        scope = self.ctx.tree.scope_of(at)
        return any(dotted(call.func.value) == value.value and self.ctx.tree.scope_of(call) is scope  # type: ignore[attr-defined]
                   for call in self.ctx.method_calls("cpu") if not call.args)

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
