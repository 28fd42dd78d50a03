"""Where a process-wide switch reaches a training run: set at a module's top level, in a
function that trains, or in one that such a function (or a top level) calls."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.names import dotted

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext

_DEPTH = 2  # functions of this file followed below the one asked about


def trains(ctx: FileContext, function: cst.FunctionDef, depth: int = 0, *, whole_run: bool = False) -> bool:
    """Does ``function`` run training: a training loop or a ``.backward()`` of its own, a
    trainer's ``fit()``/``train()`` (Lightning, transformers), or a function of this file
    it calls that does (two levels deep)? With ``whole_run``, a backward is not enough: one
    step (``def run(): loss.backward(); opt.step()``) is not the run."""
    tree = ctx.tree
    if any(tree.is_inside(loop, function) for loop in ctx.loops.training_loops()):
        return True
    for node in tree.descendants(function.body):
        if type(node) is not cst.Call:
            continue
        if runs_a_trainer(ctx, node) or not whole_run and ctx.method_name(node) == "backward":
            return True
        if depth < _DEPTH:
            callee = ctx.functions.called(node, None if type(node.func) is cst.Attribute else ctx.qname(node.func))
            if callee is not None and callee is not function and trains(ctx, callee, depth + 1, whole_run=whole_run):
                return True
    return False


def runs_a_trainer(ctx: FileContext, call: cst.Call) -> bool:
    """``trainer.fit(model)`` (Lightning, Keras-like) or ``trainer.train()`` (transformers),
    not ``model.train()`` (a mode switch)."""
    method = ctx.method_name(call)
    if method == "fit" and call.args:
        return True
    return method == "train" and "trainer" in (dotted(call.func.value) or "").lower()  # type: ignore[attr-defined]


def reaches_training(ctx: FileContext, node: cst.CSTNode, *, exported: bool = False) -> bool:
    """Does a switch set at ``node`` hold while this file trains? At the top level it holds
    for the whole process from the moment the module runs or is imported; in a function,
    when that function trains, is a method of a model (an ``nn.Module`` of this file), or a
    top level or a function that trains calls it. With ``exported``, also a function this
    file never calls: a helper other modules import to set up their runs
    (``utils.seed_everything()``), which no single file can follow."""
    function = ctx.tree.enclosing_function(node)
    if function is None:
        return True
    if trains(ctx, function):
        return True
    owner = ctx.tree.enclosing_class(function)
    if owner is not None and ctx.is_module_class(owner.name.value):
        return True  # a model's `__init__` or `forward` runs wherever the model is built or trained
    calls = _calls_of(ctx, function)
    for call in calls:
        caller = ctx.tree.enclosing_function(call)
        if caller is None or caller is not function and trains(ctx, caller):
            return True
    return exported and not calls and ctx.tree.enclosing_function(function) is None and ctx.tree.enclosing_class(function) is None


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


def wraps_training(ctx: FileContext, call: cst.Call) -> bool:
    """Is ``call`` a context manager (a ``with`` item) or a decorator that runs
    unconditionally around the training run: a training loop, a call of a function of this
    file that runs one, a trainer's ``fit()``, or each step (inside a training loop, or in a
    function a training loop of this file calls)? Around one step of a debugging session or
    a benchmark it is not."""
    tree = ctx.tree
    holder = tree.parent(call)
    if type(holder) is cst.Decorator:
        function = tree.parent(holder)
        return type(function) is cst.FunctionDef and (trains(ctx, function, whole_run=True) or _called_every_step(ctx, function))
    if type(holder) is not cst.WithItem:
        return False  # `prof = profile(); prof.__enter__()` and kin: rare, and not what is read here
    statement = tree.parent(holder)
    if not ctx.guards.runs_when_reached(statement):
        return False  # behind a flag: turned on when someone asks for it
    if ctx.loops.local_hot_loop(statement) is not None:
        return True  # every step wrapped
    function = tree.enclosing_function(statement)
    body = statement.body  # type: ignore[union-attr]
    if function is not None and _called_every_step(ctx, function) and any(
            ctx.method_name(n) == "backward" for n in tree.descendants(body) if type(n) is cst.Call):
        return True  # the backward of a step function a training loop calls
    if any(tree.is_inside(loop, body) for loop in ctx.loops.training_loops()):
        return True
    for inner in (n for n in tree.descendants(body) if type(n) is cst.Call):
        callee = ctx.functions.called(inner, None if type(inner.func) is cst.Attribute else ctx.qname(inner.func))
        if callee is not None and trains(ctx, callee, whole_run=True) or runs_a_trainer(ctx, inner):
            return True  # `with profile(): train(model, loader)`, `trainer.fit(model)`
    return False


def _called_every_step(ctx: FileContext, function: cst.FunctionDef) -> bool:
    """Is ``function`` called from a hot loop of this file (``for x, y in loader: step(x, y)``)?"""
    return any(ctx.loops.local_hot_loop(call) is not None for call in _calls_of(ctx, function))


def step_functions(ctx: FileContext) -> list[cst.FunctionDef]:
    """Functions that make one whole training step (a backward and an optimizer step) where
    the file has no training loop of its own: the step of a loop elsewhere (score_sde's
    ``get_step_fn``'s closure, called from run_lib's loop), or of a loop of this file that
    calls it. Not in test code."""
    if ctx.loops.training_loops():
        return []
    functions = {id(f): f for call in ctx.method_calls(("backward",)) if (f := ctx.tree.enclosing_function(call)) is not None}
    return sorted((f for f in functions.values() if not ctx.in_tests(f) and ctx.loops.makes_one_step(f)), key=ctx.tree.index)
