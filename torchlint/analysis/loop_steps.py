"""Training steps in a loop's body: step calls (a backward, an optimizer step, a model call), the
functions of the file that make a whole step, the training loops, and the calls a loop runs
itself (a part of ``Loops``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.loop_shapes import (
    BACKWARD, BARRIER_TYPES, NESTED_LOOP_OR_SCOPE, OPTIMIZER, body_children, slices_a_batch, target_names,
)
from torchlint.analysis.functions import built_method
from torchlint.analysis.kind_names import looks_like_optimizer
from torchlint.analysis.kinds import Kind
from torchlint.analysis.names import dotted
from torchlint.analysis.subtree_calls import IN_SCOPE, OWN, STEP, SubtreeCalls

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext


class StepCalls:
    """The step calls of one file's loops and functions, each answered once."""

    ctx: FileContext
    _trains: dict[int, int]
    _step_calls: dict[int, bool]
    _trainer_calls: dict[int, bool]
    _finding_parts: int

    def makes_one_step(self, function: cst.FunctionDef) -> bool:
        """Does ``function`` make one whole training step (a backward and an optimizer step,
        outside any loop of its own, itself or through the functions of this file it calls)?
        A loop of another module that calls it is a step loop."""
        return self._function_parts(function, 0) == BACKWARD | OPTIMIZER

    def _body_steps(self, loop: cst.CSTNode) -> bool:
        """Does the loop's own body (not a nested loop's) run a training or model step,
        itself or through a function of this file it calls (``while ...: self.run_step(b)``)?"""
        models = target_names(loop)  # `for net in nets: net(x)` goes over models, not batches
        for part in body_children(loop) or ((loop.elt,) if hasattr(loop, "elt") else ()):
            for node in self.own_calls(part):
                if self.is_step_call(node) or self._calls_a_trainer(node):
                    if dotted(node.func) in models:
                        continue  # each model called once: the loop's step is no batch's
                    return True
        return False

    def _calls_a_trainer(self, call: cst.Call) -> bool:
        """Does ``call`` run a function of this file that makes one training step: a
        backward and an optimizer step (``opt.step()``, or an optimizer handed to a call:
        ``self.mp_trainer.optimize(self.opt)``), outside any loop of its own, itself or
        through the functions of this file it calls (two levels deep)?"""
        # Asked of each call by every loop around it, the places and the loop's description: answered once.
        # (Not while a function's parts are being found: its answer there is a partial one.)
        known = self._trainer_calls.get(id(call))
        if known is None:
            known = self._step_parts(call, 0) == BACKWARD | OPTIMIZER
            if not self._finding_parts:
                self._trainer_calls[id(call)] = known
        return known

    def _step_parts(self, call: cst.Call, depth: int) -> int:
        function = self.ctx.functions.called(call, None if type(call.func) is cst.Attribute else self.ctx.qname(call.func))
        if function is None:
            function = built_method(self.ctx, call)
        return 0 if function is None else self._function_parts(function, depth)

    def _function_parts(self, function: cst.FunctionDef, depth: int) -> int:
        key = id(function)
        if key not in self._trains:
            self._trains[key] = 0  # recursion ends here
            parts = 0
            self._finding_parts += 1
            try:
                for n in self.own_calls(function.body, STEP):
                    parts |= self._own_step_parts(n) | (self._step_parts(n, depth + 1) if depth < 2 else 0)
            finally:
                self._finding_parts -= 1
            self._trains[key] = parts
        return self._trains[key]

    def _own_step_parts(self, call: cst.Call) -> int:
        func = call.func
        if type(func) is cst.Attribute and func.attr.value == "backward":
            return BACKWARD
        if type(func) is cst.Attribute and func.attr.value == "step" and self.is_step_call(call):
            return OPTIMIZER
        if any(looks_like_optimizer(dotted(arg.value) or "") for arg in call.args):
            return OPTIMIZER
        return 0

    def is_step_call(self, call: cst.Call) -> bool:
        """``loss.backward()``, ``optimizer.step()``, or a call of a model."""
        # Asked of each call by every loop and statement around it: answered once.
        known = self._step_calls.get(id(call))
        if known is None:
            known = self._step_calls[id(call)] = self._is_step_call(call)
        return known

    def _is_step_call(self, call: cst.Call) -> bool:
        func = call.func
        if isinstance(func, cst.Attribute):
            method = func.attr.value
            if method == "backward":
                return True
            if method == "step":
                receiver = dotted(func.value) or ""
                if looks_like_optimizer(receiver) or receiver.rsplit(".", 1)[-1] == "scaler":
                    return True
                return self.ctx.values.kind(func.value, call) is Kind.OPTIMIZER
        return self.ctx.values.kind(func, call) is Kind.MODULE

    def _step_nodes(self, root: cst.CSTNode):  # type: ignore[no-untyped-def]
        """The nodes of one step of a function: its own statements and its microbatch
        loops (``for i in range(0, len(batch), micro):``). Any other loop (over a loader,
        over epochs, ``while``) makes the function a whole epoch or run, so that its
        caller's loop is an epoch loop, not a step loop."""
        return self.own_nodes(root, enter=slices_a_batch)

    def own_nodes(self, root: cst.CSTNode, enter=None):  # type: ignore[no-untyped-def]
        """``root`` and its nodes, not descending into nested loops and scopes (except
        the loops ``enter`` accepts). Without ``enter``, a list remembered per root (the
        decode, denoise and top-k questions walk the same loop bodies): do not change it."""
        if enter is not None:
            return self._walk_own(root, enter)
        known: dict[int, list[cst.CSTNode]] = self.__dict__.setdefault("_own", {})
        found = known.get(id(root))
        if found is None:
            found = known[id(root)] = list(self._walk_own(root, lambda node: False))
        return found

    def _walk_own(self, root: cst.CSTNode, enter):  # type: ignore[no-untyped-def]
        stack, children = [root], self.ctx.tree.children
        while stack:
            node = stack.pop()
            yield node
            if type(node) in NESTED_LOOP_OR_SCOPE and node is not root and not enter(node):
                continue
            stack.extend(children(node))

    def _loop_nodes(self, loop: cst.CSTNode):  # type: ignore[no-untyped-def]
        stack, children = list(body_children(loop)), self.ctx.tree.children
        while stack:
            node = stack.pop()
            yield node
            if type(node) in BARRIER_TYPES:
                continue
            stack.extend(children(node))

    def own_calls(self, root: cst.CSTNode, stops: frozenset[type] | str = OWN) -> list[cst.Call]:
        """The calls of :meth:`own_nodes` (``STEP``: of :meth:`_step_nodes`), in its order,
        from one index of the file's calls (analysis/subtree_calls.py). Do not change the list."""
        if not hasattr(self, "_subtree_calls"):
            self._subtree_calls = SubtreeCalls(self.ctx.tree, slices_a_batch)
        return self._subtree_calls.calls(root, stops)

    def loop_calls(self, loop: cst.CSTNode) -> list[cst.Call]:
        """The calls of :meth:`_loop_nodes`, in its order: a loop's body's (a ``while``'s test first)."""
        return [call for part in reversed(body_children(loop)) if type(part) not in BARRIER_TYPES for call in self.own_calls(part, IN_SCOPE)]

    # --- training loops (TL4xx/TL5xx module-level advice) ----------------------------
    def training_loops(self) -> list[cst.CSTNode]:
        """Innermost ``for``/``while`` loops whose body (nested loops included, nested
        functions not) calls ``.backward()`` and an optimizer (or scaler) ``.step()``."""
        if not hasattr(self, "_training"):
            found: list[cst.CSTNode] = []
            for loop in (*self.ctx.tree.nodes(cst.For), *self.ctx.tree.nodes(cst.While)):
                backward = step = False
                for node in self.loop_calls(loop):
                    if type(node.func) is cst.Attribute:  # type: ignore[attr-defined]
                        method = node.func.attr.value
                        if method == "backward":
                            backward = True
                        elif method == "step" and self.is_step_call(node):
                            step = True
                if backward and step:
                    found.append(loop)
            # keep the innermost: drop a loop that holds another training loop
            self._training = [
                loop for loop in found if not any(other is not loop and self.ctx.tree.is_inside(other, loop) for other in found)
            ]
            self._training.sort(key=self.ctx.tree.index)
        return self._training
