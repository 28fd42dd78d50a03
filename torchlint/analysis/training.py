"""Where a process-wide switch reaches a training run: set at a module's top level, in a
function that trains, or in one that such a function (or a top level) calls."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.names import dotted

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext

_DEPTH = 2  # functions of this file followed below the one asked about


def trains(ctx: FileContext, function: cst.FunctionDef, depth: int = 0) -> bool:
    """Does ``function`` run training: a training loop or a ``.backward()`` of its own, a
    trainer's ``fit()``/``train()`` (Lightning, transformers), or a function of this file
    it calls that does (two levels deep)?"""
    tree = ctx.tree
    if any(tree.is_inside(loop, function) for loop in ctx.loops.training_loops()):
        return True
    for node in tree.descendants(function.body):
        if type(node) is not cst.Call:
            continue
        method = ctx.method_name(node)
        if method == "backward" or method == "fit" and node.args:
            return True
        if method == "train" and "trainer" in (dotted(node.func.value) or "").lower():  # type: ignore[attr-defined]
            return True  # `trainer.train()`, not `model.train()` (a mode switch)
        if depth < _DEPTH:
            callee = ctx.functions.called(node, None if type(node.func) is cst.Attribute else ctx.qname(node.func))
            if callee is not None and callee is not function and trains(ctx, callee, depth + 1):
                return True
    return False


def reaches_training(ctx: FileContext, node: cst.CSTNode) -> bool:
    """Does a switch set at ``node`` hold while this file trains? At the top level it holds
    for the whole process from the moment the module runs or is imported; in a function,
    when that function trains, is a method of a model (an ``nn.Module`` of this file), or a
    top level or a function that trains calls it."""
    function = ctx.tree.enclosing_function(node)
    if function is None:
        return True
    if trains(ctx, function):
        return True
    owner = ctx.tree.enclosing_class(function)
    if owner is not None and ctx.is_module_class(owner.name.value):
        return True  # a model's `__init__` or `forward` runs wherever the model is built or trained
    for call in _calls_of(ctx, function):
        caller = ctx.tree.enclosing_function(call)
        if caller is None or caller is not function and trains(ctx, caller):
            return True
    return False


def _calls_of(ctx: FileContext, function: cst.FunctionDef) -> list[cst.Call]:
    """The calls of this file that run ``function`` (``setup()``, ``self.setup()``)."""
    name = function.name.value
    found = []
    for call in ctx.tree.nodes(cst.Call):
        func = call.func
        if type(func) is cst.Name and func.value == name or type(func) is cst.Attribute and func.attr.value == name:
            if ctx.functions.called(call, None) is function:
                found.append(call)
    return found
