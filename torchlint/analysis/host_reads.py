"""A module's forward whose result only goes to the host: ``q_values = q_network(obs)`` then only
``torch.argmax(q_values, dim=1).cpu().numpy()``, an action picked for the environment (cleanrl's DQN,
C51 and SAC acting on every step). Outside ``no_grad`` its autograd graph is recorded and never read."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.kinds import Kind
from torchlint.analysis.names import dotted

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext

# Ending on the host: the value leaves the graph here.
_HOST_METHODS = frozenset({"cpu", "numpy", "item", "tolist"})
_HOST_BUILTINS = frozenset({"int", "float", "bool"})
# On the way there, ops that keep no use of the graph: an index picked, a shape changed, a copy cut off.
_PURE_METHODS = frozenset({"argmax", "argmin", "max", "min", "detach", "squeeze", "unsqueeze", "flatten", "reshape", "view",
                           "long", "int", "float", "clamp", "clip", "sign", "round", "sum", "mean"})
_PURE_FUNCTIONS = frozenset({"torch.argmax", "torch.argmin", "torch.max", "torch.min", "torch.squeeze", "torch.flatten", "torch.round"})
# A module's methods that run no forward (what they return is no output of the model).
_NOT_FORWARD = frozenset({"parameters", "named_parameters", "buffers", "state_dict", "load_state_dict", "to", "cuda", "cpu",
                          "train", "eval", "zero_grad", "apply", "modules", "children", "requires_grad_", "half", "float", "double"})


def acting_module(ctx: FileContext, call: cst.Call) -> tuple[str, cst.BaseExpression] | None:
    """``(name, expression)`` of the module ``call`` runs: ``q_network(obs)``, or a method of a module object
    (``actor.get_action(obs)``, ``q_network.get_action(obs)``) that is no bookkeeping of it; None otherwise."""
    func = call.func
    if ctx.qname(func) is not None:
        return None  # a library's function
    if type(func) is cst.Attribute and func.attr.value not in _NOT_FORWARD and ctx.values.kind(func.value, call) is Kind.MODULE:
        name = dotted(func.value)
        return (name, func.value) if name is not None else None
    name = dotted(func)
    return (name, func) if name is not None and ctx.values.kind(func, call) is Kind.MODULE else None


def host_only_uses(ctx: FileContext, assign: cst.Assign) -> list[cst.Call]:
    """Where each name ``assign`` binds is read, each read ending on the host (``.cpu()``, ``.numpy()``,
    ``.item()``, ``.tolist()``, ``int(...)``) through ops that keep nothing of the graph; [] where a read goes
    anywhere else (a loss, a list, a call), where none is read, or where a loop may read a former pass's value."""
    tree = ctx.tree
    target = assign.targets[0].target
    elements = [e.value for e in target.elements] if type(target) in (cst.Tuple, cst.List) else [target]  # type: ignore[attr-defined]
    if not all(type(e) is cst.Name for e in elements):
        return []
    scope, at = tree.scope_of(assign), tree.index(assign)
    loops = [a for a in tree.ancestors(assign) if type(a) in (cst.For, cst.While)]
    ends: list[cst.Call] = []
    for element in elements:
        name = element.value  # type: ignore[attr-defined]
        if name == "_":
            continue
        for use in ctx.bindings.reads(name):  # (its reads, no target)
            if tree.scope_of(use) is not scope:
                continue
            reached = ctx.bindings.reaching(name, use)
            if reached is None or reached.node is not assign:
                if tree.index(use) < at and any(tree.is_inside(use, loop) for loop in loops):
                    return []  # (read before the assignment in its loop: maybe the former pass's value)
                continue  # another binding's value
            end = _host_end(ctx, use)
            if end is None:
                return []
            ends.append(end)
    return ends


def _host_end(ctx: FileContext, name: cst.Name) -> cst.Call | None:
    """The call taking ``name``'s value to the host (``torch.argmax(q, dim=1).cpu()``), through pure ops only; None otherwise."""
    tree = ctx.tree
    node: cst.CSTNode = name
    for _ in range(12):
        parent = tree.parent(node)
        if type(parent) is cst.Attribute and parent.value is node:
            call = tree.parent(parent)
            if type(call) is not cst.Call or call.func is not parent:
                return None
            if parent.attr.value in _HOST_METHODS:
                return call
            if parent.attr.value not in _PURE_METHODS:
                return None
            node = call
        elif type(parent) is cst.Subscript and parent.value is node:
            node = parent
        elif type(parent) is cst.Arg and parent.keyword is None:
            call = tree.parent(parent)
            if type(call) is not cst.Call or not call.args or call.args[0] is not parent:
                return None
            if type(call.func) is cst.Name and call.func.value in _HOST_BUILTINS:
                return call
            if ctx.qname(call.func) not in _PURE_FUNCTIONS:
                return None
            node = call
        else:
            return None
    return None
