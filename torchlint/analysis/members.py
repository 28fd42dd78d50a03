"""Members of container modules, for the step summary: ``nn.Sequential(A(), B())``,
``nn.ModuleList([Block() for _ in range(n)])``, ``nn.Sequential(*layers)`` over a list built
with appends, ``nn.ModuleDict({"a": A()})``. A container's members are several classes at
once (``("each", refs)``): the summary makes one call per member of ``self.layers(x)``,
``self.blocks[i](x)`` and ``for layer in self.layers: x = layer(x)``. A mixin of
ObjectRefs, which supplies ``ctx``, ``_instance_class`` and ``_object_of``."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.kind_names import MODULE_CHAIN
from torchlint.analysis.names import dotted
from torchlint.analysis.object_shapes import string_key
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

    def _parameter(self, expr: cst.BaseExpression, at: cst.CSTNode) -> tuple[str, str] | None:  # pragma: no cover - ObjectRefs'
        raise NotImplementedError

    def _members_of(self, container: cst.BaseExpression, at: cst.CSTNode) -> Ref | None:
        """The member classes of a container module held in ``container`` (``self.layers``); or,
        for a container a caller passes (``self.layers = layers`` in ``__init__``, a parameter
        ``blocks``: DALLE's ``SequentialSequence(layers)``), whatever the callers pass there,
        which the join resolves (a container's members, each)."""
        found = self._instance_class(container, at) or self._entry_members(container, at)
        if found is None and type(container) is cst.Name:
            param = self._parameter(container, at)
            found = ("passed", *param) if param is not None else None
        return found if found is not None and (found[0] in ("each", "or") or found[0] == "passed" and len(found) == 3) else None

    def _entry_members(self, container: cst.BaseExpression, at: cst.CSTNode) -> Ref | None:
        """``self.emas["batch"]`` where the class appends to ``self.emas[kind]`` (demucs' dict of lists of
        EMAs): the members of any entry, each."""
        if type(container) is not cst.Subscript or type(container.value) is not cst.Attribute or dotted(container.value.value) != "self":
            return None
        cls = self.ctx.tree.enclosing_class(at)
        if cls is None:
            return None
        return as_container(either(self._appended_members(cls, container.value.attr.value + "[]"))) \
            if (id(cls), container.value.attr.value + "[]") in self._appends_to_self else None

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
        return as_container(either(self._object_of(item, at, None) for arg in call.args for item in self._items(arg.value, at, 0)))

    def _list_members(self, value: cst.BaseExpression, at: cst.CSTNode) -> Ref | None:
        """The modules a plain Python list or tuple holds (``self.heads = [Head() for _ in
        range(n)]``, ``blocks = []`` then ``blocks.append(Block())``): a container, whose
        elements a call runs each (``[head(x) for head in self.heads]``)."""
        memo: dict[tuple[int, int], Ref | None] = self.__dict__.setdefault("_list_memo", {})
        key = (id(value), id(self.ctx.tree.scope_of(at)) if type(value) is cst.Name else 0)
        if key not in memo:
            memo[key] = None  # `layers = layers + [Block()]`: the list is itself
            memo[key] = as_container(either(self._object_of(item, at, None) for item in self._items(value, at, 0)))
        return memo[key]

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

    def _appended_members(self, cls: cst.ClassDef, attr: str) -> list[Ref | None]:
        """``self.downs.append(nn.ModuleList([...]))``, ``self.blocks.extend([...])`` in a method
        of ``cls``: members of the container ``self.<attr>`` (``nn.ModuleList([])`` where it is set)."""
        return [self._object_of(item, call, None) for call in self._appends_to_self.get((id(cls), attr), ())
                for item in self._items(call.args[-1].value, call, 1)]

    @property
    def _appends_to_self(self) -> dict[tuple[int, str], list[cst.Call]]:
        """(class, attribute) -> the calls that add to ``self.<attribute>`` (one pass, kept)."""
        found: dict[tuple[int, str], list[cst.Call]] | None = self.__dict__.get("_appends_memo")
        if found is None:
            found = self.__dict__["_appends_memo"] = {}
            for call in self.ctx.method_calls(_ADDERS):
                receiver = call.func.value  # type: ignore[attr-defined]
                entry = type(receiver) is cst.Subscript
                if entry:
                    receiver = receiver.value  # `self.emas[kind].append(ModelEMA(...))`: an entry of a dict of lists
                if type(receiver) is cst.Attribute and type(receiver.value) is cst.Name and receiver.value.value == "self" and call.args:
                    cls = self.ctx.tree.enclosing_class(call)
                    if cls is not None:  # (an entry's: under `attr[]`, what `self.attr[key]` holds)
                        found.setdefault((id(cls), receiver.attr.value + ("[]" if entry else "")), []).append(call)
        return found

    @property
    def _registered(self) -> dict[tuple[int, str | None], list[tuple[cst.BaseExpression, cst.Call]]]:
        """(class, name) -> the modules registered on ``self`` by ``self.add_module("conv",
        Conv())`` or ``setattr(self, "conv", Conv())``; name None for names made at run time
        (``self.add_module(f"layer{i}", Block())``, read back by ``getattr(self, ...)``)."""
        found: dict[tuple[int, str | None], list[tuple[cst.BaseExpression, cst.Call]]] | None = self.__dict__.get("_registered_memo")
        if found is None:
            found = self.__dict__["_registered_memo"] = {}
            calls = [*self.ctx.method_calls("add_module"),
                     *(c for c in self.ctx.tree.nodes(cst.Call) if type(c.func) is cst.Name and c.func.value == "setattr")]
            for call in calls:
                positional = [a.value for a in call.args if a.keyword is None and not a.star]
                if type(call.func) is cst.Attribute:
                    owner, args = call.func.value, positional
                else:
                    owner, args = (positional[0] if positional else None), positional[1:]
                cls = self.ctx.tree.enclosing_class(call)
                if type(owner) is not cst.Name or owner.value != "self" or len(args) != 2 or cls is None:
                    continue
                name = args[0].evaluated_value if type(args[0]) is cst.SimpleString else None
                found.setdefault((id(cls), name if isinstance(name, str) else None), []).append((args[1], call))
        return found

    def _registered_members(self, cls: cst.ClassDef, name: str | None) -> Ref | None:
        """What ``self.<name>`` (or ``getattr(self, <made at run time>)``, name None) holds
        among the modules registered by name."""
        return either(self._object_of(value, call, None) for value, call in self._registered.get((id(cls), name), ()))

    def _keyed_member(self, cls: cst.ClassDef, attr: str, key: str) -> Ref | None:
        """``self.transformer.h`` (or ``self.transformer["h"]``) where ``self.transformer =
        nn.ModuleDict(dict(h=nn.ModuleList(...), wte=...))`` or ``nn.ModuleDict({"h": ...})``:
        what the key holds (nanoGPT's and litgpt's layout); or ``self.mid.attn_1`` set in a
        method (``self.mid = nn.Module()``, then ``self.mid.attn_1 = AttnBlock(c)``)."""
        for binding in self.ctx.bindings.self_attrs.get(id(cls), {}).get("self." + attr, []):
            value = binding.value
            if binding.kind != "assign" or type(value) is not cst.Call or not value.args or self.ctx.qname(value.func) != "torch.nn.ModuleDict":
                continue
            item = _keyed(value.args[0].value, key)
            if item is not None:
                return self._object_of(item, binding.node, None)
        methods = [s for s in class_body(cls) if type(s) is cst.FunctionDef]
        return either(self._object_of(b.value, b.node, b.element) for method in methods
                      for b in self.ctx.bindings.by_scope.get(id(method), {}).get(f"self.{attr}.{key}", ()) if b.kind == "assign")

    def _namespace_member(self, owner: cst.Subscript, attr: str, at: cst.CSTNode) -> Ref | None:
        """``self.down[i].attn`` where each member of ``self.down`` is a namespace module
        given its attributes where it is made (``down = nn.Module(); down.attn = attn;
        self.down.append(down)``: the diffusion models' UNet): what ``attn`` holds."""
        found = []
        for item, where in self._rows(owner.value, at):
            if type(item) is cst.Name:
                for binding in self.ctx.bindings.lookup(f"{item.value}.{attr}", where):
                    if binding.kind == "assign" and binding.value is not None:
                        found.append(self._object_of(binding.value, binding.node, binding.element))
        return either(found)

    def _row_members(self, container: cst.BaseExpression, element: int, at: cst.CSTNode) -> Ref | None:
        """``for block1, block2, attn, down in self.downs`` where each member of ``self.downs`` is
        ``nn.ModuleList([ResnetBlock(), ResnetBlock(), Attention(), Downsample()])``: the
        classes at position ``element`` of each row (a row that is no literal gives none)."""
        found: list[Ref | None] = []
        for row, where in self._rows(container, at):
            row = _unmoved(row)
            if type(row) is cst.Call and row.args and self.ctx.qname(row.func) in CONTAINERS:
                row = row.args[0].value  # `nn.ModuleList([a, b])`: its list
            if type(row) in (cst.List, cst.Tuple) and element < len(row.elements) and not any(type(e) is cst.StarredElement for e in row.elements):
                found.append(self._object_of(row.elements[element].value, where, None))
        return either(found)

    def _rows(self, container: cst.BaseExpression, at: cst.CSTNode) -> list[tuple[cst.BaseExpression, cst.CSTNode]]:
        """The items a container is made of, unflattened: ``self.downs`` set to
        ``nn.ModuleList([...])`` and appended to, or a name bound to a list in this scope."""
        ctx, values = self.ctx, []
        if type(container) is cst.Attribute and type(container.value) is cst.Name and container.value.value == "self":
            cls = ctx.tree.enclosing_class(at)
            if cls is None:
                return []
            values = [(b.value, b.node) for b in ctx.bindings.self_attrs.get(id(cls), {}).get("self." + container.attr.value, [])
                      if b.kind == "assign" and b.value is not None and b.element is None]
            for call in self._appends_to_self.get((id(cls), container.attr.value), ()):
                value = call.args[-1].value
                values.append((value, call) if call.func.attr.value == "extend" else (cst.List([cst.Element(value)]), call))  # type: ignore[attr-defined]
        elif type(container) is cst.Name:
            values = [(b.value, b.node) for b in ctx.bindings.lookup(container.value, at)
                      if b.kind == "assign" and b.value is not None and b.element is None]
        rows = []
        for value, where in values:
            if type(value) is cst.Call and value.args and ctx.qname(value.func) in CONTAINERS:
                value = value.args[0].value
            if type(value) in (cst.List, cst.Tuple):
                rows.extend((e.value, where) for e in value.elements)
            elif type(value) in (cst.ListComp, cst.GeneratorExp):
                rows.append((value.elt, where))
            elif type(value) is cst.Name:  # `nn.ModuleList(rows)`, `rows.append(nn.ModuleList([...]))`
                rows.extend((item, where) for item in self._list_items(value, where, 1))
        return rows


_ADDERS = ("append", "extend", "add_module", "insert")


def class_body(cls: cst.ClassDef) -> tuple[cst.BaseStatement, ...]:
    return tuple(cls.body.body) if isinstance(cls.body, cst.IndentedBlock) else ()


def method_named(cls: cst.ClassDef, name: str) -> cst.FunctionDef | None:
    """The first ``def name`` in the body of ``cls`` (None where it has none)."""
    return next((s for s in class_body(cls) if type(s) is cst.FunctionDef and s.name.value == name), None)


def abstract_methods(cls: cst.ClassDef) -> tuple[str, ...]:
    """The methods of ``cls`` whose body (a docstring aside) only raises ``NotImplementedError``:
    a subclass implements them, and a call of one runs that override."""
    found = []
    for statement in class_body(cls):
        if type(statement) is not cst.FunctionDef or type(statement.body) is not cst.IndentedBlock:
            continue
        body = [s for s in statement.body.body if not (type(s) is cst.SimpleStatementLine and len(s.body) == 1
                                                          and type(s.body[0]) is cst.Expr and type(s.body[0].value) is cst.SimpleString)]
        if len(body) == 1 and type(body[0]) is cst.SimpleStatementLine and len(body[0].body) == 1 and type(body[0].body[0]) is cst.Raise:
            raised = body[0].body[0].exc
            raised = raised.func if type(raised) is cst.Call else raised
            if type(raised) is cst.Name and raised.value == "NotImplementedError":
                found.append(statement.name.value)
    return tuple(found)


def _keyed(mapping: cst.BaseExpression, key: str) -> cst.BaseExpression | None:
    """The value of ``key`` in ``dict(key=...)`` or ``{"key": ...}``."""
    if type(mapping) is cst.Call and type(mapping.func) is cst.Name and mapping.func.value == "dict":
        return next((a.value for a in mapping.args if a.keyword is not None and a.keyword.value == key), None)
    if type(mapping) is cst.Dict:
        for element in mapping.elements:
            if type(element) is cst.DictElement and type(element.key) is cst.SimpleString and element.key.evaluated_value == key:
                return element.value
    return None


def either(refs: Iterable[Ref | None]) -> Ref | None:
    """One reference for objects that may be any of ``refs`` (a container's members, an
    attribute's branches): None, the one class, or ``("each", classes)``, whose every class
    a call may run (the summary makes one call per class). A container stays one, even
    of one class (``for block in self.blocks``)."""
    found: list[Ref] = []
    several = False
    for ref in refs:
        if ref is not None:
            several = several or ref[0] == "each"
            found.extend(ref[1] if ref[0] == "each" else (ref,))
    unique = tuple(dict.fromkeys(found))
    return None if not unique else ("each", unique) if several or len(unique) > 1 else unique[0]


def as_container(ref: Ref | None) -> Ref | None:
    """``ref`` as the members of a container: ``("each", ...)`` even when it is one class."""
    return ("each", (ref,)) if ref is not None and ref[0] != "each" else ref


def _unmoved(value: cst.BaseExpression) -> cst.BaseExpression:
    """``nn.ModuleList([...]).to(device)`` → ``nn.ModuleList([...])``."""
    while type(value) is cst.Call and type(value.func) is cst.Attribute and value.func.attr.value in MODULE_CHAIN:
        value = value.func.value
    return value


def target_names(target: cst.BaseExpression) -> list[cst.Name]:
    if type(target) is cst.Name:
        return [target]
    if type(target) in (cst.Tuple, cst.List):
        return [name for e in target.elements for name in target_names(e.value)]
    return []


def may_iterate_modules(iterable: cst.BaseExpression, calls_element: bool = False) -> bool:
    """``self.layers``, ``blocks``, ``enumerate(self.layers)``, ``zip(self.a, self.b)``,
    ``self.heads.values()``, ``self.heads.items()``: an iterable that may be a container of modules;
    with ``calls_element`` (the loop calls its element: ``layer(residual)``), a slice ``self.layers[:n_q]`` too."""
    if type(iterable) is cst.Call:
        func = iterable.func
        if type(func) is cst.Name and func.value in ("zip", "enumerate"):
            return any(may_iterate_modules(a.value, calls_element) for a in iterable.args)
        return type(func) is cst.Attribute and func.attr.value in ("values", "items") and may_iterate_modules(func.value)
    if type(iterable) is cst.Subscript and type(iterable.value) is cst.Attribute and dotted(iterable.value.value) == "self":
        # `self.emas["batch"]`: an entry of a dict of lists (`MemberRefs._entry_members`), by its string key; a slice
        # (`self.layers[:n_q]`) only where the loop runs each element's forward (encodec's residual quantizer): its
        # `encode` loop's `layer.encode(x)` reached audiocraft's codebooks from an evaluation loop, into branches that
        # run only in training or on the first call, which the step's analysis does not prune
        return string_key(iterable) is not None or calls_element and sliced(iterable) is not None
    return type(iterable) is cst.Name or type(iterable) is cst.Attribute


def sliced(iterable: cst.BaseExpression | None) -> cst.BaseExpression | None:
    """``self.layers`` of ``self.layers[:n_q]`` (a slice, no index): the container whose members it holds."""
    if type(iterable) is not cst.Subscript or type(iterable.value) is not cst.Attribute or dotted(iterable.value.value) != "self":
        return None
    return iterable.value if iterable.slice and all(type(s.slice) is cst.Slice for s in iterable.slice) else None


def calls_element(calls: list[cst.Call], names: set[str]) -> bool:
    """Does a loop whose calls are ``calls`` call one of its loop variables ``names`` itself (``layer(residual)``:
    each element's forward), not only a method of it?"""
    return any(type(call.func) is cst.Name and call.func.value in names for call in calls)


def iterated_item(iterable: cst.BaseExpression | None, element: int | None, *, dict_views: bool) -> cst.BaseExpression | None:
    """What a loop variable takes its items from (None when unknown): ``for layer in
    self.layers`` → ``self.layers``; ``for i, layer in enumerate(self.layers)`` → ``self.layers``
    for ``layer``; ``zip(self.a, self.b)`` → the matching argument. ``dict_views``: a dict's
    values stand for it too (``for head in self.heads.values()``, the value of ``.items()``) →
    ``self.heads``, where what is asked of the dict is asked of its values (its members, its
    tensors); not where the dict itself would answer otherwise (a dict literal is a Python
    value on the host whatever its values are)."""
    if type(iterable) is cst.Call and type(iterable.func) is cst.Name and iterable.func.value in ("zip", "enumerate"):
        positional = [a.value for a in iterable.args if a.keyword is None and not a.star]
        if iterable.func.value == "enumerate":
            return positional[0] if element == 1 and positional else None
        return positional[element] if element is not None and element < len(positional) else None
    if dict_views and type(iterable) is cst.Call and type(iterable.func) is cst.Attribute:
        if iterable.func.attr.value == "values" and element is None:
            return iterable.func.value  # `for head in self.heads.values()`
        if iterable.func.attr.value == "items" and element == 1:
            return iterable.func.value  # `for name, head in self.heads.items()`
    return iterable if element is None else None
