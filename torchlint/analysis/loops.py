"""Loop context: which loop a node runs in, and whether that loop is a hot (per-step) loop."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.names import dotted
from torchlint.analysis.values import Kind, looks_like_optimizer

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext

Loop = cst.For | cst.While | cst.CompFor
_SCOPE_BARRIERS = (cst.FunctionDef, cst.ClassDef, cst.Lambda)
_COMPREHENSIONS = (cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)
# Wrappers that iterate what they wrap: for i, (x, y) in enumerate(tqdm(loader)).
_ITER_WRAPPERS = {"enumerate", "zip", "tqdm", "iter", "trange", "tqdm.tqdm", "tqdm.auto.tqdm", "tqdm.notebook.tqdm", "progress_bar", "track"}


def _body_children(loop: cst.CSTNode) -> tuple[cst.CSTNode, ...]:
    """The parts of a loop that run once per iteration."""
    if isinstance(loop, (cst.For, cst.While)):
        return (loop.body,) if isinstance(loop, cst.For) else (loop.body, loop.test)
    return ()


class Loops:
    """Loop nesting and hot-loop facts of one file."""

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self._hot: dict[int, bool] = {}

    def enclosing_loops(self, node: cst.CSTNode) -> list[cst.CSTNode]:
        """Loops (For/While, or comprehensions) whose per-iteration part holds ``node``.

        Innermost first; stops at the enclosing function, class or lambda.
        """
        loops: list[cst.CSTNode] = []
        child = node
        for ancestor in self.ctx.tree.ancestors(node):
            if isinstance(ancestor, _SCOPE_BARRIERS):
                break
            if isinstance(ancestor, (cst.For, cst.While)):
                if any(child is part for part in _body_children(ancestor)):
                    loops.append(ancestor)
            elif isinstance(ancestor, _COMPREHENSIONS):
                first = ancestor.for_in
                if child is not first or self._inside_comp_body(node, first):
                    loops.append(ancestor)
            child = ancestor
        return loops

    def _inside_comp_body(self, node: cst.CSTNode, comp_for: cst.CompFor) -> bool:
        # The first `for`'s iterable is evaluated once; its ifs and inner fors each time.
        return not (node is comp_for.iter or self.ctx.tree.is_inside(node, comp_for.iter))

    def in_loop(self, node: cst.CSTNode) -> bool:
        return bool(self.enclosing_loops(node))

    def hot_loop(self, node: cst.CSTNode) -> cst.CSTNode | None:
        """The innermost enclosing hot loop, or None when ``node`` does not run per step."""
        for loop in self.enclosing_loops(node):
            if self.is_hot(loop):
                return loop
        return None

    def is_hot(self, loop: cst.CSTNode) -> bool:
        key = id(loop)
        if key not in self._hot:
            self._hot[key] = self._iterates_loader(loop) or self._body_steps(loop)
        return self._hot[key]

    # --- the two ways a loop is hot --------------------------------------------
    def iterated_expression(self, loop: cst.CSTNode) -> cst.BaseExpression | None:
        if isinstance(loop, cst.For):
            return loop.iter
        if isinstance(loop, _COMPREHENSIONS):
            return loop.for_in.iter
        return None

    def loader_of(self, iterable: cst.BaseExpression | None, at: cst.CSTNode) -> cst.BaseExpression | None:
        """The DataLoader expression a loop's iterable walks, through enumerate/zip/tqdm."""
        if iterable is None:
            return None
        if isinstance(iterable, cst.Call):
            name = dotted(iterable.func) or ""
            qualified = self.ctx.qname(iterable.func) or ""
            if name in _ITER_WRAPPERS or qualified.split(".")[0] == "tqdm" or name.rsplit(".", 1)[-1] in _ITER_WRAPPERS:
                for arg in iterable.args:
                    found = self.loader_of(arg.value, at)
                    if found is not None:
                        return found
            return None
        if self.ctx.values.kind(iterable, at) is Kind.LOADER:
            return iterable
        return None

    def _iterates_loader(self, loop: cst.CSTNode) -> bool:
        return self.loader_of(self.iterated_expression(loop), loop) is not None

    def _body_steps(self, loop: cst.CSTNode) -> bool:
        """Does the loop's own body (not a nested loop's) run a training or model step?"""
        for part in _body_children(loop) or ((loop.elt,) if hasattr(loop, "elt") else ()):
            for node in self._own_nodes(part):
                if isinstance(node, cst.Call) and self.is_step_call(node):
                    return True
        return False

    def _own_nodes(self, root: cst.CSTNode):  # type: ignore[no-untyped-def]
        stack = [root]
        while stack:
            node = stack.pop()
            yield node
            if isinstance(node, (cst.For, cst.While, *_SCOPE_BARRIERS, *_COMPREHENSIONS)) and node is not root:
                continue
            stack.extend(self.ctx.tree_children(node))

    def is_step_call(self, call: cst.Call) -> bool:
        """``loss.backward()``, ``optimizer.step()``, or a call of a model."""
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
