"""Lambdas that run where they stand: their body repeats with the loop around them.

``map(lambda t: t.cpu(), ts)`` and ``tree_map(lambda t: t.cpu(), out)`` call the lambda right
there, once per item. So does one bound to a name in a loop's body and only called (or mapped) in
that body: ``detach_to_cpu_ = lambda t: t.detach().cpu()``, then ``map(detach_to_cpu_, (seq,
probs))`` (PaLM-rlhf-pytorch's rollout). The loop analysis walks through such a lambda as through
a comprehension; any other lambda is a scope of its own (a callback, a key function, a lazily made
default) whose calls are not seen.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.names import dotted

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext

# Functions that call their first argument on each item, where they are called.
_MAPPERS = frozenset({"map", "tree_map", "tree_map_only", "map_structure", "apply_to_collection"})


def runs_in_place(ctx: FileContext, function: cst.Lambda) -> bool:
    """Does ``function`` run where it stands: mapped right there, or bound to a name in a loop's
    body that the body only calls or maps (see the module's docstring)?"""
    return _mapped_at(ctx, function) or _called_where_bound(ctx, function)


def _mapped_at(ctx: FileContext, node: cst.CSTNode) -> bool:
    """Is ``node`` the function argument of a mapping call (``map(f, xs)``, ``tree_map(f, out)``)?"""
    arg = ctx.tree.parent(node)
    call = ctx.tree.parent(arg) if type(arg) is cst.Arg else None
    if type(call) is not cst.Call or not call.args or call.args[0] is not arg:
        return False
    if type(call.func) is cst.Name and call.func.value == "map":
        return ctx.qname(call.func) is None  # the builtin, not a project's `map`
    name = dotted(call.func)
    return name is not None and name.rsplit(".", 1)[-1] in _MAPPERS - {"map"}


def _called_where_bound(ctx: FileContext, function: cst.Lambda) -> bool:
    """``f = lambda t: ...`` in a loop's body, every later use of ``f`` in that body a call
    ``f(x)`` or a mapping ``map(f, xs)``, and at least one use."""
    statement = ctx.tree.parent(function)
    if type(statement) is not cst.Assign or len(statement.targets) != 1 or type(statement.targets[0].target) is not cst.Name:
        return False
    loops = ctx.loops.enclosing_loops(statement)
    if not loops or type(loops[0]) not in (cst.For, cst.While):
        return False  # (bound once outside a loop: where it is called is not where it stands)
    name = statement.targets[0].target.value  # type: ignore[attr-defined]
    uses = [n for n in ctx.tree.descendants(loops[0].body) if type(n) is cst.Name and n.value == name  # type: ignore[attr-defined]
            and n is not statement.targets[0].target]
    return bool(uses) and all(_called(ctx, use) or _mapped_at(ctx, use) for use in uses)


def _called(ctx: FileContext, name: cst.Name) -> bool:
    parent = ctx.tree.parent(name)
    return type(parent) is cst.Call and parent.func is name


# What a lambda may do to its parameter on the way to the host copy: strip its graph, or convert after it.
_COPY_CHAIN = frozenset({"detach", "cpu", "numpy", "item", "tolist", "float", "clone", "squeeze", "flatten"})


def host_copy(ctx: FileContext, call: cst.Call) -> tuple[cst.BaseExpression, str] | None:
    """``to_np(torch.mean(loss))`` where ``to_np = lambda x: x.detach().cpu().numpy()`` at module level
    (dreamerv3-torch's metrics, about twenty reads a training step): the argument the call copies to the
    host, and the lambda's name. The copy runs where the lambda is called, once per call; None for any
    other call (a lambda bound anywhere else or twice, of more parameters, doing more than a chain of
    ``.detach()``, ``.cpu()``, ``.numpy()``... ending on its parameter, or with no ``.cpu()``)."""
    func = call.func
    if type(func) is not cst.Name or len(call.args) != 1 or call.args[0].keyword is not None or call.args[0].star:
        return None
    bound = ctx.bindings.lookup(func.value, call)
    if len(bound) != 1 or bound[0].kind != "assign" or type(bound[0].value) is not cst.Lambda \
            or ctx.tree.enclosing_function(bound[0].node) is not None:
        return None  # (only a module-level alias bound once: what every call of the name runs)
    function = bound[0].value
    params = function.params
    if len(params.params) != 1 or params.posonly_params or params.kwonly_params or params.star_arg not in (None, cst.MaybeSentinel.DEFAULT) \
            or params.star_kwarg is not None:
        return None
    methods: list[str] = []
    node = function.body
    while type(node) is cst.Call and type(node.func) is cst.Attribute and not node.args and node.func.attr.value in _COPY_CHAIN:
        methods.append(node.func.attr.value)
        node = node.func.value
    if type(node) is not cst.Name or node.value != params.params[0].name.value or "cpu" not in methods:
        return None
    return call.args[0].value, func.value
