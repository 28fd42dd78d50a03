"""Loops that run within each call of a model: a module's ``forward`` and the methods it calls
through ``self`` (a part of ``Loops``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.subtree_calls import OWN

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext


class ForwardLoops:
    """Which functions and loops of one file run inside a model's forward."""

    ctx: FileContext

    def module_forward(self, node: cst.CSTNode) -> str | None:
        """``Cls.forward`` where ``node`` sits in the ``forward`` of an ``nn.Module`` class of
        this file: code that runs on every call of the model,
        whether or not a step that calls it is visible; else None."""
        function = self.ctx.tree.enclosing_function(node)
        if function is None or function.name.value != "forward":
            return None
        cls = self.ctx.tree.enclosing_class(function)
        if cls is None or self.ctx.tree.parent(self.ctx.tree.parent(function)) is not cls or not self.ctx.is_module_class(cls.name.value):
            return None
        return f"{cls.name.value}.forward"

    def within_forward(self, loop: cst.CSTNode) -> bool:
        """Does ``loop`` run within each call of a model (in a method its ``forward`` calls),
        not as a decode loop of a generator module?"""
        return self.runs_in_forward(self.ctx.tree.enclosing_function(loop)) and not self.decodes(loop) and not self._trains_in_body(loop)

    def _trains_in_body(self, loop: cst.CSTNode) -> bool:
        """Does the loop's own body run a backward and an optimizer step (a trainer module's ``forward`` that
        runs the training itself, byol's ``BYOLTrainer``: its loop is the training loop, not part of a model's
        call)? A loop of backwards alone is a step's micro-batches (the optimizer steps after the forward returns)."""
        if type(loop) not in (cst.For, cst.While):
            return False
        calls = list(self.own_calls(loop.body, OWN))  # type: ignore[attr-defined]
        return any(self.ctx.method_name(call) == "backward" for call in calls) and any(
            self.ctx.method_name(call) == "step" and self.is_step_call(call) for call in calls)  # type: ignore[attr-defined]

    def runs_in_forward(self, function: cst.FunctionDef | None) -> bool:
        """Is ``function`` the ``forward`` of an ``nn.Module`` class of this file, or a method
        that forward calls through ``self.m(...)`` (segment-anything's ``MaskDecoder.forward``
        calls ``self.predict_masks``), directly or through other such methods? Its loops run
        within each call of the model."""
        if function is None:
            return False
        if not hasattr(self, "_in_forward"):
            self._in_forward = self._forward_methods()
        return id(function) in self._in_forward

    def in_class_forward(self, function: cst.FunctionDef | None) -> bool:
        """``runs_in_forward`` for a class of any base: its ``forward``, or a method that forward
        calls through ``self``. Whether the class is a module may only show in another file
        (``class CascadeROIHeads(StandardROIHeads)``): the join decides that."""
        if function is None:
            return False
        if not hasattr(self, "_in_class_forward"):
            self._in_class_forward = self._forward_methods(modules_only=False)
        return id(function) in self._in_class_forward

    def _forward_methods(self, modules_only: bool = True) -> set[int]:
        ctx, calls = self.ctx, {}
        for call in ctx.tree.nodes(cst.Call):
            func = call.func
            if type(func) is cst.Attribute and type(func.value) is cst.Name and func.value.value == "self":
                caller, callee = ctx.tree.enclosing_function(call), ctx.functions.method(func.attr.value, call)
                if caller is not None and callee is not None:
                    calls.setdefault(id(caller), []).append(callee)
        work = [f for f in ctx.tree.nodes(cst.FunctionDef) if self.module_forward(f.body) is not None
                or not modules_only and f.name.value == "forward" and ctx.tree.enclosing_class(f) is not None
                and ctx.tree.parent(ctx.tree.parent(f)) is ctx.tree.enclosing_class(f)]
        found: set[int] = set()
        while work:
            function = work.pop()
            if id(function) not in found:
                found.add(id(function))
                work.extend(calls.get(id(function), ()))
        return found
