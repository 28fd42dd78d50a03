"""What the items of a list hold at one position of their tuples, where a loop unpacks them:
``pairs = [(tv, loss) for tv, loss in zip(t, losses)]`` made in a method and returned
(``return loss.mean(), pairs``), then walked by the step that called it (``loss, pairs =
rf.forward(x, c)``, ``for t, l in pairs:``): ``t`` is ``tv``, a row of the tensor ``t``.
Followed through names, tuple positions, a string key of a returned dict literal
(``info["pairs"]`` of ``return loss, {"pairs": pairs}``) and the returns of this file's
functions and of the methods of its classes (``ValueReturns.returned_values``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.object_shapes import dict_entries, string_key

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext

_DEPTH = 6  # names bound to names, returns of returns: a chain this long ends the search
_MADE_PER_ITEM = (cst.ListComp, cst.GeneratorExp)


def item_members(ctx: FileContext, container: cst.BaseExpression, element: int, at: cst.CSTNode,
                 depth: int = 0) -> list[tuple[cst.BaseExpression, cst.CSTNode]]:
    """The expressions that position ``element`` of each item of ``container`` may be, each
    with the node it is read at (the comprehension's tuple, where its loop names are bound);
    empty where an item is not a tuple made in sight."""
    found: list[tuple[cst.BaseExpression, cst.CSTNode]] = []
    for value, value_at in _held(ctx, container, at, depth):
        if type(value) in _MADE_PER_ITEM:
            made = value.elt  # type: ignore[attr-defined]
            if type(made) in (cst.Tuple, cst.List) and element < len(made.elements) \
                    and not any(type(e) is cst.StarredElement for e in made.elements[:element + 1]):
                found.append((made.elements[element].value, made))
    return found


def _held(ctx: FileContext, expr: cst.BaseExpression, at: cst.CSTNode, depth: int) -> list[tuple[cst.BaseExpression, cst.CSTNode]]:
    """What ``expr`` may hold, names and calls followed to the values they were given."""
    if depth > _DEPTH:
        return []
    expr_type = type(expr)
    if expr_type is cst.Name:
        found = []
        for binding in ctx.bindings.reaching_each(expr.value, at):  # type: ignore[attr-defined]
            if binding.kind != "assign" or binding.value is None:
                continue  # a parameter, a loop variable: what it holds is not in sight here
            if binding.element is None:
                found.extend(_held(ctx, binding.value, binding.node, depth + 1))
            elif type(binding.value) in (cst.Tuple, cst.List):  # `a, b = x, pairs`
                elements = binding.value.elements  # type: ignore[attr-defined]
                if binding.element < len(elements) and not any(type(e) is cst.StarredElement for e in elements):
                    found.extend(_held(ctx, elements[binding.element].value, binding.node, depth + 1))
            elif type(binding.value) is cst.Call:  # `loss, pairs = rf.forward(x, c)`: that position of what it returns
                for value, ret in ctx.values.returned_values(binding.value, binding.element):
                    found.extend(_held(ctx, value, ret, depth + 1))
        return found
    if expr_type is cst.Call:
        returned = ctx.values.returned_values(expr, None)  # type: ignore[arg-type]
        return [held for value, ret in returned for held in _held(ctx, value, ret, depth + 1)] if returned else [(expr, at)]
    if expr_type is cst.Subscript:
        key = string_key(expr)  # type: ignore[arg-type]
        if key is None:
            return []
        entries = [value for mapping, _ in _held(ctx, expr.value, at, depth + 1)  # type: ignore[attr-defined]
                   for name, value in dict_entries(mapping) or () if name == key]
        return [held for entry in entries for held in _held(ctx, entry, entry, depth + 1)]
    return [(expr, at)]


__all__ = ["item_members"]
