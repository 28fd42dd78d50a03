"""Members of container modules, for the step summary: ``nn.Sequential(A(), B())``,
``nn.ModuleList([Block() for _ in range(n)])``, ``nn.Sequential(*layers)`` over a list built
with appends, ``nn.ModuleDict({"a": A()})``. A container's members are several classes at
once (``("each", refs)``): the summary makes one call per member of ``self.layers(x)``,
``self.blocks[i](x)`` and ``for layer in self.layers: x = layer(x)``. A mixin of
ObjectRefs, which supplies ``ctx``, ``_instance_class`` and ``_object_of``."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.names import dotted
from torchlint.analysis.summary import Ref

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext

CONTAINERS = frozenset({"torch.nn.Sequential", "torch.nn.ModuleList", "torch.nn.ModuleDict"})


class MemberRefs:
    ctx: FileContext

    def _instance_class(self, expr: cst.BaseExpression, at: cst.CSTNode) -> Ref | None:  # pragma: no cover - ObjectRefs'
        raise NotImplementedError

    def _object_of(self, value: cst.BaseExpression | None, at: cst.CSTNode, element: int | None) -> Ref | None:  # pragma: no cover
        raise NotImplementedError

    def _members_of(self, container: cst.BaseExpression, at: cst.CSTNode) -> Ref | None:
        """The member classes of a container module held in ``container`` (``self.layers``)."""
        found = self._instance_class(container, at)
        return found if found is not None and found[0] == "each" else None

    def _container_members(self, call: cst.Call, at: cst.CSTNode) -> Ref | None:
        """``nn.Sequential(A(), B())``, ``nn.ModuleList([Block() for _ in range(n)])``,
        ``nn.Sequential(*layers)`` (a list built with appends), ``nn.ModuleDict({"a": A()})``."""
        expanding: set[int] = self.__dict__.setdefault("_expanding", set())
        if id(call) in expanding:
            return None  # `layers = nn.ModuleList(layers)`: the list is itself
        expanding.add(id(call))
        try:
            return self._members_of_call(call, at)
        finally:
            expanding.discard(id(call))

    def _members_of_call(self, call: cst.Call, at: cst.CSTNode) -> Ref | None:
        refs: list[Ref] = []
        for arg in call.args:
            for item in self._items(arg.value, at, 0):
                found = self._object_of(item, at, None)
                if found is not None and found[0] == "each":
                    refs.extend(found[1])
                elif found is not None:
                    refs.append(found)
        unique = tuple(dict.fromkeys(refs))
        return ("each", unique) if unique else None

    def _items(self, value: cst.BaseExpression, at: cst.CSTNode, depth: int) -> list[cst.BaseExpression]:
        """The expressions a container argument is made of."""
        value_type = type(value)
        if depth > 3:
            return []
        if value_type in (cst.List, cst.Tuple, cst.Set):
            return [item for e in value.elements for item in self._items(e.value, at, depth + 1)]
        if value_type in (cst.ListComp, cst.GeneratorExp):
            return self._items(value.elt, at, depth + 1)
        if value_type is cst.Dict:
            return [item for e in value.elements if isinstance(e, cst.DictElement) for item in self._items(e.value, at, depth + 1)]
        if value_type is cst.Call and (dotted(value.func) or "").endswith("OrderedDict") and value.args:
            pairs = value.args[0].value
            return [item for e in getattr(pairs, "elements", ()) if type(e.value) is cst.Tuple and len(e.value.elements) == 2
                    for item in self._items(e.value.elements[1].value, at, depth + 1)]
        if value_type is cst.Name:
            return self._list_items(value, at, depth)
        return [value]

    def _list_items(self, name: cst.Name, at: cst.CSTNode, depth: int) -> list[cst.BaseExpression]:
        """``layers = [A()]``, ``layers.append(B())``, ``layers += [C()]`` in the same scope."""
        ctx, tree = self.ctx, self.ctx.tree
        items: list[cst.BaseExpression] = []
        scope = tree.scope_of(at)
        for binding in ctx.bindings.lookup(name.value, at):
            if binding.value is not None and binding.element is None and binding.kind in ("assign", "augassign"):
                if type(binding.value) is cst.Call and ctx.qname(binding.value.func) in CONTAINERS:
                    items.append(binding.value)
                elif type(binding.value) is not cst.Name:
                    items.extend(self._items(binding.value, binding.node, depth + 1))
        for call in ctx.method_calls(("append", "extend", "add_module", "insert")):
            receiver = call.func.value  # type: ignore[attr-defined]
            if type(receiver) is cst.Name and receiver.value == name.value and tree.scope_of(call) is scope and call.args:
                items.extend(self._items(call.args[-1].value, call, depth + 1))
        return items


def target_names(target: cst.BaseExpression) -> list[cst.Name]:
    if type(target) is cst.Name:
        return [target]
    if type(target) in (cst.Tuple, cst.List):
        return [name for e in target.elements for name in target_names(e.value)]
    return []


def may_iterate_modules(iterable: cst.BaseExpression) -> bool:
    """``self.layers``, ``blocks``, ``enumerate(self.layers)``, ``zip(self.a, self.b)``,
    ``self.heads.values()``: an iterable that may be a container of modules."""
    if type(iterable) is cst.Call:
        func = iterable.func
        if type(func) is cst.Name and func.value in ("zip", "enumerate"):
            return any(may_iterate_modules(a.value) for a in iterable.args)
        return type(func) is cst.Attribute and func.attr.value == "values" and may_iterate_modules(func.value)
    return type(iterable) is cst.Name or type(iterable) is cst.Attribute


def iterated_item(iterable: cst.BaseExpression | None, element: int | None) -> cst.BaseExpression | None:
    """What a loop variable takes its items from: ``for layer in self.layers`` →
    ``self.layers``; ``for i, layer in enumerate(self.layers)`` → ``self.layers`` for ``layer``;
    ``zip(self.a, self.b)`` → the matching argument."""
    if type(iterable) is cst.Call and type(iterable.func) is cst.Name and iterable.func.value in ("zip", "enumerate"):
        positional = [a.value for a in iterable.args if a.keyword is None and not a.star]
        if iterable.func.value == "enumerate":
            return positional[0] if element == 1 and positional else None
        return positional[element] if element is not None and element < len(positional) else None
    if type(iterable) is cst.Call and type(iterable.func) is cst.Attribute and iterable.func.attr.value == "values" and element is None:
        return iterable.func.value  # `for head in self.heads.values()`
    return iterable if element is None else None
