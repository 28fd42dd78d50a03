"""Rare-branch guards: ``if step % 100 == 0:`` and ``if i == 0:`` do not run every step."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchlint.analysis.names import dotted

if TYPE_CHECKING:
    from torchlint.analysis.context import FileContext

_CONSTANTS = (cst.Integer, cst.SimpleString, cst.Float)


def is_rare_test(test: cst.BaseExpression, tree_nodes) -> bool:  # type: ignore[no-untyped-def]
    """A test with a modulo (``step % N == 0``, also inside and/or) or ``== constant``."""
    for node in (test, *tree_nodes(test)):
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Modulo):
            if not isinstance(node.left, cst.BaseString):  # "%s" % x is formatting
                return True
        if isinstance(node, cst.Comparison):
            for target in node.comparisons:
                if isinstance(target.operator, cst.Equal) and (
                    isinstance(target.comparator, _CONSTANTS) or isinstance(node.left, _CONSTANTS)
                ):
                    return True
    return False


def _is_none(expr: cst.CSTNode | None) -> bool:
    return isinstance(expr, cst.Name) and expr.value == "None"


def _mentions(expr: cst.CSTNode | None, name: str, tree_nodes) -> bool:  # type: ignore[no-untyped-def]
    return expr is not None and any(
        isinstance(n, (cst.Name, cst.Attribute)) and dotted(n) == name for n in (expr, *tree_nodes(expr))
    )


def _none_tested(test: cst.BaseExpression) -> str | None:
    """``preds`` for ``preds is None`` (also ``self.preds is None``)."""
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
        return None
    target = test.comparisons[0]
    if not isinstance(target.operator, cst.Is) or not _is_none(target.comparator):
        return None
    return dotted(test.left)


def _mentions_device(test: cst.BaseExpression, tree_nodes) -> bool:  # type: ignore[no-untyped-def]
    for node in (test, *tree_nodes(test)):
        if isinstance(node, cst.Name) and any(word in node.value.lower() for word in ("cuda", "gpu", "device")):
            return True
    return False


class Guards:
    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx

    def conditions(self, node: cst.CSTNode, stop: cst.CSTNode | None = None) -> list[cst.If]:
        """The ``if`` statements whose body (or else branch) holds ``node``, up to ``stop``."""
        found: list[cst.If] = []
        for ancestor in self.ctx.tree.ancestors(node):
            if ancestor is stop or isinstance(ancestor, (cst.FunctionDef, cst.ClassDef)):
                break
            if isinstance(ancestor, cst.If) and not self.ctx.tree.is_inside(node, ancestor.test):
                found.append(ancestor)
        return found

    def rare(self, node: cst.CSTNode, stop: cst.CSTNode | None = None) -> bool:
        """Is ``node`` in the body of an ``if`` that runs every N steps or once?"""
        tree = self.ctx.tree
        child = node
        for ancestor in tree.ancestors(node):
            if ancestor is stop or isinstance(ancestor, (cst.FunctionDef, cst.ClassDef)):
                return False
            if isinstance(ancestor, cst.If) and child is ancestor.body:
                if is_rare_test(ancestor.test, tree.descendants) or self.first_pass(ancestor, stop):
                    return True
            if isinstance(ancestor, cst.IfExp) and child is ancestor.body:
                if is_rare_test(ancestor.test, tree.descendants):
                    return True
            child = ancestor
        return False

    def first_pass(self, branch: cst.If, stop: cst.CSTNode | None = None) -> bool:
        """``if preds is None: preds = x.cpu()``: the body binds the tested name, so it runs
        once (its ``else`` runs on every later step), unless ``stop`` (the loop) binds the
        name again each step to something that may be None (``preds = None``, ``cache.get(k)``)."""
        name = _none_tested(branch.test)
        if name is None:
            return False
        tree = self.ctx.tree
        bindings = self.ctx.bindings.lookup(name, branch)
        if not any(b.kind == "assign" and tree.is_inside(b.node, branch.body) for b in bindings):
            return False  # the body does not fill the name in: it may run again
        for binding in bindings:
            if stop is None or not tree.is_inside(binding.node, stop) or tree.is_inside(binding.node, branch):
                continue
            if binding.kind != "augassign" and not _mentions(binding.value, name, tree.descendants):
                return False  # not `preds = torch.cat([preds, p])`: may be None again next step
        return True

    def device_branch(self, node: cst.CSTNode, stop: cst.CSTNode | None = None) -> bool:
        """Is ``node`` in a branch (``if``/``else``, ``a if t else b``) chosen by the device:
        ``if train_on_gpu:``, ``... if not use_cuda else ...``, ``if torch.cuda.is_available():``?"""
        tree = self.ctx.tree
        child = node
        for ancestor in tree.ancestors(node):
            if ancestor is stop or isinstance(ancestor, (cst.FunctionDef, cst.ClassDef)):
                return False
            if isinstance(ancestor, (cst.If, cst.IfExp)) and child is not ancestor.test and _mentions_device(ancestor.test, tree.descendants):
                return True
            child = ancestor
        return False

    def conditional(self, node: cst.CSTNode, stop: cst.CSTNode | None = None) -> bool:
        """Is ``node`` under any ``if`` (body or else) between it and ``stop``?"""
        return bool(self.conditions(node, stop))
