"""Layer sequences: which layer's output goes straight into which next layer.

Found in ``nn.Sequential(...)`` (positional or ``OrderedDict``, also
``super().__init__(...)`` of an ``nn.Sequential`` subclass), adjacent items of a
list or tuple literal, consecutive additions to one list of layers
(``layers.append(conv)`` then ``layers.append(bn)``, ``+=``, ``extend``,
``add_module``, the second one possibly under an ``if``), and calls in a method
(``self.bn(self.conv(x))``, or ``x = self.conv(x)`` then ``self.bn(x)``).

Every item is resolved to the constructor call that built it (a call in place,
a name bound once to a call, or ``self.x`` assigned a call exactly once in the
class); items that cannot be resolved are left out.
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.names import dotted

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext

_LIST_ADDERS = {"append", "extend", "add_module"}
_NOT_SEQUENTIAL = {"torch.nn.ModuleList", "torch.nn.ModuleDict", "torch.nn.ParameterList"}


class Layers:
    """Direct producer → consumer links between layer constructor calls of one file."""

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self._sites: dict[tuple[int, int], cst.CSTNode] = {}  # where each link was found

    @cached_property
    def feeds(self) -> list[tuple[cst.Call, cst.Call]]:
        """``(producer, consumer)`` constructor calls, in source order of discovery, no duplicates."""
        pairs: list[tuple[cst.Call, cst.Call]] = []
        seen: set[tuple[int, int]] = set()
        for first, second, at in self._adjacent_items():
            producer, consumer = self.constructor(first, at), self.constructor(second, at)
            if producer is None or consumer is None or producer is consumer:
                continue
            key = (id(producer), id(consumer))
            if key not in seen:
                seen.add(key)
                pairs.append((producer, consumer))
                self._sites[key] = at
        return pairs

    def link_guards(self, producer: cst.Call, consumer: cst.Call) -> list[tuple[cst.If, bool]]:
        """The ``if`` statements that decide whether ``consumer`` follows ``producer``: they
        hold the place the two are joined but not the producer (``conv = ...`` then
        ``if batch_norm: layers += [conv, bn]``). Each comes with True when the link is in
        its body, False when in its ``else``; innermost first."""
        at = self._sites.get((id(producer), id(consumer)))
        if at is None:
            return []
        tree = self.ctx.tree
        found = []
        for branch in self.ctx.guards.conditions(at):
            if tree.is_inside(producer, branch):
                break  # built under the same condition: the link is not conditional on it
            found.append((branch, tree.is_inside(at, branch.body)))
        return found

    # --- resolving an item to the call that built it --------------------------------
    def constructor(self, expr: cst.BaseExpression, at: cst.CSTNode) -> cst.Call | None:
        """The call that built the layer ``expr`` refers to, when it is certain."""
        if isinstance(expr, cst.Call):
            return self._returned_by_helper(expr) or expr
        name = dotted(expr)
        if name is None or self.ctx.qname(expr) is not None:
            return None
        if name.startswith("self.") and name.count(".") == 1:
            bindings = self.ctx.bindings.lookup(name, at)
            if len(bindings) != 1:
                return None
            binding = bindings[0]
        elif "." in name:
            return None
        else:
            binding = self.ctx.bindings.reaching(name, at)
            if binding is None:
                return None
        if binding.kind != "assign" or binding.element is not None or not isinstance(binding.value, cst.Call):
            return None
        return self._returned_by_helper(binding.value) or binding.value

    def _returned_by_helper(self, call: cst.Call) -> cst.Call | None:
        """``conv3x3(a, b)`` where ``def conv3x3(...): return nn.Conv2d(...)`` is this file's
        only function of that name: the constructor call it returns."""
        if not isinstance(call.func, cst.Name) or self.ctx.qname(call.func) is not None:
            return None
        helpers = self._helpers.get(call.func.value)
        return helpers[0] if helpers is not None and len(helpers) == 1 else None

    @cached_property
    def _helpers(self) -> dict[str, list[cst.Call | None]]:
        found: dict[str, list[cst.Call | None]] = {}
        for function in self.ctx.tree.nodes(cst.FunctionDef):
            body = [s for s in function.body.body if not _is_docstring(s)] if isinstance(function.body, cst.IndentedBlock) else []
            returned = None
            if len(body) == 1 and isinstance(body[0], cst.SimpleStatementLine) and len(body[0].body) == 1:
                small = body[0].body[0]
                if isinstance(small, cst.Return) and isinstance(small.value, cst.Call) and self.ctx.qname(small.value.func) is not None:
                    returned = small.value
            found.setdefault(function.name.value, []).append(returned)
        return {name: calls for name, calls in found.items() if all(c is not None for c in calls)}

    # --- where adjacency comes from -----------------------------------------------
    def _adjacent_items(self):  # type: ignore[no-untyped-def]
        ctx = self.ctx
        for call in ctx.tree.nodes(cst.Call):
            items = self._sequential_items(call)
            if items is not None:
                yield from _pairs(items, call)
        for literal in (*ctx.tree.nodes(cst.List), *ctx.tree.nodes(cst.Tuple)):
            if self._is_layer_list(literal):
                yield from _pairs(_elements(literal), literal)
        yield from self._consecutive_additions()
        yield from self._calls_in_methods()

    def _sequential_items(self, call: cst.Call) -> list[cst.BaseExpression | None] | None:
        qualified = self.ctx.qname(call.func)
        if qualified != "torch.nn.Sequential" and not self._super_init_of_sequential(call):
            return None
        positional = [a for a in call.args if a.keyword is None]
        if len(positional) == 1 and isinstance(positional[0].value, cst.Call) and not positional[0].star:
            inner = positional[0].value
            if (dotted(inner.func) or "").rsplit(".", 1)[-1] == "OrderedDict" and inner.args:
                return _ordered_dict_items(inner.args[0].value)
        return [None if a.star else a.value for a in positional]

    def _super_init_of_sequential(self, call: cst.Call) -> bool:
        func = call.func
        if not (isinstance(func, cst.Attribute) and func.attr.value == "__init__" and isinstance(func.value, cst.Call)):
            return False
        if dotted(func.value.func) != "super":
            return False
        cls = self.ctx.tree.enclosing_class(call)
        return cls is not None and any(self.ctx.qname(base.value) == "torch.nn.Sequential" for base in cls.bases)

    def _is_layer_list(self, literal: cst.List | cst.Tuple) -> bool:
        parent = self.ctx.tree.parent(literal)
        if isinstance(parent, cst.Arg):
            call = self.ctx.tree.parent(parent)
            if isinstance(call, cst.Call) and self.ctx.qname(call.func) in _NOT_SEQUENTIAL:
                return False  # a ModuleList is indexed, not run in order
        return True

    def _consecutive_additions(self):  # type: ignore[no-untyped-def]
        tree = self.ctx.tree
        for line in tree.nodes(cst.SimpleStatementLine):
            added = _addition(line, last=True)
            if added is None:
                continue
            target, item = added
            following = tree.next_statement(line)
            if isinstance(following, cst.If) and following.body.body:
                following = following.body.body[0]  # `if batch_norm: layers.append(bn)`
            if not isinstance(following, cst.SimpleStatementLine):
                continue
            nxt = _addition(following, last=False)
            if nxt is not None and nxt[0] == target:
                yield item, nxt[1], following

    def _calls_in_methods(self):  # type: ignore[no-untyped-def]
        ctx = self.ctx
        for call in ctx.tree.nodes(cst.Call):
            if ctx.tree.enclosing_function(call) is None or not call.args or call.args[0].keyword is not None or call.args[0].star:
                continue
            func_name = dotted(call.func)
            if func_name is None or ctx.qname(call.func) is not None:
                continue
            value = call.args[0].value
            if not (isinstance(value, cst.Call) and dotted(value.func)):
                name = dotted(value)
                if name is None or "." in name:
                    continue
                statement = ctx.tree.statement_of(call)  # `x = self.bn(x)`: the `x` bound before it
                binding = ctx.bindings.reaching(name, statement) if statement is not None else None
                if binding is None or binding.kind != "assign" or binding.element is not None or not isinstance(binding.value, cst.Call):
                    continue
                value = binding.value
                if dotted(value.func) is None:
                    continue
            if ctx.qname(value.func) is not None:
                continue
            yield value.func, call.func, call


def _is_docstring(statement: cst.BaseStatement) -> bool:
    return (
        isinstance(statement, cst.SimpleStatementLine)
        and len(statement.body) == 1
        and isinstance(statement.body[0], cst.Expr)
        and isinstance(statement.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )


def _elements(literal: cst.List | cst.Tuple) -> list[cst.BaseExpression | None]:
    return [None if isinstance(e, cst.StarredElement) else e.value for e in literal.elements]


def _ordered_dict_items(expr: cst.BaseExpression) -> list[cst.BaseExpression | None] | None:
    if not isinstance(expr, (cst.List, cst.Tuple)):
        return None
    items: list[cst.BaseExpression | None] = []
    for element in expr.elements:
        pair = element.value
        if isinstance(pair, cst.Tuple) and len(pair.elements) == 2 and not isinstance(pair.elements[1], cst.StarredElement):
            items.append(pair.elements[1].value)
        else:
            items.append(None)
    return items


def _pairs(items, at):  # type: ignore[no-untyped-def]
    if not items:
        return
    for first, second in zip(items, items[1:]):
        if first is not None and second is not None:
            yield first, second, at


def _addition(line: cst.SimpleStatementLine, last: bool) -> tuple[str, cst.BaseExpression] | None:
    """``(list name, item)`` when the line adds layers to a list: its last item (or first)."""
    if len(line.body) != 1:
        return None
    small = line.body[0]
    if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
        call = small.value
        if isinstance(call.func, cst.Attribute) and call.func.attr.value in _LIST_ADDERS:
            target = dotted(call.func.value)
            position = 1 if call.func.attr.value == "add_module" else 0
            positional = [a for a in call.args if a.keyword is None and not a.star]
            if target is None or len(positional) <= position:
                return None
            value = positional[position].value
            if call.func.attr.value == "extend":
                return _edge(target, value, last)
            return target, value
        return None
    if isinstance(small, cst.AugAssign) and isinstance(small.operator, cst.AddAssign):
        target = dotted(small.target)
        return _edge(target, small.value, last) if target is not None else None
    if isinstance(small, cst.Assign) and len(small.targets) == 1:
        target = dotted(small.targets[0].target)
        return _edge(target, small.value, last) if target is not None and last else None
    return None


def _edge(target: str, value: cst.BaseExpression, last: bool) -> tuple[str, cst.BaseExpression] | None:
    if not isinstance(value, (cst.List, cst.Tuple)) or not value.elements:
        return None
    element = value.elements[-1 if last else 0]
    if isinstance(element, cst.StarredElement):
        return None
    return target, element.value
