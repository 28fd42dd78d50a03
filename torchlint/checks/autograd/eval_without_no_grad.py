"""A model called in eval mode while autograd still records its graph."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.context import short_code
from torchlint.analysis.buffer_modules import built_elsewhere
from torchlint.analysis.grad import explicitly_enabled
from torchlint.analysis.names import dotted
from torchlint.analysis.values import submodule_attributes
from torchlint.analysis.impact import Cost
from torchlint.checks.base import Check


def _mode_switch(call: cst.Call) -> tuple[str, bool] | None:
    """``m.eval()`` → (``m``, False); ``m.train()`` / ``m.train(True)`` → (``m``, True);
    ``m.train(False)`` → (``m``, False). None for anything else."""
    func = call.func
    if not isinstance(func, cst.Attribute):
        return None
    receiver = dotted(func.value)
    if receiver is None:
        return None
    if func.attr.value == "eval" and not call.args:
        return receiver, False
    if func.attr.value == "train":
        if not call.args:
            return receiver, True
        value = call.args[0].value
        if isinstance(value, cst.Name) and value.value in ("True", "False") and len(call.args) == 1:
            return receiver, value.value == "True"
        return receiver, True  # `m.train(flag)`: unknown mode, treat as no longer eval
    return None


_PHASE_HINT = (
    "The model is in eval mode only on the evaluation phase: wrap the forward pass in "
    '`with torch.set_grad_enabled(phase == "train"):` so that phase records no graph'
)


def _phase_if(tree, statement: cst.CSTNode, block: cst.CSTNode, model: str) -> cst.If | None:  # type: ignore[no-untyped-def]
    """The ``if`` (whole ``elif`` chain) with ``.eval()`` in one branch (``block``) and a
    ``.train()`` of the same model in another; None when the ``.eval()`` is not in one."""
    owner = tree.parent(block)
    if isinstance(owner, cst.Else):
        owner = tree.parent(owner)
    if not isinstance(owner, cst.If):
        return None
    top = owner
    while isinstance(tree.parent(top), cst.If) and tree.parent(top).orelse is top:
        top = tree.parent(top)
    for node in tree.descendants(top):
        if isinstance(node, cst.Call) and not tree.is_inside(node, block) and _mode_switch(node) == (model, True):
            return top
    return None


def _test_names(tree, test: cst.BaseExpression) -> frozenset[str]:  # type: ignore[no-untyped-def]
    """The names a phase test reads (``phase`` in ``phase == "train"``), ``self`` aside."""
    names = {n.value for n in (test, *tree.descendants(test)) if isinstance(n, cst.Name)}
    return frozenset(names - {"self", "None", "True", "False"})


class EvalWithoutNoGrad(Check):
    """A model called after `.eval()` without `no_grad`/`inference_mode`."""

    code = "TL301"
    name = "eval-without-no-grad"
    cost = Cost.GRAPH_BUILT
    message = "`{call}` runs after `{model}.eval()` with autograd still recording the graph"
    fix_hint = "Run the evaluation under `with torch.inference_mode():` (or `torch.no_grad()`), or decorate the function with `@torch.inference_mode()`"

    def __init__(self, ctx) -> None:  # type: ignore[no-untyped-def]
        super().__init__(ctx)
        self._reported: set[int] = set()

    def visit_Call(self, node: cst.Call) -> None:
        switch = _mode_switch(node)
        if switch is None or switch[1]:
            return
        model = switch[0]
        ctx = self.ctx
        tree = ctx.tree
        statement = tree.statement_of(node)
        block = tree.parent(statement) if statement is not None else None
        if block is None:
            return
        phase = _phase_if(tree, statement, block, model)
        # `if phase == "train": model.train() else: model.eval()`: eval mode lasts past the `if`
        region = tree.parent(phase) if phase is not None else block
        phase_names = _test_names(tree, phase.test) if phase is not None else frozenset()
        hint = _PHASE_HINT if phase is not None else ""
        scope = tree.scope_of(node)
        start = tree.index(node)
        end = self._next_train(model, start, scope, phase)
        for call in tree.nodes(cst.Call):
            index = tree.index(call)
            if index <= start:
                continue
            if end is not None and index >= end:
                break
            if id(call) in self._reported or not self._calls_model(call, model, submodule_attributes(ctx)):
                continue
            if tree.scope_of(call) is not scope or not tree.is_inside(call, region):
                continue
            if phase is not None and tree.is_inside(call, phase) and not tree.is_inside(call, block):
                continue  # the training branch of the phase `if`
            if phase is not None and not tree.is_inside(call, phase) and ctx.grad.guarded_by(call, phase_names):
                continue  # a later branch on the same phase: its own training or evaluation path
            if any(isinstance(a, cst.Lambda) for a in tree.ancestors(call)):
                continue  # runs wherever the lambda is called
            if _returned(tree, call) and _handed_out(tree, tree.enclosing_function(call)):
                continue  # a model function a factory returns: whoever calls it chooses the grad mode
            if ctx.grad.runs_without_grad(call) or explicitly_enabled(ctx, call):
                continue
            if ctx.grad.backward_after(call, unless_guarded_by=phase_names):
                continue  # a frozen network that gradients still flow through
            self._reported.add(id(call))
            # (a module of another file's class: the join drops it where that class keeps buffers only, a running mean and variance)
            self.report(call, call=short_code(ctx.module, call), model=model, hint=hint, unless_buffers=built_elsewhere(ctx, call.func, call))

    def _next_train(self, model: str, start: int, scope: cst.CSTNode, phase: cst.If | None) -> int | None:
        """Where the model leaves eval mode: the next ``.train()`` on it in the same scope
        (the training branch of the phase ``if`` does not count)."""
        tree = self.ctx.tree
        for other in self.ctx.method_calls({"train", "eval"}):
            index = tree.index(other)
            if index > start and tree.scope_of(other) is scope:
                if phase is not None and tree.is_inside(other, phase):
                    continue
                other_switch = _mode_switch(other)
                if other_switch is not None and other_switch[0] == model and other_switch[1]:
                    return index
        return None

    @staticmethod
    def _calls_model(call: cst.Call, model: str, submodules: set[str]) -> bool:
        """``m(x)``, ``m.forward(x)``, ``m.module(x)``, or ``m.decoder(h)`` where some class of
        this file binds ``self.decoder`` to a module."""
        name = dotted(call.func)
        if name is None:
            return False
        if name == model or name in (f"{model}.forward", f"{model}.module"):
            return True
        head, _, attr = name.rpartition(".")
        return head == model and attr in submodules


def _returned(tree, call: cst.Call) -> bool:  # type: ignore[no-untyped-def]
    """Is ``call``'s value returned as it is (``return model(x)``, ``return model(x), y``)?"""
    parent = tree.parent(call)
    if isinstance(parent, cst.Element):
        parent = tree.parent(tree.parent(parent))
    return isinstance(parent, cst.Return)


def _handed_out(tree, function: cst.FunctionDef | None) -> bool:  # type: ignore[no-untyped-def]
    """Is ``function`` a closure its enclosing function returns (``get_model_fn`` returns
    ``model_fn``)? Its callers are not in sight: they may run it under ``no_grad``."""
    outer = tree.enclosing_function(function) if function is not None else None
    if outer is None:
        return False
    return any(isinstance(n, cst.Return) and isinstance(n.value, cst.Name) and n.value.value == function.name.value
               for n in tree.descendants(outer))
