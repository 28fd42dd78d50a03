"""Rare-branch guards: ``if step % 100 == 0:`` and ``if i == 0:`` do not run every step."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

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
                if is_rare_test(ancestor.test, tree.descendants):
                    return True
            if isinstance(ancestor, cst.IfExp) and child is ancestor.body:
                if is_rare_test(ancestor.test, tree.descendants):
                    return True
            child = ancestor
        return False

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
